//! `parley migrate`: applies the embedded SQL migrations to the database in `DATABASE_URL`
//! and prints one line per migration applied.

use super::CmdError;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(_args: Args) -> Result<(), CmdError> {
    let mut client = crate::db::connect().await?;
    let applied = parley_core::migrate::run(&mut client).await?;
    if applied.is_empty() {
        println!("schema up to date");
    }
    for name in applied {
        println!("applied {name}");
    }
    Ok(())
}
