//! `PUT /api/conversations/{id}/messages/{seq}/feedback`: a thumbs up or down, with an
//! optional comment, on an assistant message of the caller's own conversation.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use parley_core::config::{ConfigError, Env};

use super::AppState;
use super::error::ApiError;
use crate::auth::User;

/// `FEEDBACK_*` settings (see docs/settings.md).
#[derive(Debug, Clone, Default)]
pub struct Settings {}

impl Settings {
    pub fn from_env(_env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {})
    }
}

pub async fn put(State(_state): State<AppState>, _user: User) -> Result<Response, ApiError> {
    Ok(axum::http::StatusCode::NOT_IMPLEMENTED.into_response())
}
