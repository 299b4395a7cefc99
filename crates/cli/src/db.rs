//! Opens the admin connection from `DATABASE_URL`. Kept to one small function so the plain
//! connection can be swapped for `parley_core::db`'s TLS-aware one without touching commands.

use std::str::FromStr;

use tokio_postgres::{Client, Config, NoTls};

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
    #[error("could not connect to the database in {DATABASE_URL}: {}", with_causes(.0))]
    Connect(#[source] tokio_postgres::Error),
}

impl ConnectError {
    /// A configuration mistake, as opposed to a database that is down or refusing us.
    pub fn is_usage(&self) -> bool {
        matches!(self, ConnectError::Missing | ConnectError::Invalid(_))
    }
}

/// Parses the URL without connecting, so usage errors surface before any network wait.
pub fn config_from_env() -> Result<Config, ConnectError> {
    let url = std::env::var(DATABASE_URL)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .ok_or(ConnectError::Missing)?;
    Config::from_str(&url).map_err(|e| ConnectError::Invalid(with_causes(&e)))
}

/// tokio-postgres keeps the useful part ("Connection refused", which option is bad) in the
/// error's sources, not its Display.
fn with_causes(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A dedicated session: the migration runner holds a session advisory lock on it.
pub async fn connect() -> Result<Client, ConnectError> {
    let config = config_from_env()?;
    let (client, connection) = config.connect(NoTls).await.map_err(ConnectError::Connect)?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("error: lost the database connection: {e}");
        }
    });
    Ok(client)
}
