//! The audit trail's record (`parley.audit`, migrations 0007, 0013 and 0021), one per tool call, the
//! ways a call ends, and the user's approval a call ran under (its shape is `parley_wire`'s): the mcp function writes records,
//! `parley audit` reads them back and filters on their outcome.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde_json::Value;

/// The approval's shape is the chat<->mcp contract's, so it lives in `parley-wire`; the audit
/// record stores it as it was claimed.
pub use parley_wire::{Approval, MalformedApproval};

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
}
