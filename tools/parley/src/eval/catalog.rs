//! `parley eval catalog`: labelled questions about a database run through the catalog's own
//! tools, as the mcp function serves them (`search_catalog`, `find_values`, bound and run by
//! the tool engine). A question names the tables that answer it and, optionally, the values it
//! mentions; the scores say how often the tools put them in front of the model.
//!
//! - recall@k: the share of a question's tables among the first k distinct tables the search
//!   returns (a relationship row counts its two tables, in order);
//! - complete@k: the share of questions with all their tables among the first k;
//! - value hit@5: the share of labelled values `find_values(text)` returns in its first 5
//!   (same table, column and stored value).

use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The depths scored.
pub const KS: [usize; 3] = [5, 10, 20];
/// Rows `search_catalog` is asked for: enough to find 20 distinct tables in most answers.
pub const SEARCH_ROWS: usize = 50;
/// Values `find_values` is asked for.
pub const VALUE_DEPTH: usize = 5;

/// One line of the questions file. Other keys are ignored: the documents eval's labels
/// (`pages`, ...) and the `feedback` context of a line `parley feedback export` wrote.
#[derive(Debug, Clone, Deserialize)]
pub struct Question {
    /// `question`, or `q` as the documents eval and `parley feedback export` name it.
    #[serde(alias = "q")]
    pub question: String,
    /// Missing or empty: the line is not labelled yet.
    #[serde(default)]
    pub tables: Vec<String>,
    #[serde(default)]
    pub values: Vec<ValueLabel>,
    pub split: Option<String>,
    pub id: Option<String>,
}

/// A literal of the question and where it is stored.
#[derive(Debug, Clone, Deserialize)]
pub struct ValueLabel {
    pub text: String,
    pub table: String,
    pub column: String,
    pub value: String,
}

#[derive(Debug, thiserror::Error)]
pub enum QuestionsError {
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path} line {line}: {problem}")]
    Line {
        path: String,
        line: usize,
        problem: String,
    },
    #[error("{0} holds no questions")]
    Empty(String),
    #[error("{path} holds no labelled question ({skipped} unlabelled skipped)")]
    NoneLabelled { path: String, skipped: usize },
}

/// The questions read, and the lines skipped as unlabelled.
#[derive(Debug, Clone)]
pub struct Read {
    pub questions: Vec<Question>,
    pub skipped: Vec<usize>,
}

/// Reads a JSONL questions file: one question per non-blank line. A line without `tables` is
/// not labelled yet: refused naming its line, or with `skip_unlabelled` left out and listed.
pub fn read(path: &Path, skip_unlabelled: bool) -> Result<Read, QuestionsError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| QuestionsError::Read {
        path: name.clone(),
        error,
    })?;
    let mut out = Read {
        questions: Vec::new(),
        skipped: Vec::new(),
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let refused = |problem: String| QuestionsError::Line {
            path: name.clone(),
            line: i + 1,
            problem,
        };
        let q: Question = serde_json::from_str(line).map_err(|e| refused(e.to_string()))?;
        if q.question.trim().is_empty() {
            return Err(refused(
                "`question` (or `q`) is empty: write the question".into(),
            ));
        }
        if q.tables.is_empty() {
            if skip_unlabelled {
                out.skipped.push(i + 1);
                continue;
            }
            return Err(refused(
                "not labelled: `tables` is empty: name the tables that answer the question \
                 (schema.table); label it, or pass --skip-unlabelled to leave it out"
                    .into(),
            ));
        }
        out.questions.push(q);
    }
    if out.questions.is_empty() {
        return Err(if out.skipped.is_empty() {
            QuestionsError::Empty(name)
        } else {
            QuestionsError::NoneLabelled {
                path: name,
                skipped: out.skipped.len(),
            }
        });
    }
    Ok(out)
}

/// The distinct tables of `search_catalog`'s rows, in the order they first appear.
pub fn ranked_tables(rows: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for row in rows {
        for key in ["table", "related_table"] {
            if let Some(t) = row.get(key).and_then(Value::as_str)
                && !out.iter().any(|seen| seen == t)
            {
                out.push(t.to_owned());
            }
        }
    }
    out
}

