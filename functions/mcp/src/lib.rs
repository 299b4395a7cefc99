//! Parley's MCP function: the tool engine (`parley_tools`: Postgres tools, read-only unless
//! declared `writes = true`, declared in the TOML files `TOOLS_FILE` names) served over
//! stateless Streamable HTTP at `/mcp` behind bearer auth; each call runs for its verified
//! caller (see `auth` and `parley_tools::call`).
//!
//! Modules, each importing only those after it: `server` (rmcp handler, the direct path for
//! `tools/call` and `tools/list`, rmcp's transport, what an MCP client sees of a call), `auth`
//! (the verified caller: service token or user JWT; the protected resource metadata), `error`
//! (HTTP error responses), `config` (settings, and where the tools files are read from).
//! Start-up ([`Application`]) is here.

pub mod auth;
pub mod config;
pub mod error;
pub mod server;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use deadpool_postgres::Pool;
use parley_core::config::Env;
use parley_core::metrics::{Metrics, MetricsConfig, Sink};
use parley_core::secrets::Secrets;
use parley_core::serve::{Bound, Listener, StartupFailure};
use serde_json::json;

use crate::config::McpConfig;
use crate::error::HttpError;
use parley_tools::call::Engine;
use parley_tools::catalog::{self, Catalog, CatalogError};
use parley_tools::{adhoc, audit, rerank};

/// The function's OpenTelemetry defaults (docs/tracing.md): service `parley-mcp`; a request's
/// `traceparent` is trusted unless `OTEL_TRUST_TRACEPARENT` says otherwise, as its callers hold its token, and the chat sends its tool call's span so one trace covers both.
pub const TRACES: parley_core::telemetry::FunctionTraces = parley_core::telemetry::FunctionTraces {
    service_name: "parley-mcp",
    trust_traceparent: true,
};

/// Where the function listens outside Lambda when `LISTEN_ADDR` is not set.
pub const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:3001";

/// Why the function did not start; its own part is [`SetupError`].
pub type StartupError = parley_core::serve::StartupError<SetupError>;

