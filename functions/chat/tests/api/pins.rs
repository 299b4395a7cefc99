//! The pin lint over the chat's and the mcp function's request paths: turns that read, write
//! under an idempotency key after an approval, stream, and run ad-hoc SQL, against a private
//! server that logs every statement. Nothing the two functions send per request may be a
//! statement RDS Proxy documents as pinning a session (docs/rds-proxy.md): under a proxy a
//! pinned session holds a database connection until the client disconnects, which would turn
//! it into a one-to-one passthrough. PgBouncer, which the other tests use, does not pin, so
//! only the statements can show it.

use parley_testkit::TestDb;
use parley_testkit::llm::{ScriptedLlm, Step};
use parley_testkit::pin_lint::StatementLog;
use serde_json::json;

use crate::helpers::{FEEDBACK_ROWS, spawn_chat_with_settings, sse_data, streamed_text};

/// What the functions' connections call themselves (`DbConfig::named`), and a tool call's
/// transaction (`Marker::application_name`).
const FUNCTIONS: [&str; 4] = [
    "parley-chat",
    "parley-mcp",
    "parley request=",
    "parley-ingest",
];

#[tokio::test]
async fn turns_that_read_write_stream_and_run_sql_send_nothing_a_proxy_pins_on() {
    let log = StatementLog::start();
    let db = TestDb::with_demo_data_on(&log.url(), FEEDBACK_ROWS).await;
    let task: i64 = db
        .client()
        .await
        .query_one(
            "INSERT INTO tasks (owner, title) VALUES ('alice', 'Renew my passport') RETURNING id",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let sql_url = db.sql_reader_url("").await;
    let tools = format!(
        "{},{}/../../domains/feedback/sql.toml",
        parley_testkit::domains::all_tools(),
        env!("CARGO_MANIFEST_DIR")
    );
    let llm = ScriptedLlm::start(vec![
        Step::calls([
            ("list_tasks", "{}".to_owned()),
            ("lad_by_ref", r#"{"ref":"Leeds"}"#.to_owned()),
            ("delete_task", format!(r#"{{"id":{task}}}"#)),
        ]),
        Step::text("Deleted it."),
        Step::call(
            "run_sql",
            json!({"sql": "SELECT count(*) AS n FROM feedback"}).to_string(),
        ),
        Step::text("There is feedback."),
        Step::call("create_task", r#"{"title":"Book a dentist"}"#),
        Step::text("Added."),
    ])
    .await;
    let chat = spawn_chat_with_settings(
        &db,
        &[
            ("TOOLS_FILE", tools.as_str()),
            ("SQL_DATABASE_URL", &sql_url),
        ],
        &[],
        llm,
    )
    .await;

    let paused = chat
        .turn("alice", json!({"message": "Delete my passport task"}))
        .await;
    assert_eq!(paused["status"], "awaiting_approval", "{paused}");
    let conversation = paused["conversation_id"].as_str().unwrap();
    let approval = paused["pending_approvals"][0]["id"].as_str().unwrap();
    let resumed = chat
        .turn(
            "alice",
            json!({"conversation_id": conversation,
                   "approvals": [{"id": approval, "approved": true}]}),
        )
        .await;
    assert_eq!(resumed["traces"][0]["is_error"], false, "{resumed}");
    let counted = chat
        .turn(
            "alice",
            json!({"conversation_id": conversation, "message": "How much feedback is there?"}),
        )
        .await;
    assert_eq!(counted["traces"][0]["name"], "run_sql", "{counted}");
    assert_eq!(counted["traces"][0]["is_error"], false, "{counted}");
    let streamed = chat
        .post_streamed(
            "alice",
            "/api/chat",
            json!({"conversation_id": conversation, "message": "Add a dentist task"}),
        )
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(streamed_text(&sse_data(&streamed)), "Added.", "{streamed}");

    let seen = log.statements(&FUNCTIONS).await;
    for (who, what) in [
        ("parley-chat", "INSERT INTO chat."),
        ("parley-mcp", "parley.begin_call"),
        ("parley request=", "parley.end_call"),
        ("parley-mcp", "parley.audit"),
    ] {
        assert!(
            seen.iter()
                .any(|s| s.application.starts_with(who) && s.statement.contains(what)),
            "the log has no `{what}` from {who}: the lint would pass by seeing nothing"
        );
    }
    let findings = log.findings(&FUNCTIONS).await;
    assert!(
        findings.is_empty(),
        "{} statements would pin an RDS Proxy session:\n{}",
        findings.len(),
        findings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
