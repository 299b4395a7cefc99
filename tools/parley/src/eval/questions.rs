//! The labelled questions file: `[[question]]` tables with the question, the pages or documents
//! that answer it and optional collection, filters, kind, part and split; or, in a file whose
//! name ends in `.jsonl`, one JSON object per line with the same fields (what
//! `parley feedback export` writes, its `feedback` context, `id` and the catalog eval's labels
//! `tables` and `values` accepted and ignored). Parsing only: every mistake is reported with the
//! question's number (the line's, in JSONL) and text and the field at fault. A question no one
//! has labelled yet (no `pages` or `documents`, or an empty list) is refused as such, or left
//! out when the caller skips the unlabelled.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

/// The two parts of a labelled set split once: tune on `dev`, report `held-out` untouched.
pub const SPLITS: [&str; 2] = ["dev", "held-out"];

/// One labelled question.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The question as a person would type it.
    pub q: String,
    /// Uris or file names of the documents that answer it (`pages` or `documents` in the
    /// file): a result is a hit when its uri, without `#page=N`, is one of them or ends with
    /// `/` and one of them.
    pub pages: Vec<String>,
    /// Search only this collection (the tool's `collection` argument).
    pub collection: Option<String>,
    /// The tool's `filters` argument, when the tool declares one.
    pub filters: Option<Map<String, Value>>,
    /// Free labels the scores are grouped by.
    pub kind: Option<String>,
    pub part: Option<String>,
    /// `dev` or `held-out`.
    pub split: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum QuestionsError {
    #[error("cannot read the questions file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the questions file {path} is not valid TOML: {message}")]
    Toml { path: PathBuf, message: String },
    #[error("the questions file {path} has no [[question]] tables")]
    Empty { path: PathBuf },
    /// Every question was skipped as unlabelled.
    #[error("the questions file {path} has no labelled question ({skipped} unlabelled skipped)")]
    NoneLabelled { path: PathBuf, skipped: usize },
    /// `n` counts from 1 in file order; `q` is the question's text when it has one.
    #[error("{path}: question {n} ({q:?}): {problem}")]
    Field {
        path: PathBuf,
        n: usize,
        q: String,
        problem: String,
    },
    /// A line of a JSONL file, counted from 1 (blank lines included).
    #[error("{path} line {line} ({q:?}): {problem}")]
    Line {
        path: PathBuf,
        line: usize,
        q: String,
        problem: String,
    },
}

/// The questions read, and where those skipped as unlabelled were (question numbers in TOML,
/// line numbers in JSONL).
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    pub questions: Vec<Question>,
    pub skipped: Vec<usize>,
}

/// Why a question was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    /// No one has said which documents answer it yet.
    Unlabelled(String),
    Invalid(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    q: String,
    pages: Option<Vec<String>>,
    documents: Option<Vec<String>>,
    collection: Option<String>,
    filters: Option<toml::Table>,
    kind: Option<String>,
    part: Option<String>,
    split: Option<String>,
}

/// A line of a JSONL file: [`Raw`]'s fields, and those other readers of the same line use.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLine {
    q: String,
    pages: Option<Vec<String>>,
    documents: Option<Vec<String>>,
    collection: Option<String>,
    filters: Option<Value>,
    kind: Option<String>,
    part: Option<String>,
    split: Option<String>,
    // The catalog eval's labels and name for the question, and what `parley feedback export`
    // adds for the person labelling it: read elsewhere, ignored here.
    #[allow(dead_code)]
    tables: Option<IgnoredAny>,
    #[allow(dead_code)]
    values: Option<IgnoredAny>,
    #[allow(dead_code)]
    id: Option<IgnoredAny>,
    #[allow(dead_code)]
    feedback: Option<IgnoredAny>,
}

/// Either file's fields, filters as JSON.
struct Fields {
    q: String,
    pages: Option<Vec<String>>,
    documents: Option<Vec<String>>,
    collection: Option<String>,
    filters: Option<Value>,
    kind: Option<String>,
    part: Option<String>,
    split: Option<String>,
}

