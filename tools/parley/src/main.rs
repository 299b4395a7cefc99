//! `parley`: the admin command for a Parley database (migrations, demo data, documents, the
//! audit trail). Each subcommand lives in `parley_cli::cmd::<name>`; this file only parses and
//! dispatches.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use parley_cli::cmd;

#[derive(Debug, Parser)]
#[command(
    name = "parley",
    version,
    about = "Admin command for a Parley database (reads DATABASE_URL)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// A new subcommand is one variant here, one arm below and one module in cmd/.
#[derive(Debug, Subcommand)]
enum Command {
    /// Apply pending database migrations.
    Migrate(cmd::migrate::Args),
    /// Load demo domains (schema and data): feedback, tasks, or both (the default).
    DemoData(cmd::demo_data::Args),
    /// Ingest Markdown, HTML and text files into a document collection (embeds with EMBEDDINGS_*).
    Ingest(cmd::ingest::Args),
    /// Add or remove readers of a document collection: users by subject, groups by name.
    Enroll(cmd::enroll::Args),
    /// Print the audit trail of tool calls: who called which tool, with what, and how it went.
    Audit(cmd::audit::Args),
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Migrate(args) => cmd::migrate::run(args).await,
        Command::DemoData(args) => cmd::demo_data::run(args).await,
        Command::Ingest(args) => cmd::ingest::run(args).await,
        Command::Enroll(args) => cmd::enroll::run(args).await,
        Command::Audit(args) => cmd::audit::run(args).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}