/// One question's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub question: Question,
    pub ranked: Vec<String>,
    /// Per labelled value: found in the first [`VALUE_DEPTH`].
    pub value_hits: Vec<bool>,
}

impl Outcome {
    fn recall(&self, k: usize) -> f64 {
        let first = &self.ranked[..k.min(self.ranked.len())];
        let found = self
            .question
            .tables
            .iter()
            .filter(|t| first.contains(t))
            .count();
        found as f64 / self.question.tables.len() as f64
    }

    fn complete(&self, k: usize) -> bool {
        self.recall(k) >= 1.0
    }
}

/// Whether `find_values`' rows hold the labelled value.
pub fn value_hit(rows: &[Value], label: &ValueLabel) -> bool {
    rows.iter().take(VALUE_DEPTH).any(|row| {
        row["table"].as_str() == Some(label.table.as_str())
            && row["column"].as_str() == Some(label.column.as_str())
            && row["value"].as_str() == Some(label.value.as_str())
    })
}

/// The scores of a group of questions.
#[derive(Debug, Clone, PartialEq)]
pub struct Scores {
    pub questions: usize,
    /// Per depth of [`KS`].
    pub recall: Vec<f64>,
    pub complete: Vec<f64>,
    pub values: usize,
    pub value_hit: Option<f64>,
}

pub fn score(outcomes: &[&Outcome]) -> Scores {
    let n = outcomes.len().max(1) as f64;
    let values: usize = outcomes.iter().map(|o| o.value_hits.len()).sum();
    let hits = outcomes
        .iter()
        .flat_map(|o| &o.value_hits)
        .filter(|h| **h)
        .count();
    Scores {
        questions: outcomes.len(),
        recall: KS
            .iter()
            .map(|&k| outcomes.iter().map(|o| o.recall(k)).sum::<f64>() / n)
            .collect(),
        complete: KS
            .iter()
            .map(|&k| outcomes.iter().filter(|o| o.complete(k)).count() as f64 / n)
            .collect(),
        values,
        value_hit: (values > 0).then(|| hits as f64 / values as f64),
    }
}

/// The scores overall and per split (in the order splits first appear).
pub fn by_split(outcomes: &[Outcome]) -> Vec<(String, Scores)> {
    let mut splits: Vec<String> = Vec::new();
    for o in outcomes {
        if let Some(s) = &o.question.split
            && !splits.contains(s)
        {
            splits.push(s.clone());
        }
    }
    let mut out = vec![(
        "all".to_owned(),
        score(&outcomes.iter().collect::<Vec<_>>()),
    )];
    for split in splits {
        let group: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.question.split.as_deref() == Some(split.as_str()))
            .collect();
        out.push((split, score(&group)));
    }
    out
}

