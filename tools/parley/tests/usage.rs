//! `parley usage` as a person runs it, after real turns through the chat: two chats on one
//! database asking model-x (priced) and model-y (not in `MODEL_PRICES`), scripted with known
//! tokens, for two users. The command's JSON equals what `GET /api/usage` answers an admin
//! (and a user, for `--user`), per user, model and day; the table and CSV say the same, an
//! unpriced model's cost is unknown (never 0), and bad arguments exit 2 naming themselves.

mod common;

use std::process::{Command, Output};

use common::{failure, stdout_of};
use parley_core::config::Env;
use parley_testkit::TestDb;
use parley_testkit::llm::{Plan, ScriptedLlm, Step, Usage};
use serde_json::{Value, json};

const MCP_TOKEN: &str = "usage-test-service-token-0123456789";
const CALLER_KEY: &str = "usage-test-caller-key-0123456789abcdef";
const JWT_SECRET: &str = "usage-test-jwt-secret-0123456789abcdef";
const PRICES: &str = r#"{"model-x": {"input": 1, "output": 4}}"#;

fn token(sub: &str, groups: &[&str]) -> String {
    let exp = jsonwebtoken::get_current_timestamp() + 3600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &json!({"sub": sub, "groups": groups, "exp": exp}),
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap()
}

async fn mcp(db: &TestDb) -> String {
    let app = parley_mcp::Application::build(Env::from_pairs([
        ("DATABASE_URL", db.readonly_url.as_str()),
        ("TOOLS_FILE", parley_testkit::domains::FEEDBACK_TOOLS),
        ("MCP_AUTH_TOKEN", MCP_TOKEN),
        ("MCP_CALLER_KEY", CALLER_KEY),
        ("LISTEN_ADDR", "127.0.0.1:0"),
    ]))
    .await
    .expect("the mcp function starts");
    let addr = app.local_addr().expect("bound outside Lambda");
    app.spawn().expect("serving plain HTTP");
    format!("http://{addr}/mcp")
}

/// A chat asking `model`, whose every turn is `steps`, each answer reporting `usage`: its
/// base URL, and the model (which serves as long as it is kept).
async fn chat(
    db: &TestDb,
    mcp_url: &str,
    model: &str,
    steps: Vec<Step>,
    usage: Usage,
) -> (String, ScriptedLlm) {
    let llm = ScriptedLlm::serve(Plan::PerTurn(steps), 0).await.unwrap();
    llm.set_usage(usage);
    let base_url = llm.base_url();
    let app = parley_chat::Application::build(Env::from_pairs([
        ("DATABASE_URL", db.url.as_str()),
        ("JWT_SECRET", JWT_SECRET),
        ("MCP_URL", mcp_url),
        ("MCP_AUTH_TOKEN", MCP_TOKEN),
        ("MCP_CALLER_KEY", CALLER_KEY),
        ("LLM_BASE_URL", base_url.as_str()),
        ("LLM_API_KEY", "sk-test-not-a-real-key"),
        ("LLM_MODEL", model),
        ("ADMIN_GROUP", "ops"),
        ("MODEL_PRICES", PRICES),
        ("LISTEN_ADDR", "127.0.0.1:0"),
    ]))
    .await
    .expect("the chat function starts");
    let addr = app.local_addr().expect("bound outside Lambda");
    app.spawn().expect("serving plain HTTP");
    (format!("http://{addr}"), llm)
}

