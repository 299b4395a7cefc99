//! One module per `parley` subcommand, each with clap `Args` and an async `run`. Adding a
//! subcommand is a module here plus a variant (and match arm) in main.rs.

pub mod audit;
pub mod demo_data;
pub mod enroll;
pub mod ingest;
pub mod migrate;

use std::process::ExitCode;

use crate::db::ConnectError;

#[derive(Debug, thiserror::Error)]
pub enum CmdError {
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error(transparent)]
    Migrate(#[from] parley_core::migrate::MigrateError),
    #[error(transparent)]
    Demo(#[from] crate::demo::DemoError),
    #[error(transparent)]
    Ingest(#[from] parley_ingest::IngestError),
    #[error(transparent)]
    Embed(#[from] parley_embed::EmbedError),
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    #[error(transparent)]
    Settings(parley_core::config::ConfigError),
}

impl CmdError {
    /// 2 for configuration mistakes (as clap uses for bad arguments), 1 for failures.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CmdError::Connect(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Ingest(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Settings(_) => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        }
    }
}

/// Seconds with one decimal, the precision a person reads.
pub(crate) fn secs(d: std::time::Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
