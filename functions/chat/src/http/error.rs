//! The one place the chat function's own code picks HTTP statuses: every failure of a handler
//! or extractor is an [`ApiError`], sent as `{"error":{"code","message"}}`. 5xx bodies stay
//! generic; the cause goes to the log. (Before routing, `parley_core::plain_http` refuses an
//! oversized URI or head and a repeated `Host`; `parley_core::serve` gives axum's 404 and 405
//! the same body.)

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parley_core::jwt::TokenError;

use crate::auth::AuthError;
use crate::http::bodies::RequestError;
use crate::http::cross_site::Refusal;
use crate::turn::conversation::StorageError;
use crate::turn::llm::{self, LlmError};
use crate::turn::quota::Limit;
use crate::turn::{TurnError, TurnFailure};

/// `Retry-After` of a 503 that knows no better wait (the model's limit without its own, a
/// timeout, keys or a database out of reach): every 429 and 503 says when to come back, so a
/// client need not guess. 10 s, as the page's REST API answers a throttle (template.yaml,
/// `PageApiBusyResponse`) and as the page waits when told nothing.
const RETRY_SOON: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request body or query is malformed JSON or not what the endpoint takes.
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    /// Well-formed but unacceptable values (empty message, unknown tool, ...).
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    /// Something the request names does not exist (a model, for the OpenAI endpoint).
    #[error("{message}")]
    NotFound { code: &'static str, message: String },
    /// The request cannot be taken in the conversation's present state.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    #[error("request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error(transparent)]
    Unauthorized(#[from] AuthError),
    /// What a page of another site could send (`cross_site`).
    #[error(transparent)]
    CrossSite(#[from] Refusal),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Turn(#[from] TurnError),
    /// Anything else: a bug or an unexpected failure. Logged in full, reported generically.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// `"<code>: <message>"` exactly as the client is told: safe to store and show later.
    pub fn public_summary(&self) -> String {
        let (_, code, message, _) = self.public_parts();
        format!("{code}: {message}")
    }

    /// Whether the client would be told 5xx: the failure is ours or upstream's, not theirs.
    pub fn is_server_error(&self) -> bool {
        self.public_parts().0.is_server_error()
    }

    /// Status, code, message and `Retry-After`: what the client sees, never internals.
    fn public_parts(&self) -> (StatusCode, &'static str, String, Option<Duration>) {
        let mut retry_after: Option<Duration> = None;
        let (status, code, message) = match self {
            ApiError::BadRequest { code, message } => {
                (StatusCode::BAD_REQUEST, *code, message.clone())
            }
            ApiError::Invalid { code, message } => {
                (StatusCode::UNPROCESSABLE_ENTITY, *code, message.clone())
            }
            ApiError::NotFound { code, message } => (StatusCode::NOT_FOUND, *code, message.clone()),
            ApiError::Conflict { code, message } => (StatusCode::CONFLICT, *code, message.clone()),
            ApiError::TooLarge { .. } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                self.to_string(),
            ),
            ApiError::Unauthorized(e) => match e {
                AuthError::Token(TokenError::KeysUnavailable(_)) => {
                    retry_after = Some(RETRY_SOON);
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "auth_unavailable",
                        "the keys to verify tokens cannot be fetched; retry shortly".to_owned(),
                    )
                }
                other => (StatusCode::UNAUTHORIZED, "unauthorized", other.to_string()),
            },
            ApiError::CrossSite(e) => match e {
                Refusal::NotJson(_) => (
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    e.to_string(),
                ),
                Refusal::HostNotAllowed => {
                    (StatusCode::FORBIDDEN, "host_not_allowed", e.to_string())
                }
                Refusal::CrossSite => (StatusCode::FORBIDDEN, "cross_site_request", e.to_string()),
            },
            ApiError::Storage(e) => storage_parts(e, &mut retry_after),
            ApiError::Turn(e) => match e {
                TurnError::Storage(e) => storage_parts(e, &mut retry_after),
                TurnError::UnknownTool { .. } => (
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "unknown_tool",
                    e.to_string(),
                ),
                // Nothing upstream was asked, but the gateway has no model behind it: the code
                // is the one a model's refusal of a missing key gets, and so is the status.
                TurnError::NoModel => (
                    StatusCode::BAD_GATEWAY,
                    "llm_key_missing",
                    llm::NO_MODEL.to_owned(),
                ),
                TurnError::Llm(e) | TurnError::LlmInConversation { error: e, .. } => {
                    let status = match e {
                        LlmError::RateLimited { retry_after: after } => {
                            retry_after = Some(after.unwrap_or(RETRY_SOON));
                            StatusCode::SERVICE_UNAVAILABLE
                        }
                        LlmError::Timeout | LlmError::DeadlineReached => {
                            retry_after = Some(RETRY_SOON);
                            StatusCode::SERVICE_UNAVAILABLE
                        }
                        _ => StatusCode::BAD_GATEWAY,
                    };
                    let TurnFailure { code, message } = TurnFailure::of_llm(e);
                    (status, code, message)
                }
                TurnError::Lost => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "an internal error occurred".to_owned(),
                ),
                // Another user's approval is indistinguishable from a missing one.
                TurnError::ApprovalNotFound => {
                    (StatusCode::NOT_FOUND, "approval_not_found", e.to_string())
                }
                // The user's own limit, not the service's: 429 with when it resets.
                TurnError::QuotaExceeded(exceeded) => {
                    retry_after = Some(exceeded.retry_after);
                    (
                        StatusCode::TOO_MANY_REQUESTS,
                        "quota_exceeded",
                        exceeded.to_string(),
                    )
                }
                TurnError::ApprovedCallUnsettled { tool } => {
                    retry_after = Some(Duration::from_secs(2));
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        "approval_outcome_unknown",
                        format!(
                            "the approved call `{tool}` was sent but its answer did not arrive \
in time, so it may have run; nothing more was done. Send the same answer again: the call does not \
run twice, and the turn goes on with its result"
                        ),
                    )
                }
            },
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "an internal error occurred".to_owned(),
            ),
        };
        (status, code, message, retry_after)
    }
}

