//! `parley feedback export` end to end, as a team uses it: the real chat and mcp functions on
//! loopback over a fresh database (the feedback domain, its ad-hoc SQL, a public handbook
//! searched by the documents tools), the scripted model running a document search and its own
//! SQL; a thumbs down with a comment and a thumbs up given through the chat's API; the export
//! (the built binary) has the question, the SQL, the sources, the comment and the model; a
//! person labels the lines and `parley eval` and `parley eval catalog` score them.

mod common;

use std::process::Output;

use common::{failure, stdout_of};
use parley_core::config::Env;
use parley_testkit::TestDb;
use parley_testkit::llm::{ScriptedLlm, Step};
use serde_json::{Value, json};

const MCP_TOKEN: &str = "feedback-test-service-token-0123456789";
const CALLER_KEY: &str = "feedback-test-caller-key-0123456789abcdef";
const SQL_TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/feedback/sql.toml"
);
const COUNT_SQL: &str = "SELECT count(*) AS districts FROM lads";

fn parley(args: &[&str], database_url: &str) -> Output {
    common::parley_with_model(args, database_url)
}

/// A public handbook of one page, ingested with `parley ingest`.
fn handbook(db: &TestDb, dir: &tempfile::TempDir) {
    let folder = dir.path().join("handbook");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("leave.md"),
        "# Leave\n\n## Annual leave\nNew staff get 25 days of paid annual leave a year, plus \
         public holidays.\n",
    )
    .unwrap();
    stdout_of(&parley(
        &[
            "ingest",
            dir.path().to_str().unwrap(),
            "--collection",
            "handbook",
            "--public",
        ],
        &db.url,
    ));
}

/// The mcp function (feedback tools, ad-hoc SQL, documents search) and the chat
/// (`CHAT_AUTH=none`: every request is `local-user`) over `db`; the chat's base URL.
async fn stack(db: &TestDb, llm: &ScriptedLlm) -> String {
    let sql_url = db.sql_reader_url("").await;
    let tools = format!(
        "{},{SQL_TOOLS},{}",
        parley_testkit::domains::FEEDBACK_TOOLS,
        parley_testkit::domains::DOCUMENTS_TOOLS
    );
    let mcp = parley_mcp::Application::build(Env::from_pairs([
        ("DATABASE_URL", db.readonly_url.clone()),
        ("SQL_DATABASE_URL", sql_url),
        ("TOOLS_FILE", tools),
        (
            "EMBEDDINGS_MODEL_DIR",
            parley_testkit::model_dir().display().to_string(),
        ),
        ("MCP_AUTH_TOKEN", MCP_TOKEN.to_owned()),
        ("MCP_CALLER_KEY", CALLER_KEY.to_owned()),
        ("LISTEN_ADDR", "127.0.0.1:0".to_owned()),
    ]))
    .await
    .unwrap_or_else(|e| panic!("the mcp function does not start: {e}"));
    let mcp_addr = mcp.local_addr().expect("bound outside Lambda");
    mcp.spawn().expect("serving plain HTTP");
    let chat = parley_chat::Application::build(Env::from_pairs([
        ("DATABASE_URL", db.url.clone()),
        ("CHAT_AUTH", "none".to_owned()),
        ("MCP_URL", format!("http://{mcp_addr}/mcp")),
        ("MCP_AUTH_TOKEN", MCP_TOKEN.to_owned()),
        ("MCP_CALLER_KEY", CALLER_KEY.to_owned()),
        ("LLM_BASE_URL", llm.base_url()),
        ("LLM_API_KEY", "sk-test-not-a-real-key".to_owned()),
        ("LLM_MODEL", "scripted-model".to_owned()),
        ("LISTEN_ADDR", "127.0.0.1:0".to_owned()),
    ]))
    .await
    .unwrap_or_else(|e| panic!("the chat function does not start: {e}"));
    let addr = chat.local_addr().expect("bound outside Lambda");
    chat.spawn().expect("serving plain HTTP");
    format!("http://{addr}")
}

