//! Documents into a Parley collection: [`discover`] finds the files, [`extract`] turns each into
//! a title and sections under their heading paths, [`chunk`] cuts sections into overlapping
//! chunks, and [`ingest`] embeds the chunks (outside any transaction) and stores each changed
//! document in one transaction with `COPY`, so a reader sees a document's old chunks or its
//! new ones, never a mix. Re-running is incremental by content hash.
//!
//! Storage is `migrations/0004_documents.sql`; this crate writes as the tables' owner (row-level
//! security does not apply) and never serves reads.

pub mod card;
pub mod chunk;
pub mod discover;
pub mod extract;
pub mod metadata;
mod progress;
mod run;
pub mod s3;
mod store;

use std::path::PathBuf;
use std::time::Duration;

pub use chunk::{Chunk, ChunkOptions, chunk_sections};
pub use discover::{Discovered, SourceFile, discover, discover_all};
pub use extract::text::MAX_HEADING_CHARS;
pub use extract::{
    EXTRACTOR_VERSION, ExtractError, ExtractLimits, Extracted, Format, Section, extract,
};
pub use run::{context, ingest};
pub use s3::CollectionSettings;

/// The collection a run writes into. Created on first ingest; on later runs the fields given
/// here replace the stored ones and the fields left `None` keep theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionSpec {
    /// Lower-case letters, digits, `_`, `.`, `-`; at most 63 characters, first a letter or digit.
    pub name: String,
    /// Defaults to the name on creation.
    pub title: Option<String>,
    pub description: Option<String>,
    /// Readable by every caller; defaults to false (members only) on creation.
    pub public: Option<bool>,
}

impl CollectionSpec {
    pub fn named(name: impl Into<String>) -> CollectionSpec {
        CollectionSpec {
            name: name.into(),
            title: None,
            description: None,
            public: None,
        }
    }
}

/// How a run treats its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestOptions {
    /// Delete the collection's documents that this run did not see. A file the run saw but
    /// skipped (now empty, binary, too big) keeps its stored document.
    pub prune: bool,
    /// Files larger than this are skipped; no more than this (and one byte) is ever read of a
    /// file, whatever its size claims.
    pub max_document_bytes: u64,
    /// How deep and how long one file's extraction may go before the file is skipped.
    pub extract: ExtractLimits,
    pub chunk: ChunkOptions,
    /// Draw a progress bar on stderr, if stderr is a terminal.
    pub progress: bool,
    /// Give up, with [`IngestError::Deadline`], as soon as the chunks left would not be embedded
    /// by then at the rate measured so far (a Lambda function's remaining time).
    pub deadline: Option<std::time::Instant>,
    /// Metadata given to every document of the run (`parley ingest --meta`), under each
    /// file's own and its front matter ([`metadata::merge`]).
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            prune: false,
            max_document_bytes: 10 * 1024 * 1024,
            extract: ExtractLimits::default(),
            chunk: ChunkOptions::default(),
            progress: false,
            deadline: None,
            metadata: serde_json::Map::new(),
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Documents new to the collection.
    pub added: u64,
    /// Documents whose content changed, replaced whole.
    pub replaced: u64,
    /// Documents whose content hash matched the stored one: not read further, not embedded.
    pub unchanged: u64,
    /// Documents deleted by `prune`.
    pub deleted: u64,
    /// S3 objects not written because another ingestion read a newer state of them first.
    pub superseded: u64,
    /// Files not ingested, each with why; the run went on without them.
    pub skipped: Vec<Skipped>,
    /// Chunks written (of added and replaced documents).
    pub chunks: u64,
    pub elapsed: Duration,
}

impl Summary {
    /// Documents written (added or replaced) per second of the whole run.
    pub fn docs_per_sec(&self) -> f64 {
        per_sec(self.added + self.replaced, self.elapsed)
    }

    pub fn chunks_per_sec(&self) -> f64 {
        per_sec(self.chunks, self.elapsed)
    }
}

fn per_sec(n: u64, d: Duration) -> f64 {
    let secs = d.as_secs_f64();
    if secs > 0.0 { n as f64 / secs } else { 0.0 }
}

impl std::fmt::Display for Summary {
    /// One line: `2 added, 1 replaced, 10 unchanged, 0 deleted, 1 skipped; 57 chunks in 3.2 s
    /// (0.9 docs/s, 17.8 chunks/s)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} added, {} replaced, {} unchanged, {} deleted, {} skipped; {} chunks in {:.1} s ({:.1} docs/s, {:.1} chunks/s)",
            self.added,
            self.replaced,
            self.unchanged,
            self.deleted,
            self.skipped.len(),
            self.chunks,
            self.elapsed.as_secs_f64(),
            self.docs_per_sec(),
            self.chunks_per_sec()
        )?;
        if self.superseded > 0 {
            write!(f, "; {} superseded by newer reads", self.superseded)?;
        }
        Ok(())
    }
}