impl ApiError {
    /// What the body says beside `error`: the conversation a failed turn was stored in (so the
    /// client's retry goes there instead of starting another); for a turn over its user's
    /// budget or rate, which `limit`, `retry_after` (seconds) and `resets_at` (RFC 3339).
    fn beside(&self) -> serde_json::Map<String, serde_json::Value> {
        let mut beside = serde_json::Map::new();
        match self {
            ApiError::Turn(TurnError::LlmInConversation { conversation, .. }) => {
                beside.insert("conversation_id".into(), serde_json::json!(conversation));
            }
            ApiError::Turn(TurnError::QuotaExceeded(exceeded)) => {
                beside.insert("limit".into(), exceeded.limit.name().into());
                beside.insert("retry_after".into(), exceeded.retry_after.as_secs().into());
                beside.insert(
                    "resets_at".into(),
                    exceeded
                        .resets_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                        .into(),
                );
            }
            _ => {}
        }
        beside
    }

    /// The status and headers of this error's response, logged as it is sent; the body is the
    /// caller's to put in.
    fn response_head(&self) -> (Response, &'static str, String) {
        let (status, code, message, retry_after) = self.public_parts();
        if status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        } else {
            tracing::info!(error = %self, "request refused");
        }
        let mut response = parley_core::http::error_response(status, code, &message);
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(after) = retry_after
            && let Ok(v) = HeaderValue::from_str(&after.as_secs().max(1).to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        // A budget comes back in hours: OpenAI's own clients (which retry a 429 by
        // themselves) are told not to wait for it. A rate's minute they may wait out.
        if let ApiError::Turn(TurnError::QuotaExceeded(exceeded)) = self
            && matches!(exceeded.limit, Limit::DailyTokens { .. })
        {
            response
                .headers_mut()
                .insert(SHOULD_RETRY, HeaderValue::from_static("false"));
        }
        (response, code, message)
    }

    /// This error in OpenAI's shape, for `/v1`: `{"error":{"message","type","param","code"}}`
    /// (what OpenAI's clients read), with the same status, headers and fields beside `error`.
    pub fn into_openai_response(self) -> Response {
        let beside = self.beside();
        let kind = self.openai_type();
        let (mut response, code, message) = self.response_head();
        let mut body = beside;
        body.insert(
            "error".into(),
            serde_json::json!({"message": message, "type": kind, "param": null, "code": code}),
        );
        *response.body_mut() = axum::body::Body::from(serde_json::Value::Object(body).to_string());
        response
    }

