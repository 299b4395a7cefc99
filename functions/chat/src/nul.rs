//! NUL (U+0000), which Postgres cannot store in `text` or `jsonb`: the caller's input that holds
//! one is refused at the edge ([`has_nul`]), and what the model or a tool server sends is cleaned
//! with these (`crate::turn::llm::Reply::clean_nul` for a model's reply), replacing each NUL with U+FFFD, so no outside string can make a turn unstorable.

use serde_json::Value;

const REPLACEMENT: &str = "\u{FFFD}";

/// Whether a JSON value holds a NUL anywhere (keys included).
pub fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// `text` with every NUL replaced; no copy when there is none.
pub fn clean(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', REPLACEMENT)
    } else {
        text
    }
}

/// `value` with every NUL replaced, in keys and strings at any depth.
pub fn clean_json(value: Value) -> Value {
    if !has_nul(&value) {
        return value;
    }
    match value {
        Value::String(s) => Value::String(clean(s)),
        Value::Array(items) => Value::Array(items.into_iter().map(clean_json).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (clean(k), clean_json(v)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nul_characters_are_replaced_anywhere_in_a_json_value() {
        let clean = json!({"rows": [{"name": "Leeds"}], "n": 1});
        assert_eq!(clean_json(clean.clone()), clean);
        let dirty = json!({"rows": [{"na\0me": "Le\0eds"}], "n": 1});
        assert!(has_nul(&dirty));
        assert_eq!(
            clean_json(dirty),
            json!({"rows": [{"na\u{FFFD}me": "Le\u{FFFD}eds"}], "n": 1})
        );
    }
}
