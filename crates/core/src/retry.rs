//! One JSON POST to an HTTP API (an LLM, an embeddings server) with retries: 429,
//! 500/502/503/504, timeouts and transport failures are retried with capped exponential backoff
//! and full jitter (or the server's `Retry-After`), within a number of retries and a budget of
//! waiting, and never past the caller's deadline. Bodies are read in chunks up to a cap, so a
//! runaway server cannot take the instance's memory; a streamed answer ([`post_stream`]) is
//! retried only until its first bytes arrive. What a body means is the caller's business;
//! nothing here knows an API's shapes beyond where error messages usually are.

use std::time::Duration;

use reqwest::header::HeaderMap;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;
use tokio::time::Instant;

/// The first backoff ceiling callers use unless they have reason not to (tests use a tiny one);
/// it doubles with each retry up to [`MAX_BACKOFF`].
pub const BASE_BACKOFF: Duration = Duration::from_millis(250);
pub const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// How much of an error body goes into [`PostError`]'s `detail` and the log.
pub const DETAIL_CHARS: usize = 200;

/// How much of an error status's body is read: its message is near the start, and only
/// [`DETAIL_CHARS`] of it are kept.
const ERROR_BODY_BYTES: usize = 64 * 1024;

/// How one caller retries: its settings, read once at start-up.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Whose server this is, for the log lines ("LLM", "embeddings").
    pub service: &'static str,
    /// One attempt, start to end of body.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Total time one call may spend waiting between retries; a `Retry-After` longer than what
    /// is left ends the retries, and zero turns retries off.
    pub retry_budget: Duration,
    /// The largest 2xx body read; a larger one is [`PostError::TooLarge`].
    pub max_response_bytes: usize,
    /// The first backoff ceiling (normally [`BASE_BACKOFF`]).
    pub base_backoff: Duration,
}

/// One remote service's timeout and retries as a deployment sets them: `{PREFIX}_TIMEOUT_MS`,
/// `{PREFIX}_MAX_RETRIES` (0 to 10) and `{PREFIX}_RETRY_BUDGET_MS`, read the same way for the
/// LLM, the embeddings server and the reranker, each from its own [`RetryDefaults`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    /// One attempt, start to end of body.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Waiting between one call's retries, in all.
    pub retry_budget: Duration,
}

/// Where a service's [`RetrySettings`] start, and how far a deployment may move them.
#[derive(Debug, Clone)]
pub struct RetryDefaults {
    pub timeout: Duration,
    pub timeout_ms: std::ops::RangeInclusive<u64>,
    pub max_retries: u32,
    pub retry_budget: Duration,
    pub retry_budget_ms: std::ops::RangeInclusive<u64>,
}

/// The most retries any service may be set to make.
const MAX_RETRIES: u64 = 10;

impl RetrySettings {
    /// `prefix`'s three settings, or the first one out of its range.
    pub fn from_env(
        env: &crate::config::Env,
        prefix: &str,
        defaults: RetryDefaults,
    ) -> Result<Self, crate::config::ConfigError> {
        Ok(Self {
            timeout: env.millis(
                &format!("{prefix}_TIMEOUT_MS"),
                defaults.timeout,
                defaults.timeout_ms,
            )?,
            max_retries: env.limit(
                &format!("{prefix}_MAX_RETRIES"),
                u64::from(defaults.max_retries),
                0..=MAX_RETRIES,
            )? as u32,
            retry_budget: env.millis(
                &format!("{prefix}_RETRY_BUDGET_MS"),
                defaults.retry_budget,
                defaults.retry_budget_ms,
            )?,
        })
    }

    /// The policy of `service`'s POSTs with these settings, bodies capped at
    /// `max_response_bytes`, backing off from [`BASE_BACKOFF`].
    pub fn policy(&self, service: &'static str, max_response_bytes: usize) -> RetryPolicy {
        RetryPolicy {
            service,
            timeout: self.timeout,
            max_retries: self.max_retries,
            retry_budget: self.retry_budget,
            max_response_bytes,
            base_backoff: BASE_BACKOFF,
        }
    }

