//! Start-up checks that each tool's role may do what its statement asks (issue 32): a tools
//! file over a table its role may not read, or a write its role may not make, stops start-up
//! naming the tool, the table and the `GRANT` to run, every problem at once; after the grants
//! it starts. A privilege revoked after start-up refuses the call, and the same check names it.

use parley_testkit::{READONLY_USER, TestDb};
use parley_tools::catalog::file;
use parley_tools::output::Limits;
use parley_tools::tools::privileges;
use serde_json::json;

use crate::helpers::{Options, TestApp, spawn_on};

/// The function started on `tools` over `db` as its read-only login; `Err` is the start-up
/// failure as `main` prints it (after `mcp: `).
async fn start(db: &TestDb, tools: &str) -> Result<TestApp, String> {
    spawn_on(
        db.clone(),
        Options {
            tools_toml: Some(tools.into()),
            ..Options::default()
        },
    )
    .await
}

/// Runs `sql` as the database's owner, as an admin runs a grant the start-up error names.
async fn as_owner(db: &TestDb, sql: &str) {
    db.client()
        .await
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

const ROOMS: &str = "CREATE TABLE rooms (id serial PRIMARY KEY, name text NOT NULL);
    INSERT INTO rooms (name) VALUES ('Attic'), ('Boardroom');";

const LIST_ROOMS: &str = r#"
[[tool]]
name = "list_rooms"
description = "The rooms."
sql = "SELECT id, name FROM rooms ORDER BY id"
"#;

#[tokio::test]
async fn a_tool_over_a_table_its_role_cannot_read_stops_start_up_naming_the_table_and_the_grant() {
    let db = TestDb::migrated().await;
    as_owner(&db, ROOMS).await;
    let err = start(&db, LIST_ROOMS)
        .await
        .err()
        .expect("start-up refused");
    let grant = format!("GRANT SELECT ON public.rooms TO {READONLY_USER};");
    assert_eq!(
        err,
        format!(
            "tool `list_rooms`: role {READONLY_USER} may not SELECT from public.rooms; run: \
             {grant}"
        )
    );
    // Exactly what it said to run, and it starts.
    as_owner(&db, &grant).await;
    let app = start(&db, LIST_ROOMS)
        .await
        .expect("starts after the grant");
    assert_eq!(
        app.rows("list_rooms", json!({})).await["rows"],
        json!([{"id": 1, "name": "Attic"}, {"id": 2, "name": "Boardroom"}])
    );
}

const BOOK_ROOM: &str = r#"
[[tool]]
name = "book_room"
description = "Books a room."
writes = true
destructive = false
role = "parley_test_room_booker"
sql = "INSERT INTO bookings (room, who) VALUES (:room, :who) RETURNING id, room, who"
[tool.params.room]
type = "integer"
required = true
[tool.params.who]
type = "string"
required = true
"#;

#[tokio::test]
async fn a_write_whose_role_may_not_insert_names_insert_then_the_serial_columns_sequence() {
    let db = TestDb::migrated().await;
    as_owner(
        &db,
        "CREATE TABLE bookings (id serial PRIMARY KEY, room int NOT NULL, who text NOT NULL)",
    )
    .await;
    // It may read (RETURNING does) but not add rows.
    db.writer_role(
        "parley_test_room_booker",
        "GRANT SELECT ON bookings TO parley_test_room_booker",
    )
    .await;
    let insert = "GRANT INSERT ON public.bookings TO parley_test_room_booker;";
    assert_eq!(
        start(&db, BOOK_ROOM).await.err().expect("start-up refused"),
        format!(
            "tool `book_room`: role parley_test_room_booker may not INSERT into \
             public.bookings; run: {insert}"
        )
    );
    as_owner(&db, insert).await;
    // `nextval` checks its privilege only when it runs, so start-up looks for it in the plan.
    let usage = "GRANT USAGE ON SEQUENCE public.bookings_id_seq TO parley_test_room_booker;";
    assert_eq!(
        start(&db, BOOK_ROOM).await.err().expect("start-up refused"),
        format!(
            "tool `book_room`: role parley_test_room_booker may not take the next value of \
             the sequence public.bookings_id_seq; run: {usage}"
        )
    );
    as_owner(&db, usage).await;
    let app = start(&db, BOOK_ROOM)
        .await
        .expect("starts after the grants");
    assert_eq!(
        app.rows("book_room", json!({"room": 1, "who": "Ada"}))
            .await["rows"],
        json!([{"id": 1, "room": 1, "who": "Ada"}])
    );
}

const SEVERAL: &str = r#"
[[tool]]
name = "list_rooms"
description = "The rooms."
sql = "SELECT id, name FROM rooms ORDER BY id"

[[tool]]
name = "count_rooms"
description = "How many rooms."
sql = "SELECT count(*) AS rooms FROM rooms"

[[tool]]
name = "hidden_things"
description = "Adds a thing in a schema neither its role nor the login may use."
writes = true
destructive = false
role = "parley_test_hidden_writer"
sql = "INSERT INTO hidden.things (id) VALUES (:id) RETURNING id"
[tool.params.id]
type = "integer"
required = true

[[tool]]
name = "stranger"
description = "Runs as a role the login may not switch to."
role = "parley_test_stranger"
sql = "SELECT 1 AS one"

[[tool]]
name = "ghost"
description = "Runs as a role that does not exist."
role = "parley_test_no_such_role"
sql = "SELECT 1 AS one"

[[tool]]
name = "fine"
description = "Needs nothing."
sql = "SELECT 1 AS one"
"#;

#[tokio::test]
async fn every_tools_missing_privileges_are_named_at_once_each_fix_once() {
    let db = TestDb::migrated().await;
    as_owner(&db, ROOMS).await;
    db.writer_role(
        "parley_test_hidden_writer",
        "CREATE SCHEMA hidden; CREATE TABLE hidden.things (id int);
         GRANT SELECT, INSERT ON hidden.things TO parley_test_hidden_writer;",
    )
    .await;
    // Roles are the cluster's: made once, and never granted to the login.
    as_owner(
        &db,
        "DO $$ BEGIN CREATE ROLE parley_test_stranger NOLOGIN;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;",
    )
    .await;
    let err = start(&db, SEVERAL).await.err().expect("start-up refused");
    assert_eq!(
        err,
        format!(
            "tools `list_rooms`, `count_rooms`: role {READONLY_USER} may not SELECT from \
             public.rooms; run: GRANT SELECT ON public.rooms TO {READONLY_USER}; \
             tool `hidden_things`: role parley_test_hidden_writer may not use the schema \
             hidden; run: GRANT USAGE ON SCHEMA hidden TO parley_test_hidden_writer; \
             tool `stranger`: the login {READONLY_USER} may not switch to the role \
             parley_test_stranger; run: GRANT parley_test_stranger TO {READONLY_USER} WITH \
             INHERIT FALSE, SET TRUE; \
             tool `ghost`: the role parley_test_no_such_role does not exist; run: CREATE ROLE \
             parley_test_no_such_role NOLOGIN; GRANT parley_test_no_such_role TO \
             {READONLY_USER} WITH INHERIT FALSE, SET TRUE; then grant it what the statement \
             needs"
        )
    );
}

const VISITS: &str = r#"
[[tool]]
name = "log_visit"
description = "Records a visit."
writes = true
destructive = false
role = "parley_test_lone_writer"
sql = "INSERT INTO visits (who) VALUES (:who) RETURNING id"
[tool.params.who]
type = "string"
required = true

[[tool]]
name = "rename_visitors"
description = "Claims to read, but changes rows."
sql = "UPDATE visits SET who = :who RETURNING id"
[tool.params.who]
type = "string"
required = true
"#;

#[tokio::test]
async fn a_write_role_outside_parley_tool_writer_and_a_read_only_tool_that_writes_are_named() {
    let db = TestDb::migrated().await;
    // An identity column: its sequence needs no grant, so none is asked for.
    as_owner(
        &db,
        &format!(
            "CREATE TABLE visits (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, who text);
             DO $$ BEGIN CREATE ROLE parley_test_lone_writer NOLOGIN;
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;
             GRANT parley_test_lone_writer TO {READONLY_USER} WITH INHERIT FALSE, SET TRUE;
             GRANT SELECT, INSERT ON visits TO parley_test_lone_writer;"
        ),
    )
    .await;
    assert_eq!(
        start(&db, VISITS).await.err().expect("start-up refused"),
        "tool `log_visit`: role parley_test_lone_writer may not record idempotency keys in \
         parley.idempotency; run: GRANT parley_tool_writer TO parley_test_lone_writer; \
         tool `rename_visitors`: the statement changes public.visits, but the tool is \
         read-only; declare writes = true and the role it writes as, or change the statement"
    );
}

#[tokio::test]
async fn a_privilege_revoked_after_start_up_refuses_the_call_and_the_check_names_the_grant() {
    let db = TestDb::migrated().await;
    as_owner(&db, ROOMS).await;
    as_owner(&db, &format!("GRANT SELECT ON rooms TO {READONLY_USER}")).await;
    let app = start(&db, LIST_ROOMS).await.expect("starts");
    as_owner(&db, &format!("REVOKE SELECT ON rooms FROM {READONLY_USER}")).await;
    // The caller learns that the service may not, not the operator's tables and roles.
    assert_eq!(
        app.tool_error("list_rooms", json!({})).await,
        "the database role of this service may not do what this tool asks; nothing was changed"
    );
    // What the function then logs for the operator: the check start-up runs, on this tool.
    let tools = file::parse(LIST_ROOMS, Limits::default())
        .expect("tools file")
        .tools;
    let client = db.readonly_client().await;
    client
        .batch_execute("BEGIN READ ONLY")
        .await
        .expect("begin");
    let missing = privileges::check_all(&client, &tools)
        .await
        .expect("checked")
        .expect("something is missing");
    assert_eq!(
        missing.0[0].missing.to_string(),
        format!(
            "role {READONLY_USER} may not SELECT from public.rooms; run: GRANT SELECT ON \
             public.rooms TO {READONLY_USER};"
        )
    );
}
