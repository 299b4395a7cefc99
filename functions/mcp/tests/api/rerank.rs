//! The optional reranker (`RERANK=http`) end to end: documents ingested by the CLI's own code,
//! search_documents called over HTTP, and a stand-in `/rerank` service on a real port that
//! scores each document by the reverse of the order it was sent in, so the reranked order is
//! known exactly. It also fails on demand (500, too slow, a malformed answer).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::post};
use parley_testkit::TestDb;
use parley_testkit::domains::DOCUMENTS_TOOLS;
use serde_json::{Value, json};

use crate::helpers::{Options, TestApp, env, ingest_folder, spawn_on};

const KEY: &str = "rk-test-0123456789";

/// What the stand-in does with the next requests; 0 (the default) is to score them.
const FAILS: u8 = 1;
const SLOW: u8 = 2;
const WRONG_COUNT: u8 = 3;

#[derive(Clone, Default)]
struct StandIn {
    mode: Arc<AtomicU8>,
    /// Each request's body and `Authorization` header.
    seen: Arc<Mutex<Vec<(Value, String)>>>,
}

impl StandIn {
    fn requests(&self) -> Vec<(Value, String)> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

async fn rerank(State(s): State<StandIn>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let count = body["documents"].as_array().map_or(0, Vec::len);
    s.seen.lock().unwrap().push((body, auth));
    match s.mode.load(Ordering::SeqCst) {
        FAILS => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        SLOW => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Json(json!({"results": []})).into_response()
        }
        WRONG_COUNT => {
            Json(json!({"results": [{"index": 0, "relevance_score": 1.0}]})).into_response()
        }
        // Later documents score higher: the reranked order is the sent order reversed. Sent
        // best-first so a client that ignores `index` would get it wrong.
        _ => {
            let results: Vec<Value> = (0..count)
                .rev()
                .map(|i| json!({"index": i, "relevance_score": i as f64 / 10.0}))
                .collect();
            Json(json!({"id": "x", "results": results})).into_response()
        }
    }
}

/// The stand-in on `127.0.0.1:0`; its `/rerank` URL.
async fn stand_in() -> (StandIn, String) {
    let state = StandIn::default();
    let app = Router::new()
        .route("/rerank", post(rerank))
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/rerank", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (state, url)
}

/// Six short pages on the same topic, one passage each, so every one is found.
async fn ingested() -> TestDb {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    for (i, team) in ["finance", "sales", "support", "legal", "research", "design"]
        .iter()
        .enumerate()
    {
        std::fs::write(
            dir.path().join(format!("{team}.md")),
            format!(
                "# Annual leave policy for {team}\n\nThe {team} team accrues {} days of annual \
                 leave a month under this leave policy.\n",
                i + 1
            ),
        )
        .unwrap();
    }
    let printed = ingest_folder(&db, dir.path(), "policies", Vec::new()).await;
    assert!(printed.contains("6 added"), "{printed}");
    db
}