    /// The longest one call can take: every attempt's timeout and the budget between them.
    pub fn worst_case(&self) -> Duration {
        self.timeout.saturating_mul(self.max_retries + 1) + self.retry_budget
    }
}

/// Why a POST failed, after the retries allowed. `detail`s are excerpts of the server's own
/// message with the API key (and anything that looks like one) blanked out.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PostError {
    /// Still 429 after the retries allowed.
    #[error("rate limited (HTTP 429)")]
    RateLimited { retry_after: Option<Duration> },
    /// 401 or 403: the key is missing or refused. Not transient, so never retried.
    #[error("credentials refused (HTTP {status})")]
    Unauthorized {
        status: u16,
        /// Whether a key was sent at all.
        key_set: bool,
        detail: String,
    },
    /// Another error status (after retries for 5xx).
    #[error("HTTP {status}")]
    Status { status: u16, detail: String },
    /// A 2xx body larger than the policy's `max_response_bytes`; reading stopped there.
    #[error("the response is larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// The caller's deadline came before an answer.
    #[error("the deadline was reached before an answer")]
    DeadlineReached,
    /// No answer within the policy's `timeout` (after retries).
    #[error("no answer in time")]
    Timeout,
    /// Connection refused, reset, DNS... (after retries). Never holds the URL.
    #[error("unreachable: {0}")]
    Transport(String),
}

/// A failed attempt: the error to report if it is the last one, and whether another may help.
struct Failure {
    error: PostError,
    retryable: bool,
    /// What the server asked for in `Retry-After`, if anything.
    retry_after: Option<Duration>,
}

/// The body of a 2xx answer to a POST of `body` (JSON) to `url`, by `deadline`: each
/// attempt's timeout is cut to the time left, and no retry starts past it. `api_key`, when
/// given, goes as `Authorization: Bearer`. `retries` ends as the retries made (for a caller's
/// metrics).
pub async fn post_json(
    http: &reqwest::Client,
    policy: &RetryPolicy,
    api_key: Option<&SecretString>,
    url: url::Url,
    body: Vec<u8>,
    deadline: Instant,
    retries: &mut u32,
) -> Result<bytes::Bytes, PostError> {
    // Serialized once by the caller; each attempt shares the same bytes.
    let body = bytes::Bytes::from(body);
    with_retries(policy, deadline, retries, |timeout| {
        let request = post(http, api_key, url.clone(), body.clone()).timeout(timeout);
        read_whole(request, policy, api_key)
    })
    .await
}

/// A 2xx answer being streamed, its first bytes already read.
#[derive(Debug)]
pub struct Streaming {
    response: reqwest::Response,
    first: Option<bytes::Bytes>,
}

impl Streaming {
    /// The response's status and headers.
    pub fn response(&self) -> &reqwest::Response {
        &self.response
    }

    /// The next piece of the body as it arrives, `None` at its end. No timeout applies: the
    /// caller decides how long a silence it accepts.
    pub async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, reqwest::Error> {
        match self.first.take() {
            Some(first) => Ok(Some(first)),
            None => self.response.chunk().await,
        }
    }
}

/// A POST whose 2xx answer is a stream (server-sent events), sent with `Accept:
/// text/event-stream`. Retried as [`post_json`] is until the first bytes of a 2xx body arrive,
/// with the policy's `timeout` as the time to those bytes; from there on the answer is the
/// caller's, because a retry would repeat what it has already been given.
pub async fn post_stream(
    http: &reqwest::Client,
    policy: &RetryPolicy,
    api_key: Option<&SecretString>,
    url: url::Url,
    body: Vec<u8>,
    deadline: Instant,
    retries: &mut u32,
) -> Result<Streaming, PostError> {
    let body = bytes::Bytes::from(body);
    with_retries(policy, deadline, retries, |timeout| {
        let request = post(http, api_key, url.clone(), body.clone())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        open_stream(request, api_key, timeout)
    })
    .await
}

