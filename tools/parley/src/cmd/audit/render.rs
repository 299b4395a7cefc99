//! How `parley audit` shows records: an aligned table for a terminal, or one JSON object per
//! line for `jq`. Audit rows carry text callers chose (subjects, arguments, SQL), so the table
//! turns control characters into spaces: a record must not be able to drive the terminal.

use chrono::SecondsFormat;
use parley_core::audit::{Approval, Record};
use serde_json::{Value, json};

use crate::cmd::table::{aligned, cut, one_line};

/// One row of `parley.audit`: the record the mcp function wrote, under the id the table gave
/// it (ids break ties between records of the same instant).
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub id: i64,
    pub record: Record,
}

/// The "what" column's width: a statement or arguments longer than this end in an ellipsis.
pub const WHAT_CHARS: usize = 80;

const HEADER: [&str; 9] = [
    "at (UTC)", "request", "caller", "tool", "outcome", "rows", "ms", "approved", "what",
];
/// The numeric columns (rows, ms) align right, the rest left.
const RIGHT_ALIGNED: [bool; 9] = [false, false, false, false, false, true, true, false, false];

impl Stored {
    /// Every column under its own name, the time as RFC 3339 in UTC to the microsecond.
    pub fn to_json(&self) -> Value {
        let Stored { id, record: r } = self;
        json!({
            "id": id,
            "at": r.at.to_rfc3339_opts(SecondsFormat::AutoSi, true),
            "request_id": r.request_id,
            "caller": r.caller,
            "tool": r.tool,
            "arguments": r.arguments,
            "statement": r.statement,
            "rows": r.rows,
            "truncated": r.truncated,
            "duration_ms": r.duration_ms,
            "outcome": r.outcome.as_str(),
            "error": r.error,
            "approval": r.approval.as_ref().map(Approval::to_json),
            "replayed": r.replayed,
        })
    }

    fn cells(&self) -> [String; 9] {
        let r = &self.record;
        let rows = match r.rows {
            // `+`: the caps cut the answer short, so more rows matched than were returned.
            Some(n) if r.truncated => format!("{n}+"),
            Some(n) => n.to_string(),
            None => String::new(),
        };
        // The statement for the calls that have one (run_sql, explain_sql), else the
        // arguments, which serde_json writes on one line.
        let what = match &r.statement {
            Some(statement) => statement.clone(),
            None => r.arguments.to_string(),
        };
        [
            r.at.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
            one_line(&r.request_id),
            one_line(&r.caller),
            one_line(&r.tool),
            // A replay wrote nothing: it answered with the first call's rows.
            if r.replayed {
                format!("{} (replay)", r.outcome)
            } else {
                r.outcome.to_string()
            },
            rows,
            format!("{:.1}", r.duration_ms),
            // Who approved, and when: the approval's id is in --json.
            r.approval.as_ref().map_or_else(String::new, |a| {
                format!(
                    "{} {}",
                    one_line(&a.decided_by),
                    a.decided_at.format("%Y-%m-%d %H:%M:%S")
                )
            }),
            cut(&one_line(&what), WHAT_CHARS),
        ]
    }
}

