//! The labelled questions file: `[[question]]` tables with the question, the pages or documents
//! that answer it and optional collection, filters, kind, part and split. Parsing only: every
//! mistake is reported with the question's number and text and the field at fault.

use std::path::{Path, PathBuf};

use serde::Deserialize;
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
    /// `n` counts from 1 in file order; `q` is the question's text when it has one.
    #[error("{path}: question {n} ({q:?}): {problem}")]
    Field {
        path: PathBuf,
        n: usize,
        q: String,
        problem: String,
    },
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

/// Reads and checks the questions file at `path`.
pub fn read(path: &Path) -> Result<Vec<Question>, QuestionsError> {
    let text = std::fs::read_to_string(path).map_err(|source| QuestionsError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(path, &text)
}

/// Parses `text` (read from `path`, which errors name).
pub fn parse(path: &Path, text: &str) -> Result<Vec<Question>, QuestionsError> {
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
    tables
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            let q = value
                .get("q")
                .and_then(toml::Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let field = |problem: String| QuestionsError::Field {
                path: path.to_owned(),
                n: i + 1,
                q: q.clone(),
                problem,
            };
            let raw: Raw = value
                .try_into()
                .map_err(|e: toml::de::Error| field(e.message().to_owned()))?;
            check(raw).map_err(field)
        })
        .collect()
}

fn check(raw: Raw) -> Result<Question, String> {
    if raw.q.trim().is_empty() {
        return Err("`q` is empty: write the question".into());
    }
    let pages = match (raw.pages, raw.documents) {
        (Some(_), Some(_)) => return Err("give `pages` or `documents`, not both".into()),
        (None, None) => {
            return Err(
                "no `pages` or `documents`: name the documents that answer it (uris or file names)"
                    .into(),
            );
        }
        (Some(p), None) | (None, Some(p)) => p,
    };
    if pages.is_empty() || pages.iter().any(|p| p.trim().is_empty()) {
        return Err("`pages` (or `documents`) must list at least one non-empty uri".into());
    }
    if let Some(split) = &raw.split
        && !SPLITS.contains(&split.as_str())
    {
        return Err(format!("`split` is {split:?}; it must be dev or held-out"));
    }
    if raw
        .collection
        .as_deref()
        .is_some_and(|c| c.trim().is_empty())
    {
        return Err("`collection` is empty: name one, or leave the field out".into());
    }
    let filters = raw
        .filters
        .map(|t| match serde_json::to_value(t).map(plain_dates) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err("`filters` must be a table of the tool's filters".to_owned()),
        })
        .transpose()?;
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
