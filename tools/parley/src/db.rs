//! The admin connection from `DATABASE_URL` (given, or built from `SECRET_IDS`' RDS secret):
//! one dedicated session through `parley_core::db`,
//! with the functions' TLS rules. Usage mistakes (unset, malformed) are told from a database
//! that refuses or cannot be reached, for the exit code.

use parley_core::config::Env;
use parley_core::db::DbConfig;
use tokio_postgres::Client;

pub const DATABASE_URL: &str = "DATABASE_URL";

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "{DATABASE_URL} is not set; set it to a Postgres URL such as postgres://user:password@host:5432/parley"
    )]
    Missing,
    // The parser's message names the bad part without echoing the value, which may hold a password.
    #[error("{DATABASE_URL} is not a valid Postgres URL: {0}")]
    Invalid(String),
    #[error("could not connect to the database in {DATABASE_URL}: {0}")]
    Connect(String),
}

impl ConnectError {
    /// A configuration mistake, as opposed to a database that is down or refusing us.
    pub fn is_usage(&self) -> bool {
        matches!(self, ConnectError::Missing | ConnectError::Invalid(_))
    }
}

/// Parses the settings without connecting, so usage errors surface before any network wait.
pub fn config_from_env(env: &Env) -> Result<DbConfig, ConnectError> {
    if !env.is_set(DATABASE_URL) {
        return Err(ConnectError::Missing);
    }
    DbConfig::from_env(env).map_err(|e| ConnectError::Invalid(e.problem))
}

/// A dedicated connection, with the same TLS rules as the functions: `sslmode=verify-full` and
/// `DB_CA_FILE` work here too. The commands keep nothing on its session past a transaction
/// (unnamed statements, transaction-level locks), so it may go through a transaction-mode
/// pooler such as RDS Proxy or PgBouncer.
pub async fn connect(env: &Env) -> Result<Client, ConnectError> {
    let config = config_from_env(env)?;
    parley_core::db::connect(&config)
        .await
        .map_err(|e| ConnectError::Connect(e.to_string()))
}