/// Runs `attempt` (given the time it may take) until it succeeds, fails for good, or the
/// retries, their budget or the deadline run out; `retries` ends as the retries made.
async fn with_retries<T, A, F>(
    policy: &RetryPolicy,
    deadline: Instant,
    retries: &mut u32,
    mut attempt: A,
) -> Result<T, PostError>
where
    A: FnMut(Duration) -> F,
    F: Future<Output = Result<T, Failure>>,
{
    let mut waited = Duration::ZERO;
    *retries = 0;
    let service = policy.service;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(PostError::DeadlineReached);
        }
        let timeout = policy.timeout.min(left);
        let failure = match attempt(timeout).await {
            Ok(answer) => return Ok(answer),
            Err(failure) => failure,
        };
        if matches!(failure.error, PostError::Timeout) && timeout < policy.timeout {
            // What ran out was the caller's time, not the policy's timeout.
            return Err(PostError::DeadlineReached);
        }
        let wait = failure
            .retry_after
            .unwrap_or_else(|| backoff(policy.base_backoff, *retries));
        let remaining = policy.retry_budget.saturating_sub(waited);
        // A spent budget means no more retries, even ones that would not wait at all: a budget
        // of zero turns retries off.
        let give_up = !failure.retryable
            || *retries >= policy.max_retries
            || remaining.is_zero()
            || wait > remaining
            || Instant::now() + wait >= deadline;
        let detail = match &failure.error {
            PostError::Status { detail, .. } => detail.as_str(),
            _ => "",
        };
        if give_up {
            let retries = *retries;
            tracing::warn!(service, error = %failure.error, detail, retries, "request failed");
            return Err(failure.error);
        }
        tracing::warn!(
            service,
            error = %failure.error,
            detail,
            retry = *retries + 1,
            wait_ms = wait.as_millis() as u64,
            "request failed; retrying"
        );
        tokio::time::sleep(wait).await;
        waited += wait;
        *retries += 1;
    }
}

/// The POST of `body` (JSON) to `url`, with the key as a bearer token when there is one.
fn post(
    http: &reqwest::Client,
    api_key: Option<&SecretString>,
    url: url::Url,
    body: bytes::Bytes,
) -> reqwest::RequestBuilder {
    let request = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    match api_key {
        // reqwest marks the header sensitive, so it stays out of its debug output too.
        Some(key) => request.bearer_auth(key.expose_secret()),
        None => request,
    }
}

/// One attempt read whole, up to the policy's cap.
async fn read_whole(
    request: reqwest::RequestBuilder,
    policy: &RetryPolicy,
    api_key: Option<&SecretString>,
) -> Result<bytes::Bytes, Failure> {
    let mut response = send(request, api_key).await?;
    let limit = policy.max_response_bytes;
    match read_capped(&mut response, limit).await.map_err(transport)? {
        Some(bytes) => Ok(bytes),
        None => Err(Failure {
            error: PostError::TooLarge { limit },
            retryable: false,
            retry_after: None,
        }),
    }
}

/// One attempt at a stream: a 2xx and its first bytes within `timeout`. The policy's cap on
/// the bytes read is the caller's to keep, as it reads on.
async fn open_stream(
    request: reqwest::RequestBuilder,
    api_key: Option<&SecretString>,
    timeout: Duration,
) -> Result<Streaming, Failure> {
    let opening = async {
        let mut response = send(request, api_key).await?;
        let first = response.chunk().await.map_err(transport)?;
        Ok(Streaming { response, first })
    };
    tokio::time::timeout(timeout, opening)
        .await
        .unwrap_or(Err(Failure {
            error: PostError::Timeout,
            retryable: true,
            retry_after: None,
        }))
}

