//! Failure behaviour: statement timeouts, read-only enforcement, result caps, tool
//! declarations that do not fit the schema, and Postgres going away and coming back.

use serde_json::{Value, json};

use crate::helpers::{Options, env, spawn, spawn_on};
use parley_testkit::{TestCluster, TestDb};

const SLOW_TOOL: &str = r#"
[[tool]]
name = "slow"
description = "Sleeps for a while."
timeout_ms = 200
timeout_hint = "fewer seconds"
sql = "SELECT pg_sleep(:seconds) AS slept"
[tool.params.seconds]
type = "number"
required = true
"#;

const SNEAKY_WRITE: &str = r#"
[[tool]]
name = "sneaky"
description = "Claims to read but writes."
sql = "INSERT INTO lads (code, name, utla_code, utla_name) VALUES ('X99999999', :name, 'X', 'X') RETURNING code"
[tool.params.name]
type = "string"
required = true
"#;

const DECLARED_WRITE: &str = r#"
[[tool]]
name = "close_feedback"
description = "Marks one feedback item closed."
writes = true
role = "parley_test_feedback_closer"
sql = "UPDATE feedback SET status = 'closed' WHERE id = :id RETURNING id, status"
[tool.params.id]
type = "integer"
required = true
"#;

/// Statements that change their session beyond the transaction, and one that shows the session.
const SESSION_TOOLS: &str = r#"
[[tool]]
name = "leave_search_path"
description = "Changes the session's search_path."
sql = "SELECT set_config('search_path', 'nowhere', false) AS search_path"

[[tool]]
name = "take_lock"
description = "Takes a session advisory lock."
sql = "SELECT pg_try_advisory_lock(777) AS locked"

[[tool]]
name = "session"
description = "Shows the session a call runs in."
sql = """
SELECT pg_backend_pid() AS pid, current_setting('search_path') AS search_path,
  (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()) AS advisory_locks,
  (SELECT count(*) FROM lads) AS lads
"""
"#;

#[tokio::test]
async fn a_tool_cannot_leave_settings_or_locks_for_the_next_caller() {
    let app = spawn(Options {
        tools_toml: Some(SESSION_TOOLS.into()),
        extra_env: env(&[("DB_POOL_MAX_SIZE", "1")]),
        ..Options::default()
    })
    .await;
    let before = app.rows("session", json!({})).await["rows"][0].clone();
    let changed = app.rows("leave_search_path", json!({})).await;
    assert_eq!(changed["rows"][0]["search_path"], "nowhere");
    let locked = app.rows("take_lock", json!({})).await;
    assert_eq!(locked["rows"][0]["locked"], true);

    // Pool size 1: the same connection serves the next call, and finds its session as it was.
    let after = app.rows("session", json!({})).await["rows"][0].clone();
    assert_eq!(
        after["pid"], before["pid"],
        "the pooled connection was reused"
    );
    assert_eq!(after["search_path"], before["search_path"]);
    assert_eq!(after["advisory_locks"], 0);
    assert_eq!(after["lads"], before["lads"]);
    let free: bool = app.sql_one("SELECT pg_try_advisory_lock(777)").await.get(0);
    assert!(free, "lock 777 was left held by the pooled connection");
}

#[tokio::test]
async fn a_statement_over_its_timeout_is_cancelled_and_reported() {
    let app = spawn(Options {
        tools_toml: Some(SLOW_TOOL.into()),
        ..Options::default()
    })
    .await;
    let message = app.tool_error("slow", json!({"seconds": 5})).await;
    assert_eq!(
        message,
        "the query took longer than 200 ms and was cancelled; narrow the filters (fewer \
         seconds) and try again"
    );
    // The connection went back to the pool healthy: the next call works.
    let out = app.rows("slow", json!({"seconds": 0.01})).await;
    assert_eq!(out["row_count"], 1);
}

