//! Parley's chat function: `POST /api/chat` runs an LLM tool-calling loop over MCP tools,
//! keeps the conversation in Postgres and returns the reply with a trace of every tool call;
//! `http::page` serves a chat page for people at `GET /`.
//!
//! Two rooms: `http` is the edge (routes, extractors, [`AppState`], the dialects and writers,
//! cross-site checks, the one status mapping, the page and its sign-in) and `turn` the core (the loop, the conversation's
//! storage and lease, approvals, the model and MCP clients), which knows no HTTP and is handed
//! only what it needs ([`turn::Deps`]). Each module imports only modules below it: `config`
//! (every setting, read once) → `http` → `turn` → `auth`, `limits`, `nul`.

pub mod auth;
pub mod config;
pub mod http;
pub mod limits;
pub mod nul;
pub mod turn;

use std::sync::Arc;

use axum::Router;
use parley_core::config::Env;
use parley_core::metrics::{Metrics, MetricsConfig, Sink};
use parley_core::secrets::Secrets;
use parley_core::serve::{Bound, Listener, StartupFailure};

pub use crate::http::AppState;

use crate::auth::Authenticator;
use crate::config::ChatConfig;
use crate::turn::conversation;
use crate::turn::llm::Llm;
use crate::turn::mcp_client::McpClients;

/// The function's OpenTelemetry defaults (docs/tracing.md): service `parley-chat`; a request's
/// `traceparent` is ignored unless `OTEL_TRUST_TRACEPARENT` says otherwise, as its callers are browsers: a `traceparent` from one would let anyone pick the trace id.
pub const TRACES: parley_core::telemetry::FunctionTraces = parley_core::telemetry::FunctionTraces {
    service_name: "parley-chat",
    trust_traceparent: false,
};

/// Where the function listens outside Lambda when `LISTEN_ADDR` is not set.
pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:3000";

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
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .build()
        .map_err(|e| StartupError::Function(HttpClientError(e.to_string())))?;
    let auth = Arc::new(Authenticator::new(config.auth.clone(), client.clone()));
    let sign_in = config
        .sign_in
        .clone()
        .map(|settings| Arc::new(http::sign_in::Discovery::new(settings, client.clone())));
    let db = config.db.clone().named("parley-chat");
    let pool = parley_core::db::pool_with_secrets(&db, secrets.as_ref(), &metrics)?;
    let state = AppState {
        reads: conversation::Reads::new(pool.clone(), config.history_reads_per_user),
        pool,
        llm: Llm::new(config.llm.clone(), client.clone()).with_metrics(metrics.clone()),
        mcp: Arc::new(
            McpClients::new(
                config.mcp_servers.clone(),
                client,
                config.limits.mcp_timeout,
            )
            .with_secrets(secrets)
            .with_caller_key(config.caller_key.as_ref()),
        ),
        auth,
        limits: Arc::new(config.limits.clone()),
        assistant: Arc::new(config.assistant_name.clone()),
        model_id: Arc::from(config.model_id.as_str()),
        v1_tool_blocks: config.v1_tool_blocks,
        approval: config.approval,
        quota: Arc::new(config.quota.clone()),
        usage: Arc::new(config.usage.clone()),
        feedback: Arc::new(config.feedback.clone()),
        metrics,
    };
    config.approval.warn_if_off();
    let page = http::page::router(&http::page::PageSettings {
        assistant: config.assistant_name.as_str(),
        auth: config.auth.mode,
        context_options: config.page_context_options.as_ref(),
        model_problem: config.llm.setup_problem(),
        examples: config.page_examples.as_ref(),
        stream_url: config.page_stream_url.as_ref(),
        sign_in,
    });
    // Before any handler (and any body is read): what a page of another site could send.
    let guarded = http::router(state).layer(axum::middleware::from_fn_with_state(
        Arc::new(config.cross_site.clone()),
        http::cross_site::guard,
    ));
    Ok(parley_core::serve::traced(guarded.merge(page)))
}
