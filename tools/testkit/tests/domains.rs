//! The demo domains as the functions meet them: loaded by `TestDb::with_demo_data`, read by the
//! read-only login, and the tasks domain's row-level security and write role enforced by
//! Postgres itself, whatever SQL a tool runs. Needs DATABASE_URL (run via `scripts/test`).

use parley_testkit::domains::{FEEDBACK_TOOLS, TASKS_TOOLS, all_tools, feedback, tasks};
use parley_testkit::{READONLY_USER, TestDb};
use tokio_postgres::Client;

/// The SQLSTATE of a statement that must fail.
async fn refused(client: &Client, sql: &str) -> String {
    let err = client.batch_execute(sql).await.expect_err(sql);
    err.code().map(|c| c.code().to_owned()).unwrap_or_default()
}

/// Runs `sql` in a transaction as `role` for the caller `sub`, as the mcp function runs a tool.
async fn as_caller(client: &Client, role: &str, sub: Option<&str>, sql: &str) -> Vec<String> {
    client
        .batch_execute(&format!("BEGIN; SET LOCAL ROLE {role}"))
        .await
        .expect("begin");
    if let Some(sub) = sub {
        client
            .execute(
                "SELECT set_config('parley.caller', json_build_object('sub', $1::text)::text, true)",
                &[&sub],
            )
            .await
            .expect("set the caller");
    }
    let rows = client.query(sql, &[]).await;
    client.batch_execute("ROLLBACK").await.expect("rollback");
    rows.unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

#[test]
fn the_tools_files_exist_and_name_their_domains_tools() {
    assert!(feedback::TOOLS.contains("name = \"lad_by_ref\""));
    assert!(tasks::TOOLS.contains("name = \"create_task\""));
    assert_eq!(
        std::fs::read_to_string(FEEDBACK_TOOLS).expect("feedback tools"),
        feedback::TOOLS
    );
    assert_eq!(
        std::fs::read_to_string(TASKS_TOOLS).expect("tasks tools"),
        tasks::TOOLS
    );
    assert_eq!(all_tools(), format!("{FEEDBACK_TOOLS},{TASKS_TOOLS}"));
}

#[tokio::test]
async fn the_readonly_login_reads_the_feedback_domain_and_writes_nothing() {
    let db = TestDb::with_demo_data(20).await;
    let ro = db.readonly_client().await;
    let bristol: i64 = ro
        .query_one(
            "SELECT count(*) FROM lads WHERE common_key = lad_common_key('Bristol')",
            &[],
        )
        .await
        .expect("readonly can select and call the key functions")
        .get(0);
    assert_eq!(bristol, 1);

    for write in [
        "INSERT INTO lads (code, name, utla_code, utla_name) VALUES ('X', 'x', 'X', 'x')",
        "UPDATE lads SET name = 'Bristol'",
        "DELETE FROM feedback",
        "TRUNCATE feedback",
        "INSERT INTO demo_data_meta (key, value) VALUES ('k', 'v')",
        "SELECT nextval('feedback_id_seq')",
        "INSERT INTO tasks (owner, title) VALUES ('mallory', 'x')",
    ] {
        assert_eq!(refused(&ro, write).await, "42501", "{write}");
    }
}

#[tokio::test]
async fn district_names_normalise_to_matching_keys() {
    let db = TestDb::with_demo_data(1).await;
    let client = db.client().await;
    let cases = [
        ("lad_name_key", "  Brighton  &  Hove. ", "brighton and hove"),
        ("lad_name_key", "Bristol, City of", "bristol city of"),
        ("lad_name_key", "St. Albans", "st albans"),
        ("lad_common_key", "Bristol, City of", "bristol"),
        (
            "lad_common_key",
            "Kingston upon Hull, City of",
            "kingston upon hull",
        ),
        (
            "lad_common_key",
            "Herefordshire, County of",
            "herefordshire",
        ),
        ("lad_common_key", "City of London", "city of london"),
        (
            "lad_common_key",
            "Bournemouth, Christchurch and Poole",
            "bournemouth christchurch and poole",
        ),
    ];
    for (function, input, expected) in cases {
        let got: String = client
            .query_one(&format!("SELECT {function}($1)"), &[&input])
            .await
            .expect("call key function")
            .get(0);
        assert_eq!(got, expected, "{function}({input:?})");
    }
    let row = client
        .query_one(
            "SELECT country, name_key, common_key FROM lads WHERE code = 'W06000015'",
            &[],
        )
        .await
        .expect("Cardiff is loaded");
    assert_eq!(row.get::<_, &str>(0), "Wales");
    assert_eq!(row.get::<_, &str>(1), "cardiff");
    assert_eq!(row.get::<_, &str>(2), "cardiff");
}

#[tokio::test]
async fn loading_the_demo_domains_again_changes_nothing() {
    let db = TestDb::with_demo_data(30).await;
    let mut client = db.client().await;
    let snapshot = "SELECT (SELECT count(*) FROM feedback) || '/' || (SELECT count(*) FROM tasks) \
                    || '/' || (SELECT max(xmin::text::bigint) FROM tasks)";
    let before: String = client.query_one(snapshot, &[]).await.unwrap().get(0);
    let again = parley_cli::demo::load(
        &mut client,
        &parley_cli::demo::DemoOptions {
            feedback: 30,
            ..Default::default()
        },
    )
    .await
    .expect("reload");
    assert_eq!(again.tasks.map(|t| t.seeded), Some(0));
    assert_eq!(again.feedback.map(|f| f.reloaded), Some(false));
    let after: String = client.query_one(snapshot, &[]).await.unwrap().get(0);
    assert_eq!(before, after);
}

#[tokio::test]
async fn each_caller_sees_only_their_own_tasks_even_without_an_owner_filter() {
    let db = TestDb::with_demo_data(1).await;
    let ro = db.readonly_client().await;
    let writer = tasks::WRITER_ROLE;
    let insert = "INSERT INTO tasks (title) VALUES ('mine') RETURNING owner";
    // The owner defaults to the caller; the write role may insert for itself only.
    assert_eq!(
        as_caller(&ro, writer, Some("alice"), insert).await,
        ["alice"]
    );
    ro.batch_execute(&format!(
        "BEGIN; SET LOCAL ROLE {writer};
         SELECT set_config('parley.caller', '{{\"sub\": \"alice\"}}', true);
         INSERT INTO tasks (title) VALUES ('kept'); COMMIT;"
    ))
    .await
    .expect("alice adds a task");

    let all = "SELECT owner || ':' || title FROM tasks ORDER BY id";
    let local = as_caller(&ro, "parley_readonly", Some(tasks::SEED_OWNER), all).await;
    assert_eq!(local.len(), 6, "the seed: {local:?}");
    assert!(local.iter().all(|r| r.starts_with("local-user:")));
    assert_eq!(
        as_caller(&ro, "parley_readonly", Some("alice"), all).await,
        ["alice:kept"]
    );
    assert!(
        as_caller(&ro, "parley_readonly", None, all)
            .await
            .is_empty(),
        "no user, no rows"
    );
    assert!(
        as_caller(
            &ro,
            writer,
            Some("bob"),
            "UPDATE tasks SET title = 'stolen' RETURNING title"
        )
        .await
        .is_empty(),
        "bob's unfiltered UPDATE touches none of alice's tasks"
    );

    // Writing a row for someone else violates the policy.
    ro.batch_execute(&format!(
        "BEGIN; SET LOCAL ROLE {writer};
         SELECT set_config('parley.caller', '{{\"sub\": \"bob\"}}', true);"
    ))
    .await
    .expect("begin as bob");
    let forged = "INSERT INTO tasks (owner, title) VALUES ('alice', 'forged')";
    assert_eq!(refused(&ro, forged).await, "42501");
    ro.batch_execute("ROLLBACK").await.expect("rollback");
}

#[tokio::test]
async fn the_login_role_writes_tasks_only_after_switching_to_the_write_role() {
    let db = TestDb::with_demo_data(1).await;
    let ro = db.readonly_client().await;
    let member: bool = ro
        .query_one(
            "SELECT pg_has_role($1, $2, 'SET') AND NOT pg_has_role($1, $2, 'USAGE')",
            &[&READONLY_USER, &tasks::WRITER_ROLE],
        )
        .await
        .expect("membership")
        .get(0);
    assert!(member, "{READONLY_USER} may SET ROLE but does not inherit");
    ro.batch_execute("SELECT set_config('parley.caller', '{\"sub\": \"alice\"}', false)")
        .await
        .expect("set the caller for the session");
    assert_eq!(
        refused(&ro, "INSERT INTO tasks (title) VALUES ('x')").await,
        "42501"
    );
    assert_eq!(
        refused(
            &ro,
            "INSERT INTO parley.idempotency (caller, tool, key, rows) VALUES ('alice', 't', 'k', '{}')"
        )
        .await,
        "42501"
    );
    // The write role itself may not touch the feedback domain or the conversations.
    ro.batch_execute(&format!("SET ROLE {}", tasks::WRITER_ROLE))
        .await
        .expect("switch");
    for sql in [
        "DELETE FROM feedback",
        "SELECT count(*) FROM chat.messages",
        "CREATE TABLE sneaky (x int)",
    ] {
        assert_eq!(refused(&ro, sql).await, "42501", "{sql}");
    }
}
