//! The dead-letter queue for refused objects: one SQS message per object, a JSON body with the
//! bucket, key, version, sequencer, event and reason, so a person sees what failed and why, and can send
//! the event again once the file is fixed.

use parley_core::config::Env;
use serde::Serialize;

/// A refused object, as the queue's message body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub bucket: String,
    pub key: String,
    #[serde(rename = "versionId")]
    pub version_id: Option<String>,
    pub sequencer: Option<String>,
    pub event: String,
    pub reason: String,
}

#[derive(Debug, Clone)]
pub struct DeadLetter {
    client: aws_sdk_sqs::Client,
    url: String,
}

#[derive(Debug, thiserror::Error)]
#[error("sending a refusal to the dead-letter queue failed: {0}")]
pub struct SendError(String);

impl DeadLetter {
    /// A sender to `url` with the AWS settings in `env` (`AWS_ENDPOINT_URL_SQS` or
    /// `AWS_ENDPOINT_URL` for a local SQS).
    pub async fn new(env: &Env, url: String) -> DeadLetter {
        let config = parley_core::aws::sdk_config(env, "AWS_ENDPOINT_URL_SQS").await;
        DeadLetter {
            client: aws_sdk_sqs::Client::new(&config),
            url,
        }
    }

    pub async fn send(&self, refusal: &Refusal) -> Result<(), SendError> {
        let body = serde_json::to_string(refusal).map_err(|e| SendError(e.to_string()))?;
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .map_err(|e| SendError(aws_sdk_sqs::error::DisplayErrorContext(&e).to_string()))?;
        Ok(())
    }
}
