//! `parley demo-data --domain documents`: the manual's parts ingested as collections (one
//! `parley_ingest::ingest` run per part, each document in its own transaction), then the demo
//! enrollments. A rerun re-reads the files and skips the unchanged ones by content hash.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use parley_embed::Embedder;
use parley_ingest::{CollectionSpec, IngestError, IngestOptions, Member, SourceFile, Summary};
use tokio_postgres::Client;

use crate::manual::{self, DEFAULT_MANUAL_DIR, ManualError, Page, Part};

/// Who is enrolled in what (the demo's users and groups, with `CHAT_AUTH=none`'s one user
/// first): `local-user` takes five courses, `student-1` the two introductory ones, members of
/// the `dba` group read the administration, reference and internals parts, and `staff` read
/// everything. Groups come from the token's `groups` or `cognito:groups` claim.
pub const ENROLLMENTS: [(Principal, &[&str]); 4] = [
    (
        Principal::User("local-user"),
        &[
            "pg-tutorial",
            "pg-sql",
            "pg-admin",
            "pg-client",
            "pg-reference",
        ],
    ),
    (Principal::User("student-1"), &["pg-tutorial", "pg-sql"]),
    (
        Principal::Group("dba"),
        &["pg-admin", "pg-reference", "pg-internals"],
    ),
    (
        Principal::Group("staff"),
        &[
            "pg-tutorial",
            "pg-sql",
            "pg-admin",
            "pg-client",
            "pg-server",
            "pg-reference",
            "pg-internals",
            "pg-appendixes",
        ],
    ),
];

/// A demo reader: a user by subject or a group by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    User(&'static str),
    Group(&'static str),
}

/// What to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManualOptions {
    /// The manual's html directory (with index.html).
    pub dir: PathBuf,
    /// Load only this many pages of each part, spread evenly over it (for tests); `None`: all.
    pub pages_per_part: Option<usize>,
    /// Pages (file names such as "sql-set-transaction.html") loaded whatever the slice, in
    /// their parts.
    pub include: Vec<String>,
    /// Draw parley-ingest's progress bar (when stderr is a terminal).
    pub progress: bool,
}

impl Default for ManualOptions {
    fn default() -> Self {
        ManualOptions {
            dir: PathBuf::from(DEFAULT_MANUAL_DIR),
            pages_per_part: None,
            include: Vec::new(),
            progress: false,
        }
    }
}

/// What one load did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadSummary {
    /// Each collection's name and its ingest summary, in the manual's order.
    pub collections: Vec<(&'static str, Summary)>,
    /// Memberships added (0 on a rerun).
    pub enrolled: u64,
    pub elapsed: Duration,
}

