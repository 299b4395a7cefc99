//! The `parley` command line as data: [`Cli`] is what clap parses, [`run`] runs one
//! [`Command`] with its settings and a writer for its output, so the `parley` binary and the
//! `parley-admin` function (which runs an allow-listed few) share every subcommand's code.

pub mod audit;
pub mod catalog;
pub mod check;
pub mod collections;
pub mod demo_data;
pub mod enroll;
pub mod eval;
pub mod eval_catalog;
pub mod feedback;
pub mod ingest;
pub mod logins;
pub mod migrate;
pub mod search;
pub mod sync;
mod table;
pub mod usage;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use parley_core::config::Env;

use crate::db::ConnectError;

/// Where a subcommand writes what a person reads: stdout for the CLI, a buffer that becomes
/// the answer's `output` in the function.
pub type Out = dyn Write + Send;

#[derive(Debug, Parser)]
#[command(
    name = "parley",
    version,
    about = "Admin command for a Parley database (reads DATABASE_URL, or SECRET_IDS)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// A new subcommand is one variant here, one arm in `run` and one module in cmd/; the function
// runs it too once admin::invoke's allow-list names it.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply pending database migrations.
    Migrate(migrate::Args),
    /// Load demo domains (schema and data): feedback, tasks, or both (the default).
    DemoData(demo_data::Args),
    /// Ingest Markdown, HTML, text, PDF and Word (.docx) files into a document collection, or
    /// the objects under s3://bucket/prefix (embeds with EMBEDDINGS_*).
    Ingest(ingest::Args),
    /// Bring the collections under an S3 prefix up to date with the bucket: new and changed
    /// objects ingested, settings applied, documents whose objects are gone deleted.
    Sync(sync::Args),
    Search(search::Args),
    /// List the document collections (counts, model, size, readers), make one public or
    /// private, or remove one.
    Collections(collections::Args),
    /// Add or remove readers of a document collection (users by subject, groups by name), or
    /// list who may read what.
    Enroll(enroll::Args),
    /// Print the audit trail of tool calls: who called which tool, with what, and how it went.
    Audit(audit::Args),
    /// Create or update the functions' login roles (mcp, chat, SQL tools, ingest, admin) with
    /// their grants.
    Logins(logins::Args),
    Eval(eval::Args),
    Check(check::Args),
    /// Draft, refresh or check the semantic catalog: what the tables of a database mean.
    Catalog(catalog::Args),
    /// Usage and cost per user, model or day: turns, model calls, tokens, tool calls, errors.
    Usage(usage::Args),
    /// Export the feedback people gave on answers (thumbs, comments) as JSONL for `parley eval`.
    Feedback(feedback::Args),
}

impl Command {
    /// The subcommand's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Migrate(_) => "migrate",
            Command::DemoData(_) => "demo-data",
            Command::Ingest(_) => "ingest",
            Command::Sync(_) => "sync",
            Command::Search(_) => "search",
            Command::Collections(_) => "collections",
            Command::Enroll(_) => "enroll",
            Command::Audit(_) => "audit",
            Command::Logins(_) => "logins",
            Command::Eval(_) => "eval",
            Command::Check(_) => "check",
            Command::Catalog(_) => "catalog",
            Command::Usage(_) => "usage",
            Command::Feedback(_) => "feedback",
        }
    }
}

/// Runs `command` with the settings in `env` (the process environment with the secrets of
/// `SECRET_IDS` laid over it), writing its report to `out`.
pub async fn run(command: Command, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    // Boxed: the subcommands' futures together are deep enough to overflow the compiler's
    // layout recursion limit inside the admin function's.
    match command {
        Command::Migrate(args) => Box::pin(migrate::run(args, env, out)).await,
        Command::DemoData(args) => Box::pin(demo_data::run(args, env, out)).await,
        Command::Ingest(args) => Box::pin(ingest::run(args, env, out)).await,
        Command::Sync(args) => Box::pin(sync::run(args, env, out)).await,
        Command::Search(args) => Box::pin(search::run(args, env, out)).await,
        Command::Collections(args) => Box::pin(collections::run(args, env, out)).await,
        Command::Enroll(args) => Box::pin(enroll::run(args, env, out)).await,
        Command::Audit(args) => Box::pin(audit::run(args, env, out)).await,
        Command::Logins(args) => Box::pin(logins::run(args, env, out)).await,
        Command::Eval(args) => Box::pin(eval::run(args, env, out)).await,
        Command::Check(args) => Box::pin(check::run(args, env, out)).await,
        Command::Catalog(args) => Box::pin(catalog::run(args, env, out)).await,
        Command::Usage(args) => Box::pin(usage::run(args, env, out)).await,
        Command::Feedback(args) => Box::pin(feedback::run(args, env, out)).await,
    }
}

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
    S3(#[from] parley_ingest::s3::S3Error),
    #[error(transparent)]
    Embed(#[from] parley_embed::EmbedError),
    #[error(transparent)]
    Collections(#[from] collections::CollectionsError),
    #[error(transparent)]
    Audit(#[from] audit::AuditError),
    #[error(transparent)]
    Catalog(#[from] catalog::CatalogError),
    #[error(transparent)]
    Eval(#[from] eval::EvalError),
    #[error(transparent)]
    EvalCatalog(#[from] eval_catalog::EvalCatalogError),
    #[error(transparent)]
    UsageReport(#[from] usage::UsageError),
    #[error(transparent)]
    Feedback(#[from] feedback::FeedbackError),
    #[error(transparent)]
    Tool(#[from] crate::eval::ToolError),
    #[error(transparent)]
    Search(#[from] crate::eval::SearchError),
    #[error(transparent)]
    Logins(#[from] crate::logins::LoginError),
    #[error(transparent)]
    LoginSource(#[from] logins::SourceError),
    #[error(transparent)]
    Settings(parley_core::config::ConfigError),
    #[error(transparent)]
    Secrets(#[from] parley_core::secrets::SecretsError),
    /// `parley check` ran, and some checks failed (each said why on its line).
    #[error(transparent)]
    Check(#[from] check::ChecksFailed),
    /// Arguments that do not go together, said in a sentence.
    #[error("{0}")]
    Usage(String),
    #[error("writing the output failed: {0}")]
    Output(#[from] std::io::Error),
}

impl CmdError {
    /// 2 for configuration mistakes (as clap uses for bad arguments), 1 for failures.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CmdError::Connect(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Ingest(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Collections(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Logins(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Eval(e) if e.is_usage() => ExitCode::from(2),
            CmdError::EvalCatalog(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Catalog(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Search(e) if e.is_usage() => ExitCode::from(2),
            CmdError::UsageReport(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Feedback(e) if e.is_usage() => ExitCode::from(2),
            CmdError::Tool(_) => ExitCode::from(2),
            CmdError::LoginSource(logins::SourceError::NoPassword { .. }) => ExitCode::from(2),
            CmdError::Settings(_) | CmdError::Usage(_) => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        }
    }

    /// A reader that went away (`parley audit | head`) is not a failure.
    pub fn is_broken_pipe(&self) -> bool {
        let io = match self {
            CmdError::Output(e) | CmdError::Audit(audit::AuditError::Output(e)) => e,
            _ => return false,
        };
        io.kind() == std::io::ErrorKind::BrokenPipe
    }
}

/// Seconds with one decimal, the precision a person reads.
pub(crate) fn secs(d: std::time::Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}