async fn turn(chat: &str, bearer: &str) {
    let response = reqwest::Client::new()
        .post(format!("{chat}/api/chat"))
        .bearer_auth(bearer)
        .json(&json!({"message": "How many districts has Kent?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

async fn api(chat: &str, bearer: &str, query: &str) -> Value {
    let response = reqwest::Client::new()
        .get(format!("{chat}/api/usage{query}"))
        .bearer_auth(bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

fn parley(args: &[&str], database_url: &str, prices: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_parley"))
        .arg("usage")
        .args(args)
        .env_clear()
        .env("DATABASE_URL", database_url)
        .env("MODEL_PRICES", prices)
        .output()
        .expect("parley runs")
}

/// The parts the command and the API both give (the API adds `admin`).
fn report(mut doc: Value) -> Value {
    doc.as_object_mut().unwrap().remove("admin");
    doc
}

#[tokio::test(flavor = "multi_thread")]
async fn parley_usage_prints_what_the_api_answers_after_real_turns() {
    let db = TestDb::with_demo_data(200).await;
    let mcp = mcp(&db).await;
    // model-x: a tool call, then an answer (2 model calls of 700 in and 70 out); model-y: an
    // answer of 50 in and 5 out.
    let (x, _model_x) = chat(
        &db,
        &mcp,
        "model-x",
        vec![
            Step::call("list_lads", r#"{"upper_tier": "Kent", "limit": 3}"#),
            Step::text("Three."),
        ],
        Usage {
            input: 700,
            output: 70,
        },
    )
    .await;
    let (y, _model_y) = chat(
        &db,
        &mcp,
        "model-y",
        vec![Step::text("Hello.")],
        Usage {
            input: 50,
            output: 5,
        },
    )
    .await;
    let (ana, ben) = (token("ana", &["ops"]), token("ben", &[]));
    turn(&x, &ana).await;
    turn(&x, &ana).await;
    turn(&x, &ben).await;
    turn(&y, &ben).await;

    for by in ["user", "model", "day"] {
        let from_api = api(&x, &ana, &format!("?since=1d&by={by}")).await;
        assert_eq!(from_api["admin"], true);
        let out = parley(
            &["--since", "1d", "--by", by, "--format", "json"],
            &db.url,
            PRICES,
        );
        let printed: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
        assert_eq!(printed, report(from_api), "--by {by}");
    }
    let by_user = api(&x, &ana, "?since=1d&by=user").await;
    // ana: 2 turns of 2 calls at 700/70: 2800 in, 280 out; 2800*1 + 280*4 = 3920 micro-USD.
    assert_eq!(
        by_user["rows"][0],
        json!({"key": "ana", "turns": 2, "model_calls": 4, "input_tokens": 2800,
               "output_tokens": 280, "tool_calls": 2, "tool_errors": 0, "errors": 0,
               "cost": 0.00392, "unpriced": []})
    );
    // ben's model-y tokens have no price: his cost, and the total, are unknown.
    assert_eq!(by_user["rows"][1]["cost"], Value::Null);
    assert_eq!(by_user["rows"][1]["unpriced"], json!(["model-y"]));
    assert_eq!(by_user["totals"]["cost"], Value::Null);

    // One user's, as that user sees it.
    let ben_own = api(&y, &ben, "?since=1d&by=model").await;
    assert_eq!(ben_own["admin"], false);
    let out = parley(
        &[
            "--since", "1d", "--by", "model", "--user", "ben", "--format", "json",
        ],
        &db.url,
        PRICES,
    );
    let printed: Value = serde_json::from_str(&stdout_of(&out)).unwrap();
    assert_eq!(printed, report(ben_own));

    // The table: one line per user, the totals, the period and the unpriced model named.
    let table = stdout_of(&parley(&["--since", "1d"], &db.url, PRICES));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("user") && lines[0].ends_with("cost (USD)"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("ana ") && lines[1].ends_with(" 0.00392"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("ben ") && lines[2].ends_with(" unknown"),
        "{table}"
    );
    assert!(lines[3].starts_with("total "), "{table}");
    assert_eq!(
        lines.last().unwrap(),
        &"cost unknown: no price in MODEL_PRICES for model-y",
        "{table}"
    );
    // CSV: the header and one record per model, CRLF, an unknown cost empty.
    let csv = stdout_of(&parley(
        &["--since", "1d", "--by", "model", "--format", "csv"],
        &db.url,
        PRICES,
    ));
    assert_eq!(
        csv,
        "model,turns,model_calls,input_tokens,output_tokens,tool_calls,tool_errors,errors,cost_usd\r\n\
         model-x,3,6,4200,420,3,0,0,0.00588\r\n\
         model-y,1,1,50,5,0,0,0,\r\n"
    );
    // With a default price, nothing is unknown.
    let priced = parley(
        &["--since", "1d", "--format", "json"],
        &db.url,
        r#"{"model-x": {"input": 1, "output": 4}, "*": {"input": 10, "output": 10}}"#,
    );
    let priced: Value = serde_json::from_str(&stdout_of(&priced)).unwrap();
    // ben: 1400*1 + 140*4 on model-x (a tool call and an answer), 55 tokens at 10 per
    // million on model-y.
    assert_eq!(priced["rows"][1]["cost"], json!(0.00251));
}

#[test]
fn bad_arguments_and_prices_exit_2_naming_them() {
    // Nothing listens on this URL: each is refused before connecting.
    let nowhere = "postgres://u@127.0.0.1:9/none";
    let err = failure(&parley(&["--since", "yesterday"], nowhere, PRICES), 2);
    assert!(err.contains("--since") && err.contains("7d"), "{err}");
    let err = failure(&parley(&["--by", "week"], nowhere, PRICES), 2);
    assert!(
        err.contains("--by") && err.contains("user, model or day"),
        "{err}"
    );
    let err = failure(&parley(&["--format", "xml"], nowhere, PRICES), 2);
    assert!(err.contains("--format"), "{err}");
    let err = failure(
        &parley(
            &["--since", "2026-11-02", "--until", "2026-11-01"],
            nowhere,
            PRICES,
        ),
        2,
    );
    assert!(err.contains("until"), "{err}");
    let err = failure(
        &parley(&[], nowhere, r#"{"m": {"input": -1, "output": 1}}"#),
        2,
    );
    assert!(err.contains("MODEL_PRICES"), "{err}");
}
