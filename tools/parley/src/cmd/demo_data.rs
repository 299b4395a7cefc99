//! `parley demo-data`: loads the demo domains (by default feedback and tasks) into the database
//! in `DATABASE_URL`, each its schema then its data; rerunning with the same options changes
//! nothing. The documents domain embeds the manual with the `EMBEDDINGS_*` settings' embedder.

use std::path::PathBuf;

use parley_core::config::Env;
use parley_domain_documents::{DEFAULT_MANUAL_DIR, ManualOptions};
use parley_embed::{EmbedSettings, Embedder};

use super::{CmdError, Out, secs};
use crate::demo::{self, DemoError, DemoOptions, Domain};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A demo domain to load; repeat for several. Default: feedback and tasks (documents embeds
    /// the whole PostgreSQL manual, which takes tens of minutes, and chinook is for the catalog;
    /// ask for them by name).
    #[arg(long = "domain", value_enum, value_name = "NAME")]
    pub domains: Vec<Domain>,
    /// How many feedback rows to generate (at least 1; feedback domain).
    #[arg(long, default_value_t = DemoOptions::default().feedback, value_parser = feedback_rows)]
    pub feedback: u64,
    /// Seed for the feedback generator; the same seed and size always give the same rows.
    #[arg(long, default_value_t = DemoOptions::default().seed)]
    pub seed: u64,
    /// The PostgreSQL manual's html directory (documents domain; Debian's postgresql-doc-15).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_MANUAL_DIR)]
    pub manual: PathBuf,
    /// Load only this many pages of each part of the manual, spread over it: a quick demo
    /// (documents domain). Default: every page.
    #[arg(long, value_name = "N")]
    pub pages_per_part: Option<usize>,
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

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let domains = if args.domains.is_empty() {
        Domain::DEFAULT.to_vec()
    } else {
        args.domains
    };
    // Only the documents domain embeds; the model loads before anything is written.
    let embedder = if domains.contains(&Domain::Documents) {
        let settings = EmbedSettings::from_env(env).map_err(DemoError::from)?;
        Some(Embedder::from_settings(&settings).map_err(DemoError::from)?)
    } else {
        None
    };
    let opts = DemoOptions {
        feedback: args.feedback,
        seed: args.seed,
        domains,
        manual: ManualOptions {
            dir: args.manual,
            pages_per_part: args.pages_per_part,
            progress: true,
            ..ManualOptions::default()
        },
        embedder,
    };
    let mut client = crate::db::connect(env).await?;
    let s = demo::load(&mut client, &opts).await?;
    if let Some(f) = &s.feedback {
        writeln!(out, "lads: {} rows ({} changed)", f.lads, f.lads_changed)?;
        if f.reloaded {
            writeln!(
                out,
                "feedback: {} rows in {} (seed {}; copy {}, indexes {})",
                f.feedback,
                secs(f.copy_elapsed + f.index_elapsed),
                f.seed,
                secs(f.copy_elapsed),
                secs(f.index_elapsed)
            )?;
            writeln!(out, "analyze: {}", secs(f.analyze_elapsed))?;
        } else {
            writeln!(
                out,
                "feedback: {} rows for seed {} already loaded, nothing to do",
                f.feedback, f.seed
            )?;
        }
    }
    if let Some(t) = &s.tasks {
        writeln!(
            out,
            "tasks: {} added for {} ({} in all)",
            t.seeded,
            parley_domain_tasks::SEED_OWNER,
            t.tasks
        )?;
    }
    if let Some(c) = &s.chinook {
        for schema in &c.schemas {
            writeln!(
                out,
                "{}: {} tables, {} rows",
                schema.schema, schema.tables, schema.rows
            )?;
        }
        writeln!(out, "chinook: loaded in {}", secs(c.elapsed))?;
    }
    if let Some(d) = &s.documents {
        for (collection, c) in &d.collections {
            writeln!(
                out,
                "{collection}: {} documents added, {} replaced, {} unchanged, {} deleted; {} chunks",
                c.added, c.replaced, c.unchanged, c.deleted, c.chunks
            )?;
            for skipped in &c.skipped {
                writeln!(out, "  skipped {}: {}", skipped.uri, skipped.reason)?;
            }
        }
        let total = d.total();
        writeln!(
            out,
            "documents: {} chunks written in {}; {} enrollments added",
            total.chunks,
            secs(d.elapsed),
            d.enrolled
        )?;
    }
    writeln!(out, "done in {}", secs(s.elapsed))?;
    Ok(())
}
