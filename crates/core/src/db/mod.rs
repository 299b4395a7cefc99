//! The Postgres pool (tokio-postgres + deadpool-postgres) and how its failures are classified.
//!
//! A Lambda instance serves one request at a time, so pools stay small. Connections can die
//! while an instance is frozen; callers get [`DbError::Unavailable`] for those, and
//! [`retry_once_if_stale!`] runs work that is safe to repeat once more on a fresh connection.
//! When the credentials come from Secrets Manager, the pool's connector holds `DATABASE_URL` as
//! a [`RotatingSecret`]: a password the server refuses renews it (fetched again, rate-limited)
//! and the connection is retried once, so a rotated secret does not wait for the next cold start.
//! Each connection the pool fails to open counts once in the `DbConnectFailures` metric.

mod bounded;
mod locked;
mod tls;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, PoolError, RecyclingMethod, Runtime};
use percent_encoding::percent_decode_str;
use secrecy::ExposeSecret;
use tokio::task::JoinHandle;

use crate::config::{ConfigError, Env, SecretString};
use crate::metrics::{Document, Metrics};
use crate::secrets::{RotatingSecret, Secrets};

pub use deadpool_postgres::{Object, Pool};
pub use locked::{LockedError, locked_transaction};

/// Runs work on a connection from a pool and, when that connection turns out to have been dead
/// already (it died while the Lambda instance was frozen, or Postgres restarted: checkout does
/// not test connections, a round trip per request), discards it and runs the work once more on
/// a fresh one. A macro rather than a function taking a closure: a closure over the checked-out
/// connection that returns a future borrowing it cannot be written so that the caller's future
/// stays `Send` (axum handlers must be), and this expands to the loop one would write by hand.
///
/// ```ignore
/// let rows = retry_once_if_stale!(pool, |conn| read_page(&conn, &params).await)?;
/// let rows = retry_once_if_stale!(pool, |conn| run(&conn).await, retry_if = !tool.writes)?;
/// ```
///
/// The contract, for converting a hand-written loop:
/// - `pool` is a `deadpool_postgres::Pool` or a reference to one.
/// - `conn` is bound to a fresh `deadpool_postgres::Object` for each attempt; the attempt
///   expression borrows it (`&conn`), never moves it, and usually ends in `.await`.
/// - The attempt evaluates to `Result<T, E>` where `E: From<PoolError> + Stale + Display`:
///   [`DbError`] is both (`.map_err(DbError::from)` on a `tokio_postgres::Error`), and a
///   caller's own error type can implement [`Stale`] to say which of its failures mean
///   "the connection was dead and nothing ran" (e.g. only failures before `BEGIN` was
///   answered, for a pipelined write).
/// - The whole expression is that `Result<T, E>`: the attempt's outcome, or `Err(E::from(..))`
///   when no connection could be checked out.
/// - `conn` is a [`CheckedOut`], which derefs to the `Object`. A stale failure discards its
///   connection (it never goes back to the pool), whether or not it is retried; so does an
///   attempt that never finishes because its future was dropped (the client went away
///   mid-transaction). A finished attempt, failed or not, returns the connection to the pool.
/// - At most one retry, only after a stale failure, and only when `retry_if` (default `true`,
///   evaluated once before the first attempt) holds: pass `retry_if = false` for work that may
///   have changed data before the link broke (a write whose `COMMIT` went out cannot tell "done"
///   from "not done"). The retry logs one warning naming the error.
#[macro_export]
macro_rules! retry_once_if_stale {
    ($pool:expr, |$conn:ident| $attempt:expr $(,)?) => {
        $crate::retry_once_if_stale!($pool, |$conn| $attempt, retry_if = true)
    };
    ($pool:expr, |$conn:ident| $attempt:expr, retry_if = $retry_if:expr $(,)?) => {{
        let pool: &$crate::db::Pool = &$pool;
        let mut may_retry: bool = $retry_if;
        loop {
            #[allow(unused_mut)]
            let mut $conn = match pool.get().await {
                ::core::result::Result::Ok(conn) => $crate::db::CheckedOut::new(conn),
                ::core::result::Result::Err(e) => {
                    break ::core::result::Result::Err(::core::convert::From::from(e));
                }
            };
            match $attempt {
                ::core::result::Result::Err(e) if $crate::db::Stale::is_stale(&e) => {
                    ::core::mem::drop($conn);
                    if !::core::mem::replace(&mut may_retry, false) {
                        break ::core::result::Result::Err(e);
                    }
                    $crate::db::log_stale_retry(&e);
                }
                outcome => {
                    $conn.give_back();
                    break outcome;
                }
            }
        }
    }};
}

