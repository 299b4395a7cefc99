//! The LLM's POSTs with retries, by `parley_core::retry`'s policy (429, 5xx,
//! timeouts and transport failures retried with backoff or `Retry-After`), within
//! `LLM_MAX_RETRIES` and the `LLM_RETRY_BUDGET_MS` of waiting, and never past the turn's
//! deadline; bodies capped at `LLM_MAX_RESPONSE_BYTES`; a streamed answer retried only until
//! its first bytes. Here only the LLM's own errors.

use std::time::Duration;

use parley_core::retry::{self, PostError, RetryPolicy};

use super::{LlmConfig, LlmError};

/// First backoff ceiling; it doubles with each retry. Tests use a tiny one so the retry tests
/// stay fast without a knob in the configuration.
#[cfg(not(test))]
const BASE_BACKOFF: Duration = retry::BASE_BACKOFF;
#[cfg(test)]
const BASE_BACKOFF: Duration = Duration::from_millis(2);

/// The policy of the LLM's POSTs (`parley_core::retry::post_json` and `post_stream`), built
/// once with the client: the deployment's `LLM_*` settings.
pub(super) fn policy(config: &LlmConfig) -> RetryPolicy {
    RetryPolicy {
        base_backoff: BASE_BACKOFF,
        ..config.retry.policy("LLM", config.max_response_bytes)
    }
}

impl From<PostError> for LlmError {
    fn from(error: PostError) -> Self {
        match error {
            PostError::RateLimited { retry_after } => LlmError::RateLimited { retry_after },
            PostError::Unauthorized {
                status,
                key_set,
                detail,
            } => LlmError::Unauthorized {
                status,
                key_set,
                detail,
            },
            PostError::Status { status, detail } => LlmError::Status { status, detail },
            PostError::TooLarge { limit } => LlmError::TooLarge { limit },
            PostError::DeadlineReached => LlmError::DeadlineReached,
            PostError::Timeout => LlmError::Timeout,
            PostError::Transport(message) => LlmError::Transport(message),
        }
    }
}

/// The text of a 2xx body that is not what the dialect promises, for the error.
pub(super) fn not_json(bytes: &[u8], e: &serde_json::Error, key: Option<&str>) -> LlmError {
    LlmError::BadResponse(format!(
        "the body is not JSON ({e}): {}",
        retry::excerpt(&String::from_utf8_lossy(bytes), key)
    ))
}

#[cfg(test)]
mod tests {
    use parley_core::config::SecretString;
    use parley_testkit::llm::{ScriptedLlm, Step};
    use serde_json::Value;
    use tokio::time::Instant;

    use parley_core::retry::RetrySettings;

    use super::*;
    use crate::turn::llm::fixtures::{config, far_deadline};

    /// One POST as the client sends it, with `config`'s policy.
    async fn post_json(
        http: &reqwest::Client,
        config: &LlmConfig,
        url: url::Url,
        body: Vec<u8>,
        deadline: Instant,
        retries: &mut u32,
    ) -> Result<bytes::Bytes, LlmError> {
        let key = config.api_key.as_ref();
        Ok(retry::post_json(http, &policy(config), key, url, body, deadline, retries).await?)
    }

    fn url(llm: &ScriptedLlm) -> url::Url {
        url::Url::parse(&format!("{}/responses", llm.base_url())).unwrap()
    }

    fn retrying(max_retries: u32) -> LlmConfig {
        LlmConfig {
            retry: RetrySettings {
                max_retries,
                retry_budget: Duration::from_secs(10),
                ..config().retry
            },
            ..config()
        }
    }

    async fn post(llm: &ScriptedLlm, config: &LlmConfig) -> Result<Value, LlmError> {
        post_by(llm, config, far_deadline()).await
    }

