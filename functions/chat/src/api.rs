//! The HTTP surface: `POST /api/chat` (JSON, or streamed by [`crate::stream`]),
//! `GET /api/conversations`, `GET /api/conversations/{id}/messages`, `GET /health`, and the
//! OpenAI-compatible routes of [`crate::openai`].
//!
//! Bodies are parsed by [`crate::request`] into checked domain values (parse, don't
//! validate), so the turn loop never sees an empty message, an oversize context or a
//! malformed id.

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::User;
use crate::conversation::{self, ConversationId, PageCursor, StorageError};
use crate::error::ApiError;
use crate::turn::{self, Progress, TurnResponse};
use crate::{manage, openai, request, stream};

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

/// The turn as one JSON response, or streamed when the client accepts `text/event-stream`.
async fn chat(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = request::body_bytes(body, state.limits.max_body_bytes)?;
    let request = request::chat(&bytes, &state.limits)?;
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
