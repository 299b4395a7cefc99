//! The assistant over a semantic catalog (issue 35, item 7): with a `[catalog]` served, the
//! model is told to search the catalog, look values up and prefer verified queries before it
//! writes SQL (in the server's guidance and in `run_sql`'s description), and a turn that does
//! so gets the catalog's real rows, on the JSON path and on the stream.

use parley_testkit::TestDb;
use parley_testkit::catalog::Served;
use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::helpers::{TestChat, spawn_chat_with_mcp, sse_data};

const SQL_TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/feedback/sql.toml"
);

const QUESTION: &str = "How much negative feedback did Bristol get?";

/// The model searches the catalog, looks Bristol up, then runs its SQL.
fn steps() -> Vec<Step> {
    vec![
        Step::call("search_catalog", json!({"question": QUESTION}).to_string()),
        Step::call("find_values", json!({"text": "bristol"}).to_string()),
        Step::call(
            "run_sql",
            json!({"sql": "SELECT count(*) AS n FROM feedback f JOIN lads l ON l.code = f.lad_code \
                           WHERE l.name = 'Bristol, City of' AND f.sentiment = 'negative'"})
            .to_string(),
        ),
        Step::text("Bristol had this much negative feedback."),
    ]
}

/// A chat whose mcp serves the SQL tools and a catalog of the feedback demo's tables (kept
/// on disk as long as the catalog lives).
async fn chat_over_a_catalog(db: &TestDb) -> (TestChat, Served) {
    let served = parley_testkit::catalog::served(db, &["public"]).await;
    let sql_url = db.sql_reader_url("").await;
    let files = format!("{SQL_TOOLS},{}", served.tools_file.display());
    let model = parley_testkit::model_dir().display().to_string();
    let chat = spawn_chat_with_mcp(
        db,
        &[
            ("TOOLS_FILE", &files),
            ("SQL_DATABASE_URL", &sql_url),
            ("EMBEDDINGS_MODEL_DIR", &model),
        ],
        steps(),
    )
    .await;
    (chat, served)
}

/// What the model was told and offered in its first request.
fn assert_told_to_use_the_catalog(chat: &TestChat) {
    let first = &chat.llm.requests()[0];
    let instructions = first["instructions"].as_str().unwrap_or_default();
    assert!(
        instructions.contains("call search_catalog") && instructions.contains("find_values"),
        "{instructions}"
    );
    let tools = first["tools"].as_array().unwrap();
    let run_sql = tools
        .iter()
        .find(|t| t["name"] == "run_sql")
        .expect("run_sql offered");
    assert!(
        run_sql["description"]
            .as_str()
            .unwrap()
            .contains("Before writing SQL, call search_catalog"),
        "{run_sql}"
    );
    for name in ["search_catalog", "find_values"] {
        assert!(tools.iter().any(|t| t["name"] == name), "{name} offered");
    }
}

fn assert_catalog_rows(search: &Value, values: &Value) {
    let rows = search["rows"].as_array().expect("search rows");
    assert!(
        rows.iter().any(|r| r["table"] == "public.feedback"),
        "{search}"
    );
    assert!(rows.iter().any(|r| r["kind"] == "relationship"), "{search}");
    let found = values["rows"].as_array().expect("value rows");
    // The stored spelling, and where it is stored.
    assert!(
        found.iter().any(|r| r["table"] == "public.lads"
            && r["column"] == "name"
            && r["value"] == "Bristol, City of"),
        "{values}"
    );
}

#[tokio::test]
async fn a_json_turn_searches_the_catalog_and_looks_values_up_before_its_sql() {
    let db = TestDb::with_demo_data(3_000).await;
    let (chat, _catalog) = chat_over_a_catalog(&db).await;
    let body = chat.turn("alice", json!({"message": QUESTION})).await;
    assert_told_to_use_the_catalog(&chat);
    let traces = body["traces"].as_array().expect("traces");
    let names: Vec<&str> = traces.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["search_catalog", "find_values", "run_sql"],
        "{body}"
    );
    assert_catalog_rows(&traces[0]["output"], &traces[1]["output"]);
    assert!(traces[2]["output"]["rows"][0]["n"].is_number(), "{body}");
}

#[tokio::test]
async fn a_streamed_turn_carries_the_catalogs_rows_as_tool_outputs() {
    let db = TestDb::with_demo_data(3_000).await;
    let (chat, _catalog) = chat_over_a_catalog(&db).await;
    let response = chat
        .post_streamed("alice", "/api/chat", json!({"message": QUESTION}))
        .await;
    assert_eq!(response.status(), 200);
    let parts = sse_data(&response.text().await.unwrap());
    assert_told_to_use_the_catalog(&chat);
    let input = |name: &str| {
        parts
            .iter()
            .find(|p| p["type"] == "tool-input-available" && p["toolName"] == name)
            .unwrap_or_else(|| panic!("{name} called: {parts:?}"))["toolCallId"]
            .clone()
    };
    let output = |id: Value| {
        parts
            .iter()
            .find(|p| p["type"] == "tool-output-available" && p["toolCallId"] == id)
            .expect("its output")["output"]
            .clone()
    };
    let search = output(input("search_catalog"));
    let values = output(input("find_values"));
    assert_catalog_rows(&search, &values);
}