impl From<Raw> for Fields {
    fn from(raw: Raw) -> Fields {
        Fields {
            q: raw.q,
            pages: raw.pages,
            documents: raw.documents,
            collection: raw.collection,
            // A table always serializes; dates become the text they were written as.
            filters: raw
                .filters
                .map(|t| serde_json::to_value(t).map_or(Value::Null, plain_dates)),
            kind: raw.kind,
            part: raw.part,
            split: raw.split,
        }
    }
}

impl From<RawLine> for Fields {
    fn from(raw: RawLine) -> Fields {
        Fields {
            q: raw.q,
            pages: raw.pages,
            documents: raw.documents,
            collection: raw.collection,
            filters: raw.filters,
            kind: raw.kind,
            part: raw.part,
            split: raw.split,
        }
    }
}

/// Reads and checks the questions file at `path`, every question labelled.
pub fn read(path: &Path) -> Result<Vec<Question>, QuestionsError> {
    read_file(path, false).map(|r| r.questions)
}

/// Reads and checks the questions file at `path`: JSONL when its name ends in `.jsonl`, else
/// TOML. With `skip_unlabelled`, questions without their documents are left out (and listed)
/// instead of refused.
pub fn read_file(path: &Path, skip_unlabelled: bool) -> Result<Read, QuestionsError> {
    let text = std::fs::read_to_string(path).map_err(|source| QuestionsError::Read {
        path: path.to_owned(),
        source,
    })?;
    if path.extension().is_some_and(|e| e == "jsonl") {
        parse_jsonl(path, &text, skip_unlabelled)
    } else {
        parse_toml(path, &text, skip_unlabelled)
    }
}

/// Parses TOML `text` (read from `path`, which errors name), refusing unlabelled questions.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Question>, QuestionsError> {
    parse_toml(path, text, false).map(|r| r.questions)
}

/// What a refusal says of an unlabelled question: how to label it, or to skip it.
fn unlabelled(why: String) -> String {
    format!("not labelled: {why}; label it, or pass --skip-unlabelled to leave it out")
}

/// The checked questions and the skipped places, from each place's outcome.
fn gather(
    path: &Path,
    checked: Vec<(usize, Result<Question, Problem>)>,
    skip_unlabelled: bool,
    refuse: impl Fn(usize, String) -> QuestionsError,
) -> Result<Read, QuestionsError> {
    let mut read = Read {
        questions: Vec::new(),
        skipped: Vec::new(),
    };
    for (at, outcome) in checked {
        match outcome {
            Ok(q) => read.questions.push(q),
            Err(Problem::Unlabelled(_)) if skip_unlabelled => read.skipped.push(at),
            Err(Problem::Unlabelled(why)) => return Err(refuse(at, unlabelled(why))),
            Err(Problem::Invalid(why)) => return Err(refuse(at, why)),
        }
    }
    if read.questions.is_empty() {
        return Err(QuestionsError::NoneLabelled {
            path: path.to_owned(),
            skipped: read.skipped.len(),
        });
    }
    Ok(read)
}

/// Parses JSONL `text`: one question per non-blank line.
fn parse_jsonl(path: &Path, text: &str, skip_unlabelled: bool) -> Result<Read, QuestionsError> {
    let mut checked = Vec::new();
    let mut texts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                checked.push((i + 1, Err(Problem::Invalid(format!("not JSON: {e}")))));
                texts.push(String::new());
                continue;
            }
        };
        let q = value
            .get("q")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let outcome = serde_json::from_value::<RawLine>(value)
            .map_err(|e| Problem::Invalid(e.to_string()))
            .and_then(|raw| check(raw.into()));
        checked.push((i + 1, outcome));
        texts.push(q);
    }
    if checked.is_empty() {
        return Err(QuestionsError::Empty { path: path.into() });
    }
    let lines: Vec<usize> = checked.iter().map(|(at, _)| *at).collect();
    gather(path, checked, skip_unlabelled, |line, problem| {
        let q = lines
            .iter()
            .position(|l| *l == line)
            .map(|i| texts[i].clone())
            .unwrap_or_default();
        QuestionsError::Line {
            path: path.to_owned(),
            line,
            q,
            problem,
        }
    })
}

