//! `parley audit` as a user runs it: the built binary against a fresh migrated database whose
//! audit trail the test writes directly (as the mcp function would), checking what it prints
//! for each filter, in both formats, and how it refuses.

mod common;

use std::process::{Command, Output};

use common::{failure, stdout_of};
use parley_testkit::TestDb;
use serde_json::Value;

fn parley(args: &[&str], database_url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_parley"))
        .arg("audit")
        .args(args)
        .env_clear()
        .env("DATABASE_URL", database_url)
        .output()
        .expect("parley runs")
}

/// A migrated database with four calls in its trail, oldest first: one two days ago, three in
/// the last quarter of an hour.
async fn db_with_calls() -> TestDb {
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute(
            r#"INSERT INTO parley.audit
                (at, request_id, caller, tool, arguments, statement, rows, truncated, duration_ms, outcome, error)
            VALUES
                (now() - interval '2 days', 'req-old', 'alice', 'search_feedback',
                 '{"q": "old bins"}', NULL, 2, false, 3.0, 'ok', NULL),
                (now() - interval '10 minutes', 'req-sql', 'alice', 'run_sql',
                 '{"sql": "select count(*)\nfrom feedback"}', E'select count(*)\nfrom feedback',
                 1, false, 4.26, 'ok', NULL),
                (now() - interval '5 minutes', 'req-svc', 'service', 'lad_by_ref',
                 '{"ref": "Atlantis"}', NULL, NULL, false, 0.5, 'tool_error', 'no such district'),
                (now() - interval '1 minute', 'req-bob', 'bob', 'search_feedback',
                 '{"q": "potholes"}', NULL, 100, true, 12.04, 'ok', NULL)"#,
        )
        .await
        .expect("audit rows inserted");
    db
}

/// The request ids of a table's rows, top to bottom (the header line skipped).
fn requests(table: &str) -> Vec<&str> {
    table
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().nth(2).expect("a request column"))
        .collect()
}

/// The table line of request `id`, split into its words.
fn row<'a>(table: &'a str, id: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|words| words.get(2) == Some(&id))
        .unwrap_or_else(|| panic!("no row for {id} in\n{table}"))
}

#[tokio::test]
async fn the_table_shows_every_call_oldest_first_in_aligned_columns() {
    let db = db_with_calls().await;
    let out = stdout_of(&parley(&[], &db.url));

    let header = out.lines().next().unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        [
            "at", "(UTC)", "request", "caller", "tool", "outcome", "rows", "ms", "approved", "what"
        ],
        "{out}"
    );
    assert_eq!(
        requests(&out),
        ["req-old", "req-sql", "req-svc", "req-bob"],
        "{out}"
    );
    // Each column starts where its header does.
    for (column, value) in [("request", "req-"), ("tool", "search_feedback")] {
        let at = header.find(column).unwrap();
        for line in out.lines().skip(1).filter(|l| l.contains(value)) {
            assert_eq!(line.find(value), Some(at), "{column}:\n{out}");
        }
    }
    // at to the millisecond; the statement on one line; blank rows when there are none.
    let sql = row(&out, "req-sql");
    assert_eq!(sql[0].len(), "2026-11-24".len(), "{out}");
    assert_eq!(sql[1].len(), "10:00:00.123".len(), "{out}");
    assert_eq!(
        sql[3..],
        [
            "alice", "run_sql", "ok", "1", "4.3", "select", "count(*)", "from", "feedback"
        ],
        "{out}"
    );
    assert!(out.contains("select count(*) from feedback\n"), "{out}");
    assert_eq!(
        row(&out, "req-svc")[3..],
        [
            "service",
            "lad_by_ref",
            "tool_error",
            "0.5",
            r#"{"ref":"Atlantis"}"#
        ],
        "{out}"
    );
    assert_eq!(
        row(&out, "req-bob")[3..],
        [
            "bob",
            "search_feedback",
            "ok",
            "100+",
            "12.0",
            r#"{"q":"potholes"}"#
        ],
        "{out}"
    );
}

