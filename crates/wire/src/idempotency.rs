//! The idempotency key of a `tools/call`: `_meta["parley/idempotency_key"]`. A server that
//! records keys runs a call once however often it is sent with the same key; the client sends
//! the same key on each attempt of one call and a new key for every other call.

use serde_json::{Map, Value};

use crate::META_IDEMPOTENCY_KEY;

/// A key of 1 to [`IdempotencyKey::MAX_CHARS`] printable ASCII characters (space included), as
/// `parley.idempotency.key`'s CHECK allows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "`_meta[\"parley/idempotency_key\"]` must be a string of 1 to 255 printable ASCII \
     characters; nothing was run"
)]
pub struct KeyError;

impl IdempotencyKey {
    /// Longest key accepted.
    pub const MAX_CHARS: usize = 255;

    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        let printable = key.chars().all(|c| c.is_ascii_graphic() || c == ' ');
        if key.is_empty() || key.len() > Self::MAX_CHARS || !printable {
            return Err(KeyError);
        }
        Ok(Self(key))
    }

    /// A key as a JSON value: a string of the right form.
    pub fn parse(value: &Value) -> Result<Self, KeyError> {
        Self::new(value.as_str().ok_or(KeyError)?)
    }

    /// The key in a request's `_meta`, if any.
    pub fn from_meta(meta: &Map<String, Value>) -> Result<Option<Self>, KeyError> {
        meta.get(META_IDEMPOTENCY_KEY).map(Self::parse).transpose()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn keys_are_1_to_255_printable_ascii_characters() {
        for good in ["a", "turn-1:call_abc", &"k".repeat(255), "with space"] {
            assert_eq!(IdempotencyKey::parse(&json!(good)).unwrap().as_str(), good);
        }
        for bad in [
            json!(""),
            json!("k".repeat(256)),
            json!("tab\t"),
            json!("é"),
            json!(5),
        ] {
            assert_eq!(IdempotencyKey::parse(&bad), Err(KeyError), "{bad}");
        }
    }

    #[test]
    fn a_request_without_the_key_has_none() {
        let meta = json!({"progressToken": 1});
        assert_eq!(
            IdempotencyKey::from_meta(meta.as_object().unwrap()),
            Ok(None)
        );
        let meta = json!({META_IDEMPOTENCY_KEY: "k1"});
        let key = IdempotencyKey::from_meta(meta.as_object().unwrap()).unwrap();
        assert_eq!(key.unwrap().as_str(), "k1");
    }
}
