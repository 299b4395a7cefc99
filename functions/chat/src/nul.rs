//! NUL (U+0000), which Postgres cannot store in `text` or `jsonb`: the caller's input that holds
//! one is refused at the edge ([`has_nul`]), and what the model or a tool server sends is cleaned
//! here, replacing each NUL with U+FFFD, so no outside string can make a turn unstorable.

use serde_json::Value;

use crate::llm::Reply;

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

/// Every string of a model's reply cleaned (text, call ids, tool names, arguments), before the
/// turn uses any of it: what is stored, replayed and answered is then the same text.
pub fn clean_reply(reply: &mut Reply) {
    reply.text = reply.text.take().map(clean);
    for call in &mut reply.calls {
        for s in [&mut call.call_id, &mut call.name, &mut call.arguments] {
            *s = clean(std::mem::take(s));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::llm::ToolCall;

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

    #[test]
    fn every_string_of_a_reply_is_cleaned() {
        let mut reply = Reply {
            text: Some("a\0b".into()),
            calls: vec![ToolCall {
                call_id: "call\0_1".into(),
                name: "lad\0".into(),
                arguments: "{\"ref\":\"\\u0000\0\"}".into(),
            }],
            ..Reply::default()
        };
        clean_reply(&mut reply);
        assert_eq!(reply.text.as_deref(), Some("a\u{FFFD}b"));
        let call = &reply.calls[0];
        assert_eq!(call.call_id, "call\u{FFFD}_1");
        assert_eq!(call.name, "lad\u{FFFD}");
        assert!(!call.arguments.contains('\0'));
    }
}