/// The documents tools with `rerank`'s depth set to `depth`, served with `settings`.
async fn spawn_reranking(depth: u64, settings: &[(&str, &str)]) -> TestApp {
    let tools = std::fs::read_to_string(DOCUMENTS_TOOLS).unwrap();
    let declared = "depth = 20 }";
    assert!(tools.contains(declared), "search_documents declares rerank");
    let tools = tools.replace(declared, &format!("depth = {depth} }}"));
    let model_dir = parley_testkit::model_dir().display().to_string();
    let mut pairs = vec![("EMBEDDINGS_MODEL_DIR", model_dir.as_str())];
    pairs.extend_from_slice(settings);
    spawn_on(
        ingested().await,
        Options {
            tools_toml: Some(tools),
            extra_env: env(&pairs),
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts with a reranker")
}

/// The snippets and the whole result of a search for the leave policy, `limit` rows.
async fn search(app: &TestApp, limit: u64) -> (Vec<String>, Value) {
    let result = app
        .rows(
            "search_documents",
            json!({"query": "annual leave policy", "limit": limit}),
        )
        .await;
    let snippets = result["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("rows: {result}"))
        .iter()
        .map(|r| r["snippet"].as_str().unwrap().to_owned())
        .collect();
    (snippets, result)
}

fn documents(request: &Value) -> Vec<String> {
    request["documents"]
        .as_array()
        .unwrap_or_else(|| panic!("documents: {request}"))
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_reranked_search_returns_the_rerankers_order_fetched_deep_and_cut_to_the_limit() {
    let (stand_in, url) = stand_in().await;
    let app = spawn_reranking(
        4,
        &[
            ("RERANK", "http"),
            ("RERANK_URL", &url),
            ("RERANK_MODEL", "rerank-test"),
            ("RERANK_API_KEY", KEY),
        ],
    )
    .await;

    let (rows, result) = search(&app, 2).await;
    let requests = stand_in.requests();
    assert_eq!(requests.len(), 1, "one request per search");
    let (body, auth) = &requests[0];
    assert_eq!(body["query"], "annual leave policy");
    assert_eq!(body["model"], "rerank-test");
    assert_eq!(auth, &format!("Bearer {KEY}"));
    let sent = documents(body);
    assert_eq!(sent.len(), 4, "depth rows were sent: {sent:?}");
    assert_eq!(body["top_n"], 4);
    assert_eq!(
        rows,
        [sent[3].clone(), sent[2].clone()],
        "the reranker's best two, in its order"
    );
    assert_eq!(result["truncated"], true, "more rows matched: {result}");

    // A limit past the depth: the call fetches one more than it returns, and every passage
    // found is reranked.
    let (rows, result) = search(&app, 8).await;
    let sent = documents(&stand_in.requests()[0].0);
    assert_eq!(sent.len(), 6, "all six pages: {sent:?}");
    let reversed: Vec<String> = sent.iter().rev().cloned().collect();
    assert_eq!(rows, reversed);
    assert_eq!(result["truncated"], false, "{result}");
}

#[tokio::test]
async fn when_the_reranker_fails_the_search_still_answers_in_its_own_order() {
    let (stand_in, url) = stand_in().await;
    let app = spawn_reranking(
        4,
        &[
            ("RERANK", "http"),
            ("RERANK_URL", &url),
            ("RERANK_TIMEOUT_MS", "300"),
            ("RERANK_MAX_RETRIES", "1"),
            ("RERANK_RETRY_BUDGET_MS", "1000"),
        ],
    )
    .await;

    for (mode, attempts) in [(FAILS, 2), (WRONG_COUNT, 1), (SLOW, 2)] {
        stand_in.mode.store(mode, Ordering::SeqCst);
        let started = Instant::now();
        let (rows, result) = search(&app, 3).await;
        let elapsed = started.elapsed();
        let requests = stand_in.requests();
        assert_eq!(requests.len(), attempts, "mode {mode}: {result}");
        let sent = documents(&requests[0].0);
        assert_eq!(rows, sent[..3], "mode {mode}: the search's own order");
        assert_eq!(result["truncated"], true, "mode {mode}: {result}");
        // Two attempts of 300 ms and at most 1 s of waiting, far from the stand-in's 5 s.
        assert!(elapsed < Duration::from_secs(3), "mode {mode}: {elapsed:?}");
    }
}

#[tokio::test]
async fn with_rerank_off_nothing_is_sent_and_the_search_answers() {
    let (stand_in, url) = stand_in().await;
    let app = spawn_reranking(4, &[("RERANK", "off"), ("RERANK_URL", &url)]).await;
    let (rows, _) = search(&app, 2).await;
    assert_eq!(rows.len(), 2);
    assert!(stand_in.requests().is_empty());
}

#[tokio::test]
async fn a_rerank_text_naming_a_column_the_statement_does_not_return_stops_start_up() {
    let tools = r#"
[[tool]]
name = "misranked"
description = "d"
rerank = { query = "q", text = "body", depth = 10 }
sql = "SELECT 1 AS id, :q AS text"

[tool.params.q]
type = "string"
required = true
"#;
    let err = spawn_on(
        TestDb::migrated().await,
        Options {
            tools_toml: Some(tools.into()),
            ..Options::default()
        },
    )
    .await
    .err()
    .expect("start-up refused");
    assert_eq!(
        err,
        "tool `misranked` does not match the database schema: rerank text names the column \
         `body`, which the statement does not return (it returns id, text)"
    );
}
