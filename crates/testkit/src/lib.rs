//! Test fixtures for Parley's integration tests: a fresh, migrated database per test on the
//! server at `DATABASE_URL` ([`TestDb`]), private throwaway Postgres servers for tests that stop
//! and restart the database or check passwords ([`TestCluster`]), a local AWS Secrets
//! Manager ([`Moto`]), and a TCP proxy that severs connections ([`TcpProxy`]). Run the tests
//! with `scripts/test`.

mod cluster;
mod db;
pub mod llm;
mod moto;
mod proxy;
/// Bare HTTP/1.1 connections, for what client libraries hide.
pub mod raw_http;

pub use cluster::TestCluster;
pub use db::{READONLY_USER, TestDb, connect};
pub use moto::{MOTO_REGION, Moto};
pub use proxy::TcpProxy;

/// tokio-postgres' Display for server errors is just "db error"; the useful part is inside.
pub(crate) fn pg_message(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => {
            let mut msg = format!("{} (SQLSTATE {})", db.message(), db.code().code());
            if let Some(detail) = db.detail() {
                msg.push_str("; detail: ");
                msg.push_str(detail);
            }
            msg
        }
        None => err.to_string(),
    }
}
