//! Parley's chat function: `POST /api/chat` runs an LLM tool-calling loop over MCP tools,
//! keeps the conversation in Postgres and returns the reply with a trace of every tool call.
//!
//! Modules: `api` (HTTP surface, parsing at the edge), `auth` (caller identity), `turn` (the
//! loop), `llm` (the model, two wire dialects), `mcp_client` (tools), `conversation` (memory,
//! with its own storage errors), `replay` (stored messages back into model input), `nul` (text
//! Postgres cannot store), `instructions` (what the model is told), `config`, `error` (the one
//! status mapping).

pub mod api;
pub mod auth;
pub mod config;
pub mod conversation;
pub mod error;
pub mod instructions;
pub mod llm;
pub mod mcp_client;
pub mod nul;
pub mod replay;
pub mod turn;

use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use deadpool_postgres::Pool;
use parley_core::secrets::Secrets;

use crate::auth::Authenticator;
use crate::config::{ChatConfig, Limits};
use crate::llm::Llm;
use crate::mcp_client::McpClients;

/// Everything a request needs, built once per instance and shared by every invocation.
#[derive(Clone)]
pub struct AppState {
    pub pool: Pool,
    pub llm: Llm,
    pub mcp: Arc<McpClients>,
    pub auth: Arc<Authenticator>,
    pub limits: Arc<Limits>,
}

impl FromRef<AppState> for Arc<Authenticator> {
    fn from_ref(state: &AppState) -> Self {
        state.auth.clone()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Db(#[from] parley_core::db::DbError),
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
}

/// Builds the state and the router. Nothing is connected yet: the pool, the MCP connections and
/// the JWKS are opened on first use, so a cold start does not wait for them twice.
pub fn build(config: &ChatConfig) -> Result<Router, StartupError> {
    build_with_secrets(config, None)
}

/// [`build`] for settings that came from Secrets Manager: a refused database password or a 401
/// from the `parley` MCP server fetches `secrets` again (rate-limited) and retries once.
pub fn build_with_secrets(
    config: &ChatConfig,
    secrets: Option<Secrets>,
) -> Result<Router, StartupError> {
    let http = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .build()
        .map_err(|e| StartupError::Http(e.to_string()))?;
    let auth = Arc::new(Authenticator::new(config.auth.clone(), http.clone()));
    let mut db = config.db.clone();
    db.rotation = secrets.as_ref().map(Secrets::database_rotation);
    let state = AppState {
        pool: parley_core::db::pool(&db)?,
        llm: Llm::new(config.llm.clone(), http.clone()),
        mcp: Arc::new(
            McpClients::new(config.mcp_servers.clone(), http, config.limits.mcp_timeout)
                .with_secrets(secrets),
        ),
        auth,
        limits: Arc::new(config.limits.clone()),
    };
    Ok(parley_core::serve::traced(api::router(state)))
}
