//! `GET /api/usage`: usage and cost per user, model and day, from `chat.turn_usage`. Members
//! of the admin group see everyone's; other users see their own.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use parley_core::config::{ConfigError, Env};

use super::AppState;
use super::error::ApiError;
use crate::auth::User;

/// `ADMIN_GROUP`, `MODEL_PRICES` (see docs/settings.md).
#[derive(Debug, Clone, Default)]
pub struct Settings {}

impl Settings {
    pub fn from_env(_env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {})
    }
}

pub async fn report(State(_state): State<AppState>, _user: User) -> Result<Response, ApiError> {
    Ok(axum::http::StatusCode::NOT_IMPLEMENTED.into_response())
}
