//! A question no declared tool answers, end to end: the model writes SQL, the chat runs it
//! through the mcp function's `run_sql` (as the signed-in user, over real HTTP), and the audit
//! trail records who asked.

use std::time::{Duration, Instant};

use parley_testkit::TestDb;
use parley_testkit::llm::Step;
use serde_json::json;

use crate::helpers::spawn_chat_with_mcp;

const TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/feedback/tools.toml,",
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/feedback/sql.toml"
);

const QUESTION_SQL: &str = "SELECT l.name, \
    count(*) FILTER (WHERE f.created_at >= date_trunc('quarter', now())) AS this_quarter, \
    count(*) FILTER (WHERE f.created_at >= date_trunc('quarter', now()) - interval '3 months' \
                       AND f.created_at < date_trunc('quarter', now())) AS last_quarter \
    FROM feedback f JOIN lads l ON l.code = f.lad_code WHERE f.sentiment = 'negative' \
    GROUP BY l.name ORDER BY 2 DESC, 1 LIMIT 3";

#[tokio::test]
async fn the_model_answers_with_its_own_sql_and_the_audit_names_the_user() {
    let db = TestDb::with_demo_data(3_000).await;
    let sql_url = db.sql_reader_url("").await;
    let chat = spawn_chat_with_mcp(
        &db,
        &[("TOOLS_FILE", TOOLS), ("SQL_DATABASE_URL", &sql_url)],
        vec![
            Step::call("run_sql", json!({ "sql": QUESTION_SQL }).to_string()),
            Step::text("These districts had the most negative feedback this quarter."),
        ],
    )
    .await;

    let body = chat
        .turn(
            "alice",
            json!({"message": "Which districts had more negative feedback this quarter than last?"}),
        )
        .await;
    let trace = &body["traces"][0];
    assert_eq!(trace["name"], "run_sql", "{body}");
    let rows = trace["output"]["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{trace}");
    assert!(rows[0]["this_quarter"].is_number(), "{trace}");
    // The model was offered the SQL tools, described with their schema.
    let offered = chat.llm.requests()[0]["tools"].to_string();
    assert!(offered.contains("run_sql") && offered.contains("describe_table"));

    let client = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let row = loop {
        let rows = client
            .query(
                "SELECT caller, outcome, rows, statement FROM parley.audit WHERE tool = 'run_sql'",
                &[],
            )
            .await
            .unwrap();
        if let Some(row) = rows.into_iter().next() {
            break row;
        }
        assert!(Instant::now() < deadline, "run_sql was not audited");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(row.get::<_, String>(0), "alice");
    assert_eq!(row.get::<_, String>(1), "ok");
    assert_eq!(row.get::<_, Option<i32>>(2), Some(3));
    assert_eq!(
        row.get::<_, Option<String>>(3).as_deref(),
        Some(QUESTION_SQL)
    );
}
