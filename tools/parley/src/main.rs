//! `parley`: the admin command for a Parley database (migrations, demo data, documents, the
//! audit trail, the functions' login roles). Each subcommand lives in `parley_cli::cmd::<name>`;
//! this file only parses, reads the settings and dispatches.

use std::process::ExitCode;

use clap::Parser;
use parley_cli::cmd::{self, Cli};
use parley_core::config::Env;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = async {
        // With SECRET_IDS (e.g. on a machine in the database's VPC), DATABASE_URL is built
        // from the RDS secret as the functions build theirs.
        let (env, _) = parley_core::secrets::load(&Env::from_process()).await?;
        cmd::run(cli.command, &env, &mut std::io::stdout()).await
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            e.exit_code()
        }
    }
}