pub use crate::retry_once_if_stale;

/// An error that can tell "the connection was already dead, nothing ran" from any other failure;
/// what [`retry_once_if_stale!`] retries on.
pub trait Stale {
    fn is_stale(&self) -> bool;
}

impl Stale for DbError {
    /// [`DbError::Unavailable`] from a statement means its connection (or the server) was gone.
    fn is_stale(&self) -> bool {
        matches!(self, DbError::Unavailable(_))
    }
}

/// Closes a pooled connection instead of returning it to the pool.
pub fn discard(conn: Object) {
    drop(Object::take(conn));
}

/// A connection [`retry_once_if_stale!`] checked out: dropped before [`CheckedOut::give_back`],
/// it is closed, not pooled, because work abandoned half-way may have left a transaction open.
#[derive(Debug)]
pub struct CheckedOut(Option<Object>);

impl CheckedOut {
    pub fn new(conn: Object) -> Self {
        Self(Some(conn))
    }

    /// Returns the connection to the pool: the work on it finished.
    pub fn give_back(mut self) {
        drop(self.0.take());
    }

    /// Closes the connection now instead of returning it to the pool, for work that failed
    /// half-way through a pipeline and cannot tell what state it left the session in. The
    /// connection must not be used afterwards.
    pub fn discard(&mut self) {
        if let Some(conn) = self.0.take() {
            discard(conn);
        }
    }
}

impl std::ops::Deref for CheckedOut {
    type Target = Object;
    fn deref(&self) -> &Object {
        self.0.as_ref().expect("held until given back or dropped")
    }
}

impl std::ops::DerefMut for CheckedOut {
    fn deref_mut(&mut self) -> &mut Object {
        self.0.as_mut().expect("held until given back or dropped")
    }
}

impl Drop for CheckedOut {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            discard(conn);
        }
    }
}

#[doc(hidden)]
pub fn log_stale_retry(error: &dyn fmt::Display) {
    tracing::warn!(error = %error, "stale database connection; retrying once");
}

/// How a function's statements reach Postgres (the mcp function's `MCP_STATEMENTS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Statements {
    /// Parsed, bound and run in one message each, nothing kept on the connection: safe behind
    /// a transaction-mode pooler (RDS Proxy multiplexes; PgBouncer does not break). Postgres
    /// plans every call.
    #[default]
    Unnamed,
    /// Prepared once per connection and kept: Postgres may reuse a generic plan, which saves
    /// planning on a lookup. Only for direct connections: a pooler in transaction mode hands
    /// the server connection to other clients, which then meet these statements (PgBouncer
    /// before 1.21 fails with "prepared statement does not exist"; RDS Proxy pins every
    /// connection, so it multiplexes nothing).
    Cached,
}

impl Statements {
    pub fn parse(value: &str) -> Option<Statements> {
        match value {
            "unnamed" => Some(Statements::Unnamed),
            "cached" => Some(Statements::Cached),
            _ => None,
        }
    }
}