impl LoadSummary {
    /// The collections' summaries added up.
    pub fn total(&self) -> Summary {
        let mut total = Summary::default();
        for (_, s) in &self.collections {
            total.added += s.added;
            total.replaced += s.replaced;
            total.unchanged += s.unchanged;
            total.deleted += s.deleted;
            total.chunks += s.chunks;
            total.skipped.extend(s.skipped.iter().cloned());
        }
        total.elapsed = self.elapsed;
        total
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Manual(#[from] ManualError),
    #[error("the manual has no page {0}")]
    NoSuchPage(String),
    #[error("ingesting {collection}: {source}")]
    Ingest {
        collection: &'static str,
        #[source]
        source: IngestError,
    },
    #[error("enrolling the demo users: {0}")]
    Enroll(#[source] IngestError),
}

/// Loads the manual in `options.dir` into one collection per part and enrolls the demo users
/// ([`ENROLLMENTS`]). Loading the whole manual prunes pages that are no longer in it; a slice
/// adds to what is there and deletes nothing.
pub async fn load(
    client: &mut Client,
    embedder: &Embedder,
    options: &ManualOptions,
) -> Result<LoadSummary, LoadError> {
    let started = Instant::now();
    let manual = manual::read(&options.dir)?;
    for uri in &options.include {
        if !manual
            .parts
            .iter()
            .any(|p| p.pages.iter().any(|page| &page.uri == uri))
        {
            return Err(LoadError::NoSuchPage(uri.clone()));
        }
    }
    let ingest_options = IngestOptions {
        prune: options.pages_per_part.is_none(),
        progress: options.progress,
        ..IngestOptions::default()
    };
    let mut collections = Vec::with_capacity(manual.parts.len());
    for part in &manual.parts {
        let files = slice(part, options.pages_per_part, &options.include)
            .into_iter()
            .map(|page| SourceFile {
                structure: Some(page.path.clone()),
                ..SourceFile::new(&options.dir, options.dir.join(&page.uri))
            })
            .collect();
        let spec = CollectionSpec {
            name: part.collection.to_owned(),
            title: Some(format!("PostgreSQL manual: {}", part.name)),
            description: Some(part.description.to_owned()),
            public: Some(false),
        };
        let summary = parley_ingest::ingest(client, embedder, &spec, files, &ingest_options)
            .await
            .map_err(|source| LoadError::Ingest {
                collection: part.collection,
                source,
            })?;
        collections.push((part.collection, summary));
    }
    let mut enrolled = 0;
    for (principal, courses) in ENROLLMENTS {
        let member = match principal {
            Principal::User(sub) => Member::User(sub.to_owned()),
            Principal::Group(name) => Member::Group(name.to_owned()),
        };
        for course in courses {
            enrolled += parley_ingest::enroll(client, course, std::slice::from_ref(&member), false)
                .await
                .map_err(LoadError::Enroll)?;
        }
    }
    Ok(LoadSummary {
        collections,
        enrolled,
        elapsed: started.elapsed(),
    })
}

/// The pages of `part` to load: all, or `per_part` of them spread evenly over its reading
/// order (the first one, the part's own page, always among them), plus the `include`d ones.
fn slice<'a>(part: &'a Part, per_part: Option<usize>, include: &[String]) -> Vec<&'a Page> {
    let pages = &part.pages;
    let Some(n) = per_part else {
        return pages.iter().collect();
    };
    let n = n.min(pages.len());
    pages
        .iter()
        .enumerate()
        .filter(|(i, page)| {
            // Page i is the first of its stretch when i*n/len steps up.
            let picked = n > 0 && (i * n) % pages.len() < n;
            picked || include.contains(&page.uri)
        })
        .map(|(_, page)| page)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(pages: usize) -> Part {
        Part {
            collection: "pg-test",
            name: "Test".into(),
            description: "",
            pages: (0..pages)
                .map(|i| Page {
                    uri: format!("p{i}.html"),
                    title: format!("P{i}"),
                    path: vec![],
                })
                .collect(),
        }
    }

    fn uris(pages: &[&Page]) -> Vec<String> {
        pages.iter().map(|p| p.uri.clone()).collect()
    }

    #[test]
    fn a_slice_spreads_its_pages_over_the_part() {
        let p = part(10);
        assert_eq!(
            uris(&slice(&p, Some(3), &[])),
            ["p0.html", "p4.html", "p7.html"]
        );
        assert_eq!(slice(&p, Some(1), &[]).len(), 1);
        assert_eq!(slice(&p, Some(10), &[]).len(), 10);
        assert_eq!(slice(&p, Some(50), &[]).len(), 10);
        assert_eq!(slice(&p, None, &[]).len(), 10);
        assert!(slice(&p, Some(0), &[]).is_empty());
    }

    #[test]
    fn included_pages_join_the_slice() {
        let p = part(10);
        assert_eq!(
            uris(&slice(&p, Some(1), &["p5.html".into()])),
            ["p0.html", "p5.html"]
        );
        assert_eq!(uris(&slice(&p, Some(0), &["p9.html".into()])), ["p9.html"]);
    }

    #[test]
    fn every_enrollment_names_a_part_of_the_manual() {
        for (_, courses) in ENROLLMENTS {
            for course in courses {
                assert!(
                    manual::PARTS.iter().any(|(_, name, _)| name == course),
                    "{course}"
                );
            }
        }
    }
}
