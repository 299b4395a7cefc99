//! The idempotency key of a write tool's call: `_meta["parley/idempotency_key"]` of the
//! `tools/call` request. A write called with one records its rows under (caller, tool, key) in
//! the same transaction (see `exec`), so the same call sent again returns the first result.
//!
//! Only the key's form is checked here; what it means is the client's (the chat sends its turn
//! and tool call ids).

use serde_json::{Map, Value};

/// The request `_meta` key carrying the idempotency key, and the tool `_meta` key announcing
/// that a tool records one.
pub const META_KEY: &str = "parley/idempotency_key";

/// Longest key accepted, as `parley.idempotency.key`'s CHECK allows.
pub const MAX_KEY_CHARS: usize = 255;

/// A key of 1 to 255 printable ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "`_meta[\"{META_KEY}\"]` must be a string of 1 to {MAX_KEY_CHARS} printable ASCII \
     characters; nothing was run"
)]
pub struct KeyError;

impl IdempotencyKey {
    pub fn parse(value: &Value) -> Result<Self, KeyError> {
        let key = value.as_str().ok_or(KeyError)?;
        let printable = key.chars().all(|c| c.is_ascii_graphic() || c == ' ');
        if key.is_empty() || key.len() > MAX_KEY_CHARS || !printable {
            return Err(KeyError);
        }
        Ok(Self(key.to_owned()))
    }

    /// The key in a request's `_meta`, if any.
    pub fn from_meta(meta: &Map<String, Value>) -> Result<Option<Self>, KeyError> {
        meta.get(META_KEY).map(Self::parse).transpose()
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
        let meta = json!({META_KEY: "k1"});
        assert_eq!(
            IdempotencyKey::from_meta(meta.as_object().unwrap())
                .unwrap()
                .unwrap()
                .as_str(),
            "k1"
        );
    }
}
