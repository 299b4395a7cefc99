//! Tool approval (issue 22), the mcp function's side: a tools file marks the tools whose calls
//! wait for the user's approval and the listing says so to clients; a call made under an
//! approval carries it in `_meta`, and the audit records it beside the verified caller.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use parley_testkit::TestDb;
use parley_wire::META_APPROVED;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, MetaObject, RequestMetaObject, Tool,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use serde_json::{Value, json};

use crate::helpers::{Options, TOKEN, TestApp, env, spawn_on};
use crate::sql_attacks::wait_for_audit;

/// Signs the users' tokens.
const SECRET: &str = "an-approvals-test-secret-of-32-bytes+";

const WRITER: &str = "parley_test_approvals_writer";

/// A read that sends something (approval always), a destructive write, and a plain read.
const TOOLS: &str = r#"
[[tool]]
name = "send_reminder"
description = "Sends a reminder e-mail about a note (here: only says it would)."
approval = "always"
sql = "SELECT :note_id AS sent"
[tool.params.note_id]
type = "integer"
required = true

[[tool]]
name = "delete_note"
description = "Deletes a note."
writes = true
destructive = true
role = "parley_test_approvals_writer"
sql = "DELETE FROM notes WHERE id = :id RETURNING id"
[tool.params.id]
type = "integer"
required = true

[[tool]]
name = "count_notes"
description = "Counts the notes."
approval = "never"
sql = "SELECT count(*) AS n FROM notes"
"#;

async fn spawn_approvals() -> TestApp {
    let db = TestDb::migrated().await;
    db.writer_role(
        WRITER,
        &format!(
            "CREATE TABLE notes (id bigint PRIMARY KEY, body text NOT NULL);
             INSERT INTO notes VALUES (1, 'one'), (2, 'two'), (3, 'three');
             GRANT SELECT ON notes TO parley_readonly;
             GRANT SELECT, DELETE ON notes TO {WRITER};"
        ),
    )
    .await;
    spawn_on(
        db,
        Options {
            tools_toml: Some(TOOLS.into()),
            extra_env: env(&[
                ("JWT_SECRET", SECRET),
                ("MCP_RESOURCE_URL", "http://127.0.0.1/mcp"),
            ]),
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts")
}

fn listed<'a>(tools: &'a [Tool], name: &str) -> &'a Tool {
    tools.iter().find(|t| t.name == name).expect(name)
}

#[tokio::test]
async fn the_listing_marks_tools_that_always_wait_and_keeps_destructive_ones_destructive() {
    let app = spawn_approvals().await;
    let client = app.client().await;
    let tools = client.list_all_tools().await.expect("tools/list");

    let send = listed(&tools, "send_reminder");
    let meta = send.meta.as_ref().expect("_meta").0.clone();
    assert_eq!(meta.get(parley_wire::META_APPROVAL), Some(&json!("always")));
    let hints = send.annotations.as_ref().expect("annotations");
    assert_eq!(hints.read_only_hint, Some(true));
    assert_eq!(hints.destructive_hint, Some(false));

    let delete = listed(&tools, "delete_note");
    let hints = delete.annotations.as_ref().expect("annotations");
    assert_eq!(hints.destructive_hint, Some(true));
    assert_eq!(hints.read_only_hint, Some(false));
    // Not marked: a client pauses it for its annotation, not for `_meta`.
    let meta = delete
        .meta
        .as_ref()
        .map(|m| m.0.clone())
        .unwrap_or_default();
    assert_eq!(meta.get(parley_wire::META_APPROVAL), None, "{meta:?}");

    // "never" is the default: nothing published.
    assert!(listed(&tools, "count_notes").meta.is_none());
    client.cancel().await.ok();
}

fn user(sub: &str) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": sub, "exp": get_current_timestamp() + 600}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("token")
}

/// `delete_note` of `id` through a real rmcp client, with `approved` (unless null) as the
/// request's `_meta["parley/approved"]`.
async fn delete_under(
    client: &RunningService<RoleClient, ClientConfig>,
    id: i64,
    approved: Value,
) -> Result<CallToolResult, ServiceError> {
    delete_with(client, id, approved, None).await
}

/// [`delete_under`], under the idempotency key `key` when one is given.
async fn delete_with(
    client: &RunningService<RoleClient, ClientConfig>,
    id: i64,
    approved: Value,
    key: Option<&str>,
) -> Result<CallToolResult, ServiceError> {
    let mut params = CallToolRequestParams::new("delete_note")
        .with_arguments(json!({"id": id}).as_object().cloned().expect("object"));
    let mut meta = serde_json::Map::new();
    if !approved.is_null() {
        meta.insert(META_APPROVED.into(), approved);
    }
    if let Some(key) = key {
        meta.insert(parley_wire::META_IDEMPOTENCY_KEY.into(), key.into());
    }
    if !meta.is_empty() {
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
    }
    client.call_tool(params).await
}

