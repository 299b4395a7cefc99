//! `parley migrate`: applies the embedded SQL migrations to the database in `DATABASE_URL`
//! and prints one line per migration applied.

use parley_core::config::Env;

use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let applied = apply(env).await?;
    if applied.is_empty() {
        writeln!(out, "schema up to date")?;
    }
    for name in applied {
        writeln!(out, "applied {name}")?;
    }
    Ok(())
}

/// The migrations applied, by name, in order (none when the schema was up to date).
pub async fn apply(env: &Env) -> Result<Vec<String>, CmdError> {
    let mut client = crate::db::connect(env).await?;
    Ok(parley_core::migrate::run(&mut client).await?)
}
