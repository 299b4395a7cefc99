//! Which output columns of a tool make its rows sources: declared in a tools file, published as
//! the tool's `_meta["parley/citation"]`, read back by the chat to number and return sources.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `id` names the column that tells sources apart (rows of any tool with the same id column and
/// value are one source); the others name columns that describe it. Deserializing refuses
/// unknown keys (a tools file's typo); [`Citation::from_meta`] ignores them (another server may
/// describe more than this client uses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Citation {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snippet: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<String>,
}

/// Why a tool's `_meta["parley/citation"]` is not a citation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CitationError {
    #[error("it is not a JSON object")]
    NotAnObject,
    #[error("`id` is missing")]
    NoId,
    #[error("`{0}` is not a column name")]
    NotAColumn(&'static str),
}

impl Citation {
    /// A listed tool's `_meta["parley/citation"]`: an object whose `id` is a column name, and
    /// whose `title`, `uri`, `snippet` and `score`, when present, are too.
    pub fn from_meta(meta: &Value) -> Result<Citation, CitationError> {
        let Value::Object(map) = meta else {
            return Err(CitationError::NotAnObject);
        };
        let column = |key: &'static str| match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(CitationError::NotAColumn(key)),
        };
        Ok(Citation {
            id: column("id")?.ok_or(CitationError::NoId)?,
            title: column("title")?,
            uri: column("uri")?,
            snippet: column("snippet")?,
            score: column("score")?,
        })
    }

    /// Every column named, keyed by what it is for.
    pub fn columns(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("id", Some(&self.id)),
            ("title", self.title.as_ref()),
            ("uri", self.uri.as_ref()),
            ("snippet", self.snippet.as_ref()),
            ("score", self.score.as_ref()),
        ]
        .into_iter()
        .filter_map(|(key, column)| column.map(|c| (key, c.as_str())))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn what_a_server_publishes_the_client_reads_back_the_same() {
        let declared = Citation {
            id: "chunk_id".into(),
            title: Some("title".into()),
            uri: None,
            snippet: Some("text".into()),
            score: None,
        };
        let published = serde_json::to_value(&declared).unwrap();
        assert_eq!(
            published,
            json!({"id": "chunk_id", "title": "title", "snippet": "text"})
        );
        assert_eq!(Citation::from_meta(&published), Ok(declared));
    }

    #[test]
    fn a_declaration_refuses_unknown_keys_but_a_listing_ignores_them() {
        let meta = json!({"id": "doc", "page": "p"});
        assert!(serde_json::from_value::<Citation>(meta.clone()).is_err());
        assert_eq!(Citation::from_meta(&meta).unwrap().id, "doc");
    }

    #[test]
    fn a_listing_without_an_id_column_or_with_a_blank_one_is_no_citation() {
        assert_eq!(
            Citation::from_meta(&json!([])),
            Err(CitationError::NotAnObject)
        );
        assert_eq!(
            Citation::from_meta(&json!({"title": "t"})),
            Err(CitationError::NoId)
        );
        assert_eq!(
            Citation::from_meta(&json!({"id": ""})),
            Err(CitationError::NotAColumn("id"))
        );
        assert_eq!(
            Citation::from_meta(&json!({"id": "d", "uri": " "})),
            Err(CitationError::NotAColumn("uri"))
        );
        assert_eq!(
            Citation::from_meta(&json!({"id": "d", "score": 5})),
            Err(CitationError::NotAColumn("score"))
        );
    }
}