    /// OpenAI's error `type` for this error's status (and, over a user's limits, OpenAI's own
    /// names for a spent quota and a request rate).
    fn openai_type(&self) -> &'static str {
        if let ApiError::Turn(TurnError::QuotaExceeded(exceeded)) = self {
            return match exceeded.limit {
                Limit::DailyTokens { .. } => "insufficient_quota",
                Limit::TurnRate { .. } => "requests",
            };
        }
        match self.public_parts().0.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            s if s >= 500 => "server_error",
            _ => "invalid_request_error",
        }
    }
}

/// The header OpenAI's clients read to decide whether to retry by themselves.
const SHOULD_RETRY: header::HeaderName = header::HeaderName::from_static("x-should-retry");

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let beside = self.beside();
        let (mut response, code, message) = self.response_head();
        if !beside.is_empty() {
            let body = parley_core::http::error_body_with(code, &message, beside);
            *response.body_mut() = axum::body::Body::from(body);
        }
        response
    }
}

fn storage_parts(
    e: &StorageError,
    retry_after: &mut Option<Duration>,
) -> (StatusCode, &'static str, String) {
    match e {
        StorageError::NotFound => (
            StatusCode::NOT_FOUND,
            "conversation_not_found",
            e.to_string(),
        ),
        StorageError::Busy => (
            StatusCode::CONFLICT,
            "conversation_busy",
            format!("{e}; retry when it has finished"),
        ),
        StorageError::LeaseLost => (
            StatusCode::CONFLICT,
            "turn_lease_lost",
            "this turn ran longer than its hold on the conversation (TURN_LEASE_MS) and a later \
turn took the conversation over; this reply was not stored, send the message again"
                .to_owned(),
        ),
        StorageError::PoolExhausted => {
            *retry_after = Some(Duration::from_secs(1));
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "database_pool_exhausted",
                "every database connection of this instance is in use; retry shortly".to_owned(),
            )
        }
        StorageError::TooManyReads { .. } => {
            *retry_after = Some(Duration::from_secs(1));
            (
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_reads",
                format!("{e}; retry shortly"),
            )
        }
        StorageError::Unavailable(_) => {
            *retry_after = Some(RETRY_SOON);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the database cannot be reached; retry shortly".to_owned(),
            )
        }
        StorageError::Failed(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "an internal error occurred".to_owned(),
        ),
    }
}

/// A refused request body: malformed JSON is 400, JSON the chat does not take is 422.
impl From<RequestError> for ApiError {
    fn from(e: RequestError) -> Self {
        match e {
            RequestError::Malformed(_) => ApiError::BadRequest {
                code: "invalid_json",
                message: e.to_string(),
            },
            RequestError::Invalid { code, message } => ApiError::Invalid { code, message },
            RequestError::TooLarge { limit } => ApiError::TooLarge { limit },
            RequestError::Unreadable(message) => ApiError::BadRequest {
                code: "unreadable_body",
                message,
            },
        }
    }
}

