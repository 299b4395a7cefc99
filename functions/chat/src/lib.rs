//! Parley's chat function: `POST /api/chat` runs an LLM tool-calling loop over MCP tools,
//! keeps the conversation in Postgres and returns the reply with a trace of every tool call;
//! `page` serves a chat page for people at `GET /`.
//!
//! Modules, each importing only modules below it in this list (`lib` alone sees them all):
//! `api` (the `/api` routes and the router), `cross_site` (what a page of another site could
//! send, refused before any handler), `openai` (the OpenAI-compatible `/v1` routes),
//! `stream` (a turn as server-sent events), `error` (the one status mapping), `turn` (the
//! loop, its `TurnError`), `request` (wire bodies of both routes into a checked
//! `TurnRequest`), `instructions` (what the model is told), `replay` (stored messages back
//! into model input), `mcp_client` (tools), `config`, `page` (the page for people),
//! `manage` (renaming and deleting a conversation), `conversation` (memory,
//! with its own storage errors), `auth` (caller identity), `approval` (which tool calls wait
//! for the user, and their one decision), `nul`
//! (text Postgres cannot store), `llm` (the model, two wire dialects), `sources` (citable
//! tool rows and the reply's citations of them), `sign_in` (the page's OpenID provider).

pub mod api;
pub mod approval;
pub mod auth;
pub mod config;
pub mod conversation;
pub mod cross_site;
pub mod error;
pub mod instructions;
pub mod llm;
pub mod manage;
pub mod mcp_client;
pub mod nul;
pub mod openai;
pub mod page;
pub mod replay;
pub mod request;
pub mod sign_in;
pub mod sources;
pub mod stream;
pub mod turn;

use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use deadpool_postgres::Pool;
use parley_core::config::Env;
use parley_core::metrics::{Metrics, MetricsConfig, Sink};
use parley_core::secrets::Secrets;
use parley_core::serve::{Bound, Listener, StartupFailure};

use crate::auth::Authenticator;
use crate::config::{AssistantName, ChatConfig, Limits};
use crate::llm::Llm;
use crate::mcp_client::McpClients;

/// Where the function listens outside Lambda when `LISTEN_ADDR` is not set.
pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:3000";

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
    /// Where each turn's metrics go (`METRICS`, `METRICS_NAMESPACE`; see docs/metrics.md).
    pub metrics: Metrics,
}

impl FromRef<AppState> for Arc<Authenticator> {
    fn from_ref(state: &AppState) -> Self {
        state.auth.clone()
    }
}

/// Why the function did not start; its own part is the HTTP client.
pub type StartupError = parley_core::serve::StartupError<HttpClientError>;

#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct HttpClientError(String);

impl StartupFailure for HttpClientError {
    fn is_bad_setting(&self) -> bool {
        false
    }
}

/// The function's start-up, as `main`, the tests and the bench run it.
pub struct Application;

impl Application {
    /// Everything before the first request: the secrets named in `SECRET_IDS` laid over `env`,
    /// the settings, the state and the router; then `LISTEN_ADDR` is bound (not under Lambda).
    /// Nothing is connected yet: the pool, the MCP connections and the JWKS are opened on
    /// first use, so a cold start does not wait for them twice. A refused database password or
    /// a 401 from the `parley` MCP server fetches the secrets again (rate-limited).
    pub async fn build(env: Env) -> Result<Bound, StartupError> {
        Self::build_with_metrics(env, Sink::Stdout).await
    }

    /// [`Application::build`] with its metrics going to `sink` (tests read them from memory).
    pub async fn build_with_metrics(env: Env, sink: Sink) -> Result<Bound, StartupError> {
        let (env, secrets) = parley_core::secrets::load(&env).await?;
        let config = ChatConfig::from_env(&env)?;
        let metrics = Metrics::new(&MetricsConfig::from_env(&env)?, sink);
        let router = router(&config, secrets, metrics)?;
        let listener = Listener::bind(&env, DEFAULT_LISTEN_ADDR).await?;
        Ok(Bound::new(router, listener))
    }
}

fn router(
    config: &ChatConfig,
    secrets: Option<Secrets>,
    metrics: Metrics,
) -> Result<Router, StartupError> {
    let http = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .build()
        .map_err(|e| StartupError::Function(HttpClientError(e.to_string())))?;
    let auth = Arc::new(Authenticator::new(config.auth.clone(), http.clone()));
    let sign_in = config
        .sign_in
        .clone()
        .map(|settings| Arc::new(sign_in::Discovery::new(settings, http.clone())));
    let db = config.db.clone().named("parley-chat");
    let pool = parley_core::db::pool_with_secrets(&db, secrets.as_ref(), &metrics)?;
    let state = AppState {
        reads: conversation::Reads::new(pool.clone(), config.history_reads_per_user),
        pool,
        llm: Llm::new(config.llm.clone(), http.clone()).with_metrics(metrics.clone()),
        mcp: Arc::new(
            McpClients::new(config.mcp_servers.clone(), http, config.limits.mcp_timeout)
                .with_secrets(secrets)
                .with_caller_key(config.caller_key.as_ref()),
        ),
        auth,
        limits: Arc::new(config.limits.clone()),
        assistant: Arc::new(config.assistant_name.clone()),
        model_id: Arc::from(config.model_id.as_str()),
        v1_tool_blocks: config.v1_tool_blocks,
        approval: config.approval,
        metrics,
    };
    config.approval.warn_if_off();
    let page = page::router(&page::PageSettings {
        assistant: config.assistant_name.as_str(),
        auth: config.auth.mode,
        context_options: config.page_context_options.as_ref(),
        model_problem: config.llm.setup_problem(),
        examples: config.page_examples.as_ref(),
        stream_url: config.page_stream_url.as_ref(),
        sign_in,
    });
    // Before any handler (and any body is read): what a page of another site could send.
    let guarded = api::router(state).layer(axum::middleware::from_fn_with_state(
        Arc::new(config.cross_site.clone()),
        cross_site::guard,
    ));
    Ok(parley_core::serve::traced(guarded.merge(page)))
}
