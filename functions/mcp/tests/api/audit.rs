//! The audit trail of declared tools: every call (refused ones too) leaves a record with who,
//! what, how it went; sensitive arguments only as hashes; the table cannot be rewritten; a DBA
//! sees which tool and request a running statement belongs to.

use std::time::Duration;

use parley_testkit::TestDb;
use serde_json::{Value, json};

use crate::helpers::{FEEDBACK_ROWS, Options, TestApp, env, spawn_on};
use crate::sql_attacks::wait_for_audit;

const TOOLS: &str = r#"
[[tool]]
name = "lad_by_code"
description = "A district by its code."
sql = "SELECT code, name, :note AS note FROM lads WHERE code = :code"
[tool.params.code]
type = "string"
required = true
sensitive = true
[tool.params.note]
type = "string"

[[tool]]
name = "slow"
description = "Sleeps for a while."
sql = "SELECT pg_sleep(:seconds)::text AS slept"
[tool.params.seconds]
type = "number"
required = true
"#;

async fn spawn_audited(extra: &[(&str, &str)]) -> TestApp {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    spawn_on(
        db,
        Options {
            tools_toml: Some(TOOLS.into()),
            extra_env: env(extra),
            ..Options::default()
        },
    )
    .await
    .expect("starts")
}

/// A `tools/call` carrying `x-request-id: request_id`; the JSON-RPC response.
async fn call_as(app: &TestApp, request_id: &str, tool: &str, arguments: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}})
    .to_string();
    let headers = app.standard_headers();
    let mut headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    headers.push(("x-request-id", request_id));
    app.post_mcp(body, &headers).await.json().await.unwrap()
}

fn by_request<'a>(audit: &'a [Value], request_id: &str) -> &'a Value {
    audit
        .iter()
        .find(|r| r["request_id"] == request_id)
        .unwrap_or_else(|| panic!("{request_id} not audited: {audit:?}"))
}

#[tokio::test]
async fn every_call_is_audited_with_its_outcome_and_sensitive_arguments_hashed() {
    let app = spawn_audited(&[("TOOL_TIMEOUT_MS", "300")]).await;
    let code: String = app.sql_one("SELECT min(code) FROM lads").await.get(0);
    let ok = call_as(
        &app,
        "req-ok",
        "lad_by_code",
        json!({"code": code, "note": "hi"}),
    )
    .await;
    assert_eq!(ok["result"]["isError"], false, "{ok}");
    call_as(
        &app,
        "req-missing",
        "lad_by_code",
        json!({"note": "no code"}),
    )
    .await;
    call_as(&app, "req-timeout", "slow", json!({"seconds": 5})).await;
    let unknown = call_as(&app, "req-unknown", "drop_everything", json!({})).await;
    assert!(unknown["error"].is_object(), "{unknown}");

    let audit = wait_for_audit(&app, 4).await;
    let ok = by_request(&audit, "req-ok");
    assert_eq!(ok["caller"], "service");
    assert_eq!(ok["tool"], "lad_by_code");
    assert_eq!(ok["outcome"], "ok");
    assert_eq!(ok["rows"], 1);
    assert_eq!(ok["truncated"], false);
    assert!(ok["duration_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(
        ok["arguments"]["note"], "hi",
        "other arguments are kept as sent"
    );
    let hash = ok["arguments"]["code"]["sha256"].as_str().unwrap();
    assert_eq!(hash.len(), 64);
    assert!(
        !ok.to_string().contains(&code),
        "the sensitive value is not stored: {ok}"
    );
    assert_eq!(by_request(&audit, "req-missing")["outcome"], "refused");
    assert_eq!(
        by_request(&audit, "req-missing")["error"],
        "missing argument `code`"
    );
    assert_eq!(by_request(&audit, "req-timeout")["outcome"], "timeout");
    assert_eq!(by_request(&audit, "req-unknown")["outcome"], "refused");
    assert_eq!(by_request(&audit, "req-unknown")["tool"], "drop_everything");
}

#[tokio::test]
async fn the_audit_table_is_append_only() {
    let app = spawn_audited(&[]).await;
    call_as(&app, "req-1", "lad_by_code", json!({"code": "x"})).await;
    wait_for_audit(&app, 1).await;
    let client = app.db.client().await;
    for sql in [
        "UPDATE parley.audit SET outcome = 'ok'",
        "DELETE FROM parley.audit",
        "TRUNCATE parley.audit",
    ] {
        let e = client.batch_execute(sql).await.unwrap_err();
        assert!(
            parley_core::db::pg_message(&e).contains("append-only"),
            "{sql}: {e}"
        );
    }
    // The function's own role may add records but not read them back.
    let readonly = app.db.readonly_client().await;
    let e = readonly
        .batch_execute("SELECT * FROM parley.audit")
        .await
        .unwrap_err();
    assert!(parley_core::db::pg_message(&e).contains("permission denied"));
}

#[tokio::test]
async fn audit_log_and_off_leave_the_table_empty() {
    for setting in ["log", "off"] {
        let app = spawn_audited(&[("AUDIT", setting)]).await;
        let ok = call_as(&app, "req-1", "lad_by_code", json!({"code": "x"})).await;
        assert_eq!(ok["result"]["isError"], false, "{ok}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let n: i64 = app
            .sql_one("SELECT count(*) FROM parley.audit")
            .await
            .get(0);
        assert_eq!(n, 0, "AUDIT={setting}");
    }
}

#[tokio::test]
async fn a_declared_tool_shows_its_name_and_request_to_a_dba() {
    let app = spawn_audited(&[]).await;
    let call = call_as(&app, "req-dba-7", "slow", json!({"seconds": 0.8}));
    let look = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.sql_one(&format!(
            "SELECT query, application_name FROM pg_stat_activity \
             WHERE usename = '{}' AND datname = current_database() AND state = 'active'",
            parley_testkit::READONLY_USER
        ))
        .await
    };
    let (response, seen) = tokio::join!(call, look);
    assert_eq!(response["result"]["isError"], false, "{response}");
    let query: String = seen.get(0);
    let application: String = seen.get(1);
    assert!(query.starts_with("/* parley tool=slow */"), "{query}");
    assert_eq!(application, "parley request=req-dba-7");
}
