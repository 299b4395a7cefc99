//! `PATCH /api/conversations/{id}` (`{"title": ...}`) and `DELETE /api/conversations/{id}`:
//! the HTTP side of [`crate::conversation::manage`], so a person can tidy their list.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use crate::AppState;
use crate::auth::User;
use crate::conversation::manage::{self, MAX_TITLE_CHARS};
use crate::conversation::{ConversationId, ConversationSummary, StorageError};
use crate::error::ApiError;
use crate::request::{body_bytes, parse_json};

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
    let title = manage::title(&title).ok_or_else(|| ApiError::Invalid {
        code: "invalid_title",
        message: format!(
            "`title` must be 1 to {MAX_TITLE_CHARS} characters on one line (no control \
             characters)"
        ),
    })?;
    Ok(Json(manage::rename(&state.pool, &user, &id, &title).await?))
}

/// 204 once the conversation and its messages are gone; 409 `conversation_busy` while a turn
/// runs in it.
pub async fn delete(
    State(state): State<AppState>,
    User { id: user, .. }: User,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = ConversationId::parse(&id).ok_or(StorageError::NotFound)?;
    manage::delete(&state.pool, &user, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