async fn notes_left(app: &TestApp) -> Vec<i64> {
    app.sql_one("SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM notes")
        .await
        .get(0)
}

/// The audit records of `delete_note`, oldest first, once `n` calls in all are recorded.
async fn deletes_audited(app: &TestApp, n: usize) -> Vec<Value> {
    wait_for_audit(app, n)
        .await
        .into_iter()
        .filter(|r| r["tool"] == "delete_note")
        .collect()
}

/// The JSON-RPC error a call was refused with: (code, message).
fn refused(answer: Result<CallToolResult, ServiceError>) -> (i32, String) {
    match answer {
        Err(ServiceError::McpError(e)) => (e.code.0, e.message.to_string()),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_call_under_an_approval_is_audited_with_it_beside_the_verified_caller() {
    let app = spawn_approvals().await;
    let alice = app.client_with(Some(&user("alice"))).await.expect("alice");
    let approved = json!({"id": "appr-0001", "decided_by": "alice",
                          "decided_at": "2026-11-27T10:00:03.25+01:00"});
    let result = delete_under(&alice, 1, approved).await.expect("answered");
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(
        result.structured_content.as_ref().expect("rows")["rows"],
        json!([{"id": 1}])
    );
    // What the model reads of the call says nothing of the approval.
    let seen = serde_json::to_string(&result).expect("JSON");
    assert!(
        !seen.contains("appr-0001") && !seen.contains("decided"),
        "{seen}"
    );
    assert_eq!(notes_left(&app).await, [2, 3]);

    // The service token carries no user to compare with: the claim is recorded as made.
    let service = app.client_with(Some(TOKEN)).await.expect("service");
    let by_bob = json!({"id": "appr-0002", "decided_by": "bob",
                        "decided_at": "2026-11-27T09:05:00Z"});
    let result = delete_under(&service, 2, by_bob).await.expect("answered");
    assert_eq!(result.is_error, Some(false), "{result:?}");
    // And a call without one records none.
    delete_under(&alice, 3, Value::Null)
        .await
        .expect("answered");
    assert_eq!(notes_left(&app).await, Vec::<i64>::new());

    let audited = deletes_audited(&app, 3).await;
    let summary: Vec<_> = audited
        .iter()
        .map(|r| (&r["caller"], &r["outcome"], &r["approval"]))
        .collect();
    assert_eq!(
        summary,
        [
            (
                &json!("alice"),
                &json!("ok"),
                &json!({"id": "appr-0001", "decided_by": "alice",
                        "decided_at": "2026-11-27T09:00:03.250Z"})
            ),
            (
                &json!("service"),
                &json!("ok"),
                &json!({"id": "appr-0002", "decided_by": "bob",
                        "decided_at": "2026-11-27T09:05:00Z"})
            ),
            (&json!("alice"), &json!("ok"), &Value::Null),
        ]
    );
}

#[tokio::test]
async fn a_malformed_approval_is_refused_as_invalid_params_and_nothing_runs() {
    let app = spawn_approvals().await;
    let alice = app.client_with(Some(&user("alice"))).await.expect("alice");
    let at = "2026-11-27T10:00:03Z";
    let cases = [
        (json!("appr-1"), "it is not an object"),
        (
            json!({"id": "appr-1", "decided_by": "alice"}),
            "exactly these three keys",
        ),
        (
            json!({"id": "appr 1", "decided_by": "alice", "decided_at": at}),
            "`id` must be",
        ),
        (
            json!({"id": "appr-1", "decided_by": "alice", "decided_at": "soon"}),
            "`decided_at`",
        ),
        (
            json!({"id": "appr-1", "decided_by": "al\u{7}ice", "decided_at": at}),
            "`decided_by`",
        ),
    ];
    for (bad, why) in &cases {
        let (code, message) = refused(delete_under(&alice, 1, bad.clone()).await);
        assert_eq!(code, -32602, "{bad}: {message}");
        assert!(
            message.starts_with("`_meta[\"parley/approved\"]` must be an object"),
            "{bad}: {message}"
        );
        assert!(message.contains(why), "{bad}: {message}");
        assert!(message.ends_with("; nothing was run"), "{message}");
    }
    assert_eq!(notes_left(&app).await, [1, 2, 3]);
    let audited = deletes_audited(&app, cases.len()).await;
    assert_eq!(audited.len(), cases.len());
    for record in &audited {
        assert_eq!(record["outcome"], "refused", "{record}");
        assert_eq!(record["caller"], "alice", "{record}");
        assert_eq!(record["approval"], Value::Null, "not stored: {record}");
    }
}

#[tokio::test]
async fn an_approval_decided_by_another_user_is_refused_and_recorded_as_claimed() {
    let app = spawn_approvals().await;
    let mallory = app
        .client_with(Some(&user("mallory")))
        .await
        .expect("mallory");
    let alices = json!({"id": "appr-alice", "decided_by": "alice",
                        "decided_at": "2026-11-27T10:00:03Z"});
    let (code, message) = refused(delete_under(&mallory, 1, alices.clone()).await);
    assert_eq!(code, -32602, "{message}");
    assert_eq!(
        message,
        "`_meta[\"parley/approved\"]` was decided by another user than the one calling: an \
         approval covers only calls made for the user who gave it; nothing was run"
    );
    assert!(!message.contains("alice"), "names nobody: {message}");
    assert_eq!(notes_left(&app).await, [1, 2, 3]);
    let audited = deletes_audited(&app, 1).await;
    assert_eq!(audited[0]["caller"], "mallory");
    assert_eq!(audited[0]["outcome"], "refused");
    assert_eq!(audited[0]["approval"], alices);
}

#[tokio::test]
async fn a_trail_without_the_approval_column_stops_start_up_naming_the_migration() {
    let db = TestDb::migrated().await;
    // A database migrated before 0013 (as far as the table can tell).
    db.client()
        .await
        .batch_execute("ALTER TABLE parley.audit DROP COLUMN approval")
        .await
        .expect("column dropped");
    let tools = "[[tool]]\nname = \"one\"\ndescription = \"One.\"\nsql = \"SELECT 1 AS one\"\n";
    let options = Options {
        tools_toml: Some(tools.into()),
        ..Options::default()
    };
    let err = spawn_on(db, options).await.err().expect("start-up refused");
    assert!(
        err.contains("AUDIT=postgres, but parley.audit has no approval column"),
        "{err}"
    );
    assert!(err.contains("0013 adds its approval column"), "{err}");
}

#[tokio::test]
async fn rmcps_own_path_checks_and_records_an_approval_alike() {
    let app = spawn_approvals().await;
    // `Accept` with weights: the direct path leaves the request to rmcp's transport.
    let via_rmcp = async |token: &str, id: i64, approved: Value| -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "delete_note", "arguments": {"id": id},
                       "_meta": {"parley/approved": approved}}});
        let authorization = format!("Bearer {token}");
        let response = app
            .post_mcp(
                body.to_string(),
                &[
                    ("accept", "application/json;q=1, text/event-stream;q=1"),
                    ("authorization", &authorization),
                ],
            )
            .await;
        response.json().await.expect("JSON body")
    };
    let alices = json!({"id": "appr-9", "decided_by": "alice",
                        "decided_at": "2026-11-27T10:00:03Z"});
    let refused = via_rmcp(&user("bob"), 1, alices.clone()).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(notes_left(&app).await, [1, 2, 3]);
    let ran = via_rmcp(&user("alice"), 1, alices.clone()).await;
    assert_eq!(ran["result"]["isError"], false, "{ran}");
    assert_eq!(notes_left(&app).await, [2, 3]);
    let audited = deletes_audited(&app, 2).await;
    let summary: Vec<_> = audited
        .iter()
        .map(|r| {
            (
                r["caller"].clone(),
                r["outcome"].clone(),
                r["approval"].clone(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (json!("bob"), json!("refused"), alices.clone()),
            (json!("alice"), json!("ok"), alices),
        ]
    );
}

/// The chat sends an approved call again under its key when the first answer was lost (issue
/// 32): the write happens once, and the audit tells the replay from the write.
#[tokio::test]
async fn an_approved_call_sent_again_under_its_key_is_audited_as_a_replay() {
    let app = spawn_approvals().await;
    let alice = app.client_with(Some(&user("alice"))).await.expect("alice");
    let approved = json!({"id": "appr-0009", "decided_by": "alice",
                          "decided_at": "2026-11-27T10:00:03Z"});
    let key = Some("turn-9:call-1");
    let first = delete_with(&alice, 2, approved.clone(), key)
        .await
        .expect("answered");
    let again = delete_with(&alice, 2, approved, key)
        .await
        .expect("answered");
    assert_eq!(first.is_error, Some(false), "{first:?}");
    assert_eq!(
        again.structured_content, first.structured_content,
        "the first call's rows"
    );
    assert_eq!(notes_left(&app).await, [1, 3]);

    let audited = deletes_audited(&app, 2).await;
    let summary: Vec<_> = audited
        .iter()
        .map(|r| {
            (
                &r["outcome"],
                &r["rows"],
                &r["replayed"],
                &r["approval"]["id"],
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (&json!("ok"), &json!(1), &json!(false), &json!("appr-0009")),
            (&json!("ok"), &json!(1), &json!(true), &json!("appr-0009")),
        ]
    );
}
