//! Parameters the server computes: `from = "embedding.<argument>"` (a text's vector, bound as
//! `float4[]`) and `from = "embedder.model"`, over a real pgvector table, the real built-in
//! model (also behind a local OpenAI-compatible server) and both request paths.

use parley_testkit::TestDb;
use serde_json::{Value, json};

use crate::helpers::{Options, TestApp, env, spawn_on};

const PASSAGES: [(i32, &str); 4] = [
    (1, "The cat curled up on the mat and purred."),
    (
        2,
        "The central bank raised interest rates again this quarter.",
    ),
    (
        3,
        "Knead the dough, let it rise overnight, then bake the sourdough loaf.",
    ),
    (
        4,
        "The striker scored twice in the second half of the cup final.",
    ),
];

const TOOLS: &str = r#"
[[tool]]
name = "nearest"
description = "Passages nearest in meaning to the query."
settings = { "hnsw.ef_search" = "100" }
sql = """
SELECT id, body, :model AS model
FROM passages
ORDER BY embedding <=> :query_embedding::vector(384)
LIMIT 3
"""
[tool.params.query]
type = "string"
required = true
min_length = 1
[tool.params.query_embedding]
from = "embedding.query"
[tool.params.model]
from = "embedder.model"

[[tool]]
name = "maybe_near"
description = "Whether an optional text was embedded, and into how many numbers."
sql = "SELECT :e IS NULL AS absent, cardinality(:e) AS dims, vector_norm(:e::vector(384)) AS norm"
[tool.params.text]
type = "string"
[tool.params.e]
from = "embedding.text"
"#;

/// A database with the passages embedded by the same built-in model the function loads.
async fn passages_db() -> TestDb {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    client
        .batch_execute(
            "CREATE TABLE passages (id int PRIMARY KEY, body text NOT NULL, embedding vector(384) NOT NULL);
             GRANT SELECT ON passages TO parley_readonly;",
        )
        .await
        .expect("passages table");
    let embedder = parley_testkit::embeddings::embedder();
    let texts: Vec<String> = PASSAGES.iter().map(|(_, t)| (*t).to_owned()).collect();
    let vectors = embedder.embed(&texts).await.expect("passages embedded");
    for ((id, body), vector) in PASSAGES.iter().zip(vectors) {
        client
            .execute(
                "INSERT INTO passages VALUES ($1, $2, $3::float4[]::vector)",
                &[id, body, &vector],
            )
            .await
            .expect("passage inserted");
    }
    db
}

async fn app() -> TestApp {
    spawn_on(passages_db().await, with_model(TOOLS))
        .await
        .expect("starts with the model")
}

fn with_model(tools: &str) -> Options {
    Options {
        tools_toml: Some(tools.into()),
        extra_env: env(&[(
            "EMBEDDINGS_MODEL_DIR",
            &parley_testkit::model_dir().display().to_string(),
        )]),
        ..Options::default()
    }
}