/// The longest uri stored, in characters: `documents.uri`'s CHECK (migration 0004). A file whose
/// path relative to its root is longer is skipped.
pub const MAX_URI_CHARS: usize = 2000;

/// A file the run left out, and why (a sentence for the person running it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub uri: String,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("{0}: no such file or directory")]
    NotFound(PathBuf),
    #[error("could not read {path}: {source}")]
    Walk {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "\"{0}\" is not a collection name: use 1 to 63 lower-case letters, digits, '_', '.' or '-', starting with a letter or digit"
    )]
    CollectionName(String),
    #[error("the database has no documents tables; run `parley migrate` first")]
    NotMigrated,
    #[error(
        "the collection \"{collection}\" was embedded with {stored}, but the configured embedder is {configured}; \
         configure EMBEDDINGS_* to match, or ingest into a new collection"
    )]
    ModelMismatch {
        collection: String,
        stored: String,
        configured: String,
    },
    #[error("the embedder's vectors have {0} dimensions; Parley stores at most 2000")]
    Dims(usize),
    #[error("{collection}: no collection by that name")]
    NoCollection { collection: String },
    #[error("embedding failed: {0}")]
    Embed(#[from] parley_embed::EmbedError),
    #[error(
        "{chunks} chunks left to embed would not finish in the {}s left{}; ingest it with `parley ingest` from a machine, split the file, or give the function more memory (CPU)",
        time_left.as_secs(),
        needed.map(|n| format!(" (about {}s at the rate so far)", n.as_secs())).unwrap_or_default()
    )]
    Deadline {
        chunks: usize,
        needed: Option<Duration>,
        time_left: Duration,
    },
    #[error(
        "{uri}: another ingestion began extracting this version {}s ago and may not have finished; it is left to it (the next attempt after the extraction time limit refuses the file if it never finishes)",
        since.as_secs()
    )]
    Extracting { uri: String, since: Duration },
    #[error("the embedder returned {got} vectors for {expected} texts")]
    EmbedCount { expected: usize, got: usize },
    #[error("{step}: {}", parley_core::db::pg_message(source))]
    Postgres {
        step: &'static str,
        #[source]
        source: tokio_postgres::Error,
    },
}

impl IngestError {
    /// A mistake in what was asked (paths, names), as opposed to a failure while doing it.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            IngestError::NotFound(_) | IngestError::CollectionName(_)
        )
    }
}

pub(crate) fn pg(step: &'static str) -> impl FnOnce(tokio_postgres::Error) -> IngestError {
    move |source| IngestError::Postgres { step, source }
}

/// Checks a collection name against the rule the table's CHECK enforces, so the person gets
/// a sentence rather than a constraint violation.
pub fn check_collection_name(name: &str) -> Result<(), IngestError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_.-".contains(c));
    if first_ok && rest_ok && name.len() <= 63 {
        Ok(())
    } else {
        Err(IngestError::CollectionName(name.to_owned()))
    }
}

/// Adds and removes readers of a collection (`parley enroll`): users by subject, groups by
/// name. Returns how many memberships changed (existing ones are not counted twice).
pub async fn enroll(
    db: &tokio_postgres::Client,
    collection: &str,
    members: &[Member],
    remove: bool,
) -> Result<u64, IngestError> {
    store::enroll(db, collection, members, remove).await
}

/// One reader of a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    /// A user, by the `sub` claim of their token.
    User(String),
    /// Everyone whose token names this group (`groups` or `cognito:groups`).
    Group(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collection_names_follow_the_tables_rule() {
        for ok in ["pg-tutorial", "a", "course_101.v2", "9lives"] {
            assert!(check_collection_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Upper", "-lead", "has space", &"x".repeat(64), "ü"] {
            assert!(check_collection_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_summary_line_has_every_count_and_both_rates() {
        let s = Summary {
            added: 2,
            replaced: 1,
            unchanged: 10,
            deleted: 0,
            skipped: vec![Skipped {
                uri: "x".into(),
                reason: "empty".into(),
            }],
            chunks: 60,
            elapsed: Duration::from_secs(2),
            ..Summary::default()
        };
        assert_eq!(
            s.to_string(),
            "2 added, 1 replaced, 10 unchanged, 0 deleted, 1 skipped; 60 chunks in 2.0 s (1.5 docs/s, 30.0 chunks/s)"
        );
    }
}