/// The caller extractor's rejection (`auth` knows nothing of HTTP statuses).
impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        ApiError::from(self).into_response()
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        ApiError::from(self).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_turns_metric_outcome_is_the_code_its_client_is_sent() {
        let failures = [
            TurnError::UnknownTool {
                unknown: "x".into(),
                available: String::new(),
            },
            TurnError::NoModel,
            TurnError::Llm(LlmError::RateLimited { retry_after: None }),
            TurnError::Llm(LlmError::Timeout),
            TurnError::Llm(LlmError::TooLarge { limit: 1 }),
            TurnError::LlmInConversation {
                conversation: crate::turn::conversation::ConversationId::new(),
                error: LlmError::Transport("reset".into()),
            },
            TurnError::Storage(StorageError::NotFound),
            TurnError::Storage(StorageError::Busy),
            TurnError::Storage(StorageError::LeaseLost),
            TurnError::Storage(StorageError::PoolExhausted),
            TurnError::Storage(StorageError::TooManyReads { limit: 2 }),
            TurnError::Storage(StorageError::Unavailable("down".into())),
            TurnError::Storage(StorageError::Failed("bug".into())),
            TurnError::Lost,
            TurnError::QuotaExceeded(crate::turn::quota::Exceeded {
                limit: Limit::TurnRate { per_minute: 1 },
                resets_at: chrono::Utc::now(),
                retry_after: Duration::from_secs(1),
            }),
        ];
        for failure in failures {
            let code = failure.code();
            let told = ApiError::Turn(failure).public_summary();
            assert!(told.starts_with(&format!("{code}: ")), "{code} vs {told}");
        }
    }

    #[test]
    fn an_exhausted_pool_is_its_own_error_and_a_503_with_retry_after() {
        use deadpool_postgres::{PoolError, TimeoutType};

        let e = StorageError::from(PoolError::Timeout(TimeoutType::Wait));
        assert!(matches!(e, StorageError::PoolExhausted), "{e:?}");
        let response = ApiError::from(e).into_response();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["retry-after"], "1");
        // A connect timeout is the database being unreachable, not the pool being busy.
        let e = StorageError::from(PoolError::Timeout(TimeoutType::Create));
        assert!(matches!(e, StorageError::Unavailable(_)), "{e:?}");
    }

    /// Every refusal a client should send again later (429, 503) says when, so the page can
    /// tell its user "try again in N s" instead of guessing.
    #[test]
    fn every_429_and_503_says_when_to_come_back() {
        let refusals = [
            ApiError::from(AuthError::Token(TokenError::KeysUnavailable("down".into()))),
            ApiError::Storage(StorageError::PoolExhausted),
            ApiError::Storage(StorageError::TooManyReads { limit: 4 }),
            ApiError::Storage(StorageError::Unavailable("refused".into())),
            ApiError::Turn(TurnError::Storage(StorageError::Unavailable(
                "refused".into(),
            ))),
            ApiError::Turn(TurnError::Llm(LlmError::RateLimited { retry_after: None })),
            ApiError::Turn(TurnError::Llm(LlmError::Timeout)),
            ApiError::Turn(TurnError::Llm(LlmError::DeadlineReached)),
            ApiError::Turn(TurnError::ApprovedCallUnsettled {
                tool: "delete_task".into(),
            }),
        ];
        for e in refusals {
            let what = format!("{e:?}");
            let response = e.into_response();
            let status = response.status();
            assert!(
                status == StatusCode::SERVICE_UNAVAILABLE
                    || status == StatusCode::TOO_MANY_REQUESTS,
                "{what}: {status}"
            );
            let after = response.headers().get(header::RETRY_AFTER);
            let seconds: u64 = after
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{what}: Retry-After {after:?}"));
            assert!((1..=10).contains(&seconds), "{what}: Retry-After {seconds}");
        }
    }

    fn over(limit: crate::turn::quota::Limit, secs: u64) -> ApiError {
        ApiError::Turn(TurnError::QuotaExceeded(crate::turn::quota::Exceeded {
            limit,
            resets_at: "2026-11-30T00:00:00Z".parse().unwrap(),
            retry_after: Duration::from_secs(secs),
        }))
    }

    async fn body_of(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// Over a budget or rate: 429 with when it resets, in the chat's body and in OpenAI's; a
    /// budget tells OpenAI's clients not to retry by themselves.
    #[tokio::test]
    async fn a_quota_refusal_says_when_it_resets_in_both_shapes() {
        let budget = Limit::DailyTokens { budget: 5000 };
        let response = over(budget, 11_520).into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "11520");
        assert_eq!(response.headers()["x-should-retry"], "false");
        let body = body_of(response).await;
        assert_eq!(
            body,
            serde_json::json!({
                "error": {"code": "quota_exceeded", "message":
                    "You have used today's token budget (5000 tokens); it resets at 00:00 UTC, in 3 h 12 min"},
                "limit": "daily_tokens", "retry_after": 11520, "resets_at": "2026-11-30T00:00:00Z",
            })
        );
        let response = over(Limit::TurnRate { per_minute: 3 }, 42).into_openai_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "42");
        assert!(response.headers().get("x-should-retry").is_none());
        let body = body_of(response).await;
        assert_eq!(
            body["error"],
            serde_json::json!({"code": "quota_exceeded", "type": "requests", "param": null,
                "message": "Too many questions in a minute (at most 3); try again in 42 s"})
        );
        assert_eq!(body["limit"], "turns_per_minute");
        // Any other error keeps its code in OpenAI's shape.
        let body = body_of(ApiError::Turn(TurnError::NoModel).into_openai_response()).await;
        assert_eq!(body["error"]["code"], "llm_key_missing");
        assert_eq!(body["error"]["type"], "server_error");
    }

    #[test]
    fn a_model_s_own_retry_after_is_passed_on() {
        let e = ApiError::Turn(TurnError::Llm(LlmError::RateLimited {
            retry_after: Some(Duration::from_secs(7)),
        }));
        assert_eq!(e.into_response().headers()[header::RETRY_AFTER], "7");
    }
}