/// Parses TOML `text`: `[[question]]` tables.
fn parse_toml(path: &Path, text: &str, skip_unlabelled: bool) -> Result<Read, QuestionsError> {
    let toml_error = |message: String| QuestionsError::Toml {
        path: path.to_owned(),
        message: message.trim_end().to_owned(),
    };
    let mut file: toml::Table = toml::from_str(text).map_err(|e| toml_error(e.to_string()))?;
    if let Some(key) = file.keys().find(|k| *k != "question") {
        return Err(toml_error(format!(
            "unknown top-level key `{key}` (only [[question]] tables belong here)"
        )));
    }
    let tables = match file.remove("question") {
        None => return Err(QuestionsError::Empty { path: path.into() }),
        Some(toml::Value::Array(a)) if a.is_empty() => {
            return Err(QuestionsError::Empty { path: path.into() });
        }
        Some(toml::Value::Array(a)) => a,
        Some(_) => return Err(toml_error("`question` must be [[question]] tables".into())),
    };
    let mut texts = Vec::new();
    let checked: Vec<(usize, Result<Question, Problem>)> = tables
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            texts.push(
                value
                    .get("q")
                    .and_then(toml::Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            );
            let outcome = value
                .try_into::<Raw>()
                .map_err(|e: toml::de::Error| Problem::Invalid(e.message().to_owned()))
                .and_then(|raw| check(raw.into()));
            (i + 1, outcome)
        })
        .collect();
    gather(path, checked, skip_unlabelled, |n, problem| {
        QuestionsError::Field {
            path: path.to_owned(),
            n,
            q: texts[n - 1].clone(),
            problem,
        }
    })
}

fn check(raw: Fields) -> Result<Question, Problem> {
    let invalid = |why: &str| Err(Problem::Invalid(why.to_owned()));
    if raw.q.trim().is_empty() {
        return invalid("`q` is empty: write the question");
    }
    let pages = match (raw.pages, raw.documents) {
        (Some(p), Some(d)) if !p.is_empty() && !d.is_empty() => {
            return invalid("give `pages` or `documents`, not both");
        }
        (Some(p), Some(d)) => [p, d].concat(),
        (None, None) => Vec::new(),
        (Some(p), None) | (None, Some(p)) => p,
    };
    if pages.is_empty() {
        return Err(Problem::Unlabelled(
            "no `pages` or `documents`: name the documents that answer it (uris or file names)"
                .into(),
        ));
    }
    if pages.iter().any(|p| p.trim().is_empty()) {
        return invalid("`pages` (or `documents`) must list non-empty uris");
    }
    if let Some(split) = &raw.split
        && !SPLITS.contains(&split.as_str())
    {
        return Err(Problem::Invalid(format!(
            "`split` is {split:?}; it must be dev or held-out"
        )));
    }
    if raw
        .collection
        .as_deref()
        .is_some_and(|c| c.trim().is_empty())
    {
        return invalid("`collection` is empty: name one, or leave the field out");
    }
    let filters = match raw.filters {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return invalid("`filters` must be a table of the tool's filters"),
    };
    Ok(Question {
        q: raw.q,
        pages,
        collection: raw.collection,
        filters,
        kind: raw.kind,
        part: raw.part,
        split: raw.split,
    })
}

