//! Scoring ranked result uris against a question's answers: recall@k, reciprocal rank within the
//! first ten, and their means overall and per split, kind and part. Pure arithmetic: no
//! database, no output format beyond one report line.

use std::collections::HashSet;

use super::{DEPTH, Question};

/// Whether a result's `uri` is the answer `expected`: the uri without its `#page=N` (a PDF's
/// page) equals it, or ends with `/` and it, so a file name matches the file under any folder.
pub fn is_answer(expected: &str, uri: &str) -> bool {
    let uri = uri.split_once("#page=").map_or(uri, |(u, _)| u);
    uri == expected
        || uri
            .strip_suffix(expected)
            .is_some_and(|folder| folder.ends_with('/'))
}

/// One question's scores from its ranked result uris.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Score {
    /// Share of the answers found among the first k results.
    pub recall: f64,
    /// 1 / rank of the first answering result within the first ten, else 0.
    pub rr10: f64,
}

/// Scores `uris` (best first) against the answers `expected`, recall over the first `k`.
pub fn score(expected: &[String], uris: &[String], k: usize) -> Score {
    let expected: HashSet<&str> = expected.iter().map(String::as_str).collect();
    let found: HashSet<&str> = uris
        .iter()
        .take(k)
        .flat_map(|u| expected.iter().copied().filter(|e| is_answer(e, u)))
        .collect();
    let first = uris
        .iter()
        .take(DEPTH)
        .position(|u| expected.iter().any(|e| is_answer(e, u)));
    Score {
        recall: found.len() as f64 / expected.len().max(1) as f64,
        rr10: first.map_or(0.0, |i| 1.0 / (i + 1) as f64),
    }
}

/// Mean scores of one method, overall, per split, per kind and per part.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub method: String,
    pub recall: f64,
    pub mrr10: f64,
    /// `dev` and `held-out`: what was tuned on and what was not. Empty when no question has a
    /// split; questions without one are `unsplit` when others have one.
    pub by_split: Vec<Group>,
    pub by_kind: Vec<Group>,
    pub by_part: Vec<Group>,
}

/// The mean scores of the questions sharing a split, a kind or a part.
#[derive(Debug, Clone, Default)]
pub struct Group {
    pub name: String,
    pub questions: usize,
    pub recall: f64,
    pub mrr10: f64,
}

/// `groups` on one line of a report: `name (questions) recall/MRR@10, ...`.
pub fn groups_line(groups: &[Group]) -> String {
    let each: Vec<String> = groups
        .iter()
        .map(|g| {
            format!(
                "{} ({}) {:.2}/{:.2}",
                g.name, g.questions, g.recall, g.mrr10
            )
        })
        .collect();
    each.join(", ")
}

/// The means of `scores` (one per question, in the same order) for `method`.
pub fn summarise(method: &str, questions: &[Question], scores: &[Score]) -> Summary {
    let all = group("all", questions, scores, |_| true);
    let groups = |key: fn(&Question) -> Option<&str>, missing: &str| {
        if questions.iter().all(|q| key(q).is_none()) {
            return Vec::new();
        }
        let mut names: Vec<&str> = questions
            .iter()
            .map(|q| key(q).unwrap_or(missing))
            .collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .map(|n| group(n, questions, scores, |q| key(q).unwrap_or(missing) == n))
            .collect()
    };
    Summary {
        method: method.to_owned(),
        recall: all.recall,
        mrr10: all.mrr10,
        by_split: groups(|q| q.split.as_deref(), "unsplit"),
        by_kind: groups(|q| q.kind.as_deref(), "no kind"),
        by_part: groups(|q| q.part.as_deref(), "no part"),
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
        recall: picked.iter().map(|s| s.recall).sum::<f64>() / n,
        mrr10: picked.iter().map(|s| s.rr10).sum::<f64>() / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pages: &[&str]) -> Question {
        Question {
            q: "?".into(),
            pages: pages.iter().map(|p| (*p).to_owned()).collect(),
            collection: None,
            filters: None,
            kind: Some("keyword".into()),
            part: Some("sql".into()),
            split: None,
        }
    }

    fn uris(v: &[&str]) -> Vec<String> {
        v.iter().map(|u| (*u).to_owned()).collect()
    }

    #[test]
    fn recall_counts_distinct_pages_in_the_top_k_and_rr_the_first_hit() {
        let s = score(
            &q(&["a.html", "b.html"]).pages,
            &uris(&["x.html", "a.html", "a.html", "y.html", "z.html", "b.html"]),
            5,
        );
        assert_eq!(
            s,
            Score {
                recall: 0.5,
                rr10: 0.5
            }
        );
        let s = score(
            &q(&["a.html", "b.html"]).pages,
            &uris(&["x.html", "a.html", "a.html", "y.html", "z.html", "b.html"]),
            6,
        );
        assert_eq!(s.recall, 1.0);
    }

    #[test]
    fn a_miss_scores_zero_and_folders_and_pdf_pages_are_ignored() {
        assert_eq!(
            score(&q(&["a.html"]).pages, &uris(&["x.html"]), 5),
            Score::default()
        );
        for uri in ["manual/a.html", "a.html", "s3://b/k/a.html#page=3"] {
            let s = score(&q(&["a.html"]).pages, &uris(&[uri]), 5);
            assert_eq!(
                s,
                Score {
                    recall: 1.0,
                    rr10: 1.0
                },
                "{uri}"
            );
        }
        // A longer file name that ends the same way is another document.
        assert!(!is_answer("a.html", "manual/data.html"));
        assert!(is_answer("guide/a.md", "team/guide/a.md"));
        assert!(!is_answer("guide/a.md", "team/otherguide/a.md"));
    }

    #[test]
    fn summaries_average_overall_and_per_group() {
        let mut a = q(&["a.html"]);
        a.kind = Some("concept".into());
        let qs = [a, q(&["b.html"]), q(&["c.html"])];
        let scores = [
            Score {
                recall: 1.0,
                rr10: 1.0,
            },
            Score {
                recall: 1.0,
                rr10: 0.5,
            },
            Score::default(),
        ];
        let s = summarise("m", &qs, &scores);
        assert!((s.recall - 2.0 / 3.0).abs() < 1e-9 && (s.mrr10 - 0.5).abs() < 1e-9);
        let kinds: Vec<(&str, usize, f64)> = s
            .by_kind
            .iter()
            .map(|g| (g.name.as_str(), g.questions, g.mrr10))
            .collect();
        assert_eq!(kinds, [("concept", 1, 1.0), ("keyword", 2, 0.25)]);
        assert_eq!(s.by_part.len(), 1);
        // No question has a split: no split groups to print.
        assert!(s.by_split.is_empty());
    }

    #[test]
    fn questions_without_a_label_are_grouped_apart_when_others_have_one() {
        let mut a = q(&["a.html"]);
        a.split = Some("dev".into());
        let qs = [a, q(&["b.html"])];
        let s = summarise("m", &qs, &[Score::default(), Score::default()]);
        let names: Vec<&str> = s.by_split.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["dev", "unsplit"]);
    }
}