/// Settings for the pool; see docs/settings.md. The URL shows in `Debug` as
/// `SecretString`'s own redaction.
#[derive(Debug, Clone)]
pub struct DbConfig {
    /// `DATABASE_URL`, kept secret because it may carry a password.
    pub url: SecretString,
    /// `DB_POOL_MAX_SIZE`: connections per instance (default 4; 1-2 is plenty under Lambda).
    pub pool_max_size: usize,
    /// `DB_CONNECT_TIMEOUT_MS`: TCP connect plus TLS plus authentication (default 5000).
    pub connect_timeout: Duration,
    /// `DB_ACQUIRE_TIMEOUT_MS`: how long a request waits for a free pooled connection (default 5000).
    pub acquire_timeout: Duration,
    /// `DB_CA_FILE`: PEM bundle of CAs to trust for `verify-ca`/`verify-full`
    /// (e.g. Amazon's RDS global bundle). Overrides `sslrootcert` in the URL.
    pub ca_file: Option<PathBuf>,
    /// Most bytes one server message may take, for connections whose statements are not the
    /// deployment's (mcp's ad-hoc SQL): an error or notice over it arrives with each field cut
    /// to 8 KiB, any other message over it closes the connection. `None`: unbounded. Applies
    /// to TCP hosts (a Unix socket is not bounded).
    pub max_message_bytes: Option<usize>,
    /// The `application_name` connections give when the URL names none: which function a
    /// session belongs to in pg_stat_activity and the server's log (`%a`). Each function sets
    /// its own (`parley-chat`, `parley-mcp`, `parley-ingest`); `parley` otherwise.
    pub application_name: &'static str,
    /// The setting the URL came from, which [`pool_with_secrets`] reads again from the secrets
    /// when the server refuses the password: `DATABASE_URL`, or `SQL_DATABASE_URL` for the
    /// mcp function's SQL tools (a `SECRET_IDS` entry `SQL_DATABASE_URL=<id>`).
    pub url_setting: &'static str,
}

impl DbConfig {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let url = env
            .secret("DATABASE_URL")
            .ok_or_else(|| ConfigError::new("DATABASE_URL", "is required but not set"))?;
        // Parse now so a malformed URL stops start-up instead of the first request.
        ConnectTarget::parse(url.expose_secret())
            .map_err(|e| ConfigError::new("DATABASE_URL", e.to_string()))?;
        Ok(Self {
            url,
            pool_max_size: env.limit("DB_POOL_MAX_SIZE", 4, 1..=256)? as usize,
            connect_timeout: env.millis(
                "DB_CONNECT_TIMEOUT_MS",
                Duration::from_secs(5),
                100..=120_000,
            )?,
            acquire_timeout: env.millis(
                "DB_ACQUIRE_TIMEOUT_MS",
                Duration::from_secs(5),
                10..=120_000,
            )?,
            ca_file: env.optional("DB_CA_FILE")?,
            max_message_bytes: None,
            application_name: "parley",
            url_setting: "DATABASE_URL",
        })
    }

    /// The same, with connections named `name` in pg_stat_activity (see
    /// [`DbConfig::application_name`]).
    pub fn named(self, name: &'static str) -> Self {
        Self {
            application_name: name,
            ..self
        }
    }

    /// A config for tools and tests that only have a URL.
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        Self::from_env(&Env::from_pairs([("DATABASE_URL", url)]))
    }
}

/// Failures talking to Postgres, split by what the caller can do about them.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The server could not be reached, a connection broke, or the pool is exhausted: retrying
    /// later may work, and the client should hear "503 Service Unavailable".
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The server ran the statement and refused it (syntax, constraint, permission, timeout...).
    #[error("{}", pg_message(.0))]
    Query(tokio_postgres::Error),
    #[error("invalid database URL: {0}")]
    Url(String),
    #[error("database TLS set-up failed: {0}")]
    Tls(String),
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        if is_connection_error(&e) {
            DbError::Unavailable(pg_message(&e))
        } else {
            DbError::Query(e)
        }
    }
}

