//! Behind a transaction-mode pooler (PgBouncer, as RDS Proxy or PgBouncer in a deployment) with
//! one server connection per database role for every client connection of the function: calls
//! of every kind at once (declared reads, document search, ad-hoc SQL, tools that try to leave
//! state), all answered, and nothing left on the server sessions afterwards (no named prepared
//! statement, no session setting, no advisory lock, no temporary table, no cursor).

use futures_util::future::join_all;
use serde_json::json;

use crate::helpers::{
    FEEDBACK_ROWS, FEEDBACK_TOOLS_FILE, Options, env, ingest_folder, run_sql, spawn_on,
};
use parley_testkit::{PgBouncer, TestDb};

/// Tools that try to leave state on their session, one of them failing after taking a lock.
const SESSION_TOOLS: &str = r#"
[[tool]]
name = "leave_setting"
description = "Changes a setting for the session."
sql = "SELECT set_config('work_mem', '1234kB', false) AS work_mem"

[[tool]]
name = "take_lock"
description = "Takes a session advisory lock."
sql = "SELECT pg_try_advisory_lock(777) AS locked"

[[tool]]
name = "take_lock_and_fail"
description = "Takes a session advisory lock, then fails."
sql = "SELECT pg_try_advisory_lock(778) AND 1 / (SELECT count(*) - count(*) FROM lads) = 1 AS never"
"#;

const DOCUMENTS_TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/documents/tools.toml"
);

#[tokio::test]
async fn calls_through_a_transaction_pooler_leave_nothing_on_the_shared_server_session() {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(
        docs.join("leave.md"),
        "# Leave\n\nStaff take twenty days of annual leave.\n",
    )
    .unwrap();
    std::fs::write(
        docs.join("expenses.md"),
        "# Expenses\n\nClaim travel within a month.\n",
    )
    .unwrap();
    ingest_folder(&db, &docs, "handbook", Vec::new()).await;
    let sql_url = db
        .sql_reader_url("GRANT SELECT ON public.lads TO parley_sql_reader;")
        .await;
    let session_tools = dir.path().join("session.toml");
    std::fs::write(&session_tools, SESSION_TOOLS).unwrap();
    let sql_tools = dir.path().join("sql.toml");
    std::fs::write(&sql_tools, "[sql]\nschemas = [\"public\"]\n").unwrap();
    let tools = format!(
        "{FEEDBACK_TOOLS_FILE},{DOCUMENTS_TOOLS},{},{}",
        session_tools.display(),
        sql_tools.display()
    );

    let bouncer = PgBouncer::start(&db.url, 1);
    let model = parley_testkit::model_dir().display().to_string();
    let app = spawn_on(
        db.clone(),
        Options {
            database_url: Some(bouncer.url(&db.readonly_url)),
            // Four client connections, one server connection: each call's transaction may
            // follow another client's on the same server session. The same for the SQL role.
            extra_env: env(&[
                ("DB_POOL_MAX_SIZE", "4"),
                ("TOOLS_FILE", &tools),
                ("EMBEDDINGS_MODEL_DIR", &model),
                ("SQL_DATABASE_URL", &bouncer.url(&sql_url)),
                ("SQL_POOL_MAX_SIZE", "2"),
            ]),
            ..Options::default()
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nPgBouncer's log:\n{}", bouncer.log()));

    let calls = (0..12).flat_map(|i| {
        [
            ("lad_by_ref", json!({"ref": "Leeds"})),
            ("list_lads", json!({"limit": 5 + i})),
            ("leave_setting", json!({})),
            ("take_lock", json!({})),
            ("take_lock_and_fail", json!({})),
            (
                "search_documents",
                json!({"query": "how much annual leave"}),
            ),
            (
                "run_sql",
                json!({"sql": "SELECT count(*) AS lads FROM lads"}),
            ),
        ]
    });
    let answers = join_all(calls.map(|(tool, args)| {
        let app = &app;
        async move { (tool, app.call(tool, args).await) }
    }))
    .await;
    for (tool, result) in &answers {
        let failed = result["isError"] == true;
        assert_eq!(
            failed,
            *tool == "take_lock_and_fail",
            "{tool}: {result}\nPgBouncer's log:\n{}",
            bouncer.log()
        );
    }
    let leeds = answers
        .iter()
        .find(|(tool, _)| *tool == "lad_by_ref")
        .map(|(_, r)| {
            r["structuredContent"]["rows"]
                .as_array()
                .map_or(0, Vec::len)
        });
    assert!(leeds > Some(0), "lad_by_ref found Leeds");
    let search = answers
        .iter()
        .find(|(tool, _)| *tool == "search_documents")
        .map(|(_, r)| r["structuredContent"]["rows"][0]["uri"].clone());
    assert_eq!(search, Some(json!("leave.md")));
    let counted = run_sql(&app, "SELECT count(*) AS lads FROM lads").await;
    assert!(counted.is_ok(), "{counted:?}");

    // Let the audit's writer catch up: its records go through the same pool.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        bouncer.leftovers(&db.readonly_url).await,
        Vec::<String>::new(),
        "the server session the function's connections shared"
    );
    assert_eq!(
        bouncer.leftovers(&sql_url).await,
        Vec::<String>::new(),
        "the server session the SQL tools' connections shared"
    );
}