/// The records as an aligned table under a header, one line each, columns two spaces apart.
pub fn table(records: &[Stored]) -> String {
    let lines: Vec<Vec<String>> = std::iter::once(HEADER.map(str::to_owned))
        .chain(records.iter().map(Stored::cells))
        .map(Vec::from)
        .collect();
    aligned(&lines, &RIGHT_ALIGNED)
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;
    use parley_core::audit::Outcome;

    use super::*;

    fn record() -> Record {
        Record {
            at: DateTime::parse_from_rfc3339("2026-11-24T10:00:01.234567Z")
                .unwrap()
                .to_utc(),
            request_id: "req-1".into(),
            caller: "alice".into(),
            tool: "search_feedback".into(),
            arguments: json!({"q": "bins"}),
            statement: None,
            rows: Some(3),
            truncated: false,
            duration_ms: 1.26,
            outcome: Outcome::Ok,
            error: None,
            approval: None,
            replayed: false,
        }
    }

    fn approval() -> Approval {
        Approval::from_json(&json!({"id": "appr-7", "decided_by": "alice",
                                    "decided_at": "2026-11-24T09:59:58.5Z"}))
        .unwrap()
    }

    fn stored(id: i64, record: Record) -> Stored {
        Stored { id, record }
    }

    #[test]
    fn the_table_aligns_columns_under_a_header() {
        let sql = Record {
            request_id: "req-22".into(),
            caller: "service".into(),
            tool: "run_sql".into(),
            arguments: json!({"sql": "select 1"}),
            statement: Some("select\n  1".into()),
            rows: Some(100),
            truncated: true,
            duration_ms: 12.0,
            ..record()
        };
        let refused = Record {
            rows: None,
            outcome: Outcome::Refused,
            ..record()
        };
        let approved = Record {
            request_id: "req-3".into(),
            tool: "delete_task".into(),
            arguments: json!({"id": 4}),
            rows: Some(1),
            approval: Some(approval()),
            ..record()
        };
        let replayed = Record {
            request_id: "req-4".into(),
            replayed: true,
            ..approved.clone()
        };
        assert_eq!(
            table(&[
                stored(7, record()),
                stored(8, sql),
                stored(9, refused),
                stored(10, approved),
                stored(11, replayed)
            ]),
            "\
at (UTC)                 request  caller   tool             outcome      rows    ms  approved                   what
2026-11-24 10:00:01.234  req-1    alice    search_feedback  ok              3   1.3                             {\"q\":\"bins\"}
2026-11-24 10:00:01.234  req-22   service  run_sql          ok           100+  12.0                             select 1
2026-11-24 10:00:01.234  req-1    alice    search_feedback  refused             1.3                             {\"q\":\"bins\"}
2026-11-24 10:00:01.234  req-3    alice    delete_task      ok              1   1.3  alice 2026-11-24 09:59:58  {\"id\":4}
2026-11-24 10:00:01.234  req-4    alice    delete_task      ok (replay)     1   1.3  alice 2026-11-24 09:59:58  {\"id\":4}
"
        );
    }

    #[test]
    fn long_statements_are_cut_to_the_column_with_an_ellipsis() {
        let long = Record {
            statement: Some(format!("select {}", "x, ".repeat(40))),
            ..record()
        };
        let what = &stored(7, long).cells()[8];
        assert_eq!(what.chars().count(), WHAT_CHARS);
        assert!(what.starts_with("select x, x,"), "{what}");
        assert!(what.ends_with('…'), "{what}");
        assert_eq!(cut("exactly", 7), "exactly");
    }

    #[test]
    fn control_characters_cannot_reach_the_terminal() {
        assert_eq!(
            one_line("\u{1b}[2J evil\r\n\tcaller\u{202e}txt.exe\u{0}"),
            "[2J evil caller txt.exe"
        );
    }

    #[test]
    fn json_has_every_column_and_the_exact_time() {
        let value = stored(
            7,
            Record {
                statement: Some("select 1".into()),
                error: Some("boom".into()),
                approval: Some(approval()),
                ..record()
            },
        )
        .to_json();
        assert_eq!(
            value,
            json!({
                "id": 7, "at": "2026-11-24T10:00:01.234567Z", "request_id": "req-1",
                "caller": "alice", "tool": "search_feedback", "arguments": {"q": "bins"},
                "statement": "select 1", "rows": 3, "truncated": false, "duration_ms": 1.26,
                "outcome": "ok", "error": "boom",
                "approval": {"id": "appr-7", "decided_by": "alice",
                             "decided_at": "2026-11-24T09:59:58.500Z"},
                "replayed": false,
            })
        );
    }
}