impl From<PoolError> for DbError {
    /// Every pool failure means "no usable connection": even a server's refusal while
    /// connecting (wrong password, missing database) is an outage to the caller, not a bad
    /// statement.
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::Backend(e) if e.code().is_some() => DbError::Unavailable(format!(
                "the server refused the connection: {}",
                pg_message(&e)
            )),
            PoolError::Backend(e) => DbError::Unavailable(pg_message(&e)),
            other => DbError::Unavailable(crate::error::chain(&other)),
        }
    }
}

/// What Postgres said, for logs and terminals: `message (SQLSTATE code); detail: ...; hint:
/// ...` for a server's error (tokio-postgres' own `Display` is just "db error"), else the error
/// and its causes ("error connecting to server: Connection refused"). The server's messages
/// name objects and values of the statement, never the connection's password.
pub fn pg_message(e: &tokio_postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return crate::error::chain(e);
    };
    let mut text = format!("{} (SQLSTATE {})", db.message(), db.code().code());
    if let Some(detail) = db.detail() {
        text.push_str("; detail: ");
        text.push_str(detail);
    }
    if let Some(hint) = db.hint() {
        text.push_str("; hint: ");
        text.push_str(hint);
    }
    text
}

impl DbError {
    /// The SQLSTATE code when Postgres itself refused the statement.
    pub fn sqlstate(&self) -> Option<&tokio_postgres::error::SqlState> {
        match self {
            DbError::Query(e) => e.code(),
            _ => None,
        }
    }
}

/// Whether the error means "this connection (or the server) is gone" rather than "this statement
/// failed". Server shutdown and start-up states count as gone: the statement never ran.
pub fn is_connection_error(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CRASH_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::CONNECTION_FAILURE,
            SqlState::CONNECTION_EXCEPTION,
        ]
        .contains(code),
        // No SQLSTATE: either the link failed (I/O, TLS, connect timeout) or the client refused
        // a value before sending it, which is a statement problem, not an outage.
        None => has_io_source(e) || e.to_string().starts_with("timeout"),
    }
}

