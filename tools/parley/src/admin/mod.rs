//! The `parley-admin` Lambda function: the `parley` subcommands for a database no machine can
//! reach but Lambda. One handler takes two kinds of event: a CloudFormation custom resource
//! (`custom_resource`) and a direct `{"command": [...]}` invocation (`invoke`).

pub mod custom_resource;
pub mod invoke;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parley_core::config::Env;
use serde_json::Value;

/// Longest a PUT of the answer to CloudFormation may take, per attempt: the URL is a presigned
/// S3 URL, which answers in well under a second.
const PUT_TIMEOUT: Duration = Duration::from_secs(10);

/// 2001-09-09 in milliseconds since the epoch: no deadline Lambda sends is earlier.
const EPOCH_DEADLINES_FROM: u64 = 1_000_000_000_000;

/// What remains of an invocation whose runtime deadline is `deadline_ms`. Lambda sends the
/// deadline in milliseconds since the epoch; `cargo lambda watch` (1.9) sends its timeout
/// instead (`600000`), which read as a time is long past: a value too small to be a time is
/// taken as what is left.
pub fn time_left(deadline_ms: u64, now: SystemTime) -> Duration {
    if deadline_ms < EPOCH_DEADLINES_FROM {
        return Duration::from_millis(deadline_ms);
    }
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    Duration::from_millis(deadline_ms).saturating_sub(now)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left_reads_lambdas_epoch_deadline_and_the_emulators_timeout() {
        let now = UNIX_EPOCH + Duration::from_millis(1_795_762_213_458);
        assert_eq!(
            time_left(1_795_762_213_458 + 900_000, now),
            Duration::from_secs(900)
        );
        assert_eq!(
            time_left(1_795_762_213_000, now),
            Duration::ZERO,
            "already past"
        );
        assert_eq!(
            time_left(600_000, now),
            Duration::from_secs(600),
            "cargo lambda watch"
        );
    }
}