/// The report as text: a line per group, then the misses (questions incomplete at 10 and
/// values not found), at most `misses` of each.
pub fn text(outcomes: &[Outcome], misses: usize) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<10} {:>9} {:>9} {:>10} {:>11} {:>11} {:>11} {:>12}",
        "split",
        "questions",
        "recall@5",
        "recall@10",
        "complete@5",
        "complete@10",
        "complete@20",
        "value hit@5"
    );
    for (name, sc) in by_split(outcomes) {
        let hit = sc
            .value_hit
            .map(|h| format!("{h:.3} ({})", sc.values))
            .unwrap_or_else(|| "-".into());
        let _ = writeln!(
            s,
            "{:<10} {:>9} {:>9.3} {:>10.3} {:>11.3} {:>11.3} {:>11.3} {:>12}",
            name,
            sc.questions,
            sc.recall[0],
            sc.recall[1],
            sc.complete[0],
            sc.complete[1],
            sc.complete[2],
            hit
        );
    }
    let incomplete: Vec<&Outcome> = outcomes.iter().filter(|o| !o.complete(10)).collect();
    if !incomplete.is_empty() {
        let _ = writeln!(s, "\nincomplete at 10 ({}):", incomplete.len());
        for o in incomplete.iter().take(misses) {
            let missing: Vec<&str> = o
                .question
                .tables
                .iter()
                .filter(|t| !o.ranked.iter().take(10).any(|r| r == *t))
                .map(String::as_str)
                .collect();
            let _ = writeln!(
                s,
                "  {} missing {}; first: {}",
                o.question.question,
                missing.join(", "),
                o.ranked
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let lost: Vec<(&Outcome, &ValueLabel)> = outcomes
        .iter()
        .flat_map(|o| {
            o.question
                .values
                .iter()
                .zip(&o.value_hits)
                .filter(|(_, hit)| !**hit)
                .map(move |(v, _)| (o, v))
        })
        .collect();
    if !lost.is_empty() {
        let _ = writeln!(
            s,
            "\nvalues not in the first {VALUE_DEPTH} ({}):",
            lost.len()
        );
        for (_, v) in lost.iter().take(misses) {
            let _ = writeln!(
                s,
                "  {:?} -> {}.{} = {:?}",
                v.text, v.table, v.column, v.value
            );
        }
    }
    s
}

/// The report as one JSON document.
pub fn json_report(outcomes: &[Outcome]) -> Value {
    let groups: Map<String, Value> = by_split(outcomes)
        .into_iter()
        .map(|(name, sc)| {
            let mut g = Map::new();
            g.insert("questions".into(), json!(sc.questions));
            for (i, k) in KS.iter().enumerate() {
                g.insert(format!("recall@{k}"), json!(sc.recall[i]));
                g.insert(format!("complete@{k}"), json!(sc.complete[i]));
            }
            g.insert("values".into(), json!(sc.values));
            g.insert("value_hit@5".into(), json!(sc.value_hit));
            (name, Value::Object(g))
        })
        .collect();
    let questions: Vec<Value> = outcomes
        .iter()
        .map(|o| {
            json!({
                "id": o.question.id,
                "question": o.question.question,
                "split": o.question.split,
                "tables": o.question.tables,
                "ranked": o.ranked.iter().take(20).collect::<Vec<_>>(),
                "complete@10": o.complete(10),
                "value_hits": o.value_hits,
            })
        })
        .collect();
    json!({ "groups": groups, "questions": questions })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(tables: &[&str], ranked: &[&str]) -> Outcome {
        Outcome {
            question: Question {
                question: "q".into(),
                tables: tables.iter().map(|t| t.to_string()).collect(),
                values: Vec::new(),
                split: Some("dev".into()),
                id: None,
            },
            ranked: ranked.iter().map(|t| t.to_string()).collect(),
            value_hits: Vec::new(),
        }
    }

    #[test]
    fn an_export_line_labelled_with_tables_is_read_and_an_unlabelled_one_named_or_skipped() {
        let dir = std::env::temp_dir().join(format!("catalog-q-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("fb.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"q":"Orders per country?","pages":[],"tables":["shop.orders"],"values":[],"split":null,"id":"c/4","feedback":{"rating":"down"}}"#,
                "\n",
                r#"{"q":"How long is annual leave?","pages":["leave.md"],"tables":[],"id":"c/2","feedback":{}}"#,
                "\n"
            ),
        )
        .unwrap();
        let err = read(&path, false).unwrap_err().to_string();
        assert!(
            err.contains("line 2") && err.contains("`tables` is empty"),
            "{err}"
        );
        assert!(err.contains("--skip-unlabelled"), "{err}");
        let read = read(&path, true).unwrap();
        assert_eq!(read.skipped, [2]);
        assert_eq!(read.questions[0].question, "Orders per country?");
        assert_eq!(read.questions[0].id.as_deref(), Some("c/4"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn relationship_rows_rank_both_their_tables_once() {
        let rows = vec![
            json!({"kind": "column", "table": "s.a"}),
            json!({"kind": "relationship", "table": "s.b", "related_table": "s.a"}),
            json!({"kind": "instruction", "table": null}),
            json!({"kind": "relationship", "table": "s.b", "related_table": "s.c"}),
        ];
        assert_eq!(ranked_tables(&rows), ["s.a", "s.b", "s.c"]);
    }

    #[test]
    fn complete_needs_every_table_and_recall_counts_shares() {
        let o = outcome(&["s.a", "s.z"], &["s.a", "s.b", "s.c", "s.d", "s.e", "s.z"]);
        assert_eq!(o.recall(5), 0.5);
        assert!(!o.complete(5));
        assert!(o.complete(10));
        let sc = score(&[&o]);
        assert_eq!(sc.complete, vec![0.0, 1.0, 1.0]);
        assert_eq!(sc.value_hit, None);
    }
}