fn has_io_source(e: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Whether the server refused our credentials while connecting: 28P01 (invalid_password) or
/// 28000 (invalid_authorization_specification, e.g. no pg_hba.conf entry for the user).
pub fn is_auth_failure(e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    e.code().is_some_and(|code| {
        *code == SqlState::INVALID_PASSWORD
            || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Require,
    VerifyCa,
    VerifyFull,
}

/// A `DATABASE_URL` split into what tokio-postgres understands and the TLS settings it does not
/// (tokio-postgres knows no `verify-ca`/`verify-full`, and nothing of `sslrootcert`).
#[derive(Debug)]
struct ConnectTarget {
    pg: tokio_postgres::Config,
    ssl_mode: SslMode,
    root_cert: Option<PathBuf>,
}

impl ConnectTarget {
    fn parse(raw: &str) -> Result<Self, DbError> {
        let mut url = url::Url::parse(raw).map_err(|e| DbError::Url(e.to_string()))?;
        if !matches!(url.scheme(), "postgres" | "postgresql") {
            return Err(DbError::Url(
                "scheme must be postgres:// or postgresql://".into(),
            ));
        }
        let mut ssl_mode = SslMode::Disable;
        let mut root_cert = None;
        // The query is read as libpq reads it: `&`-separated `key=value`, percent-decoded (a `+`
        // is a plus, not a space). The TLS settings are taken out; everything else goes on to
        // tokio-postgres exactly as written.
        let mut kept = Vec::new();
        for piece in url.query().unwrap_or_default().split('&') {
            let (key, value) = piece.split_once('=').unwrap_or((piece, ""));
            let value = percent_decode_str(value).decode_utf8_lossy();
            match key {
                "sslmode" => {
                    ssl_mode = match value.as_ref() {
                        "disable" | "allow" | "prefer" => SslMode::Disable,
                        "require" => SslMode::Require,
                        "verify-ca" => SslMode::VerifyCa,
                        "verify-full" => SslMode::VerifyFull,
                        other => {
                            return Err(DbError::Url(format!(
                                "unknown sslmode {other:?}; use one of disable, allow, prefer, \
                                 require, verify-ca, verify-full"
                            )));
                        }
                    }
                }
                "sslrootcert" => root_cert = Some(PathBuf::from(value.as_ref())),
                "" => {}
                _ => kept.push(piece),
            }
        }
        let query = kept.join("&");
        url.set_query((!query.is_empty()).then_some(query.as_str()));
        let mut pg = tokio_postgres::Config::from_str(url.as_str())
            // The message may echo the URL, password included: keep only the kind of problem.
            .map_err(|_| DbError::Url("not a valid Postgres connection URL".into()))?;
        pg.ssl_mode(match ssl_mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            _ => tokio_postgres::config::SslMode::Require,
        });
        Ok(Self {
            pg,
            ssl_mode,
            root_cert,
        })
    }
}

/// Builds the pool with a fixed URL. Connections are opened lazily, so this succeeds while
/// Postgres is down and the service recovers by itself once it is back.
pub fn pool(config: &DbConfig) -> Result<Pool, DbError> {
    pool_with_secrets(config, None, &Metrics::off())
}

/// [`pool`] for a function: when the server refuses the password (SQLSTATE 28P01 or 28000),
/// `DATABASE_URL` is read again from `secrets` (fetched again, rate-limited) and the connection
/// retried once, so a rotated password needs no cold start; each connection that cannot be
/// opened counts once in `metrics` as `DbConnectFailures`.
pub fn pool_with_secrets(
    config: &DbConfig,
    secrets: Option<&Secrets>,
    metrics: &Metrics,
) -> Result<Pool, DbError> {
    let mut connector = Connector::new(config, secrets.cloned())?;
    connector.metrics = metrics.clone();
    let manager_config = ManagerConfig {
        // "Not closed" only, no round trip: a connection that died idle is found by the work
        // that uses it, and `retry_once_if_stale!` runs that work again.
        recycling_method: RecyclingMethod::Fast,
    };
    // deadpool hands this config to `Connect::connect`, which ignores it in favour of the
    // connector's current one (that is what a refresh replaces).
    let pg = connector.current().pg.clone();
    let manager = Manager::from_connect(pg, PoolConnect(Arc::new(connector)), manager_config);
    Pool::builder(manager)
        .max_size(config.pool_max_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(config.acquire_timeout))
        .create_timeout(Some(config.connect_timeout))
        .recycle_timeout(Some(config.connect_timeout))
        .build()
        .map_err(|e| DbError::Unavailable(e.to_string()))
}

/// One dedicated connection outside any pool, with the same TLS and rotation rules: for admin
/// work such as migrations and ingestion, which keep nothing on it past a transaction, so it may
/// go through a transaction-mode pooler.
pub async fn connect(config: &DbConfig) -> Result<tokio_postgres::Client, DbError> {
    let (client, _task) = Connector::new(config, None)?.connect().await?;
    Ok(client)
}

/// Opens connections with the current credentials, and on an authentication failure renews
/// the URL ([`RotatingSecret::renew`]) and tries once more.
struct Connector {
    url: RotatingSecret,
    /// The URL of generation `prepared.generation`, parsed and made ready to connect with.
    prepared: RwLock<Arc<Target>>,
    connect_timeout: Duration,
    ca_file: Option<PathBuf>,
    max_message_bytes: Option<usize>,
    application_name: &'static str,
    /// Where a failed connection is counted (off for [`connect`]'s admin connections).
    metrics: Metrics,
}

/// One URL made ready to connect with, and the generation of the URL it was made from.
struct Target {
    pg: tokio_postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    generation: u64,
    max_message_bytes: Option<usize>,
}

impl Connector {
    fn new(config: &DbConfig, secrets: Option<Secrets>) -> Result<Self, DbError> {
        let mut first = prepare(
            &config.url,
            (config.connect_timeout, config.application_name),
            config.ca_file.as_deref(),
            0,
        )?;
        first.max_message_bytes = config.max_message_bytes;
        Ok(Self {
            url: RotatingSecret::new(config.url_setting, Some(config.url.clone()), secrets),
            prepared: RwLock::new(Arc::new(first)),
            connect_timeout: config.connect_timeout,
            ca_file: config.ca_file.clone(),
            max_message_bytes: config.max_message_bytes,
            application_name: config.application_name,
            metrics: Metrics::off(),
        })
    }

    /// The target for the URL's current generation, prepared on first use. A rotated URL that
    /// cannot be used (the error names the kind of problem, never the URL) keeps the last one.
    fn current(&self) -> Arc<Target> {
        // A poisoned lock only means a panic elsewhere while swapping an Arc: the value is whole.
        let prepared = self
            .prepared
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let (generation, url) = self.url.peek();
        let Some(url) = url.filter(|_| generation != prepared.generation) else {
            return prepared;
        };
        match prepare(
            &url,
            (self.connect_timeout, self.application_name),
            self.ca_file.as_deref(),
            generation,
        ) {
            Ok(mut next) => {
                next.max_message_bytes = self.max_message_bytes;
                let next = Arc::new(next);
                let mut slot = self.prepared.write().unwrap_or_else(|p| p.into_inner());
                if slot.generation < generation {
                    *slot = next.clone();
                }
                next
            }
            Err(e) => {
                tracing::warn!(error = %e, "the refreshed DATABASE_URL is unusable");
                prepared
            }
        }
    }

    async fn connect(
        &self,
    ) -> Result<(tokio_postgres::Client, JoinHandle<()>), tokio_postgres::Error> {
        let used = self.current();
        match used.connect().await {
            Err(e) if is_auth_failure(&e) => {
                tracing::warn!(
                    sqlstate = e.code().map_or("?", |c| c.code()),
                    "the database refused the credentials; fetching them again"
                );
                if !self.url.renew(used.generation).await {
                    return Err(e);
                }
                let now = self.current();
                if now.generation == used.generation {
                    return Err(e);
                }
                let second = now.connect().await;
                if second.is_ok() {
                    tracing::info!("connected with the refreshed database credentials");
                }
                second
            }
            other => other,
        }
    }
}

impl Target {
    async fn connect(
        &self,
    ) -> Result<(tokio_postgres::Client, JoinHandle<()>), tokio_postgres::Error> {
        if let Some(limit) = self.max_message_bytes
            && let Some((host, port)) = self.tcp_address()
        {
            return self.connect_bounded(&host, port, limit).await;
        }
        match &self.tls {
            None => {
                let (client, connection) = self.pg.connect(tokio_postgres::NoTls).await?;
                Ok((client, tokio::spawn(watch(connection))))
            }
            Some(tls) => {
                let (client, connection) = self.pg.connect(tls.clone()).await?;
                Ok((client, tokio::spawn(watch(connection))))
            }
        }
    }
}

impl Target {
    /// The first host and its port when it is reached over TCP, as tokio-postgres would try
    /// first (`hostaddr` when given).
    fn tcp_address(&self) -> Option<(String, u16)> {
        let port = self.pg.get_ports().first().copied().unwrap_or(5432);
        if let Some(ip) = self.pg.get_hostaddrs().first() {
            return Some((ip.to_string(), port));
        }
        match self.pg.get_hosts().first()? {
            tokio_postgres::config::Host::Tcp(host) => Some((host.clone(), port)),
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(_) => None,
        }
    }

    /// Opens the socket itself (tokio-postgres offers no hook into its own) so that every
    /// server message goes through [`bounded::Bounded`]: on the socket without TLS, on what
    /// TLS decrypted with it.
    async fn connect_bounded(
        &self,
        host: &str,
        port: u16,
        limit: usize,
    ) -> Result<(tokio_postgres::Client, JoinHandle<()>), tokio_postgres::Error> {
        let socket = match self.open(host, port).await {
            Ok(socket) => socket,
            Err(e) => {
                let failed = self
                    .pg
                    .connect_raw(bounded::Unopened(Some(e)), tokio_postgres::NoTls)
                    .await?;
                return Ok((failed.0, tokio::spawn(watch(failed.1))));
            }
        };
        match &self.tls {
            None => {
                let (client, connection) = self
                    .pg
                    .connect_raw(bounded::Bounded::new(socket, limit), tokio_postgres::NoTls)
                    .await?;
                Ok((client, tokio::spawn(watch(connection))))
            }
            Some(tls) => {
                let name = match self.pg.get_hosts().first() {
                    Some(tokio_postgres::config::Host::Tcp(name)) => name.clone(),
                    _ => host.to_owned(),
                };
                let inner =
                    tokio_postgres::tls::MakeTlsConnect::<tokio::net::TcpStream>::make_tls_connect(
                        &mut tls.clone(),
                        &name,
                    );
                let inner = match inner {
                    Ok(inner) => inner,
                    Err(e) => {
                        let e = std::io::Error::other(e);
                        let failed = self
                            .pg
                            .connect_raw(bounded::Unopened(Some(e)), tokio_postgres::NoTls)
                            .await?;
                        return Ok((failed.0, tokio::spawn(watch(failed.1))));
                    }
                };
                let (client, connection) = self
                    .pg
                    .connect_raw(socket, bounded::BoundedTls { inner, limit })
                    .await?;
                Ok((client, tokio::spawn(watch(connection))))
            }
        }
    }

    /// A TCP connection as tokio-postgres makes one: the connect timeout, no Nagle delay,
    /// keepalives.
    async fn open(&self, host: &str, port: u16) -> std::io::Result<tokio::net::TcpStream> {
        let connecting = tokio::net::TcpStream::connect((host, port));
        let socket = match self.pg.get_connect_timeout() {
            Some(limit) => tokio::time::timeout(*limit, connecting)
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "connection timed out")
                })??,
            None => connecting.await?,
        };
        socket.set_nodelay(true)?;
        if self.pg.get_keepalives() {
            let keepalive = socket2::TcpKeepalive::new().with_time(self.pg.get_keepalives_idle());
            socket2::SockRef::from(&socket).set_tcp_keepalive(&keepalive)?;
        }
        Ok(socket)
    }
}

