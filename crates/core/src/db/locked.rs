//! A transaction that first takes a transaction-level advisory lock: how the migrations, the
//! demo data and the login roles take turns when several runners start at once. The lock goes
//! with COMMIT or ROLLBACK (or the session, if the connection dies), never needing an unlock on
//! the same server session, so it works through a transaction-mode pooler and RDS Proxy.

use tokio_postgres::types::Type;
use tokio_postgres::{Client, Transaction};

/// Which step of [`locked_transaction`] failed, and Postgres's error.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub struct LockedError {
    /// `"starting the transaction"` or `"taking the advisory lock"`.
    pub step: &'static str,
    #[source]
    pub source: tokio_postgres::Error,
}

/// Begins a transaction on `client` and waits for the advisory lock `key` in it.
pub async fn locked_transaction(
    client: &mut Client,
    key: i64,
) -> Result<Transaction<'_>, LockedError> {
    let tx = client.transaction().await.map_err(|source| LockedError {
        step: "starting the transaction",
        source,
    })?;
    tx.execute_typed("SELECT pg_advisory_xact_lock($1)", &[(&key, Type::INT8)])
        .await
        .map_err(|source| LockedError {
            step: "taking the advisory lock",
            source,
        })?;
    Ok(tx)
}