/// A turn asking `message`; its JSON answer.
async fn ask(http: &reqwest::Client, base: &str, message: &str) -> Value {
    let response = http
        .post(format!("{base}/api/chat"))
        .json(&json!({ "message": message }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Feedback on message `seq` of `conversation`; the feedback stored.
async fn rate(
    http: &reqwest::Client,
    base: &str,
    conversation: &str,
    seq: u64,
    body: Value,
) -> Value {
    let response = http
        .put(format!(
            "{base}/api/conversations/{conversation}/messages/{seq}/feedback"
        ))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    answer["feedback"].clone()
}

fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[tokio::test]
async fn a_thumbs_down_is_exported_with_its_sql_and_sources_and_once_labelled_both_evals_score_it()
{
    let db = TestDb::with_demo_data(300).await;
    let dir = tempfile::tempdir().unwrap();
    handbook(&db, &dir);
    let llm = ScriptedLlm::start(vec![
        Step::calls([
            (
                "search_documents",
                r#"{"query": "annual leave for new staff"}"#.to_owned(),
            ),
            ("run_sql", json!({ "sql": COUNT_SQL }).to_string()),
        ]),
        Step::text("New staff get 20 days of leave [S1]."),
        Step::text("There are several districts."),
    ])
    .await;
    let base = stack(&db, &llm).await;
    let http = reqwest::Client::new();

    let leave = ask(
        &http,
        &base,
        "How many days of annual leave do new staff get?",
    )
    .await;
    let leave_id = leave["conversation_id"].as_str().unwrap().to_owned();
    assert_eq!(leave["traces"][1]["name"], "run_sql", "{leave}");
    assert_eq!(leave["traces"][1]["is_error"], false, "{leave}");
    assert_eq!(leave["sources"][0]["uri"], "handbook/leave.md", "{leave}");
    let down = rate(
        &http,
        &base,
        &leave_id,
        leave["seq"].as_u64().expect("the answer's seq"),
        json!({"rating": "down", "comment": "The handbook says 25 days, not 20."}),
    )
    .await;
    assert_eq!(down["rating"], "down");
    let districts = ask(&http, &base, "How many districts are there?").await;
    let districts_id = districts["conversation_id"].as_str().unwrap().to_owned();
    let seq = districts["seq"].as_u64().expect("the answer's seq");
    rate(&http, &base, &districts_id, seq, json!({"rating": "up"})).await;

    // Only the thumbs down, with everything that explains it.
    let out = dir.path().join("down.jsonl");
    let said = stdout_of(&parley(
        &[
            "feedback",
            "export",
            "--rating",
            "down",
            "--out",
            out.to_str().unwrap(),
        ],
        &db.url,
    ));
    assert!(said.contains("1 feedback line written to"), "{said}");
    let exported = lines(&std::fs::read_to_string(&out).unwrap());
    assert_eq!(exported.len(), 1, "{exported:?}");
    let line = &exported[0];
    assert_eq!(line["q"], "How many days of annual leave do new staff get?");
    assert_eq!(line["pages"], json!([]));
    assert_eq!(line["tables"], json!([]));
    assert_eq!(line["split"], Value::Null);
    assert_eq!(line["id"], format!("{leave_id}/2"));
    let feedback = &line["feedback"];
    assert_eq!(feedback["rating"], "down");
    assert_eq!(feedback["comment"], "The handbook says 25 days, not 20.");
    assert_eq!(feedback["answer"], "New staff get 20 days of leave [S1].");
    assert_eq!(feedback["owner"], "local-user");
    assert_eq!(feedback["conversation_id"], leave_id.as_str());
    assert_eq!(feedback["seq"], 2);
    assert_eq!(feedback["error"], Value::Null);
    // From the turn's row in the usage ledger.
    assert_eq!(feedback["model"], "scripted-model");
    let calls = feedback["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{feedback}");
    assert_eq!(calls[0]["name"], "search_documents");
    assert_eq!(calls[0].get("sql"), None, "{feedback}");
    assert_eq!(calls[1]["name"], "run_sql");
    assert_eq!(calls[1]["sql"], COUNT_SQL);
    assert_eq!(calls[1]["arguments"]["sql"], COUNT_SQL);
    assert_eq!(calls[1]["is_error"], false);
    let sources = feedback["sources"].as_array().unwrap();
    assert_eq!(sources[0]["id"], "S1", "{feedback}");
    assert_eq!(sources[0]["uri"], "handbook/leave.md");
    assert_eq!(sources[0]["title"], leave["sources"][0]["title"]);
    assert_eq!(sources[0]["cited"], true);
    assert!(feedback["given_at"].is_string() && feedback["answered_at"].is_string());

    // Both, oldest first, to stdout; a period that ends before it starts is refused.
    let all = lines(&stdout_of(&parley(&["feedback", "export"], &db.url)));
    let ratings: Vec<&Value> = all.iter().map(|l| &l["feedback"]["rating"]).collect();
    assert_eq!(ratings, [&json!("down"), &json!("up")]);
    assert_eq!(all[1]["q"], "How many districts are there?");
    assert!(
        lines(&stdout_of(&parley(
            &["feedback", "export", "--since", "2999-01-01"],
            &db.url
        )))
        .is_empty()
    );
    let refused = parley(
        &[
            "feedback",
            "export",
            "--since",
            "2026-11-24",
            "--until",
            "2026-11-23",
        ],
        &db.url,
    );
    assert!(failure(&refused, 2).contains("--until"));

    // A person labels the thumbs down for the documents eval and the thumbs up for the catalog.
    let mut labelled = all.clone();
    labelled[0]["pages"] = json!(["handbook/leave.md"]);
    labelled[0]["split"] = json!("dev");
    labelled[1]["tables"] = json!(["public.lads"]);
    let file = dir.path().join("labelled.jsonl");
    let text: String = labelled.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let file = file.to_str().unwrap();

    let unlabelled = parley(&["eval", file], &db.url);
    let said = failure(&unlabelled, 2);
    assert!(
        said.contains("line 2") && said.contains("not labelled") && said.contains("`pages`"),
        "{said}"
    );
    let documents = parley(&["eval", file, "--skip-unlabelled"], &db.url);
    let report = stdout_of(&documents);
    assert!(
        report.starts_with(&format!("1 questions from {file}")),
        "{report}"
    );
    assert!(report.contains("hybrid (search_documents)"), "{report}");
    assert!(
        String::from_utf8_lossy(&documents.stderr).contains("skipped 1 unlabelled question"),
        "{}",
        String::from_utf8_lossy(&documents.stderr)
    );

    // The catalog of the demo's tables, indexed, served to the catalog eval.
    let catalog = dir.path().join("catalog.toml");
    let catalog = catalog.to_str().unwrap();
    stdout_of(&parley(
        &["catalog", "init", "--schema", "public", "--out", catalog],
        &db.url,
    ));
    stdout_of(&parley(&["catalog", "index", catalog], &db.url));
    let tools = dir.path().join("tools.toml");
    std::fs::write(&tools, format!("[catalog]\nfile = \"{catalog}\"\n")).unwrap();
    let scored = stdout_of(&parley(
        &[
            "eval",
            "catalog",
            "--questions",
            file,
            "--tools",
            tools.to_str().unwrap(),
            "--skip-unlabelled",
            "--json",
        ],
        &db.url,
    ));
    let report: Value = serde_json::from_str(&scored).unwrap();
    assert_eq!(report["groups"]["all"]["questions"], 1, "{report}");
    assert_eq!(report["questions"][0]["id"], format!("{districts_id}/2"));
    assert_eq!(report["questions"][0]["tables"], json!(["public.lads"]));
}
