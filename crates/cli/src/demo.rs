//! The demo domains `parley demo-data` can load, each a crate under domains/ with its own schema,
//! tools and data: loading one applies its schema, then its data, in one transaction. Parley's
//! own schema (`parley migrate`) never includes them.

use std::fmt;
use std::time::{Duration, Instant};

use parley_core::db::pg_message;
use parley_domain_feedback as feedback;
use parley_domain_tasks as tasks;
use tokio_postgres::{Client, Transaction};

/// Serialises concurrent `demo-data` runs on one database. ASCII "parleydm".
const LOCK_KEY: i64 = 0x7061_726c_6579_646d;

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

    pub fn name(self) -> &'static str {
        match self {
            Domain::Feedback => "feedback",
            Domain::Tasks => "tasks",
        }
    }

    /// The domain's schema.sql: idempotent; it needs `parley migrate` first.
    pub fn schema(self) -> &'static str {
        match self {
            Domain::Feedback => feedback::SCHEMA,
            Domain::Tasks => tasks::SCHEMA,
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
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
    #[error("this database has no Parley schema; run `parley migrate` before `parley demo-data`")]
    NotMigrated,
    #[error("checking for Parley's schema failed: {}", pg_message(.0))]
    Check(#[source] tokio_postgres::Error),
    #[error("loading the {domain} domain: {step} failed: {}", pg_message(.source))]
    Postgres {
        domain: Domain,
        step: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("loading the feedback domain: {0}")]
    Feedback(#[from] feedback::LoadError),
    #[error("loading the tasks domain: {0}")]
    Tasks(#[from] tasks::LoadError),
}

/// Loads each chosen domain (its schema, then its data), each in a transaction of its own. A
/// rerun with the same options changes nothing.
pub async fn load(client: &mut Client, opts: &DemoOptions) -> Result<DemoSummary, DemoError> {
    let started = Instant::now();
    // The domains' schemas grant to Parley's roles and use its caller helpers. Roles are
    // cluster-wide, so the parley schema is what shows this database was migrated.
    let migrated: bool = client
        .query_one(
            "SELECT to_regprocedure('parley.caller_sub()') IS NOT NULL
                AND to_regrole('parley_readonly') IS NOT NULL
                AND to_regrole('parley_tool_writer') IS NOT NULL",
            &[],
        )
        .await
        .map_err(DemoError::Check)?
        .get(0);
    if !migrated {
        return Err(DemoError::NotMigrated);
    }
    let wanted = |d| opts.domains.contains(&d);
    let feedback = if wanted(Domain::Feedback) {
        let generator = feedback::LoadOptions {
            feedback: opts.feedback,
            seed: opts.seed,
        };
        let tx = begin(client, Domain::Feedback).await?;
        let summary = feedback::load_data(&tx, &generator).await?;
        commit(tx, Domain::Feedback).await?;
        Some(summary)
    } else {
        None
    };
    let tasks = if wanted(Domain::Tasks) {
        let tx = begin(client, Domain::Tasks).await?;
        let summary = tasks::load_data(&tx).await?;
        commit(tx, Domain::Tasks).await?;
        Some(summary)
    } else {
        None
    };
    Ok(DemoSummary {
        feedback,
        tasks,
        elapsed: started.elapsed(),
    })
}

/// A transaction that holds the demo-data lock and has applied `domain`'s schema.
async fn begin(client: &mut Client, domain: Domain) -> Result<Transaction<'_>, DemoError> {
    let pg = |step| {
        move |source| DemoError::Postgres {
            domain,
            step,
            source,
        }
    };
    let tx = client
        .transaction()
        .await
        .map_err(pg("starting the transaction"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await
        .map_err(pg("taking the demo-data lock"))?;
    tx.batch_execute(domain.schema())
        .await
        .map_err(pg("applying the schema"))?;
    Ok(tx)
}

async fn commit(tx: Transaction<'_>, domain: Domain) -> Result<(), DemoError> {
    tx.commit().await.map_err(|source| DemoError::Postgres {
        domain,
        step: "committing",
        source,
    })
}
