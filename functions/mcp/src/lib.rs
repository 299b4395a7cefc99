//! Parley's MCP function: read-only Postgres tools, declared in a TOML file, served over
//! stateless Streamable HTTP at `/mcp` behind bearer auth.
//!
//! Modules: `config` (settings), `tools` (declarations → running queries), `server` (rmcp
//! handler and transport), `auth` (bearer check), `error` (HTTP error responses).

pub mod auth;
pub mod config;
pub mod error;
pub mod server;
pub mod tools;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use deadpool_postgres::Pool;
use parley_core::config::{ConfigError, Env};
use parley_core::secrets::{Secrets, SecretsError};
use parley_core::serve::{Listener, ServeError, StartupFailure};
use serde_json::json;

use crate::config::McpConfig;
use crate::error::HttpError;
use crate::tools::{Catalog, CatalogError};

/// Where the function listens outside Lambda when `LISTEN_ADDR` is not set.
pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:3001";

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Secrets(#[from] SecretsError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Db(#[from] parley_core::db::DbError),
    #[error(transparent)]
    Serve(#[from] ServeError),
}

impl StartupFailure for StartupError {
    fn is_bad_setting(&self) -> bool {
        use parley_core::db::DbError;
        match self {
            StartupError::Config(_) => true,
            StartupError::Secrets(e) => e.is_bad_setting(),
            // The tools file (or how it fits the schema) is configuration.
            StartupError::Catalog(_) => true,
            StartupError::Db(e) => matches!(e, DbError::Url(_) | DbError::Tls(_)),
            StartupError::Serve(e) => e.is_bad_setting(),
        }
    }
}

/// The function, built and bound but not yet serving: what `main`, the tests and the bench
/// start alike.
pub struct Application {
    router: Router,
    listener: Listener,
}

impl Application {
    /// Everything before the first request: the secrets named in `SECRET_IDS` laid over `env`,
    /// the settings, the tools file, the pool, every tool statement checked against the
    /// database, the router; then `LISTEN_ADDR` is bound (not under Lambda). A refused database
    /// password or a bearer token that does not match fetches the secrets again (rate-limited).
    pub async fn build(env: Env) -> Result<Self, StartupError> {
        let (env, secrets) = parley_core::secrets::load(&env).await?;
        let config = McpConfig::from_env(&env)?;
        let router = router(&config, secrets).await?;
        let listener = Listener::bind(&env, DEFAULT_LISTEN_ADDR).await?;
        Ok(Self { router, listener })
    }

    /// The bound address; `None` under Lambda.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr()
    }

    /// The router, for a caller that serves it itself (e.g. behind a test's own layer).
    pub fn into_router(self) -> Router {
        self.router
    }

    /// Serves until the process is told to stop.
    pub async fn run_until_stopped(self) -> Result<(), StartupError> {
        Ok(self.listener.serve(self.router).await?)
    }

    /// Serves plain HTTP on a task of its own and returns at once, for tests. `None` under
    /// Lambda, whose handler cannot run on a spawned task (its future is not `Send`).
    pub fn spawn(self) -> Option<tokio::task::JoinHandle<Result<(), ServeError>>> {
        match self.listener {
            Listener::Http(listener) => Some(tokio::spawn(parley_core::serve::serve(
                listener,
                self.router,
            ))),
            Listener::Lambda => None,
        }
    }
}

/// Loads the tools, builds the pool, checks every tool statement against the database and
/// returns the whole HTTP surface.
async fn router(config: &McpConfig, secrets: Option<Secrets>) -> Result<Router, StartupError> {
    let catalog = Arc::new(Catalog::load(config.tools_file.as_deref(), config.limits)?);
    let pool = parley_core::db::pool_with_secrets(&config.db, secrets.as_ref())?;
    if catalog.check_against(&pool).await? {
        tracing::info!(
            tools = catalog.specs().len(),
            "tool statements checked against the database"
        );
    }
    if config.auth_token.is_none() {
        tracing::warn!(
            "MCP_AUTH_TOKEN is not set: /mcp accepts unauthenticated requests (local development only)"
        );
    }
    if config.allowed_hosts.is_none() {
        tracing::warn!("MCP_ALLOWED_HOSTS=*: the Host check is off; rely on the gateway in front");
    }
    Ok(routes(config, catalog, pool, secrets))
}

/// The whole HTTP surface: `POST /mcp` and `GET /health`.
fn routes(
    config: &McpConfig,
    catalog: Arc<Catalog>,
    pool: Pool,
    secrets: Option<Secrets>,
) -> Router {
    let mcp = server::service(config, server::ParleyMcp::new(catalog, pool.clone()));
    let mut mcp_routes = Router::new()
        .route_service("/mcp", mcp)
        .route_layer(axum::middleware::from_fn(error::json_transport_errors));
    if let Some(token) = &config.auth_token {
        mcp_routes = mcp_routes.route_layer(axum::middleware::from_fn_with_state(
            Arc::new(auth::BearerAuth::new(token.clone(), secrets)),
            auth::require_bearer,
        ));
    }
    let health = Router::new().route("/health", get(health)).with_state(pool);
    parley_core::serve::traced(mcp_routes.merge(health))
}

/// Readiness: 200 when a database connection works, else 503.
async fn health(State(pool): State<Pool>) -> Result<axum::Json<serde_json::Value>, HttpError> {
    let client = pool
        .get()
        .await
        .map_err(|_| HttpError::DatabaseUnavailable)?;
    client
        .simple_query("SELECT 1")
        .await
        .map_err(|_| HttpError::DatabaseUnavailable)?;
    Ok(axum::Json(json!({"status": "ok"})))
}
