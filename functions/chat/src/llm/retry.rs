//! One JSON POST to the LLM server with retries: 429, 500/502/503/504, timeouts and transport
//! failures are retried with capped exponential backoff and full jitter (or the server's
//! `Retry-After`), within `LLM_MAX_RETRIES` and the `LLM_RETRY_BUDGET_MS` of waiting, and never
//! past the turn's deadline. Bodies are read in chunks up to `LLM_MAX_RESPONSE_BYTES`, so a
//! runaway server cannot take the instance's memory.

use std::time::Duration;

use parley_core::config::ExposeSecret;
use reqwest::header::HeaderMap;
use serde_json::Value;
use tokio::time::Instant;

use super::{LlmConfig, LlmError};

/// First backoff ceiling; it doubles with each retry up to [`MAX_BACKOFF`]. Tests use a tiny
/// one so the retry tests stay fast without a knob in the configuration.
#[cfg(not(test))]
const BASE_BACKOFF: Duration = Duration::from_millis(250);
#[cfg(test)]
const BASE_BACKOFF: Duration = Duration::from_millis(2);
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// How much of an error body goes into `LlmError::Status::detail` and the log.
const DETAIL_CHARS: usize = 200;

/// How much of an error status's body is read: its message is near the start, and only
/// [`DETAIL_CHARS`] of it are kept.
const ERROR_BODY_BYTES: usize = 64 * 1024;

/// A failed attempt: the error to report if it is the last one, and whether another may help.
struct Failure {
    error: LlmError,
    retryable: bool,
    /// What the server asked for in `Retry-After`, if anything.
    retry_after: Option<Duration>,
}

/// The body of a 2xx answer to one POST, within `deadline`: each attempt's timeout is cut to
/// the time left, and no retry starts past it.
pub(super) async fn post_json(
    http: &reqwest::Client,
    config: &LlmConfig,
    url: url::Url,
    body: Vec<u8>,
    deadline: Instant,
) -> Result<bytes::Bytes, LlmError> {
    // Serialized once by the dialect; each attempt shares the same bytes.
    let body = bytes::Bytes::from(body);
    let mut waited = Duration::ZERO;
    let mut retries = 0u32;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(LlmError::DeadlineReached);
        }
        let timeout = config.timeout.min(left);
        let failure = match attempt(http, config, url.clone(), body.clone(), timeout).await {
            Ok(bytes) => return Ok(bytes),
            Err(failure) => failure,
        };
        if matches!(failure.error, LlmError::Timeout) && timeout < config.timeout {
            // What ran out was the turn's time, not `LLM_TIMEOUT_MS`.
            return Err(LlmError::DeadlineReached);
        }
        let wait = failure.retry_after.unwrap_or_else(|| backoff(retries));
        let remaining = config.retry_budget.saturating_sub(waited);
        // A spent budget means no more retries, even ones that would not wait at all: a budget
        // of zero turns retries off.
        let give_up = !failure.retryable
            || retries >= config.max_retries
            || remaining.is_zero()
            || wait > remaining
            || Instant::now() + wait >= deadline;
        let detail = match &failure.error {
            LlmError::Status { detail, .. } => detail.as_str(),
            _ => "",
        };
        if give_up {
            tracing::warn!(error = %failure.error, detail, retries, "LLM request failed");
            return Err(failure.error);
        }
        tracing::warn!(
            error = %failure.error,
            detail,
            retry = retries + 1,
            wait_ms = wait.as_millis() as u64,
            "LLM request failed; retrying"
        );
        tokio::time::sleep(wait).await;
        waited += wait;
        retries += 1;
    }
}

async fn attempt(
    http: &reqwest::Client,
    config: &LlmConfig,
    url: url::Url,
    body: bytes::Bytes,
    timeout: Duration,
) -> Result<bytes::Bytes, Failure> {
    let mut request = http
        .post(url)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    if let Some(key) = &config.api_key {
        // reqwest marks the header sensitive, so it stays out of its debug output too.
        request = request.bearer_auth(key.expose_secret());
    }
    let mut response = request.send().await.map_err(transport)?;
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let key = config.api_key.as_ref().map(|k| k.expose_secret());
    if status.is_success() {
        let limit = config.max_response_bytes;
        return match read_capped(&mut response, limit).await.map_err(transport)? {
            Some(bytes) => Ok(bytes),
            None => Err(Failure {
                error: LlmError::TooLarge { limit },
                retryable: false,
                retry_after: None,
            }),
        };
    }
    // Only the start of an error body is read: the message is there.
    let bytes = read_capped(&mut response, ERROR_BODY_BYTES)
        .await
        .map_err(transport)?
        .unwrap_or_default();
    let code = status.as_u16();
    let error = match code {
        429 => LlmError::RateLimited { retry_after },
        401 | 403 => LlmError::Unauthorized {
            status: code,
            key_set: config.api_key.is_some(),
            detail: detail(&bytes, key),
        },
        _ => LlmError::Status {
            status: code,
            detail: detail(&bytes, key),
        },
    };
    Err(Failure {
        error,
        retryable: matches!(code, 429 | 500 | 502 | 503 | 504),
        retry_after,
    })
}

/// The body, read chunk by chunk, or `None` as soon as it is known to exceed `limit` bytes: a
/// larger one is never held in memory.
async fn read_capped(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<Option<bytes::Bytes>, reqwest::Error> {
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Ok(None);
    }
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body.freeze()))
}

