//! The chat's HTTP edge: [`AppState`], the router, `POST /api/chat` (JSON, or streamed by
//! [`ui_stream`]) and `GET /health`; the conversations' routes are in [`conversations`], the
//! OpenAI-compatible ones in [`openai`] (charts as tables: [`chart_table`]), the page and its
//! sign-in in [`page`] and [`sign_in`]. It runs a turn through [`crate::turn::run`], handing
//! it only what it needs, and renders the outcome; nothing below this room sees axum.
//!
//! Bodies are parsed by [`bodies`] into checked domain values (parse, don't validate), so the
//! turn loop never sees an empty message, an oversize context or a malformed id.

pub mod bodies;
pub mod chart_table;
pub mod conversations;
pub mod cross_site;
pub mod error;
pub mod feedback;
pub mod openai;
pub mod page;
pub mod sign_in;
pub mod turn_body;
pub mod ui_stream;
pub mod usage;

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post, put};
use deadpool_postgres::Pool;
use parley_core::metrics::Metrics;
use serde_json::{Value, json};

use crate::auth::{Authenticator, User};
use crate::limits::Limits;
use crate::turn::instructions::AssistantName;
use crate::turn::llm::Llm;
use crate::turn::mcp_client::McpClients;
use crate::turn::{self, Progress, approval, conversation};
use error::ApiError;
use turn_body::TurnBody;

/// Everything a request needs, built once per instance and shared by every invocation.
#[derive(Clone)]
pub struct AppState {
    pub pool: Pool,
    /// Reads of stored conversations, bounded per user (`HISTORY_READS_PER_USER`).
    pub reads: conversation::Reads,
    pub llm: Llm,
    pub mcp: Arc<McpClients>,
    pub auth: Arc<Authenticator>,
    pub limits: Arc<Limits>,
    /// `ASSISTANT_NAME`, for the instructions.
    pub assistant: Arc<AssistantName>,
    /// `ASSISTANT_MODEL_ID`, the model of the OpenAI-compatible endpoint.
    pub model_id: Arc<str>,
    /// `V1_TOOL_BLOCKS`: whether that endpoint's answers carry the tool calls as blocks.
    pub v1_tool_blocks: bool,
    /// `APPROVAL`, `APPROVAL_TTL_MS`: which tool calls wait for the user's approval.
    pub approval: approval::Settings,
    /// `BUDGET_*`, `RATE_*`: each user's token budget and turn rate.
    pub quota: Arc<turn::quota::Settings>,
    /// `ADMIN_GROUP`, `MODEL_PRICES`: who sees everyone's usage, and what it costs.
    pub usage: Arc<usage::Settings>,
    /// `FEEDBACK_*`: feedback on answers.
    pub feedback: Arc<feedback::Settings>,
    /// Where each turn's metrics go (`METRICS`, `METRICS_NAMESPACE`; see docs/metrics.md).
    pub metrics: Metrics,
}

impl AppState {
    /// What a turn is handed of the instance: its narrow view of this state.
    pub fn turn_deps(&self) -> turn::Deps<'_> {
        turn::Deps {
            pool: &self.pool,
            llm: &self.llm,
            mcp: &self.mcp,
            limits: &self.limits,
            assistant: self.assistant.as_str(),
            approval: self.approval,
            quota: &self.quota,
            metrics: &self.metrics,
        }
    }
}

impl FromRef<AppState> for Arc<Authenticator> {
    fn from_ref(state: &AppState) -> Self {
        state.auth.clone()
    }
}

pub fn router(state: AppState) -> Router {
    let body_limit = state.limits.max_body_bytes;
    Router::new()
        .route("/api/chat", post(chat))
        .route("/api/conversations", get(conversations::list))
        .route(
            "/api/conversations/{id}",
            patch(conversations::rename).delete(conversations::delete),
        )
        .route(
            "/api/conversations/{id}/messages",
            get(conversations::messages),
        )
        .route(
            "/api/conversations/{id}/messages/{seq}/feedback",
            put(feedback::put),
        )
        .route("/api/usage", get(usage::report))
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
    let bytes = bodies::body_bytes(body, state.limits.max_body_bytes)?;
    let request = bodies::chat(&bytes, &state.limits)?;
    if ui_stream::wanted(&headers) {
        return Ok(ui_stream::respond(state, user, request).await);
    }
    let outcome = turn::run(&state.turn_deps(), &user, request, Progress::none()).await?;
    Ok(Json(TurnBody::from(outcome)).into_response())
}

/// Readiness: 200 when a database connection works, else 503.
async fn health(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    conversation::ping(&state.pool).await?;
    Ok(Json(json!({"status": "ok"})))
}
