//! `parley demo-data`: loads the demo domains (by default all of them) into the database in
//! `DATABASE_URL`, each its schema then its data; rerunning with the same options changes
//! nothing.

use super::{CmdError, secs};
use crate::demo::{self, DemoOptions, Domain};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A demo domain to load; repeat for several. Default: every demo domain.
    #[arg(long = "domain", value_enum, value_name = "NAME")]
    pub domains: Vec<Domain>,
    /// How many feedback rows to generate (at least 1; feedback domain).
    #[arg(long, default_value_t = DemoOptions::default().feedback, value_parser = feedback_rows)]
    pub feedback: u64,
    /// Seed for the feedback generator; the same seed and size always give the same rows.
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
        domains: if args.domains.is_empty() {
            Domain::ALL.to_vec()
        } else {
            args.domains
        },
    };
    let mut client = crate::db::connect().await?;
    let s = demo::load(&mut client, &opts).await?;
    if let Some(f) = &s.feedback {
        println!("lads: {} rows ({} changed)", f.lads, f.lads_changed);
        if f.reloaded {
            println!(
                "feedback: {} rows in {} (seed {}; copy {}, indexes {})",
                f.feedback,
                secs(f.copy_elapsed + f.index_elapsed),
                f.seed,
                secs(f.copy_elapsed),
                secs(f.index_elapsed)
            );
            println!("analyze: {}", secs(f.analyze_elapsed));
        } else {
            println!(
                "feedback: {} rows for seed {} already loaded, nothing to do",
                f.feedback, f.seed
            );
        }
    }
    if let Some(t) = &s.tasks {
        println!(
            "tasks: {} added for {} ({} in all)",
            t.seeded,
            parley_domain_tasks::SEED_OWNER,
            t.tasks
        );
    }
    println!("done in {}", secs(s.elapsed));
    Ok(())
}
