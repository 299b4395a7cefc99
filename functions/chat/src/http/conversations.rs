//! The conversations' routes: `GET /api/conversations` (a page of the caller's list),
//! `GET /api/conversations/{id}/messages`, and `PATCH /api/conversations/{id}`
//! (`{"title": ...}`) and `DELETE /api/conversations/{id}`, the HTTP side of
//! [`crate::turn::conversation::edit`], so a person can tidy their list.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::bodies::{body_bytes, parse_json};
use super::error::ApiError;
use crate::auth::User;
use crate::turn::conversation::edit::{self, MAX_TITLE_CHARS};
use crate::turn::conversation::{ConversationId, ConversationSummary, PageCursor, StorageError};

/// The query of `GET /api/conversations`: a page's size and where it starts.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageQuery {
    limit: Option<u32>,
    cursor: Option<String>,
}

/// `GET /api/conversations`: the caller's conversations, newest first, a page at a time.
pub async fn list(
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

/// `GET /api/conversations/{id}/messages`: one of the caller's conversations, message by message.
pub async fn messages(
    State(state): State<AppState>,
    User { id: user, .. }: User,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = ConversationId::parse(&id).ok_or(StorageError::NotFound)?;
    let messages = state.reads.messages(&user, &id).await?;
    Ok(Json(json!({"conversation_id": id, "messages": messages})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RenameBody {
    title: String,
}

/// The conversation with its new title, as `GET /api/conversations` lists it.
pub async fn rename(
    State(state): State<AppState>,
    User { id: user, .. }: User,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ConversationSummary>, ApiError> {
    let id = ConversationId::parse(&id).ok_or(StorageError::NotFound)?;
    let bytes = body_bytes(body, state.limits.max_body_bytes)?;
    let RenameBody { title } = parse_json(&bytes)?;
    let title = edit::title(&title).ok_or_else(|| ApiError::Invalid {
        code: "invalid_title",
        message: format!(
            "`title` must be 1 to {MAX_TITLE_CHARS} characters on one line (no control \
             characters)"
        ),
    })?;
    Ok(Json(edit::rename(&state.pool, &user, &id, &title).await?))
}

/// 204 once the conversation and its messages are gone; 409 `conversation_busy` while a turn
/// runs in it.
pub async fn delete(
    State(state): State<AppState>,
    User { id: user, .. }: User,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = ConversationId::parse(&id).ok_or(StorageError::NotFound)?;
    edit::delete(&state.pool, &user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