/// The response to `request` if its status is a 2xx, else the failure it is.
async fn send(
    request: reqwest::RequestBuilder,
    api_key: Option<&SecretString>,
) -> Result<reqwest::Response, Failure> {
    let mut response = request.send().await.map_err(transport)?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = retry_after(response.headers());
    let key = api_key.map(|k| k.expose_secret());
    // Only the start of an error body is read: the message is there.
    let bytes = read_capped(&mut response, ERROR_BODY_BYTES)
        .await
        .map_err(transport)?
        .unwrap_or_default();
    let code = status.as_u16();
    let error = match code {
        429 => PostError::RateLimited { retry_after },
        401 | 403 => PostError::Unauthorized {
            status: code,
            key_set: api_key.is_some(),
            detail: detail(&bytes, key),
        },
        _ => PostError::Status {
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

fn transport(e: reqwest::Error) -> Failure {
    // A request that cannot even be built will not build better the next time.
    let retryable = !e.is_builder();
    let error = if e.is_timeout() {
        PostError::Timeout
    } else {
        // The URL stays out: a base URL may carry credentials in its query or user info.
        PostError::Transport(crate::error::chain(&e.without_url()))
    };
    Failure {
        error,
        retryable,
        retry_after: None,
    }
}

/// Full jitter: a uniformly random wait up to a ceiling that doubles with each retry, so many
/// instances throttled at once do not come back in lockstep.
fn backoff(base: Duration, retries: u32) -> Duration {
    let ceiling = base
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

/// A short, single-line excerpt of a server's text with anything that looks like an API key
/// blanked out: OpenAI's 401 message quotes the key it was given (partly masked, but still).
pub fn excerpt(text: &str, key: Option<&str>) -> String {
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
    use super::*;

    fn defaults() -> RetryDefaults {
        RetryDefaults {
            timeout: Duration::from_secs(3),
            timeout_ms: 10..=60_000,
            max_retries: 1,
            retry_budget: Duration::from_millis(500),
            retry_budget_ms: 0..=60_000,
        }
    }

    #[test]
    fn retry_settings_are_read_under_the_services_prefix_within_its_ranges() {
        let env = |pairs: &[(&str, &str)]| crate::config::Env::from_pairs(pairs.iter().copied());
        let unset = RetrySettings::from_env(&env(&[]), "RERANK", defaults()).unwrap();
        assert_eq!(
            unset,
            RetrySettings {
                timeout: Duration::from_secs(3),
                max_retries: 1,
                retry_budget: Duration::from_millis(500),
            }
        );
        assert_eq!(unset.worst_case(), Duration::from_millis(6_500));
        let set = RetrySettings::from_env(
            &env(&[
                ("RERANK_TIMEOUT_MS", "250"),
                ("RERANK_MAX_RETRIES", "0"),
                ("RERANK_RETRY_BUDGET_MS", "0"),
                ("LLM_TIMEOUT_MS", "9"),
            ]),
            "RERANK",
            defaults(),
        )
        .unwrap();
        assert_eq!(set.timeout, Duration::from_millis(250));
        assert_eq!((set.max_retries, set.retry_budget), (0, Duration::ZERO));
        let policy = set.policy("reranker", 1024);
        assert_eq!(
            (policy.service, policy.max_response_bytes),
            ("reranker", 1024)
        );
        assert_eq!(policy.base_backoff, BASE_BACKOFF);

        for (var, value) in [
            ("RERANK_TIMEOUT_MS", "9"),
            ("RERANK_MAX_RETRIES", "11"),
            ("RERANK_RETRY_BUDGET_MS", "60001"),
        ] {
            let err =
                RetrySettings::from_env(&env(&[(var, value)]), "RERANK", defaults()).unwrap_err();
            assert_eq!(err.var, var);
        }
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
            assert!(backoff(BASE_BACKOFF, retries) <= ceiling);
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
