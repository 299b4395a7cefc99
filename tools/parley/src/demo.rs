//! The demo domains `parley demo-data` can load, each a crate under domains/ with its tools and
//! data. Feedback, tasks and chinook have their own schemas: loading one applies its schema,
//! then its data, in one transaction; Parley's own schema (`parley migrate`) never includes them. The
//! documents domain lives in Parley's schema (migration 0004) and is loaded by parley-ingest,
//! one transaction per document, after the others.

use std::fmt;
use std::time::{Duration, Instant};

use parley_core::db::pg_message;
use parley_domain_chinook as chinook;
use parley_domain_documents as documents;
use parley_domain_feedback as feedback;
use parley_domain_tasks as tasks;
use parley_embed::Embedder;
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
    /// The Chinook music store (schema chinook) beside 32 tables of baseball (lahman) and
    /// flights (nycflights13): a larger database with no comments, for the semantic catalog
    /// and ad-hoc SQL.
    Chinook,
    /// The PostgreSQL manual as courses (one collection per part), with demo enrollments; it
    /// embeds every page, so it needs the manual and the embedding model.
    Documents,
}

impl Domain {
    pub const ALL: [Domain; 4] = [
        Domain::Feedback,
        Domain::Tasks,
        Domain::Chinook,
        Domain::Documents,
    ];

    /// What `parley demo-data` loads without `--domain`: not documents, which embeds the
    /// whole manual (about 8,800 chunks: tens of minutes with the built-in model here), and
    /// which scripts/dev and the scratch databases of scripts/lib.sh do not need; nor chinook,
    /// which neither the tools files nor the tests that load the defaults use.
    pub const DEFAULT: [Domain; 2] = [Domain::Feedback, Domain::Tasks];

    pub fn name(self) -> &'static str {
        match self {
            Domain::Feedback => "feedback",
            Domain::Tasks => "tasks",
            Domain::Chinook => "chinook",
            Domain::Documents => "documents",
        }
    }

    /// The domain's schema.sql: idempotent; it needs `parley migrate` first. The documents
    /// domain has none: its tables are Parley's own (migration 0004).
    pub fn schema(self) -> Option<&'static str> {
        match self {
            Domain::Feedback => Some(feedback::SCHEMA),
            Domain::Tasks => Some(tasks::SCHEMA),
            Domain::Chinook => Some(chinook::SCHEMA),
            Domain::Documents => None,
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Feedback rows to generate (feedback domain).
    pub feedback: u64,
    /// Seed of the feedback generator; the same seed and size always give the same rows.
    pub seed: u64,
    /// The domains to load, each once, in [`Domain::ALL`]'s order whatever the order here.
    pub domains: Vec<Domain>,
    /// Which pages of which manual (documents domain).
    pub manual: documents::ManualOptions,
    /// What embeds the manual's chunks; the documents domain needs one.
    pub embedder: Option<Embedder>,
}

impl Default for DemoOptions {
    /// [`Domain::DEFAULT`]: a program (a test, the bench) asks for documents by name, with an
    /// embedder.
    fn default() -> Self {
        let generator = feedback::LoadOptions::default();
        DemoOptions {
            feedback: generator.feedback,
            seed: generator.seed,
            domains: Domain::DEFAULT.to_vec(),
            manual: documents::ManualOptions::default(),
            embedder: None,
        }
    }
}

/// What one run loaded; `None` for a domain it was not asked to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSummary {
    pub feedback: Option<feedback::LoadSummary>,
    pub tasks: Option<tasks::LoadSummary>,
    pub chinook: Option<chinook::LoadSummary>,
    pub documents: Option<documents::LoadSummary>,
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
    #[error("loading the chinook domain: {0}")]
    Chinook(#[from] chinook::LoadError),
    #[error("loading the documents domain: {0}")]
    Documents(#[from] documents::LoadError),
    #[error("loading the documents domain needs an embedder (DemoOptions::embedder)")]
    NoEmbedder,
    #[error("loading the documents domain: {0}")]
    EmbedSettings(#[from] parley_core::config::ConfigError),
    #[error("loading the documents domain: {0}")]
    Embedder(#[from] parley_embed::EmbedError),
}

/// Loads each chosen domain (its schema, then its data), each in a transaction of its own; the
/// documents domain last, a transaction per document (see the module doc). A rerun with the
/// same options changes nothing.
pub async fn load(client: &mut Client, opts: &DemoOptions) -> Result<DemoSummary, DemoError> {
    let started = Instant::now();
    // The domains' schemas grant to Parley's roles and use its caller helpers. Roles are
    // cluster-wide, so the parley schema is what shows this database was migrated.
    let migrated: bool = client
        .query_typed_one(
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
    // Before anything is loaded: a run that would stop at the documents domain loads nothing.
    if wanted(Domain::Documents) {
        if opts.embedder.is_none() {
            return Err(DemoError::NoEmbedder);
        }
        documents::manual::check_dir(&opts.manual.dir).map_err(documents::LoadError::from)?;
    }
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
    let chinook = if wanted(Domain::Chinook) {
        let tx = begin(client, Domain::Chinook).await?;
        let summary = chinook::load_data(&tx).await?;
        commit(tx, Domain::Chinook).await?;
        Some(summary)
    } else {
        None
    };
    let documents = if wanted(Domain::Documents) {
        let embedder = opts.embedder.as_ref().ok_or(DemoError::NoEmbedder)?;
        Some(documents::load(client, embedder, &opts.manual).await?)
    } else {
        None
    };
    Ok(DemoSummary {
        feedback,
        tasks,
        chinook,
        documents,
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
    let tx = parley_core::db::locked_transaction(client, LOCK_KEY)
        .await
        .map_err(|e| pg(e.step)(e.source))?;
    if let Some(schema) = domain.schema() {
        tx.batch_execute(schema)
            .await
            .map_err(pg("applying the schema"))?;
    }
    Ok(tx)
}

async fn commit(tx: Transaction<'_>, domain: Domain) -> Result<(), DemoError> {
    tx.commit().await.map_err(|source| DemoError::Postgres {
        domain,
        step: "committing",
        source,
    })
}
