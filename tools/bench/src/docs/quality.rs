//! Retrieval quality over the labelled manual questions (`data/manual_questions.toml`):
//! recall@5 and MRR@10 for hybrid (the shipped `search_documents`, called over MCP) and its
//! two branches alone, scored by `parley_cli::eval` (what `parley eval` runs). Here: the
//! bench's own file and the stricter rules its labels follow.

use std::path::Path;

use anyhow::bail;
use parley_cli::eval::questions;
pub use parley_cli::eval::score::{groups_line, summarise};
pub use parley_cli::eval::{DEPTH, Group, Question, Score, Summary};

/// The questions file, relative to the bench crate.
pub const QUESTIONS: &str = "data/manual_questions.toml";

/// Recall is over the first 5 results.
pub const K: usize = 5;

/// `parley eval`'s format, with what the manual's labels always have: a kind among three, a
/// part of the manual, and 1-3 answering pages.
pub fn questions(path: &Path) -> anyhow::Result<Vec<Question>> {
    let qs = questions::read(path)?;
    for q in &qs {
        if q.pages.is_empty() || q.pages.len() > 3 {
            bail!("{:?}: give 1-3 answering pages", q.q);
        }
        if !matches!(
            q.kind.as_deref(),
            Some("paraphrase" | "keyword" | "concept")
        ) {
            bail!("{:?}: kind must be paraphrase, keyword or concept", q.q);
        }
        if q.part.is_none() {
            bail!("{:?}: give the part of the manual", q.q);
        }
    }
    Ok(qs)
}

pub fn score(question: &Question, uris: &[String]) -> Score {
    parley_cli::eval::score::score(&question.pages, uris, K)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_questions_parse_and_cover_every_kind() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(QUESTIONS);
        let qs = questions(&path).unwrap();
        assert!(qs.len() >= 40, "{}", qs.len());
        for kind in ["paraphrase", "keyword", "concept"] {
            assert!(qs.iter().any(|q| q.kind.as_deref() == Some(kind)), "{kind}");
        }
        let manual = Path::new("/usr/share/doc/postgresql-doc-15/html");
        if manual.is_dir() {
            for q in &qs {
                for p in &q.pages {
                    assert!(manual.join(p).is_file(), "{:?}: no page {p}", q.q);
                }
            }
        }
    }
}
