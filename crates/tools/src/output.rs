//! What every tool call returns, declared or ad hoc: the result envelope (`rows`, `row_count`,
//! `truncated`) built one row at a time within the caps, its JSON Schema, and the server-wide
//! limits those caps default to. It knows no tool, no SQL and no MCP transport.

use std::time::Duration;

use serde_json::{Map, Value, json};

/// Most rows any tool may return, whatever its file says: a guard against a typo of `max_rows`.
pub const HARD_MAX_ROWS: u64 = 10_000;

/// Server-wide defaults for what a tool declaration leaves out.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `TOOL_MAX_ROWS`
    pub max_rows: u64,
    /// `TOOL_MAX_RESULT_BYTES`
    pub max_bytes: u64,
    /// `TOOL_TIMEOUT_MS`
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_rows: 100,
            max_bytes: 256 * 1024,
            timeout: Duration::from_secs(5),
        }
    }
}

/// A tool's result: the exact JSON text sent to clients, plus what the log and tests need.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub json: String,
    pub row_count: usize,
    pub truncated: Option<Truncation>,
    /// The rows are a repeat's: recorded under the call's idempotency key the first time.
    pub replayed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truncation {
    MaxRows,
    MaxBytes,
}

/// Every tool returns the same envelope (the SQL tools' `run_sql` and `list_tables` too); its
/// rows are described by the tool's description.
pub fn output_schema() -> Map<String, Value> {
    let schema = json!({
        "type": "object",
        "properties": {
            "rows": {"type": "array", "items": {"type": "object"}},
            "row_count": {"type": "integer", "minimum": 0},
            "truncated": {"type": "boolean"},
            "truncated_reason": {"type": "string", "enum": ["max_rows", "max_bytes"]},
            "note": {"type": "string"}
        },
        "required": ["rows", "row_count", "truncated"]
    });
    match schema {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Builds `{"rows":[...],"row_count":n,"truncated":bool}` from rows Postgres already rendered.
pub fn render<'a>(
    rows: impl IntoIterator<Item = &'a str>,
    row_limit: u64,
    max_bytes: u64,
) -> ToolOutput {
    let mut out = Render::new(row_limit, max_bytes);
    for row in rows {
        if !out.push(row) {
            break;
        }
    }
    out.finish()
}

/// A result being built one row at a time, as rows arrive.
pub struct Render {
    json: String,
    row_count: usize,
    truncated: Option<Truncation>,
    row_limit: u64,
    max_bytes: usize,
}

impl Render {
    /// Room kept for the closing fields and the truncation note.
    const ENVELOPE: usize = 256;

    pub fn new(row_limit: u64, max_bytes: u64) -> Self {
        Self {
            json: String::from("{\"rows\":["),
            row_count: 0,
            truncated: None,
            row_limit,
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
        }
    }

    /// Adds `row` if it fits; `false` once the result is full and further rows are not wanted.
    pub fn push(&mut self, row: &str) -> bool {
        if self.row_count as u64 == self.row_limit {
            self.truncated = Some(Truncation::MaxRows);
            return false;
        }
        if self.json.len() + row.len() + Self::ENVELOPE > self.max_bytes {
            self.truncated = Some(Truncation::MaxBytes);
            return false;
        }
        if self.row_count > 0 {
            self.json.push(',');
        }
        self.json.push_str(row);
        self.row_count += 1;
        true
    }

    pub fn finish(self) -> ToolOutput {
        let Self {
            mut json,
            row_count,
            truncated,
            ..
        } = self;
        json.push_str("],\"row_count\":");
        json.push_str(&row_count.to_string());
        match truncated {
            None => json.push_str(",\"truncated\":false}"),
            Some(reason) => {
                let (reason, note) = match reason {
                    Truncation::MaxRows => (
                        "max_rows",
                        "more rows match than were returned; narrow the filters or ask for fewer",
                    ),
                    Truncation::MaxBytes => (
                        "max_bytes",
                        "the result was cut to fit the size limit; narrow the filters or ask for fewer rows",
                    ),
                };
                json.push_str(",\"truncated\":true,\"truncated_reason\":\"");
                json.push_str(reason);
                json.push_str("\",\"note\":\"");
                json.push_str(note);
                json.push_str("\"}");
            }
        }
        ToolOutput {
            json,
            row_count,
            truncated,
            replayed: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_embedded_verbatim() {
        let out = render([r#"{"n":1.10}"#, r#"{"n":2}"#], 10, 4096);
        assert_eq!(
            out.json,
            r#"{"rows":[{"n":1.10},{"n":2}],"row_count":2,"truncated":false}"#
        );
    }

    #[test]
    fn one_row_past_the_limit_marks_the_result_truncated() {
        let out = render(["{}", "{}", "{}"], 2, 4096);
        assert_eq!(out.row_count, 2);
        assert_eq!(out.truncated, Some(Truncation::MaxRows));
        let v: serde_json::Value = serde_json::from_str(&out.json).unwrap();
        assert_eq!(v["truncated"], true);
        assert_eq!(v["truncated_reason"], "max_rows");
    }

    #[test]
    fn exactly_the_limit_is_not_truncated() {
        let out = render(["{}", "{}"], 2, 4096);
        assert_eq!(out.truncated, None);
    }

    #[test]
    fn the_byte_cap_stops_before_the_row_that_would_cross_it() {
        let big = format!("{{\"s\":\"{}\"}}", "x".repeat(600));
        let out = render([big.as_str(), big.as_str(), big.as_str()], 10, 1200);
        assert_eq!(out.row_count, 1);
        assert_eq!(out.truncated, Some(Truncation::MaxBytes));
        assert!(out.json.len() <= 1200);
        serde_json::from_str::<serde_json::Value>(&out.json).unwrap();
    }
}
