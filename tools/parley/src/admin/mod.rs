//! The `parley-admin` Lambda function: the `parley` subcommands for a database no machine can
//! reach but Lambda. One handler takes two kinds of event: a CloudFormation custom resource
//! (`custom_resource`) and a direct `{"command": [...]}` invocation (`invoke`).

pub mod custom_resource;
pub mod invoke;

use std::time::Duration;

use parley_core::config::Env;
use serde_json::Value;

/// Longest a PUT of the answer to CloudFormation may take, per attempt: the URL is a presigned
/// S3 URL, which answers in well under a second.
const PUT_TIMEOUT: Duration = Duration::from_secs(10);

pub use parley_core::serve::time_left;

/// What every invocation shares, built once at cold start. Settings are read per invocation,
/// with the secrets, so that a bad one becomes a FAILED answer rather than an init error (which
/// CloudFormation would wait an hour for).
#[derive(Debug, Clone)]
pub struct Admin {
    /// The process environment; `SECRET_IDS`' secrets are laid over it per invocation.
    pub base: Env,
    pub http: reqwest::Client,
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(
        "not an event this function knows: expected a CloudFormation custom-resource request \
         (RequestType, ResponseURL, ...) or {{\"command\": [\"audit\", ...]}}"
    )]
    Unrecognised,
    #[error("the custom-resource request has no usable ResponseURL: {0}")]
    NoResponseUrl(String),
    #[error("could not answer CloudFormation at {host}: {reason}")]
    Respond { host: String, reason: String },
    #[error("building the HTTP client failed: {0}")]
    Http(String),
}

impl Admin {
    pub fn new(base: Env) -> Result<Admin, AdminError> {
        let http = reqwest::Client::builder()
            .timeout(PUT_TIMEOUT)
            .build()
            .map_err(|e| AdminError::Http(parley_core::error::chain(&e)))?;
        Ok(Admin { base, http })
    }

    /// One invocation. `time_left` is what remains of the function's timeout (the runtime's
    /// deadline), so a custom resource answers before Lambda stops it.
    pub async fn handle(&self, event: Value, time_left: Duration) -> Result<Value, AdminError> {
        if custom_resource::is_request(&event) {
            Box::pin(custom_resource::handle(self, event, time_left)).await
        } else if invoke::is_command(&event) {
            Ok(Box::pin(invoke::handle(self, &event)).await)
        } else {
            Err(AdminError::Unrecognised)
        }
    }
}
