//! Tool approval (issue 22), the mcp function's side: a tools file marks the tools whose calls
//! wait for the user's approval and the listing says so to clients; a call made under an
//! approval carries it in `_meta`, and the audit records it beside the verified caller.

use parley_testkit::TestDb;
use rmcp::model::Tool;
use serde_json::json;

use crate::helpers::{Options, TestApp, spawn_on};

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
             INSERT INTO notes VALUES (1, 'one'), (2, 'two');
             GRANT SELECT ON notes TO parley_readonly;
             GRANT SELECT, DELETE ON notes TO {WRITER};"
        ),
    )
    .await;
    spawn_on(
        db,
        Options {
            tools_toml: Some(TOOLS.into()),
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