#[tokio::test]
async fn a_statement_another_session_cancels_is_reported_as_cancelled_not_as_a_timeout() {
    // A minute's timeout: the cancel comes long before it, however loaded the machine.
    let app = spawn(Options {
        tools_toml: Some(SLOW_TOOL.replace("timeout_ms = 200", "timeout_ms = 60000")),
        ..Options::default()
    })
    .await;
    let call = app.tool_error("slow", json!({"seconds": 30}));
    let cancel = async {
        // As a DBA would: the tool's active statement, once it is running.
        for _ in 0..400 {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let cancelled: i64 = app
                .sql_one(
                    "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity \
                     WHERE datname = current_database() AND state = 'active' \
                     AND query LIKE '%parley tool=slow%' AND pid <> pg_backend_pid()",
                )
                .await
                .get(0);
            if cancelled > 0 {
                return;
            }
        }
        panic!("the statement never showed in pg_stat_activity");
    };
    let (message, ()) = tokio::join!(call, cancel);
    assert_eq!(
        message,
        "the query was cancelled by the database (another session or an administrator) before \
         its 60000 ms limit; it was not too slow, and it may be tried again"
    );
    let out = app.rows("slow", json!({"seconds": 0.01})).await;
    assert_eq!(out["row_count"], 1);
}

