//! The demo domains `parley demo-data` can load, each a crate under domains/ with its own schema,
//! tools and data: loading one applies its schema, then its data. Parley's own schema
//! (`parley migrate`) never includes them.

use std::time::{Duration, Instant};

use parley_domain_feedback as feedback;
use parley_domain_tasks as tasks;
use tokio_postgres::Client;

/// A demo domain, named as on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Domain {
    /// UK local authority districts and public feedback about them (read-only tools).
    Feedback,
    /// A personal task list per user, with write tools and row-level security.
    Tasks,
}

impl Domain {
    pub const ALL: [Domain; 2] = [Domain::Feedback, Domain::Tasks];
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoOptions {
    /// Feedback rows to generate (feedback domain).
    pub feedback: u64,
    /// Seed of the feedback generator; the same seed and size always give the same rows.
    pub seed: u64,
    /// The domains to load, each once, in [`Domain::ALL`]'s order whatever the order here.
    pub domains: Vec<Domain>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        let generator = feedback::LoadOptions::default();
        DemoOptions {
            feedback: generator.feedback,
            seed: generator.seed,
            domains: Domain::ALL.to_vec(),
        }
    }
}

/// What one run loaded; `None` for a domain it was not asked to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSummary {
    pub feedback: Option<feedback::LoadSummary>,
    pub tasks: Option<tasks::LoadSummary>,
    pub elapsed: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("loading the feedback domain: {0}")]
    Feedback(#[from] feedback::LoadError),
    #[error("loading the tasks domain: {0}")]
    Tasks(#[from] tasks::LoadError),
}

/// Loads each chosen domain (its schema, then its data), each in a transaction of its own. A
/// rerun with the same options changes nothing.
pub async fn load(client: &mut Client, opts: &DemoOptions) -> Result<DemoSummary, DemoError> {
    let started = Instant::now();
    let wanted = |d| opts.domains.contains(&d);
    let feedback = if wanted(Domain::Feedback) {
        let generator = feedback::LoadOptions {
            feedback: opts.feedback,
            seed: opts.seed,
        };
        Some(feedback::load(client, &generator).await?)
    } else {
        None
    };
    let tasks = if wanted(Domain::Tasks) {
        Some(tasks::load(client).await?)
    } else {
        None
    };
    Ok(DemoSummary {
        feedback,
        tasks,
        elapsed: started.elapsed(),
    })
}
