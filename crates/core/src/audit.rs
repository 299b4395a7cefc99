//! The audit trail's record (`parley.audit`, migrations 0007, 0013 and 0021), one per tool call, the
//! ways a call ends, and the user's approval a call ran under: the mcp function writes records,
//! `parley audit` reads them back and filters on their outcome.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

/// One tool call, as `parley.audit` stores it (the table adds the row's `id`).
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub at: DateTime<Utc>,
    pub request_id: String,
    /// The user's subject, or `service`.
    pub caller: String,
    pub tool: String,
    /// As sent, sensitive parameters replaced by their hash.
    pub arguments: Value,
    pub statement: Option<String>,
    pub rows: Option<i32>,
    /// The caps cut the answer short: more rows matched than `rows`.
    pub truncated: bool,
    /// Milliseconds, as the `duration_ms` column holds them: what the writer measured is
    /// converted once, so what is read back is what was written, to the bit.
    pub duration_ms: f64,
    pub outcome: Outcome,
    /// What went wrong, without argument values.
    pub error: Option<String>,
    /// The user's approval the call ran under, as the client claimed it; `None` for a call
    /// that needed none or carried none.
    pub approval: Option<Approval>,
    /// The call repeated an idempotency key already used: it wrote nothing and answered with
    /// the rows the first call recorded.
    pub replayed: bool,
}

/// The user's approval a tool call ran under (issue 22), as the client that sent the call
/// claims it in `_meta["parley/approved"]`. Holding one proves its shape, not its truth:
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

    /// As `parley.audit.approval` stores it; [`Approval::from_json`] reads it back exactly.
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
        })
    }
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The call succeeded.
    Ok,
    /// The statement failed, or the tool's SQL refused the call.
    ToolError,
    /// The call ran out of time.
    Timeout,
    /// Refused before or instead of running: bad arguments, an unknown tool, a privilege or
    /// read-only refusal from Postgres, a statement over a limit.
    Refused,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Ok,
        Outcome::ToolError,
        Outcome::Timeout,
        Outcome::Refused,
    ];

    /// The value stored in `parley.audit.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::ToolError => "tool_error",
            Outcome::Timeout => "timeout",
            Outcome::Refused => "refused",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Outcome {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| "one of ok, tool_error, timeout, refused".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_read_back_as_written() {
        for outcome in Outcome::ALL {
            assert_eq!(outcome.as_str().parse::<Outcome>(), Ok(outcome));
        }
        assert!("failed".parse::<Outcome>().is_err());
    }

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
}
