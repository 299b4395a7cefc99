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

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use deadpool_postgres::Pool;
use parley_core::secrets::Secrets;
use serde_json::json;

use crate::config::McpConfig;
use crate::error::HttpError;
use crate::tools::{Catalog, CatalogError};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Db(#[from] parley_core::db::DbError),
}

/// Loads the tools, builds the pool and checks every tool statement against the database.
pub async fn build(config: &McpConfig) -> Result<Router, StartupError> {
    build_with_secrets(config, None).await
}

/// [`build`] for settings that came from Secrets Manager: a refused database password or a
/// bearer token that does not match fetches `secrets` again (rate-limited) before giving up.
pub async fn build_with_secrets(
    config: &McpConfig,
    secrets: Option<Secrets>,
) -> Result<Router, StartupError> {
    let catalog = Arc::new(Catalog::load(config.tools_file.as_deref(), config.limits)?);
    let mut db = config.db.clone();
    db.rotation = secrets.as_ref().map(Secrets::database_rotation);
    let pool = parley_core::db::pool(&db)?;
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
    Ok(router_with_secrets(config, catalog, pool, secrets))
}

/// The whole HTTP surface: `POST /mcp` and `GET /health`.
pub fn router(config: &McpConfig, catalog: Arc<Catalog>, pool: Pool) -> Router {
    router_with_secrets(config, catalog, pool, None)
}

fn router_with_secrets(
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
