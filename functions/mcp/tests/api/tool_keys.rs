//! The tools-file keys that shape a call's transaction and what it tells the caller:
//! `[tool.settings]` (`SET LOCAL` per call), `[tool.citation]` (published in `_meta`) and a
//! `RAISE EXCEPTION` in the SQL reaching the caller as the tool error.

use parley_testkit::TestDb;
use serde_json::json;

use crate::helpers::{Options, TestApp, spawn_on};

const TOOLS: &str = r#"
[[tool]]
name = "show_settings"
description = "The transaction's settings, as a tool sees them."
settings = { work_mem = "8MB", application_name = "it's a \\ test", "parley_test.flag" = 42 }
sql = """
SELECT current_setting('work_mem') AS work_mem,
       current_setting('application_name') AS application_name,
       current_setting('parley_test.flag') AS flag
"""

[[tool]]
name = "plain_settings"
description = "The same settings, in a tool that sets none."
sql = "SELECT current_setting('work_mem') AS work_mem, current_setting('application_name') AS application_name"

[[tool]]
name = "cited"
description = "Rows that are sources."
citation = { id = "id", title = "title", score = "score" }
sql = "SELECT 1 AS id, 'A page' AS title, 0.5 AS score"

[[tool]]
name = "guarded"
description = "Refuses unless asked for an open shelf."
sql = "SELECT test_guard(:shelf) AS shelf"
[tool.params.shelf]
type = "string"
required = true

[[tool]]
name = "searchable"
description = "The collections a search may read (parley's own check, which RAISEs)."
sql = "SELECT parley.searchable_collections(:collection, 'all-MiniLM-L6-v2@384') AS ids"
[tool.params.collection]
type = "string"

[[tool]]
name = "broken"
description = "Fails with an error that is not a refusal."
sql = "SELECT 1 / (:n - :n) AS x"
[tool.params.n]
type = "integer"
required = true
"#;

/// A function that refuses with a message for the person asking, as enrollment checks do.
const GUARD: &str = r#"
CREATE FUNCTION test_guard(shelf text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  IF shelf = 'open' THEN RETURN shelf; END IF;
  IF shelf = 'long' THEN RAISE EXCEPTION '%', repeat('x', 800); END IF;
  RAISE EXCEPTION 'You are not enrolled in "%"; ask your tutor to add you.', shelf;
END $$;
"#;

async fn app(tools: &str) -> Result<TestApp, String> {
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute(GUARD)
        .await
        .expect("guard function");
    spawn_on(
        db,
        Options {
            tools_toml: Some(tools.into()),
            ..Options::default()
        },
    )
    .await
}

#[tokio::test]
async fn tool_settings_hold_for_its_transaction_only_with_values_as_written() {
    let app = app(TOOLS).await.expect("starts");
    let before = app.rows("plain_settings", json!({})).await;
    let rows = app.rows("show_settings", json!({})).await;
    assert_eq!(
        rows["rows"][0],
        json!({"work_mem": "8MB", "application_name": "it's a \\ test", "flag": "42"})
    );
    // Nothing stays on the pooled connection (calls in turn reuse it) after the transaction;
    // a tool that does not set application_name shows Parley's, naming its own request.
    let after = app.rows("plain_settings", json!({})).await;
    assert_eq!(after["rows"][0]["work_mem"], before["rows"][0]["work_mem"]);
    assert_ne!(after["rows"][0]["work_mem"], "8MB");
    for row in [&before, &after] {
        let name = row["rows"][0]["application_name"].as_str().unwrap();
        assert!(name.starts_with("parley request="), "{name}");
    }
    assert_ne!(before, after, "each call names its own request");
}

#[tokio::test]
async fn a_setting_postgres_refuses_stops_start_up_naming_the_tool() {
    let tools = r#"
[[tool]]
name = "bad_setting"
description = "d"
settings = { work_mem = "lots" }
sql = "SELECT 1 AS one"
"#;
    let err = app(tools).await.err().expect("start-up refused");
    assert!(err.contains("tool `bad_setting`"), "{err}");
    assert!(err.contains("[tool.settings]"), "{err}");
    assert!(err.contains("work_mem"), "{err}");
}

#[tokio::test]
async fn a_citation_is_published_in_the_tools_meta() {
    let app = app(TOOLS).await.expect("starts");
    let (status, body) = app.rpc("tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let tools = body["result"]["tools"].as_array().expect("tools");
    let meta = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .expect(name)
            .get("_meta")
            .cloned()
    };
    assert_eq!(
        meta("cited").expect("_meta")["parley/citation"],
        json!({"id": "id", "title": "title", "score": "score"})
    );
    assert_eq!(meta("plain_settings"), None);
}

#[tokio::test]
async fn a_citation_naming_a_column_the_statement_does_not_return_stops_start_up() {
    let tools = r#"
[[tool]]
name = "miscited"
description = "d"
citation = { id = "id", title = "titel" }
sql = "SELECT 1 AS id, 'A page' AS title"
"#;
    let err = app(tools).await.err().expect("start-up refused");
    assert_eq!(
        err,
        "tool `miscited` does not match the database schema: citation `title` names the column \
         `titel`, which the statement does not return (it returns id, title)"
    );
}

#[tokio::test]
async fn a_statement_returning_two_columns_of_one_name_stops_start_up() {
    let tools = r#"
[[tool]]
name = "twice"
description = "d"
sql = "SELECT 1 AS a, 2 AS a"
"#;
    let err = app(tools).await.err().expect("start-up refused");
    assert_eq!(
        err,
        "tool `twice` does not match the database schema: the statement returns two columns \
         named `a`; name each one (`AS`), as each row is one JSON object and a key holds one \
         value"
    );
}

#[tokio::test]
async fn a_raised_exception_reaches_the_caller_as_the_tool_error() {
    let app = app(TOOLS).await.expect("starts");
    assert_eq!(
        app.rows("guarded", json!({"shelf": "open"})).await["rows"][0]["shelf"],
        "open"
    );
    assert_eq!(
        app.tool_error("guarded", json!({"shelf": "maths"})).await,
        "You are not enrolled in \"maths\"; ask your tutor to add you."
    );
    let long = app.tool_error("guarded", json!({"shelf": "long"})).await;
    assert_eq!(long, "x".repeat(500), "cut to 500 characters");
    // Through a real MCP client (rmcp's path) alike.
    let client = app.client().await;
    let result = crate::helpers::client_call(&client, "guarded", json!({"shelf": "maths"})).await;
    assert_eq!(result.is_error, Some(true));
    assert_eq!(
        result.content[0].as_text().expect("text").text,
        "You are not enrolled in \"maths\"; ask your tutor to add you."
    );
    // Parley's own enrollment check (migration 0004) speaks to the person asking.
    assert_eq!(
        app.tool_error("searchable", json!({"collection": "nope"}))
            .await,
        "there is no collection named \"nope\" that you may read (it does not exist, or you are \
         not enrolled in it); list_collections shows the ones you may read"
    );
    // Any other error keeps its generic message.
    let other = app.tool_error("broken", json!({"n": 1})).await;
    assert_eq!(
        other,
        "the query failed (SQLSTATE 22012); the tool's declaration may need fixing"
    );
}
