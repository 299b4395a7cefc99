//! Retrieval quality over the labelled manual questions (`data/manual_questions.toml`):
//! recall@5 and MRR@10 for hybrid (the shipped `search_documents`, called over MCP) and its
//! two branches alone ([`crate::docs::branches`], run on the bench's own connection with the
//! values the server binds).

use std::collections::HashSet;
use std::path::Path;

use anyhow::{Context, bail};
use serde::Deserialize;

/// The questions file, relative to the bench crate.
pub const QUESTIONS: &str = "data/manual_questions.toml";

/// Rows a search is asked for: enough for MRR@10.
pub const DEPTH: usize = 10;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    question: Vec<Question>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    pub q: String,
    pub kind: String,
    pub part: String,
    /// Manual pages (file names) that answer it.
    pub pages: Vec<String>,
    /// `dev` (tune on it) or `held-out` (report only), fixed once by the file header's rule.
    pub split: Option<String>,
}

pub fn questions(path: &Path) -> anyhow::Result<Vec<Question>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file: File =
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    for q in &file.question {
        if q.pages.is_empty() || q.pages.len() > 3 {
            bail!("{:?}: give 1-3 answering pages", q.q);
        }
        if !["paraphrase", "keyword", "concept"].contains(&q.kind.as_str()) {
            bail!("{:?}: kind must be paraphrase, keyword or concept", q.q);
        }
        if !matches!(q.split.as_deref(), None | Some("dev" | "held-out")) {
            bail!("{:?}: split must be dev or held-out", q.q);
        }
    }
    Ok(file.question)
}

/// The manual page a result's `uri` names (its last path component: the loader and a plain
/// `parley ingest` of the html folder both record file names, possibly under a folder).
pub fn page(uri: &str) -> &str {
    uri.rsplit('/').next().unwrap_or(uri)
}

/// One question's scores from its ranked result uris.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Score {
    /// Share of the answering pages among the first 5 results.
    pub recall5: f64,
    /// 1 / rank of the first answering result within the first 10, else 0.
    pub rr10: f64,
}

pub fn score(question: &Question, uris: &[String]) -> Score {
    let relevant: HashSet<&str> = question.pages.iter().map(String::as_str).collect();
    let found: HashSet<&str> = uris
        .iter()
        .take(5)
        .map(|u| page(u))
        .filter(|p| relevant.contains(p))
        .collect();
    let first = uris
        .iter()
        .take(DEPTH)
        .position(|u| relevant.contains(page(u)));
    Score {
        recall5: found.len() as f64 / relevant.len() as f64,
        rr10: first.map_or(0.0, |i| 1.0 / (i + 1) as f64),
    }
}

/// Mean scores of one method, overall, per kind of question and per part of the manual.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub method: String,
    pub recall5: f64,
    pub mrr10: f64,
    pub by_kind: Vec<Group>,
    pub by_part: Vec<Group>,
    /// `dev` and `held-out`: what was tuned on and what was not.
    pub by_split: Vec<Group>,
}

/// The mean scores of the questions sharing a kind or a part.
#[derive(Debug, Clone, Default)]
pub struct Group {
    pub name: String,
    pub questions: usize,
    pub recall5: f64,
    pub mrr10: f64,
}

/// `groups` on one line of a report: `name (questions) recall@5/MRR@10, ...`.
pub fn groups_line(groups: &[Group]) -> String {
    let each: Vec<String> = groups
        .iter()
        .map(|g| {
            format!(
                "{} ({}) {:.2}/{:.2}",
                g.name, g.questions, g.recall5, g.mrr10
            )
        })
        .collect();
    each.join(", ")
}

pub fn summarise(method: &str, questions: &[Question], scores: &[Score]) -> Summary {
    let all = group("all", questions, scores, |_| true);
    let groups = |key: fn(&Question) -> &str| {
        let mut names: Vec<&str> = questions.iter().map(key).collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .map(|n| group(n, questions, scores, |q| key(q) == n))
            .collect()
    };
    Summary {
        method: method.to_owned(),
        recall5: all.recall5,
        mrr10: all.mrr10,
        by_kind: groups(|q| &q.kind),
        by_part: groups(|q| &q.part),
        by_split: groups(|q| q.split.as_deref().unwrap_or("unsplit")),
    }
}

fn group(
    name: &str,
    questions: &[Question],
    scores: &[Score],
    member: impl Fn(&Question) -> bool,
) -> Group {
    let picked: Vec<&Score> = questions
        .iter()
        .zip(scores)
        .filter(|(q, _)| member(q))
        .map(|(_, s)| s)
        .collect();
    let n = picked.len().max(1) as f64;
    Group {
        name: name.to_owned(),
        questions: picked.len(),
        recall5: picked.iter().map(|s| s.recall5).sum::<f64>() / n,
        mrr10: picked.iter().map(|s| s.rr10).sum::<f64>() / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pages: &[&str]) -> Question {
        Question {
            q: "?".into(),
            kind: "keyword".into(),
            part: "sql".into(),
            pages: pages.iter().map(|p| (*p).to_owned()).collect(),
            split: None,
        }
    }

    fn uris(v: &[&str]) -> Vec<String> {
        v.iter().map(|u| (*u).to_owned()).collect()
    }

    #[test]
    fn recall_counts_distinct_pages_in_the_top_five_and_rr_the_first_hit() {
        let s = score(
            &q(&["a.html", "b.html"]),
            &uris(&["x.html", "a.html", "a.html", "y.html", "z.html", "b.html"]),
        );
        assert_eq!(
            s,
            Score {
                recall5: 0.5,
                rr10: 0.5
            }
        );
    }

    #[test]
    fn a_miss_scores_zero_and_folders_are_ignored() {
        assert_eq!(score(&q(&["a.html"]), &uris(&["x.html"])), Score::default());
        let s = score(&q(&["a.html"]), &uris(&["manual/a.html"]));
        assert_eq!(
            s,
            Score {
                recall5: 1.0,
                rr10: 1.0
            }
        );
    }

    #[test]
    fn summaries_average_overall_and_per_group() {
        let mut a = q(&["a.html"]);
        a.kind = "concept".into();
        let qs = [a, q(&["b.html"]), q(&["c.html"])];
        let scores = [
            Score {
                recall5: 1.0,
                rr10: 1.0,
            },
            Score {
                recall5: 1.0,
                rr10: 0.5,
            },
            Score::default(),
        ];
        let s = summarise("m", &qs, &scores);
        assert!((s.recall5 - 2.0 / 3.0).abs() < 1e-9 && (s.mrr10 - 0.5).abs() < 1e-9);
        let kinds: Vec<(&str, usize, f64)> = s
            .by_kind
            .iter()
            .map(|g| (g.name.as_str(), g.questions, g.mrr10))
            .collect();
        assert_eq!(kinds, [("concept", 1, 1.0), ("keyword", 2, 0.25)]);
        assert_eq!(s.by_part.len(), 1);
    }

    #[test]
    fn the_shipped_questions_parse_and_cover_every_kind() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(QUESTIONS);
        let qs = questions(&path).unwrap();
        assert!(qs.len() >= 40, "{}", qs.len());
        for kind in ["paraphrase", "keyword", "concept"] {
            assert!(qs.iter().any(|q| q.kind == kind), "{kind}");
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