#[tokio::test]
async fn a_tool_that_writes_without_declaring_it_is_refused_by_the_read_only_transaction() {
    // Connect as the owner, not the read-only role, so only the transaction mode stops it.
    let db = TestDb::with_demo_data(100).await;
    let url = db.url.clone();
    let app = spawn_on(
        db,
        Options {
            tools_toml: Some(SNEAKY_WRITE.into()),
            database_url: Some(url),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let message = app.tool_error("sneaky", json!({"name": "Nowhere"})).await;
    assert!(message.contains("read-only"), "{message}");
    let count: i64 = app
        .sql_one("SELECT count(*) FROM lads WHERE code = 'X99999999'")
        .await
        .get(0);
    assert_eq!(count, 0);
}

/// [`DECLARED_WRITE`] over demo data, its role given `grants` in this database.
async fn spawn_closer(grants: &str) -> crate::helpers::TestApp {
    let db = TestDb::with_demo_data(100).await;
    db.writer_role("parley_test_feedback_closer", grants).await;
    spawn_on(
        db,
        Options {
            tools_toml: Some(DECLARED_WRITE.into()),
            ..Options::default()
        },
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_write_role_without_the_grant_refuses_the_write() {
    // The role exists (and the login may switch to it) but, since start-up (which refuses a
    // role without it), may not update this database's feedback: the write is refused by
    // Postgres, whatever the tools file says.
    let app = spawn_closer("GRANT SELECT, UPDATE ON feedback TO parley_test_feedback_closer").await;
    app.db
        .client()
        .await
        .batch_execute("REVOKE UPDATE ON feedback FROM parley_test_feedback_closer")
        .await
        .expect("revoked");
    let message = app.tool_error("close_feedback", json!({"id": 1})).await;
    assert!(
        message.contains("may not do what this tool asks"),
        "{message}"
    );
    let status: String = app
        .sql_one("SELECT status FROM feedback WHERE id = 1")
        .await
        .get(0);
    assert_ne!(status, "closed");
}

#[tokio::test]
async fn a_declared_writing_tool_writes_when_its_role_may() {
    let app = spawn_closer("GRANT SELECT, UPDATE ON feedback TO parley_test_feedback_closer").await;
    let (_, listed) = app.rpc("tools/list", json!({})).await;
    assert_eq!(
        listed["result"]["tools"][0]["annotations"]["readOnlyHint"],
        false
    );
    let out = app.rows("close_feedback", json!({"id": 1})).await;
    assert_eq!(out["rows"][0]["status"], "closed");
    let status: String = app
        .sql_one("SELECT status FROM feedback WHERE id = 1")
        .await
        .get(0);
    assert_eq!(status, "closed");
}

#[tokio::test]
async fn results_over_the_byte_cap_are_cut_and_marked() {
    let app = spawn(Options {
        extra_env: env(&[("TOOL_MAX_RESULT_BYTES", "2048")]),
        ..Options::default()
    })
    .await;
    let out = app.rows("list_lads", json!({"limit": 400})).await;
    assert_eq!(out["truncated"], true);
    assert_eq!(out["truncated_reason"], "max_bytes");
    let result = app.call("list_lads", json!({"limit": 400})).await;
    assert!(result["content"][0]["text"].as_str().unwrap().len() <= 2048);
}

#[tokio::test]
async fn a_tool_that_does_not_fit_the_schema_stops_start_up_naming_it() {
    let broken = r#"
[[tool]]
name = "broken"
description = "Reads a column that does not exist."
sql = "SELECT no_such_column FROM pg_catalog.pg_class"
"#;
    let db = TestDb::migrated().await;
    let err = spawn_on(
        db,
        Options {
            tools_toml: Some(broken.into()),
            ..Options::default()
        },
    )
    .await
    .err()
    .expect("start-up fails");
    assert!(err.contains("tool `broken`"), "{err}");
    assert!(err.contains("no_such_column"), "{err}");
}

#[tokio::test]
async fn the_service_reports_postgres_down_and_recovers_when_it_returns() {
    let mut cluster = TestCluster::start();
    let db = TestDb::migrated_on(&cluster.url()).await;
    let options = parley_cli::demo::DemoOptions {
        feedback: 200,
        ..Default::default()
    };
    parley_cli::demo::load(&mut db.client().await, &options)
        .await
        .expect("demo data");
    let url = db.url.clone();
    let app = spawn_on(
        db,
        Options {
            database_url: Some(url),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let before = app.rows("lad_by_ref", json!({"ref": "Leeds"})).await;
    assert_eq!(before["row_count"], 1);

    cluster.stop();
    let message = app.tool_error("lad_by_ref", json!({"ref": "Leeds"})).await;
    assert!(message.contains("database is unavailable"), "{message}");
    let health = app.get("/health").await;
    assert_eq!(health.status(), 503);
    assert_eq!(
        health.json::<Value>().await.unwrap()["error"]["code"],
        "database_unavailable"
    );

    cluster.restart();
    let after = app.rows("lad_by_ref", json!({"ref": "Leeds"})).await;
    assert_eq!(after, before);
    assert_eq!(app.get("/health").await.status(), 200);
}

/// A write whose table checks itself at COMMIT (a deferred constraint trigger), with a setting
/// of its own for the transaction (as `parley.caller` is for a user's call).
const DEFERRED_WRITE: &str = r#"
[[tool]]
name = "add_note"
description = "Adds a note."
writes = true
role = "parley_test_note_writer"
settings = { "app.note_source" = "the tool" }
sql = "INSERT INTO notes (body) VALUES (:body) RETURNING id"
[tool.params.body]
type = "string"
required = true
"#;

#[tokio::test]
async fn a_deferred_constraint_is_checked_with_the_calls_settings_before_the_session_is_reset() {
    let db = TestDb::with_demo_data(100).await;
    db.client()
        .await
        .batch_execute(
            "CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL, checked_as text);
             CREATE FUNCTION note_checked() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
             BEGIN
                 UPDATE notes
                    SET checked_as = current_setting('role') || ', ' || current_setting('app.note_source', true)
                  WHERE id = NEW.id;
                 RETURN NULL;
             END $$;
             CREATE CONSTRAINT TRIGGER note_checked AFTER INSERT ON notes
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION note_checked();",
        )
        .await
        .unwrap();
    db.writer_role(
        "parley_test_note_writer",
        "GRANT INSERT, SELECT ON notes TO parley_test_note_writer;
         GRANT USAGE ON SEQUENCE notes_id_seq TO parley_test_note_writer;",
    )
    .await;
    let app = spawn_on(
        db.clone(),
        Options {
            tools_toml: Some(DEFERRED_WRITE.into()),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    app.rows("add_note", json!({"body": "hello"})).await;
    let checked_as: Option<String> = app
        .sql_one("SELECT checked_as FROM notes WHERE body = 'hello'")
        .await
        .get(0);
    assert_eq!(
        checked_as.as_deref(),
        Some("parley_test_note_writer, the tool")
    );
}
