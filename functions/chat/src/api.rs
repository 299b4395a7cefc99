//! The HTTP surface: `POST /api/chat` (JSON, or streamed by [`crate::stream`]),
//! `GET /api/conversations`, `GET /api/conversations/{id}/messages`, `GET /health`, and the
//! OpenAI-compatible routes of [`crate::openai`].
//!
//! Wire structs are parsed here into checked domain values (parse, don't validate), so the
//! turn loop never sees an empty message, an oversize context or a malformed id.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::User;
use crate::config::Limits;
use crate::conversation::{self, ConversationId, PageCursor, StorageError};
use crate::error::ApiError;
use crate::instructions::UiContext;
use crate::nul;
use crate::turn::{self, Progress, TurnRequest, TurnResponse};
use crate::{manage, openai, stream};

pub fn router(state: AppState) -> Router {
    let body_limit = state.limits.max_body_bytes;
    Router::new()
        .route("/api/chat", post(chat))
        .route("/api/conversations", get(list_conversations))
        .route(
            "/api/conversations/{id}",
            patch(manage::rename).delete(manage::delete),
        )
        .route(
            "/api/conversations/{id}/messages",
            get(conversation_messages),
        )
        .route("/health", get(health))
        .route("/v1/models", get(openai::models))
        .route("/v1/chat/completions", post(openai::completions))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatBody {
    message: String,
    #[serde(default)]
    context: Option<Value>,
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    tools: Option<Vec<String>>,
}

/// Most names a request may narrow the tools to.
const MAX_TOOL_NAMES: usize = 64;

impl ChatBody {
    fn parse(bytes: &[u8], limits: &Limits) -> Result<TurnRequest, ApiError> {
        let body: ChatBody = parse_json(bytes)?;
        if body.context.as_ref().is_some_and(nul::has_nul) {
            return Err(invalid(
                "invalid_characters",
                "`message` and `context` must not contain NUL characters",
            ));
        }
        let message = checked_message(&body.message, limits)?;
        let context = match body.context {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => {
                let size = Value::Object(map.clone()).to_string().len();
                if size > limits.max_context_bytes {
                    return Err(invalid(
                        "context_too_large",
                        format!(
                            "`context` is {size} bytes; the limit is {}",
                            limits.max_context_bytes
                        ),
                    ));
                }
                Some(UiContext::new(map))
            }
            Some(_) => {
                return Err(invalid(
                    "invalid_context",
                    "`context` must be a JSON object",
                ));
            }
        };
        let conversation = body
            .conversation_id
            .map(|raw| {
                ConversationId::parse(&raw).ok_or_else(|| {
                    invalid(
                        "invalid_conversation_id",
                        "`conversation_id` must be a UUID",
                    )
                })
            })
            .transpose()?;
        if let Some(tools) = &body.tools
            && (tools.is_empty() || tools.len() > MAX_TOOL_NAMES)
        {
            return Err(invalid(
                "invalid_tools",
                format!("`tools` must list between 1 and {MAX_TOOL_NAMES} tool names"),
            ));
        }
        Ok(TurnRequest {
            message,
            context,
            conversation,
            tools: body.tools,
            prior: Vec::new(),
        })
    }
}

/// The user's message, trimmed: not empty, not too long, no NUL (Postgres text cannot hold
/// one; refused here rather than failing when stored).
pub(crate) fn checked_message(raw: &str, limits: &Limits) -> Result<String, ApiError> {
    if raw.contains('\0') {
        return Err(invalid(
            "invalid_characters",
            "`message` and `context` must not contain NUL characters",
        ));
    }
    let message = raw.trim();
    if message.is_empty() {
        return Err(invalid("message_empty", "`message` must not be empty"));
    }
    let chars = message.chars().count();
    if chars > limits.max_message_chars {
        return Err(invalid(
            "message_too_long",
            format!(
                "`message` has {chars} characters; the limit is {}",
                limits.max_message_chars
            ),
        ));
    }
    Ok(message.to_owned())
}

pub(crate) fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::Invalid {
        code,
        message: message.into(),
    }
}

/// Bad JSON is 400; JSON of the wrong shape (types, unknown or missing fields) is 422, with the
/// path of the offending field.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed: Result<T, _> = serde_path_to_error::deserialize(&mut de);
    let trailing = parsed.is_ok().then(|| de.end()).and_then(Result::err);
    if let Some(e) = trailing {
        return Err(ApiError::BadRequest {
            code: "invalid_json",
            message: format!("the body is not valid JSON: {e}"),
        });
    }
    parsed.map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_data() {
            let at = if path == "." {
                String::new()
            } else {
                format!(" at `{path}`")
            };
            ApiError::Invalid {
                code: "invalid_request",
                message: format!("{inner}{at}"),
            }
        } else {
            ApiError::BadRequest {
                code: "invalid_json",
                message: format!("the body is not valid JSON: {inner}"),
            }
        }
    })
}

pub(crate) fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| match rejection {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            ApiError::TooLarge { limit }
        }
        other => ApiError::BadRequest {
            code: "unreadable_body",
            message: other.body_text(),
        },
    })
}