/// The text of a 2xx body that is not what the dialect promises, for the error.
pub(super) fn not_json(bytes: &[u8], e: &serde_json::Error, key: Option<&str>) -> LlmError {
    LlmError::BadResponse(format!(
        "the body is not JSON ({e}): {}",
        excerpt(&String::from_utf8_lossy(bytes), key)
    ))
}

fn transport(e: reqwest::Error) -> Failure {
    // A request that cannot even be built will not build better the next time.
    let retryable = !e.is_builder();
    let error = if e.is_timeout() {
        LlmError::Timeout
    } else {
        // The URL stays out: a base URL may carry credentials in its query or user info.
        LlmError::Transport(parley_core::error::chain(&e.without_url()))
    };
    Failure {
        error,
        retryable,
        retry_after: None,
    }
}

/// Full jitter: a uniformly random wait up to a ceiling that doubles with each retry, so many
/// instances throttled at once do not come back in lockstep.
fn backoff(retries: u32) -> Duration {
    let ceiling = BASE_BACKOFF
        .saturating_mul(2u32.saturating_pow(retries))
        .min(MAX_BACKOFF);
    let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(rand::random_range(0..=millis))
}

/// `Retry-After` as seconds or an HTTP-date; `retry-after-ms` (sent by Azure OpenAI and some
/// gateways) wins because it is more precise.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && let Ok(wait) = Duration::try_from_secs_f64(ms / 1000.0)
    {
        return Some(wait);
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    // A date in the past means "now".
    Some(
        (date.to_utc() - chrono::Utc::now())
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// The server's own explanation of an error status: `error.message` in OpenAI's shape,
/// `detail` or `message` in others', else the start of the body.
fn detail(bytes: &[u8], key: Option<&str>) -> String {
    let text = String::from_utf8_lossy(bytes);
    let message = serde_json::from_str::<Value>(&text).ok().and_then(|json| {
        [
            json.pointer("/error/message"),
            json.get("error"),
            json.get("detail"),
            json.get("message"),
        ]
        .into_iter()
        .flatten()
        .find_map(|v| v.as_str().map(str::to_owned))
    });
    excerpt(message.as_deref().unwrap_or(&text), key)
}

/// A short, single-line excerpt with anything that looks like an API key blanked out: OpenAI's
/// 401 message quotes the key it was given (partly masked, but still).
fn excerpt(text: &str, key: Option<&str>) -> String {
    let key = key.filter(|k| !k.is_empty());
    let words: Vec<&str> = text
        .split_whitespace()
        .map(|word| {
            let secret = word.contains("sk-") || key.is_some_and(|k| word.contains(k));
            if secret { "[redacted]" } else { word }
        })
        .collect();
    let line = words.join(" ");
    match line.char_indices().nth(DETAIL_CHARS) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use parley_core::config::SecretString;
    use parley_testkit::llm::{ScriptedLlm, Step};

    use super::*;
    use crate::llm::fixtures::{config, far_deadline};

    fn url(llm: &ScriptedLlm) -> url::Url {
        url::Url::parse(&format!("{}/responses", llm.base_url())).unwrap()
    }

    fn retrying(max_retries: u32) -> LlmConfig {
        LlmConfig {
            max_retries,
            retry_budget: Duration::from_secs(10),
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
        let config = LlmConfig {
            retry_budget: Duration::ZERO,
            ..retrying(3)
        };
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
        let config = LlmConfig {
            timeout: Duration::from_millis(100),
            ..retrying(1)
        };
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
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&err, LlmError::Transport(m) if !m.contains("secret") && m.contains("connect")),
            "{err:?}"
        );
    }

    #[test]
    fn retry_after_is_read_as_seconds_an_http_date_or_milliseconds() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().unwrap());
            }
            map
        };
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers(&[(
                "retry-after",
                "Sun, 06 Nov 1994 08:49:37 GMT"
            )])),
            Some(Duration::ZERO)
        );
        let soon = (chrono::Utc::now() + chrono::Duration::seconds(30))
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let wait = retry_after(&headers(&[("retry-after", &soon)])).unwrap();
        assert!(
            wait > Duration::from_secs(20) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2"), ("retry-after-ms", "150")])),
            Some(Duration::from_millis(150))
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn backoff_stays_under_a_ceiling_that_doubles_up_to_the_cap() {
        for retries in 0..40 {
            let ceiling = BASE_BACKOFF
                .saturating_mul(2u32.saturating_pow(retries))
                .min(MAX_BACKOFF);
            assert!(backoff(retries) <= ceiling);
        }
    }

    #[test]
    fn error_details_prefer_the_json_message_and_are_cut_short() {
        assert_eq!(
            detail(
                br#"{"error":{"message":"model not found","type":"x"}}"#,
                None
            ),
            "model not found"
        );
        assert_eq!(detail(br#"{"detail":"Not Found"}"#, None), "Not Found");
        assert_eq!(
            detail(b"upstream\n  connect error", None),
            "upstream connect error"
        );
        let long = "x".repeat(1000);
        assert_eq!(
            detail(long.as_bytes(), None).chars().count(),
            DETAIL_CHARS + 1
        );
        assert_eq!(
            detail(b"key abc123 rejected", Some("abc123")),
            "key [redacted] rejected"
        );
    }
}