    async fn post_by(
        llm: &ScriptedLlm,
        config: &LlmConfig,
        deadline: Instant,
    ) -> Result<Value, LlmError> {
        let bytes = post_json(
            &reqwest::Client::new(),
            config,
            url(llm),
            br#"{"model":"m"}"#.to_vec(),
            deadline,
            &mut 0,
        )
        .await?;
        Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    #[tokio::test]
    async fn a_429_with_retry_after_zero_is_retried_and_then_succeeds() {
        let llm = ScriptedLlm::start(vec![Step::rate_limited(0), Step::text("hi")]).await;
        let body = post(&llm, &retrying(3)).await.unwrap();
        assert_eq!(body["output"][0]["content"][0]["text"], "hi");
        assert_eq!(llm.requests().len(), 2);
    }

    #[tokio::test]
    async fn persistent_500s_end_in_a_status_error_after_the_allowed_retries() {
        let llm = ScriptedLlm::start(vec![
            Step::error(500, "boom 1"),
            Step::error(500, "boom 2"),
            Step::error(500, "boom 3"),
            Step::text("too late"),
        ])
        .await;
        let err = post(&llm, &retrying(2)).await.unwrap_err();
        assert!(
            matches!(&err, LlmError::Status { status: 500, detail } if detail == "boom 3"),
            "{err:?}"
        );
        assert_eq!(llm.requests().len(), 3);
    }

    #[tokio::test]
    async fn a_429_after_the_last_retry_is_rate_limited_with_its_retry_after() {
        let llm = ScriptedLlm::start(vec![Step::rate_limited(0), Step::rate_limited(0)]).await;
        let err = post(&llm, &retrying(1)).await.unwrap_err();
        assert!(
            matches!(err, LlmError::RateLimited { retry_after: Some(d) } if d.is_zero()),
            "{err:?}"
        );
        assert_eq!(llm.requests().len(), 2);
    }

    #[tokio::test]
    async fn a_400_is_not_retried() {
        let llm = ScriptedLlm::start(vec![Step::error(400, "bad tools"), Step::text("no")]).await;
        let err = post(&llm, &retrying(3)).await.unwrap_err();
        assert!(matches!(&err, LlmError::Status { status: 400, detail } if detail == "bad tools"));
        assert_eq!(llm.requests().len(), 1);
    }

    #[tokio::test]
    async fn a_zero_retry_budget_turns_retries_off() {
        let llm = ScriptedLlm::start(vec![Step::rate_limited(0), Step::text("no")]).await;
        let mut config = retrying(3);
        config.retry.retry_budget = Duration::ZERO;
        let err = post(&llm, &config).await.unwrap_err();
        assert!(matches!(err, LlmError::RateLimited { .. }), "{err:?}");
        assert_eq!(llm.requests().len(), 1);
    }

    #[tokio::test]
    async fn a_retry_after_longer_than_the_budget_left_ends_the_retries() {
        let llm = ScriptedLlm::start(vec![Step::rate_limited(60), Step::text("no")]).await;
        let err = post(&llm, &retrying(3)).await.unwrap_err();
        assert!(
            matches!(err, LlmError::RateLimited { retry_after: Some(d) } if d.as_secs() == 60),
            "{err:?}"
        );
        assert_eq!(llm.requests().len(), 1);
    }

    #[tokio::test]
    async fn an_answer_slower_than_the_timeout_is_retried_then_reported_as_a_timeout() {
        let slow = || Step::delayed(Duration::from_secs(5), Step::text("late"));
        let llm = ScriptedLlm::start(vec![slow(), slow()]).await;
        let mut config = retrying(1);
        config.retry.timeout = Duration::from_millis(100);
        let err = post(&llm, &config).await.unwrap_err();
        assert!(matches!(err, LlmError::Timeout), "{err:?}");
        assert_eq!(llm.requests().len(), 2);
    }

    #[tokio::test]
    async fn the_api_key_is_sent_as_a_bearer_token_and_kept_out_of_error_details() {
        let llm = ScriptedLlm::start(vec![
            Step::text("ok"),
            Step::error(
                401,
                "Incorrect API key provided: sk-test-123. See the docs.",
            ),
        ])
        .await;
        let config = LlmConfig {
            api_key: Some(SecretString::from("sk-test-123".to_owned())),
            ..retrying(3)
        };
        post(&llm, &config).await.unwrap();
        let err = post(&llm, &config).await.unwrap_err();
        assert_eq!(
            llm.authorizations(),
            vec![Some("Bearer sk-test-123".to_owned()); 2]
        );
        let LlmError::Unauthorized {
            status: 401,
            key_set: true,
            detail,
        } = &err
        else {
            panic!("{err:?}");
        };
        assert!(
            !format!("{err:?} {err}").contains("sk-test-123"),
            "{detail}"
        );
        assert_eq!(llm.requests().len(), 2, "a 401 is not retried");
    }

    #[tokio::test]
    async fn a_403_without_a_key_is_unauthorized_and_not_retried() {
        let llm = ScriptedLlm::start(vec![Step::error(403, "no key"), Step::text("no")]).await;
        let err = post(&llm, &retrying(3)).await.unwrap_err();
        assert!(
            matches!(
                err,
                LlmError::Unauthorized {
                    status: 403,
                    key_set: false,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(llm.requests().len(), 1);
    }

    #[tokio::test]
    async fn a_body_over_the_cap_is_refused_without_a_retry() {
        let llm = ScriptedLlm::start(vec![Step::text("x".repeat(5000)), Step::text("small")]).await;
        let config = LlmConfig {
            max_response_bytes: 4096,
            ..retrying(3)
        };
        let err = post(&llm, &config).await.unwrap_err();
        assert!(matches!(err, LlmError::TooLarge { limit: 4096 }), "{err:?}");
        assert_eq!(llm.requests().len(), 1);
        // A body under the cap is read whole.
        let body = post(&llm, &config).await.unwrap();
        assert_eq!(body["output"][0]["content"][0]["text"], "small");
    }

    #[tokio::test]
    async fn a_hanging_server_is_given_up_at_the_deadline_without_a_retry() {
        let hang = || Step::delayed(Duration::from_secs(60), Step::text("late"));
        let llm = ScriptedLlm::start(vec![hang(), hang()]).await;
        let deadline = Instant::now() + Duration::from_millis(200);
        let err = post_by(&llm, &retrying(3), deadline).await.unwrap_err();
        assert!(matches!(err, LlmError::DeadlineReached), "{err:?}");
        assert_eq!(llm.requests().len(), 1);
        // Past the deadline nothing is sent at all.
        let err = post_by(&llm, &retrying(3), deadline).await.unwrap_err();
        assert!(matches!(err, LlmError::DeadlineReached), "{err:?}");
        assert_eq!(llm.requests().len(), 1);
    }

    #[tokio::test]
    async fn no_authorization_header_is_sent_without_a_key() {
        let llm = ScriptedLlm::start(vec![Step::text("ok")]).await;
        post(&llm, &config()).await.unwrap();
        assert_eq!(llm.authorizations(), vec![None]);
    }

    #[tokio::test]
    async fn an_unreachable_server_is_a_transport_error_without_the_url() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url =
            url::Url::parse(&format!("http://127.0.0.1:{port}/v1/responses?key=secret")).unwrap();
        let err = post_json(
            &reqwest::Client::new(),
            &retrying(1),
            url,
            b"{}".to_vec(),
            far_deadline(),
            &mut 0,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&err, LlmError::Transport(m) if !m.contains("secret") && m.contains("connect")),
            "{err:?}"
        );
    }
}