/// deadpool's side of [`Connector`].
struct PoolConnect(Arc<Connector>);

impl deadpool_postgres::Connect for PoolConnect {
    fn connect(
        &self,
        _ignored: &tokio_postgres::Config,
    ) -> Pin<
        Box<
            dyn Future<
                    Output = Result<
                        (tokio_postgres::Client, JoinHandle<()>),
                        tokio_postgres::Error,
                    >,
                > + Send
                + '_,
        >,
    > {
        Box::pin(async move {
            let mut attempt = Attempt {
                metrics: &self.0.metrics,
                opened: false,
            };
            let connected = self.0.connect().await;
            attempt.opened = connected.is_ok();
            connected
        })
    }
}

/// One connection being opened for the pool: dropped without having opened it, whether it
/// failed or the pool's `DB_CONNECT_TIMEOUT_MS` gave up on it first, it counts one
/// `DbConnectFailures` (a refused password renewed and retried inside counts once).
struct Attempt<'a> {
    metrics: &'a Metrics,
    opened: bool,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.opened {
            self.metrics
                .emit(Document::new().count("DbConnectFailures", 1));
        }
    }
}

/// A URL parsed and made ready to connect: timeouts, keepalives, application name and TLS.
fn prepare(
    url: &SecretString,
    (connect_timeout, application_name): (Duration, &str),
    ca_file: Option<&std::path::Path>,
    generation: u64,
) -> Result<Target, DbError> {
    let target = ConnectTarget::parse(url.expose_secret())?;
    let mut pg = target.pg;
    pg.connect_timeout(connect_timeout)
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(30));
    if pg.get_application_name().is_none() {
        pg.application_name(application_name);
    }
    let tls = match target.ssl_mode {
        SslMode::Disable => None,
        mode => {
            let ca = ca_file.or(target.root_cert.as_deref());
            Some(tls::connector(mode, ca)?)
        }
    };
    Ok(Target {
        pg,
        tls,
        generation,
        max_message_bytes: None,
    })
}

