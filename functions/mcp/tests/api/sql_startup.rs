//! Start-up refuses to serve the SQL tools over a role that can do more than read the allowed
//! schemas, naming what to change; and a file without `[sql]` serves none of them.

use parley_testkit::TestDb;
use serde_json::json;

use crate::helpers::{FEEDBACK_ROWS, Options, env, spawn, spawn_on};

const SQL_TOOLS: &str = "[sql]\nschemas = [\"public\"]\n";

/// Starts the function with the SQL tools over `sql_url`; the start-up error if it fails.
async fn start(db: TestDb, sql_url: Option<&str>) -> Result<(), String> {
    let extra_env = sql_url.map_or_else(Vec::new, |url| env(&[("SQL_DATABASE_URL", url)]));
    spawn_on(
        db,
        Options {
            tools_toml: Some(SQL_TOOLS.into()),
            extra_env,
            ..Options::default()
        },
    )
    .await
    .map(drop)
}

#[tokio::test]
async fn the_sql_tools_need_their_own_role() {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let e = start(db.clone(), None).await.unwrap_err();
    assert!(e.contains("SQL_DATABASE_URL"), "{e}");
    // The functions' own role lends Parley's rights.
    let e = start(db.clone(), Some(&db.readonly_url)).await.unwrap_err();
    assert!(
        e.contains("GRANT parley_sql_reader TO parley_mcp_test"),
        "{e}"
    );
    assert!(
        e.contains("REVOKE parley_readonly FROM parley_mcp_test"),
        "{e}"
    );
    // A superuser can do anything.
    let e = start(db.clone(), Some(&db.url)).await.unwrap_err();
    assert!(e.contains("NOSUPERUSER"), "{e}");
}

#[tokio::test]
async fn a_readable_table_outside_the_allowed_schemas_stops_start_up() {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let url = db
        .sql_reader_url(
            "CREATE SCHEMA secret; CREATE TABLE secret.keys (k text);
             GRANT USAGE ON SCHEMA secret TO parley_sql_reader;
             GRANT SELECT ON secret.keys TO parley_sql_reader;
             CREATE TABLE public.notes (n text); GRANT INSERT ON public.notes TO PUBLIC;
             CREATE SCHEMA helpers; GRANT USAGE ON SCHEMA helpers TO parley_sql_reader;
             CREATE FUNCTION helpers.peek() RETURNS bigint LANGUAGE sql SECURITY DEFINER
                 AS 'SELECT count(*) FROM secret.keys';
             CREATE SEQUENCE helpers.ids; GRANT SELECT ON helpers.ids TO parley_sql_reader;
             GRANT EXECUTE ON FUNCTION pg_read_file(text) TO parley_sql_reader;",
        )
        .await;
    let e = start(db, Some(&url)).await.unwrap_err();
    assert!(e.contains("REVOKE ALL ON secret.keys"), "{e}");
    assert!(
        e.contains("REVOKE INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES ON notes"),
        "{e}"
    );
}

#[tokio::test]
async fn a_schema_the_role_cannot_use_stops_start_up() {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let url = db.sql_reader_url("CREATE SCHEMA closed;").await;
    let e = spawn_on(
        db.clone(),
        Options {
            tools_toml: Some("[sql]\nschemas = [\"closed\", \"missing\"]\n".into()),
            extra_env: env(&[("SQL_DATABASE_URL", &url)]),
            ..Options::default()
        },
    )
    .await
    .map(drop)
    .unwrap_err();
    assert!(
        e.contains("GRANT USAGE ON SCHEMA closed TO parley_sql_reader"),
        "{e}"
    );
    assert!(e.contains("schema `missing` does not exist"), "{e}");
}

#[tokio::test]
async fn without_sql_in_the_tools_files_no_sql_tool_is_served() {
    let app = spawn(Options::default()).await;
    let (_, listed) = app.rpc("tools/list", json!({})).await;
    let text = listed.to_string();
    for name in ["run_sql", "list_tables", "describe_table", "explain_sql"] {
        assert!(!text.contains(&format!("\"{name}\"")), "{name} is listed");
    }
    let (_, answer) = app
        .rpc(
            "tools/call",
            json!({"name": "run_sql", "arguments": {"sql": "SELECT 1"}}),
        )
        .await;
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool")
    );
}

#[tokio::test]
async fn audit_to_a_database_without_the_table_stops_start_up_naming_the_fix() {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    db.client()
        .await
        .batch_execute("REVOKE INSERT ON parley.audit FROM parley_readonly")
        .await
        .unwrap();
    let e = spawn_on(db.clone(), Options::default())
        .await
        .map(drop)
        .unwrap_err();
    assert!(e.contains("AUDIT=postgres"), "{e}");
    assert!(e.contains("or set AUDIT=log"), "{e}");
    spawn_on(
        db,
        Options {
            extra_env: env(&[("AUDIT", "log")]),
            ..Options::default()
        },
    )
    .await
    .expect("AUDIT=log needs no table");
}