#[tokio::test]
async fn filters_narrow_the_trail_and_combine() {
    let db = db_with_calls().await;
    let run = |args: &[&str]| stdout_of(&parley(args, &db.url));

    assert_eq!(
        requests(&run(&["--tool", "search_feedback"])),
        ["req-old", "req-bob"]
    );
    assert_eq!(
        requests(&run(&["--caller", "alice"])),
        ["req-old", "req-sql"]
    );
    assert_eq!(
        requests(&run(&["--since", "1h"])),
        ["req-sql", "req-svc", "req-bob"]
    );
    assert_eq!(
        requests(&run(&["--since", "1h", "--caller", "alice"])),
        ["req-sql"]
    );
    assert_eq!(requests(&run(&["--outcome", "tool_error"])), ["req-svc"]);
    assert_eq!(
        requests(&run(&[
            "--since",
            "2000-01-01T00:00:00Z",
            "--tool",
            "run_sql"
        ])),
        ["req-sql"]
    );
    assert_eq!(run(&["--since", "2999-01-01"]), "no audit records match\n");
    assert_eq!(
        run(&["--tool", "search_feedback", "--caller", "service"]),
        "no audit records match\n"
    );
}

#[tokio::test]
async fn limit_keeps_the_most_recent_calls_and_says_there_may_be_more() {
    let db = db_with_calls().await;
    let out = parley(&["--limit", "2"], &db.url);
    assert_eq!(requests(&stdout_of(&out)), ["req-svc", "req-bob"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the 2 most recent"), "{stderr}");

    let all = parley(&["--limit", "4"], &db.url);
    assert_eq!(requests(&stdout_of(&all)).len(), 4);
    let stderr = String::from_utf8_lossy(&all.stderr);
    assert!(stderr.contains("the 4 most recent"), "{stderr}");
    let more = parley(&["--limit", "5"], &db.url);
    assert_eq!(requests(&stdout_of(&more)).len(), 4);
    assert_eq!(String::from_utf8_lossy(&more.stderr), "");
}

#[tokio::test]
async fn json_prints_one_object_per_call_with_every_column() {
    let db = db_with_calls().await;
    let out = stdout_of(&parley(&["--json", "--since", "1h"], &db.url));
    let calls: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let ids: Vec<&str> = calls
        .iter()
        .map(|c| c["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["req-sql", "req-svc", "req-bob"]);

    let sql = &calls[0];
    let mut keys: Vec<&str> = sql
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "approval",
            "arguments",
            "at",
            "caller",
            "duration_ms",
            "error",
            "id",
            "outcome",
            "replayed",
            "request_id",
            "rows",
            "statement",
            "tool",
            "truncated"
        ]
    );
    assert_eq!(sql["statement"], "select count(*)\nfrom feedback");
    assert_eq!(sql["arguments"]["sql"], "select count(*)\nfrom feedback");
    assert_eq!(sql["rows"], 1);
    assert_eq!(sql["duration_ms"], 4.26);
    assert!(sql["at"].as_str().unwrap().ends_with('Z'), "{sql}");
    assert_eq!(calls[1]["error"], "no such district");
    assert_eq!(calls[1]["rows"], Value::Null);
    assert_eq!(calls[2]["truncated"], true);
    assert_eq!(calls[2]["approval"], Value::Null);
    assert_eq!(calls[2]["replayed"], false);

    let one = stdout_of(&parley(&["--json", "--tool", "nope"], &db.url));
    assert_eq!(one, "", "no lines when nothing matches");
}

#[tokio::test]
async fn a_call_made_under_an_approval_shows_who_approved_it_and_when() {
    let db = db_with_calls().await;
    // As the mcp function writes it (migration 0013): the approval the chat sent with the call.
    db.client()
        .await
        .batch_execute(
            r#"INSERT INTO parley.audit
                (at, request_id, caller, tool, arguments, rows, truncated, duration_ms, outcome,
                 approval)
            VALUES (now(), 'req-del', 'alice', 'delete_task', '{"id": 4}', 1, false, 2.0, 'ok',
                    '{"id": "appr-7", "decided_by": "alice",
                      "decided_at": "2026-11-27T09:59:58.5Z"}')"#,
        )
        .await
        .expect("an approved call");
    let table = stdout_of(&parley(&["--since", "2m"], &db.url));
    assert_eq!(
        row(&table, "req-del")[3..],
        [
            "alice",
            "delete_task",
            "ok",
            "1",
            "2.0",
            "alice",
            "2026-11-27",
            "09:59:58",
            r#"{"id":4}"#
        ],
        "{table}"
    );
    let header = table.lines().next().unwrap();
    let approved_at = header.find("approved").unwrap();
    let line = table.lines().find(|l| l.contains("req-del")).unwrap();
    assert_eq!(line[approved_at..].find("alice"), Some(0), "{table}");
    // Calls without one leave the column blank.
    assert_eq!(
        row(&table, "req-bob")[3..],
        [
            "bob",
            "search_feedback",
            "ok",
            "100+",
            "12.0",
            r#"{"q":"potholes"}"#
        ],
        "{table}"
    );

    let json = stdout_of(&parley(&["--json", "--tool", "delete_task"], &db.url));
    let call: Value = serde_json::from_str(json.trim_end()).expect("one JSON line");
    assert_eq!(
        call["approval"],
        serde_json::json!({"id": "appr-7", "decided_by": "alice",
                           "decided_at": "2026-11-27T09:59:58.500Z"})
    );
}

#[tokio::test]
async fn a_role_that_may_not_read_the_trail_is_told_which_may() {
    let db = db_with_calls().await;
    // The mcp function's role: it writes the trail and may not read it back.
    let stderr = failure(&parley(&[], &db.readonly_url), 1);
    assert!(stderr.contains("may not read the audit trail"), "{stderr}");
    assert!(
        stderr.contains("permission denied for table audit"),
        "{stderr}"
    );
    assert!(stderr.contains("SELECT on parley.audit"), "{stderr}");
}

#[tokio::test]
async fn an_outcome_this_build_does_not_know_is_an_error_naming_it() {
    let db = db_with_calls().await;
    // As a newer migration could allow: the CHECK widened to an outcome this build predates.
    db.client()
        .await
        .batch_execute(
            "ALTER TABLE parley.audit DROP CONSTRAINT audit_outcome_check;
             INSERT INTO parley.audit
                 (at, request_id, caller, tool, arguments, rows, truncated, duration_ms, outcome)
             VALUES (now(), 'req-new', 'alice', 'search_feedback', '{}', 0, false, 1.0, 'cancelled')",
        )
        .await
        .expect("an outcome from the future");
    let stderr = failure(&parley(&[], &db.url), 1);
    assert!(stderr.contains("outcome `cancelled`"), "{stderr}");
    assert!(
        stderr.contains("ok, tool_error, timeout, refused"),
        "{stderr}"
    );
    // Filtering it out leaves records this build can show.
    let out = stdout_of(&parley(&["--outcome", "ok"], &db.url));
    assert_eq!(requests(&out), ["req-old", "req-sql", "req-bob"], "{out}");
}

/// Refused by the argument parser before connecting: nothing listens on the URL's port.
fn usage_error(args: &[&str]) -> String {
    failure(&parley(args, "postgres://u@127.0.0.1:9/none"), 2)
}

#[test]
fn a_bad_since_is_refused_naming_the_forms_accepted() {
    for bad in ["yesterday", "2h30m", "2026-11-24 10:00"] {
        let stderr = usage_error(&["--since", bad]);
        assert!(stderr.contains("--since"), "{stderr}");
        assert!(stderr.contains(&format!("'{bad}'")), "{stderr}");
        for form in ["90s, 30m, 2h, 7d", "RFC 3339", "2026-11-24T10:00:00Z"] {
            assert!(stderr.contains(form), "{bad}: {stderr}");
        }
    }
}

#[test]
fn unknown_outcomes_and_a_zero_limit_are_refused() {
    let stderr = usage_error(&["--outcome", "failed"]);
    for outcome in ["ok", "tool_error", "timeout", "refused"] {
        assert!(stderr.contains(outcome), "{stderr}");
    }
    let stderr = usage_error(&["--limit", "0"]);
    assert!(stderr.contains("--limit"), "{stderr}");
}
