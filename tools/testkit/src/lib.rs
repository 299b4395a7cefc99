//! Test fixtures for Parley's integration tests: a fresh, migrated database per test on the
//! server at `DATABASE_URL` ([`TestDb`]), private throwaway Postgres servers for tests that stop
//! and restart the database or check passwords ([`TestCluster`]), a local AWS Secrets
//! Manager ([`Moto`]), the one TCP proxy, which severs connections or loses an answer
//! ([`TcpProxy`]), PgBouncer in transaction mode in front of the test server ([`PgBouncer`]),
//! the one scripted LLM ([`llm`], also the `parley-llm-stub` binary the
//! Python and shell runners start), test-only JWT signing keys ([`keys`]), PDFs written byte by
//! byte ([`pdf`]), an OTLP trace receiver ([`otlp`]) and the demo domains' tools files ([`domains`]). Run the tests with `scripts/test`.

pub mod catalog;
mod cluster;
mod db;
pub mod domains;
pub mod embeddings;
pub mod keys;
pub mod llm;
/// A server whose migrating role is not a superuser, as on RDS and Aurora.
pub mod managed;
mod moto;
/// A real OTLP/HTTP trace receiver, for the tracing tests.
pub mod otlp;
pub mod pdf;
/// Statements RDS Proxy documents as pinning a session, found in a server's statement log.
pub mod pin_lint;
mod pooler;
mod proxy;
/// Bare HTTP/1.1 connections, for what client libraries hide.
pub mod raw_http;

pub use cluster::{TestCluster, bin_dir as pg_bin_dir};
pub use db::{READONLY_USER, SQL_READER_USER, TestDb, connect};
pub use embeddings::{embedder, model_dir};
pub use moto::{MOTO_REGION, Moto, MotoBucket};
pub use pooler::PgBouncer;
pub use proxy::TcpProxy;
