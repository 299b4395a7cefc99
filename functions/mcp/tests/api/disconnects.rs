//! A client that goes away in the middle of a call: the call still runs to its end (a
//! statement in Postgres, a write's commit) and leaves its audit record, on the direct path,
//! through rmcp's transport and for the ad-hoc SQL tools alike (issue 20, defect 7).

use std::time::{Duration, Instant};

use parley_testkit::TestDb;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::helpers::{Options, TOKEN, TestApp, env, spawn_on};

const WRITER: &str = "parley_test_left_writer";

const TOOLS: &str = r#"
[sql]
schemas = ["public"]
timeout_ms = 5000

[[tool]]
name = "slow"
description = "Sleeps for a while."
sql = "SELECT pg_sleep(:seconds)::text AS slept"
[tool.params.seconds]
type = "number"
required = true

[[tool]]
name = "slow_note"
description = "Keeps a note, slowly."
writes = true
destructive = false
role = "parley_test_left_writer"
sql = "INSERT INTO left_notes (body) SELECT :body FROM pg_sleep(:seconds) RETURNING body"
[tool.params.body]
type = "string"
required = true
[tool.params.seconds]
type = "number"
required = true
"#;

/// `Accept` as ordinary clients send it (the direct path), and with weights (rmcp's).
const DIRECT: &str = "application/json, text/event-stream";
const VIA_RMCP: &str = "application/json;q=1, text/event-stream;q=1";

/// How long the client waits before it leaves: well inside every call below.
const PATIENCE: Duration = Duration::from_millis(300);

async fn spawn_leavable() -> TestApp {
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute("CREATE TABLE left_notes (body text NOT NULL)")
        .await
        .expect("set-up");
    db.writer_role(
        WRITER,
        &format!("GRANT SELECT, INSERT ON left_notes TO {WRITER};"),
    )
    .await;
    let sql_url = db.sql_reader_url("").await;
    spawn_on(
        db,
        Options {
            tools_toml: Some(TOOLS.into()),
            extra_env: env(&[("SQL_DATABASE_URL", &sql_url)]),
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts")
}

/// Sends a `tools/call` over a bare connection, waits [`PATIENCE`] and hangs up without
/// reading an answer, as a client that times out or crashes does.
async fn call_and_leave(app: &TestApp, accept: &str, request_id: &str, tool: &str, args: Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}})
    .to_string();
    let addr = app.base.trim_start_matches("http://");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: {accept}\r\nMCP-Protocol-Version: 2025-06-18\r\n\
         Authorization: Bearer {TOKEN}\r\nx-request-id: {request_id}\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    stream.write_all(request.as_bytes()).await.expect("sent");
    tokio::time::sleep(PATIENCE).await;
    stream.shutdown().await.ok();
    drop(stream);
}

/// The audit record of `request_id`, waiting up to 15 s for the call to end and its record
/// to be written (the slowest call here sleeps 2 s).
async fn audit_of(app: &TestApp, request_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let row = app
            .sql_one(&format!(
                "SELECT coalesce((SELECT row_to_json(a)::text FROM parley.audit a \
                 WHERE request_id = '{request_id}'), 'null')"
            ))
            .await;
        let record: Value = row.get::<_, String>(0).parse().expect("json");
        if !record.is_null() {
            return record;
        }
        assert!(
            Instant::now() < deadline,
            "no audit record for {request_id} 15 s after its client left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_call_whose_client_leaves_still_runs_to_its_end_and_is_audited() {
    let app = spawn_leavable().await;
    call_and_leave(&app, DIRECT, "left-direct", "slow", json!({"seconds": 1})).await;
    call_and_leave(&app, VIA_RMCP, "left-rmcp", "slow", json!({"seconds": 1})).await;
    call_and_leave(
        &app,
        DIRECT,
        "left-sql",
        "run_sql",
        json!({"sql": "SELECT pg_sleep(2)"}),
    )
    .await;
    for (request_id, tool, seconds) in [
        ("left-direct", "slow", 1.0),
        ("left-rmcp", "slow", 1.0),
        ("left-sql", "run_sql", 2.0),
    ] {
        let record = audit_of(&app, request_id).await;
        assert_eq!(record["tool"], tool, "{record}");
        assert_eq!(record["outcome"], "ok", "{record}");
        assert_eq!(record["rows"], 1, "{record}");
        let ms = record["duration_ms"].as_f64().unwrap();
        assert!(ms >= seconds * 1000.0, "ran to its end: {record}");
    }
}

#[tokio::test]
async fn a_write_whose_client_leaves_commits_and_is_audited() {
    let app = spawn_leavable().await;
    call_and_leave(
        &app,
        DIRECT,
        "left-write",
        "slow_note",
        json!({"body": "kept", "seconds": 0.6}),
    )
    .await;
    let record = audit_of(&app, "left-write").await;
    assert_eq!(record["tool"], "slow_note");
    assert_eq!(record["outcome"], "ok", "{record}");
    let kept: i64 = app
        .sql_one("SELECT count(*) FROM left_notes WHERE body = 'kept'")
        .await
        .get(0);
    assert_eq!(kept, 1, "the write committed");
}