/// The turn as one JSON response, or streamed when the client accepts `text/event-stream`.
async fn chat(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = body_bytes(body, state.limits.max_body_bytes)?;
    let request = ChatBody::parse(&bytes, &state.limits)?;
    if stream::wanted(&headers) {
        return Ok(stream::respond(state, user, request).await);
    }
    let response: TurnResponse = turn::run(&state, &user, request, Progress::none()).await?;
    Ok(Json(response).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PageQuery {
    limit: Option<u32>,
    cursor: Option<String>,
}

async fn list_conversations(
    State(state): State<AppState>,
    User { id: user, .. }: User,
    query: Result<Query<PageQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(page) = query.map_err(|e| ApiError::BadRequest {
        code: "invalid_query",
        message: e.body_text(),
    })?;
    let limit = page.limit.unwrap_or(20);
    if limit == 0 || limit > state.limits.page_max {
        return Err(ApiError::BadRequest {
            code: "invalid_query",
            message: format!("`limit` must be between 1 and {}", state.limits.page_max),
        });
    }
    let cursor = page
        .cursor
        .map(|raw| {
            PageCursor::parse(&raw).ok_or(ApiError::BadRequest {
                code: "invalid_query",
                message: "`cursor` is not one this API returned".into(),
            })
        })
        .transpose()?;
    let (conversations, next) = state.reads.list(&user, limit, cursor.as_ref()).await?;
    Ok(Json(json!({
        "conversations": conversations,
        "next_cursor": next.map(|c| c.to_string()),
    })))
}

async fn conversation_messages(
    State(state): State<AppState>,
    User { id: user, .. }: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = ConversationId::parse(&id).ok_or(StorageError::NotFound)?;
    let messages = state.reads.messages(&user, &id).await?;
    Ok(Json(json!({"conversation_id": id, "messages": messages})))
}

/// Readiness: 200 when a database connection works, else 503.
async fn health(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    conversation::ping(&state.pool).await?;
    Ok(Json(json!({"status": "ok"})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> Limits {
        Limits {
            history: 20,
            replay_chars: 2000,
            max_steps: 8,
            max_calls_per_step: 16,
            turn_deadline: Duration::from_secs(25),
            stream_turn_deadline: Duration::from_secs(300),
            max_message_chars: 10,
            max_body_bytes: 1024,
            max_context_bytes: 64,
            turn_lock_wait: Duration::from_secs(1),
            turn_lease: Duration::from_secs(30),
            mcp_timeout: Duration::from_secs(1),
            page_max: 100,
        }
    }

    fn error(body: &str) -> (u16, &'static str) {
        use axum::response::IntoResponse;
        let e = ChatBody::parse(body.as_bytes(), &limits()).unwrap_err();
        let code = match &e {
            ApiError::Invalid { code, .. } | ApiError::BadRequest { code, .. } => *code,
            _ => "other",
        };
        (e.into_response().status().as_u16(), code)
    }

    #[test]
    fn malformed_json_is_400() {
        assert_eq!(error("{\"message\":"), (400, "invalid_json"));
        assert_eq!(
            error("{\"message\":\"hi\"} trailing"),
            (400, "invalid_json")
        );
    }

    #[test]
    fn wrong_shapes_are_422() {
        assert_eq!(error(r#"{"message": 5}"#), (422, "invalid_request"));
        assert_eq!(
            error(r#"{"message": "hi", "colour": "red"}"#),
            (422, "invalid_request")
        );
        assert_eq!(error(r#"{}"#), (422, "invalid_request"));
        assert_eq!(
            error(r#"{"message": "hi", "context": [1]}"#),
            (422, "invalid_context")
        );
        assert_eq!(
            error(r#"{"message": "hi", "conversation_id": "nope"}"#),
            (422, "invalid_conversation_id")
        );
        assert_eq!(
            error(r#"{"message": "hi", "tools": []}"#),
            (422, "invalid_tools")
        );
        assert_eq!(
            error(r#"{"message": "a\u0000b"}"#),
            (422, "invalid_characters")
        );
        assert_eq!(
            error(r#"{"message": "hi", "context": {"x": ["\u0000"]}}"#),
            (422, "invalid_characters")
        );
    }

    #[test]
    fn message_bounds_are_enforced_after_trimming() {
        assert_eq!(error(r#"{"message": "   "}"#), (422, "message_empty"));
        assert_eq!(
            error(r#"{"message": "eleven chars"}"#),
            (422, "message_too_long")
        );
        let ok = ChatBody::parse(br#"{"message": "  ten chars!  "}"#, &limits()).unwrap();
        assert_eq!(ok.message, "ten chars!");
    }

    #[test]
    fn a_valid_request_becomes_a_turn_request() {
        let r = ChatBody::parse(
            br#"{"message": " hi ", "context": {"district": "Leeds"}, "conversation_id": "6f1c5d2e-8c7b-4f2a-9d1e-3b5a7c9e1f20", "tools": ["lad_by_ref"]}"#,
            &limits(),
        )
        .unwrap();
        assert_eq!(r.message, "hi");
        assert!(r.context.is_some());
        assert!(r.conversation.is_some());
        assert_eq!(r.tools.unwrap(), ["lad_by_ref"]);
    }

    #[test]
    fn an_oversize_context_is_refused() {
        let big = format!(
            r#"{{"message": "hi", "context": {{"note": "{}"}}}}"#,
            "x".repeat(100)
        );
        assert_eq!(error(&big), (422, "context_too_large"));
    }
}