/// The MCP function's own start-up failures: the tools files, then what they need (the SQL
/// role, the embedder) and the audit.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(
        "[sql] needs SQL_DATABASE_URL: the URL of the login role the SQL tools run as (see docs/sql.md)"
    )]
    SqlUrlMissing,
    #[error(transparent)]
    UnsafeSqlRole(#[from] adhoc::role::UnsafeRole),
    #[error(transparent)]
    Audit(#[from] audit::AuditUnwritable),
    #[error("the tools embed text, and the embedder cannot be loaded: {0}")]
    Embedder(#[source] parley_embed::EmbedError),
}

impl StartupFailure for SetupError {
    /// The tools file, how it fits the schema, the SQL role and the audit table are all
    /// configuration.
    fn is_bad_setting(&self) -> bool {
        true
    }
}

/// The tools files could not be served: the engine's error, as this function's start-up failure.
fn catalog_failed(e: CatalogError) -> StartupError {
    StartupError::Function(SetupError::Catalog(e))
}

/// The function's start-up, as `main`, the tests and the bench run it.
pub struct Application;

impl Application {
    /// Everything before the first request: the secrets named in `SECRET_IDS` laid over `env`,
    /// the settings, the tools file, the pool, every tool statement checked against the
    /// database, the router; then `LISTEN_ADDR` is bound (not under Lambda). A refused database
    /// password or a bearer token that does not match fetches the secrets again (rate-limited).
    pub async fn build(env: Env) -> Result<Bound, StartupError> {
        Self::build_with_metrics(env, Sink::Stdout).await
    }

    /// [`Application::build`] with its metrics going to `sink` (tests read them from memory).
    pub async fn build_with_metrics(env: Env, sink: Sink) -> Result<Bound, StartupError> {
        let (env, secrets) = parley_core::secrets::load(&env).await?;
        let config = McpConfig::from_env(&env)?;
        let metrics = Metrics::new(&MetricsConfig::from_env(&env)?, sink);
        let router = router(&env, &config, secrets, metrics).await?;
        let listener = Listener::bind(&env, DEFAULT_LISTEN_ADDR).await?;
        Ok(Bound::new(router, listener))
    }
}

/// Loads the tools (and the embedder, when a tool embeds text), builds the pool, checks every
/// tool statement against the database and returns the whole HTTP surface.
async fn router(
    env: &Env,
    config: &McpConfig,
    secrets: Option<Secrets>,
    metrics: Metrics,
) -> Result<Router, StartupError> {
    let catalog = Arc::new(load_catalog(env, config).await.map_err(catalog_failed)?);
    // The model loads on a blocking thread while the statements are checked, so a cold start
    // pays for the longer of the two, not both.
    let embedder = catalog.needs_embedder().then(|| {
        let settings = config.embeddings.clone();
        tokio::task::spawn_blocking(move || parley_embed::Embedder::from_settings(&settings))
    });
    let db = config.db.clone().named("parley-mcp");
    let pool = parley_core::db::pool_with_secrets(&db, secrets.as_ref(), &metrics)?;
    let checking = std::time::Instant::now();
    if catalog.check_against(&pool).await.map_err(catalog_failed)? {
        tracing::info!(
            tools = catalog.specs().len(),
            elapsed_ms = checking.elapsed().as_millis() as u64,
            "tool statements checked against the database"
        );
    }
    let sql = match catalog.sql() {
        None => None,
        Some(spec) => Some(Arc::new(
            sql_tools(config, spec, secrets.as_ref(), &metrics).await?,
        )),
    };
    let embedder = match embedder {
        None => None,
        Some(loading) => {
            let embedder = loading
                .await
                .map_err(|e| {
                    parley_embed::EmbedError::Inference(format!("loading the model failed: {e}"))
                })
                .and_then(|loaded| loaded)
                .map_err(|e| StartupError::Function(SetupError::Embedder(e)))?;
            tracing::info!(model = embedder.model_id(), "embedder loaded");
            Some(embedder)
        }
    };
    if config.auth_token.is_none() && config.users.is_none() {
        tracing::warn!(
            "MCP_AUTH_TOKEN is not set: /mcp accepts unauthenticated requests (local development only)"
        );
    }
    if let Some(users) = &config.users
        && users.jwt.issuer.is_none()
    {
        tracing::warn!(
            "JWT_ISSUER is not set: the protected resource metadata names no authorization \
             server, so MCP clients cannot discover where to get a token"
        );
    }
    if config.allowed_hosts.is_none() {
        tracing::warn!("MCP_ALLOWED_HOSTS=*: the Host check is off; rely on the gateway in front");
    }
    audit::check(config.audit, &pool)
        .await
        .map_err(|e| StartupError::Function(SetupError::Audit(e)))?;
    let audit = audit::Audit::start(config.audit, &pool);
    let reranker = match config.rerank.clone() {
        Some(settings) => Some(rerank::Reranker::new(settings, env).await),
        None => None,
    };
    if reranker.is_some() && !catalog.specs().iter().any(|t| t.rerank.is_some()) {
        tracing::warn!("RERANK is set but no tool declares `rerank`: nothing is reranked");
    }
    let engine = Engine::new(catalog, pool.clone(), embedder)
        .with_statements(config.statements)
        .with_reranker(reranker)
        .with_sql(sql)
        .with_audit(audit)
        .with_metrics(metrics);
    let handler = server::ParleyMcp::new(engine);
    Ok(routes(config, handler, pool, secrets))
}

/// The tools files `TOOLS_FILE` names, each read (from disk, or from S3 for an `s3://` URI:
/// `config::tools_source`) and parsed with the same errors, naming the path or the URI; then
/// merged.
async fn load_catalog(env: &Env, config: &McpConfig) -> Result<Catalog, CatalogError> {
    let reader = config::tools_source::Reader::new(env, config.tools_s3);
    let mut files = Vec::with_capacity(config.tools_files.len());
    for source in &config.tools_files {
        let path = source.to_string();
        let text = match reader.read(source).await {
            Ok(text) => text,
            Err(source) => return Err(CatalogError::Read { path, source }),
        };
        let named = |source| CatalogError::File {
            path: path.clone(),
            source,
        };
        let mut file = catalog::file::parse(&text, config.limits).map_err(named)?;
        // A `[catalog]` file is read beside the tools file, from disk or S3 alike.
        if let Some(spec) = &file.catalog {
            let beside = source.resolve(&spec.file).map_err(|problem| {
                named(catalog::file::FileError::Catalog(format!(
                    "file `{}` {problem}",
                    spec.file
                )))
            })?;
            let catalog_text = reader
                .read(&beside)
                .await
                .map_err(|source| CatalogError::Read {
                    path: beside.to_string(),
                    source,
                })?;
            catalog::serve_catalog(&mut file, &catalog_text, config.limits).map_err(named)?;
        }
        files.push((path, file));
    }
    Catalog::merge(files)
}

/// The ad-hoc SQL tools on their own pool, their role checked before anything is served.
async fn sql_tools(
    config: &McpConfig,
    spec: &adhoc::SqlSpec,
    secrets: Option<&parley_core::secrets::Secrets>,
    metrics: &Metrics,
) -> Result<adhoc::SqlTools, StartupError> {
    let db = config
        .sql_db
        .as_ref()
        .ok_or(StartupError::Function(SetupError::SqlUrlMissing))?;
    let mut db = db.clone().named("parley-mcp-sql");
    db.max_message_bytes = Some(adhoc::max_message_bytes(spec));
    // A rotated SQL login is read again from `SQL_DATABASE_URL` (`DbConfig::url_setting`).
    let pool = parley_core::db::pool_with_secrets(&db, secrets, metrics)?;
    let tools = adhoc::SqlTools::new(spec.clone(), pool);
    match tools.check_role().await {
        Ok(true) => tracing::info!(
            schemas = %spec.schemas.join(","),
            "SQL role checked: it reads the allowed schemas and nothing else"
        ),
        Ok(false) => {}
        Err(unsafe_role) => {
            return Err(StartupError::Function(SetupError::UnsafeSqlRole(
                unsafe_role,
            )));
        }
    }
    Ok(tools)
}

/// The whole HTTP surface: `POST /mcp`, `GET /health` and, with user tokens, the protected
/// resource metadata.
fn routes(
    config: &McpConfig,
    handler: server::ParleyMcp,
    pool: Pool,
    secrets: Option<Secrets>,
) -> Router {
    let mcp = server::service(config, handler);
    let authenticator = auth::Authenticator::new(config, secrets, reqwest::Client::new());
    // Outermost, so both the direct path and rmcp's transport (inside `mcp`) only ever see
    // requests that carry a verified `auth::Caller`.
    let mcp_routes = Router::new()
        .route_service("/mcp", mcp)
        .route_layer(axum::middleware::from_fn(error::json_transport_errors))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::new(authenticator),
            auth::authenticate,
        ));
    let mut router = mcp_routes.merge(Router::new().route("/health", get(health)).with_state(pool));
    if let Some(users) = &config.users {
        router = router.merge(auth::metadata::routes(users));
    }
    parley_core::serve::traced(router)
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
