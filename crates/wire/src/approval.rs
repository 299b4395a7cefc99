//! The user's approval a tool call runs under, as `_meta["parley/approved"]` carries it: the
//! chat builds one for each approved call it sends, the mcp function reads it for the call's
//! audit record. Its one shape, both ways.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

/// The user's approval a tool call runs under (issue 22), as the client that sends the call
/// claims it in `_meta["parley/approved"]` ([`crate::META_APPROVED`]). Holding one proves its shape, not its truth:
/// `decided_by` is a claim, which the mcp function checks against the verified caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The client's id of the approval: 1-128 printable ASCII characters, no spaces.
    pub id: String,
    /// The subject of the user who approved: 1-255 characters, no control characters (a
    /// `sub` claim's rule).
    pub decided_by: String,
    pub decided_at: DateTime<Utc>,
}

/// Why a value is not an [`Approval`]; never quotes the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be an object {{\"id\", \"decided_by\", \"decided_at\"}}: {0}")]
pub struct MalformedApproval(&'static str);

impl Approval {
    /// The JSON object `{"id", "decided_by", "decided_at"}` (an RFC 3339 time), no other keys.
    pub fn from_json(value: &Value) -> Result<Self, MalformedApproval> {
        let Some(object) = value.as_object() else {
            return Err(MalformedApproval("it is not an object"));
        };
        if object.len() != 3 {
            return Err(MalformedApproval("it must have exactly these three keys"));
        }
        let text = |key: &str| object.get(key).and_then(Value::as_str);
        let id = text("id").ok_or(MalformedApproval("`id` must be a string"))?;
        if id.is_empty() || id.len() > 128 || !id.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(MalformedApproval(
                "`id` must be 1 to 128 printable ASCII characters without spaces",
            ));
        }
        let decided_by =
            text("decided_by").ok_or(MalformedApproval("`decided_by` must be a string"))?;
        if decided_by.is_empty()
            || decided_by.chars().count() > 255
            || decided_by.chars().any(char::is_control)
        {
            return Err(MalformedApproval(
                "`decided_by` must be 1 to 255 characters without control characters",
            ));
        }
        let decided_at = text("decided_at")
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .ok_or(MalformedApproval("`decided_at` must be an RFC 3339 time"))?;
        Ok(Approval {
            id: id.to_owned(),
            decided_by: decided_by.to_owned(),
            decided_at: decided_at.to_utc(),
        })
    }

    /// As a call's `_meta` carries it and `parley.audit.approval` stores it;
    /// [`Approval::from_json`] reads it back exactly.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_reads_back_as_written_to_the_nanosecond() {
        let sent = json!({"id": "appr-1", "decided_by": "alice",
                          "decided_at": "2026-11-27T10:00:03.123456789+01:00"});
        let approval = Approval::from_json(&sent).unwrap();
        assert_eq!(approval.decided_by, "alice");
        assert_eq!(
            approval.to_json()["decided_at"],
            "2026-11-27T09:00:03.123456789Z"
        );
        assert_eq!(Approval::from_json(&approval.to_json()), Ok(approval));
    }

    #[test]
    fn a_malformed_approval_says_which_part_is_wrong() {
        let at = "2026-11-27T10:00:03Z";
        for (value, why) in [
            (json!("appr-1"), "not an object"),
            (
                json!({"id": "a", "decided_by": "alice"}),
                "exactly these three keys",
            ),
            (
                json!({"id": "a", "decided_by": "alice", "decided_at": at, "extra": 1}),
                "exactly these three keys",
            ),
            (
                json!({"id": 7, "decided_by": "alice", "decided_at": at}),
                "`id`",
            ),
            (
                json!({"id": "a b", "decided_by": "alice", "decided_at": at}),
                "`id`",
            ),
            (
                json!({"id": "", "decided_by": "alice", "decided_at": at}),
                "`id`",
            ),
            (
                json!({"id": "a", "decided_by": "", "decided_at": at}),
                "`decided_by`",
            ),
            (
                json!({"id": "a", "decided_by": "al\nice", "decided_at": at}),
                "`decided_by`",
            ),
            (
                json!({"id": "a", "decided_by": "alice", "decided_at": "yesterday"}),
                "`decided_at`",
            ),
            (
                json!({"id": "a", "decided_by": "alice", "decided_to": at}),
                "`decided_at`",
            ),
        ] {
            let err = Approval::from_json(&value).unwrap_err().to_string();
            assert!(err.contains(why), "{value}: {err}");
        }
    }

    #[test]
    fn what_the_chat_sends_is_what_the_server_reads() {
        let approval = Approval {
            id: "0b5e4a4e-9a55-4b47-8d6c-3f0a4b7a1c2d".into(),
            decided_by: "alice".into(),
            decided_at: DateTime::from_timestamp_micros(1_795_000_000_123_456).unwrap(),
        };
        let sent = approval.to_json();
        assert_eq!(sent["decided_at"], "2026-11-18T11:06:40.123456Z");
        assert_eq!(Approval::from_json(&sent), Ok(approval));
    }
}
