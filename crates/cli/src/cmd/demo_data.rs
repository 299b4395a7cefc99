//! `parley demo-data`: loads the 331 districts and deterministic demo feedback into the
//! database in `DATABASE_URL`; rerunning with the same options changes nothing.

use super::{CmdError, secs};
use crate::demo::{self, DemoOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many feedback rows to generate (at least 1).
    #[arg(long, default_value_t = DemoOptions::default().feedback, value_parser = feedback_rows)]
    pub feedback: u64,
    /// Seed for the generator; the same seed and size always give the same rows.
    #[arg(long, default_value_t = DemoOptions::default().seed)]
    pub seed: u64,
}

/// Refuses 0: loading replaces the feedback table, so `--feedback 0` would empty it without a
/// word, which is never what "load demo data" means.
fn feedback_rows(raw: &str) -> Result<u64, String> {
    match raw.parse::<u64>() {
        Ok(0) => Err("must be at least 1 (0 would empty the feedback table)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

pub async fn run(args: Args) -> Result<(), CmdError> {
    let opts = DemoOptions {
        feedback: args.feedback,
        seed: args.seed,
    };
    let mut client = crate::db::connect().await?;
    let s = demo::load(&mut client, &opts).await?;
    println!("lads: {} rows ({} changed)", s.lads, s.lads_changed);
    if s.reloaded {
        println!(
            "feedback: {} rows in {} (seed {}; copy {}, indexes {})",
            s.feedback,
            secs(s.copy_elapsed + s.index_elapsed),
            s.seed,
            secs(s.copy_elapsed),
            secs(s.index_elapsed)
        );
        println!("analyze: {}", secs(s.analyze_elapsed));
    } else {
        println!(
            "feedback: {} rows for seed {} already loaded, nothing to do",
            s.feedback, s.seed
        );
    }
    println!("done in {}", secs(s.elapsed));
    Ok(())
}