async fn watch<F: std::future::Future<Output = Result<(), tokio_postgres::Error>>>(connection: F) {
    if let Err(e) = connection.await {
        tracing::warn!(error = %pg_message(&e), "database connection closed");
    }
}

/// Host, port and database of a URL, for logs: never the user or password.
pub fn describe(url: &SecretString) -> String {
    match url::Url::parse(url.expose_secret()) {
        Ok(u) => format!(
            "{}:{}{}",
            u.host_str().unwrap_or("?"),
            u.port().unwrap_or(5432),
            u.path()
        ),
        Err(_) => "(unparsable URL)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_settings_are_taken_out_of_the_url() {
        let t = ConnectTarget::parse(
            "postgres://u:p@db.example:6432/app?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(t.ssl_mode, SslMode::VerifyFull);
        assert_eq!(t.root_cert, Some(PathBuf::from("/ca.pem")));
        assert_eq!(t.pg.get_application_name(), Some("x"));
        assert_eq!(t.pg.get_ports(), &[6432]);
    }

    #[test]
    fn other_parameters_keep_their_spaces() {
        let t = ConnectTarget::parse(
            "postgres://u@h/app?sslmode=require&options=-c%20statement_timeout%3D5000&application_name=a+b&sslrootcert=/my%20certs/ca.pem",
        )
        .unwrap();
        assert_eq!(t.pg.get_options(), Some("-c statement_timeout=5000"));
        assert_eq!(t.pg.get_application_name(), Some("a+b"));
        assert_eq!(t.root_cert, Some(PathBuf::from("/my certs/ca.pem")));
    }

    #[test]
    fn no_sslmode_means_plain_connections() {
        let t = ConnectTarget::parse("postgres://u@localhost/app").unwrap();
        assert_eq!(t.ssl_mode, SslMode::Disable);
    }

    #[test]
    fn unknown_sslmode_is_refused() {
        let e = ConnectTarget::parse("postgres://u@h/app?sslmode=maybe").unwrap_err();
        assert!(e.to_string().contains("unknown sslmode"));
        assert!(
            e.to_string()
                .contains("allow, prefer, require, verify-ca, verify-full")
        );
    }

    #[test]
    fn url_errors_never_echo_the_password() {
        let cfg = DbConfig::from_url("mysql://u:hunter2@h/app").unwrap_err();
        assert!(!cfg.to_string().contains("hunter2"));
        assert!(cfg.to_string().contains("DATABASE_URL"));
    }

    #[test]
    fn describe_hides_credentials() {
        let url = SecretString::from("postgres://user:hunter2@db.internal:5433/app".to_owned());
        assert_eq!(describe(&url), "db.internal:5433/app");
    }

    #[test]
    fn verify_full_builds_a_connector_with_the_default_roots() {
        assert!(tls::connector(SslMode::VerifyFull, None).is_ok());
        assert!(tls::connector(SslMode::Require, None).is_ok());
    }

    #[test]
    fn a_missing_ca_file_is_a_clear_error() {
        let Err(e) = tls::connector(SslMode::VerifyCa, Some(std::path::Path::new("/nope.pem")))
        else {
            panic!("expected an error");
        };
        assert!(e.to_string().contains("/nope.pem"));
    }
}