/// TOML dates and times serialize as `{"$__toml_private_datetime": "..."}`; a tool takes them
/// as the text they were written as.
fn plain_dates(value: Value) -> Value {
    const KEY: &str = "$__toml_private_datetime";
    match value {
        Value::Object(m) if m.len() == 1 && m.contains_key(KEY) => {
            m.into_iter().next().map_or(Value::Null, |(_, v)| v)
        }
        Value::Object(m) => {
            Value::Object(m.into_iter().map(|(k, v)| (k, plain_dates(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(plain_dates).collect()),
        v => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Vec<Question>, String> {
        parse(Path::new("qs.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_team_file_reads_pages_documents_collection_filters_and_labels() {
        let qs = parsed(
            r#"
[[question]]
q = "How do I reset my password?"
pages = ["handbook/accounts.md"]
kind = "paraphrase"
split = "dev"

[[question]]
q = "When was the travel policy last changed?"
documents = ["travel.pdf"]
collection = "policies"
filters = { department = "finance", updated = { from = 2024-01-01 } }
split = "held-out"
"#,
        )
        .unwrap();
        assert_eq!(qs.len(), 2);
        assert_eq!(qs[0].pages, ["handbook/accounts.md"]);
        assert_eq!(qs[0].kind.as_deref(), Some("paraphrase"));
        assert_eq!(qs[1].pages, ["travel.pdf"]);
        assert_eq!(qs[1].collection.as_deref(), Some("policies"));
        assert_eq!(
            Value::Object(qs[1].filters.clone().unwrap()),
            serde_json::json!({ "department": "finance", "updated": { "from": "2024-01-01" } })
        );
    }

    #[test]
    fn a_mistake_names_the_question_and_the_field() {
        let err = parsed(
            "[[question]]\nq = \"fine\"\npages = [\"a.md\"]\n\n\
             [[question]]\nq = \"which one?\"\npgaes = [\"b.md\"]\n",
        )
        .unwrap_err();
        assert!(err.contains("question 2 (\"which one?\")"), "{err}");
        assert!(err.contains("pgaes"), "{err}");

        let err =
            parsed("[[question]]\nq = \"x\"\npages = [\"a\"]\nsplit = \"test\"\n").unwrap_err();
        assert!(
            err.contains("question 1") && err.contains("`split`"),
            "{err}"
        );
        let err = parsed("[[question]]\nq = \"x\"\n").unwrap_err();
        assert!(err.contains("no `pages` or `documents`"), "{err}");
        let err =
            parsed("[[question]]\nq = \"x\"\npages = [\"a\"]\ndocuments = [\"b\"]\n").unwrap_err();
        assert!(err.contains("not both"), "{err}");
    }

    fn jsonl(text: &str, skip: bool) -> Result<Read, String> {
        parse_jsonl(Path::new("fb.jsonl"), text, skip).map_err(|e| e.to_string())
    }

    /// What `parley feedback export` writes, one labelled for documents, one for the catalog.
    const EXPORTED: &str = concat!(
        r#"{"q":"How long is annual leave?","pages":["leave.md"],"tables":[],"values":[],"split":"dev","id":"c/2","feedback":{"rating":"down","tool_calls":[]}}"#,
        "\n\n",
        r#"{"q":"Orders per country?","pages":[],"tables":["shop.orders"],"values":[],"split":null,"id":"c/4","feedback":{"rating":"down"}}"#,
        "\n"
    );

    #[test]
    fn a_labelled_export_line_is_a_question_and_its_feedback_is_ignored() {
        let read = jsonl(EXPORTED, true).unwrap();
        assert_eq!(read.questions.len(), 1);
        assert_eq!(read.questions[0].q, "How long is annual leave?");
        assert_eq!(read.questions[0].pages, ["leave.md"]);
        assert_eq!(read.questions[0].split.as_deref(), Some("dev"));
        // Line 3: the blank line counts.
        assert_eq!(read.skipped, [3]);
    }

    #[test]
    fn an_unlabelled_line_is_refused_by_its_number_unless_skipped() {
        let err = jsonl(EXPORTED, false).unwrap_err();
        assert!(
            err.contains("fb.jsonl line 3 (\"Orders per country?\")"),
            "{err}"
        );
        assert!(
            err.contains("not labelled") && err.contains("`pages`"),
            "{err}"
        );
        assert!(err.contains("--skip-unlabelled"), "{err}");
        let none = jsonl(&EXPORTED.replace("\"leave.md\"", ""), true).unwrap_err();
        assert!(
            none.contains("no labelled question (2 unlabelled skipped)"),
            "{none}"
        );
        let typo = jsonl(r#"{"q":"x","pgaes":["a"]}"#, true).unwrap_err();
        assert!(typo.contains("line 1") && typo.contains("pgaes"), "{typo}");
        let bad = jsonl("{\"q\":", true).unwrap_err();
        assert!(bad.contains("line 1") && bad.contains("not JSON"), "{bad}");
    }

    #[test]
    fn a_file_without_questions_or_with_other_keys_is_refused() {
        assert!(parsed("").unwrap_err().contains("no [[question]]"));
        assert!(parsed("title = \"x\"\n").unwrap_err().contains("`title`"));
        assert!(
            parsed("[[question\n")
                .unwrap_err()
                .contains("not valid TOML")
        );
    }
}
