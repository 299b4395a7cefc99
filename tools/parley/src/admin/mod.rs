//! The `parley-admin` Lambda function: the `parley` subcommands for a database no machine can
//! reach but Lambda. One handler takes two kinds of event: a CloudFormation custom resource
//! (`custom_resource`) and a direct `{"command": [...]}` invocation (`invoke`). Migrations and
//! roles run as the database's owner (`SECRET_IDS`); the routine commands as a login that can
//! do only them (`ADMIN_ROUTINE_SECRET_ID`, migration 0025's `parley_admin_ops`).

pub mod custom_resource;
pub mod invoke;

use std::time::Duration;

use parley_core::config::Env;
use parley_core::secrets::{self, SECRET_IDS, SecretsError};
use serde_json::Value;

use crate::db::DATABASE_URL;

/// Longest a PUT of the answer to CloudFormation may take, per attempt: the URL is a presigned
/// S3 URL, which answers in well under a second.
const PUT_TIMEOUT: Duration = Duration::from_secs(10);

pub use parley_core::serve::time_left;

/// `ADMIN_ROUTINE_SECRET_ID`: the secret (name or ARN, in RDS's format) of the login that the
/// direct invocations other than migrations and roles ([`invoke::AS_OWNER`]) connect as, a
/// member of `parley_admin_ops`. Unset, they connect as the owner, as before 0025, and the log
/// says so.
pub const ROUTINE_SECRET_ID: &str = "ADMIN_ROUTINE_SECRET_ID";

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

    /// The settings for migrations and roles: `SECRET_IDS`' secrets (the owner's database
    /// secret, and the app secret for the embeddings' key) over the environment.
    pub async fn owner_env(&self) -> Result<Env, SecretsError> {
        Ok(secrets::load(&self.base).await?.0)
    }

    /// The settings for the routine commands: [`Admin::owner_env`]'s with `DATABASE_URL` that of
    /// the [`ROUTINE_SECRET_ID`] login. That secret is read on its own, so the URL cannot be
    /// the owner's when the secret holds no login.
    pub async fn routine_env(&self) -> Result<Env, SecretsError> {
        let env = self.owner_env().await?;
        let Some(id) = self.base.get(ROUTINE_SECRET_ID) else {
            tracing::warn!(
                "{ROUTINE_SECRET_ID} is not set: the command runs as the database's owner; give \
                 the function a parley_admin_ops login's secret (docs/admin-function.md)"
            );
            return Ok(env);
        };
        let alone = self.base.overlay([(SECRET_IDS, id), (DATABASE_URL, "")]);
        let (login, _) = secrets::load(&alone).await?;
        let url = login
            .get(DATABASE_URL)
            .ok_or_else(|| SecretsError::Invalid {
                id: id.to_owned(),
                problem: format!(
                    "holds no database login (`username` and `password`, in RDS's format), \
                     which {ROUTINE_SECRET_ID} names it for"
                ),
            })?
            .to_owned();
        Ok(env.overlay([(DATABASE_URL, url)]))
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
