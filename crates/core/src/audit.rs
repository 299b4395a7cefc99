//! What the audit trail (`parley.audit`, migration 0007) calls the ways a tool call ends: the
//! mcp function writes these values and `parley audit` filters on them.

use std::fmt;
use std::str::FromStr;

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
