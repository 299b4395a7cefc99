//! What Parley's functions share: typed configuration, settings from Secrets Manager, the
//! Postgres pool, migrations, JWT verification, telemetry, metrics (EMF) and the dual Lambda /
//! plain-HTTP runtime.
//!
//! **Invariant:** this crate knows no routes, no MCP and no LLM; the functions bring those.

pub mod audit;
pub mod aws;
pub mod config;
pub mod db;
pub mod error;
pub mod http;
pub mod jwt;
pub mod metrics;
pub mod migrate;
pub mod plain_http;
pub mod retry;
pub mod secrets;
pub mod serve;
pub mod telemetry;
pub mod usage;