fn ids(rows: &Value) -> Vec<i64> {
    rows["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["id"].as_i64().expect("id"))
        .collect()
}

#[tokio::test]
async fn the_passage_nearest_in_meaning_comes_first_with_the_model_bound() {
    let app = app().await;
    for (query, first) in [
        ("a kitten napping on a rug", 1),
        ("borrowing costs and monetary policy", 2),
        ("how do I make bread at home?", 3),
        ("football match result", 4),
    ] {
        let rows = app.rows("nearest", json!({"query": query})).await;
        assert_eq!(ids(&rows)[0], first, "{query}: {rows}");
        assert_eq!(rows["rows"][0]["model"], "all-MiniLM-L6-v2@384");
    }
}

#[tokio::test]
async fn rmcps_path_embeds_the_same_way() {
    let app = app().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "nearest", "arguments": {"query": "a kitten napping on a rug"}}})
    .to_string();
    let token = format!("Bearer {}", app.token.as_deref().expect("token"));
    // A weighted Accept is left to rmcp's transport (see direct.rs).
    let response = app
        .post_mcp(
            body,
            &[
                ("accept", "application/json;q=1, text/event-stream;q=1"),
                ("authorization", &token),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.expect("json");
    let rows = &body["result"]["structuredContent"];
    assert_eq!(ids(rows)[0], 1, "{body}");
    assert_eq!(rows["rows"][0]["model"], "all-MiniLM-L6-v2@384");
}

#[tokio::test]
async fn computed_parameters_are_not_published_and_refused_as_arguments() {
    let app = app().await;
    let (status, body) = app.rpc("tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let nearest = body["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "nearest")
        .expect("nearest")
        .clone();
    assert_eq!(
        nearest["inputSchema"]["properties"],
        json!({"query": {"type": "string", "minLength": 1}})
    );
    assert_eq!(nearest["inputSchema"]["required"], json!(["query"]));
    for name in ["query_embedding", "model"] {
        let err = app
            .tool_error("nearest", json!({"query": "cats", name: "x"}))
            .await;
        assert_eq!(
            err,
            format!(
                "invalid arguments: parameter `{name}` is computed by the server and cannot be \
                 passed as an argument"
            )
        );
    }
}

#[tokio::test]
async fn an_optional_text_left_out_binds_a_null_embedding() {
    let app = app().await;
    let rows = app.rows("maybe_near", json!({})).await;
    assert_eq!(rows["rows"][0]["absent"], true);
    let rows = app.rows("maybe_near", json!({"text": "hello"})).await;
    assert_eq!(rows["rows"][0]["absent"], false);
    assert_eq!(rows["rows"][0]["dims"], 384);
    let norm = rows["rows"][0]["norm"].as_f64().expect("norm");
    assert!((norm - 1.0).abs() < 1e-3, "unit length: {norm}");
}

#[tokio::test]
async fn the_model_is_loaded_only_when_a_tool_embeds_and_a_missing_one_stops_start_up() {
    let missing = |tools: &str| Options {
        tools_toml: Some(tools.into()),
        extra_env: env(&[("EMBEDDINGS_MODEL_DIR", "/nonexistent/model")]),
        ..Options::default()
    };
    let err = spawn_on(passages_db().await, missing(TOOLS))
        .await
        .err()
        .expect("start-up refused");
    assert!(
        err.starts_with("the tools embed text, and the embedder cannot be loaded:"),
        "{err}"
    );
    assert!(err.contains("/nonexistent/model"), "{err}");
    let plain = "[[tool]]\nname = \"one\"\ndescription = \"d\"\nsql = \"SELECT 1 AS one\"\n";
    let app = spawn_on(TestDb::migrated().await, missing(plain))
        .await
        .expect("no tool embeds: the model is not needed");
    assert_eq!(app.rows("one", json!({})).await["rows"][0]["one"], 1);
}

#[tokio::test]
async fn an_http_embedder_serves_the_same_search_and_its_failure_is_a_tool_error() {
    use parley_testkit::embeddings::{EmbeddingsServer, Fault};
    let server =
        EmbeddingsServer::with_faults(vec![Fault::Status(500, "model overloaded".into())]).await;
    let options = Options {
        tools_toml: Some(TOOLS.into()),
        extra_env: env(&[
            ("EMBEDDINGS", "http"),
            ("EMBEDDINGS_URL", &server.base_url()),
            ("EMBEDDINGS_MODEL", "all-MiniLM-L6-v2"),
            ("EMBEDDINGS_DIMENSIONS", "384"),
            ("EMBEDDINGS_MAX_RETRIES", "0"),
        ]),
        ..Options::default()
    };
    let app = spawn_on(passages_db().await, options)
        .await
        .expect("starts with the http embedder");
    let query = json!({"query": "a kitten napping on a rug"});
    assert_eq!(
        app.tool_error("nearest", query.clone()).await,
        "the text could not be embedded right now; try again in a few seconds"
    );
    let rows = app.rows("nearest", query).await;
    assert_eq!(ids(&rows)[0], 1, "{rows}");
    assert_eq!(rows["rows"][0]["model"], "all-MiniLM-L6-v2@384");
    assert_eq!(server.requests().len(), 2, "one request per call");
}
