//! Verified queries as sources: a turn whose reply follows a successful call of a tool that
//! runs a verified query (`_meta["parley/verified"]`) lists `verified: <name>` among its sources,
//! first, in the JSON answer, the stream (a `source-document` part and `finish`'s metadata) and
//! the stored message a reload reads. The tool runs on the real mcp function over the notes
//! table of `sources`.

use parley_testkit::llm::{ScriptedLlm, Step};
use serde_json::{Value, json};

use crate::helpers::{TestChat, mcp_env, spawn_chat_over, spawn_mcp_from, sse_data};
use crate::sources::{NOTES_TOOLS, notes_db};

const VERIFIED_TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/verified_notes.toml"
);

/// A chat whose mcp function serves the notes tools and a catalog whose verified query
/// `note_count` is the tool `verified_note_count`, and a model that plays `steps`.
async fn verified_chat(steps: Vec<Step>) -> TestChat {
    let db = notes_db().await;
    let tools = format!("{NOTES_TOOLS},{VERIFIED_TOOLS}");
    // The catalog's search tools embed the question: the mcp function loads the model.
    let model = parley_testkit::model_dir().display().to_string();
    let mcp = spawn_mcp_from(mcp_env(&db).overlay([
        ("TOOLS_FILE", tools.as_str()),
        ("EMBEDDINGS_MODEL_DIR", model.as_str()),
    ]))
    .await;
    spawn_chat_over(&db, mcp, &[], ScriptedLlm::start(steps).await).await
}

/// The verified query answers alongside a search whose row the reply cites.
fn count_and_search_then_answer() -> Vec<Step> {
    vec![
        Step::calls([
            ("verified_note_count", r#"{"word": "transaction"}"#),
            ("search_notes", r#"{"query": "vacuum"}"#),
        ]),
        Step::text("Three notes mention transactions; vacuuming reclaims storage [S1]."),
    ]
}

/// The source a reply answered from `verified_note_count` in the call `call_1` lists.
fn note_count_source() -> Value {
    json!({
        "id": "verified:note_count", "title": "verified: note_count", "uri": null,
        "snippet": null, "score": null, "tool": "verified_note_count", "call_id": "call_1",
        "cited": true, "verified": "note_count"
    })
}

fn ids(sources: &Value) -> Vec<&str> {
    sources
        .as_array()
        .unwrap_or_else(|| panic!("sources: {sources}"))
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_reply_from_a_verified_query_names_it_first_among_the_sources_and_a_reload_too() {
    let chat = verified_chat(count_and_search_then_answer()).await;
    let body = chat
        .turn(
            "alice",
            json!({"message": "How many notes mention transactions?"}),
        )
        .await;

    // The query ran on the mcp function and answered.
    assert_eq!(body["traces"][0]["name"], "verified_note_count");
    assert_eq!(body["traces"][0]["is_error"], false, "{body}");
    assert_eq!(body["traces"][0]["output"]["rows"][0]["notes"], 3);

    assert_eq!(ids(&body["sources"]), ["verified:note_count", "S1"]);
    assert_eq!(body["sources"][0], note_count_source());
    assert_eq!(body["sources"][1]["title"], "Routine vacuuming");
    assert!(
        body["sources"][1].get("verified").is_none(),
        "a row is no verified query: {body}"
    );

    let conversation = body["conversation_id"].as_str().unwrap();
    let messages = chat.messages("alice", conversation).await;
    assert_eq!(messages[1]["sources"], body["sources"]);
}

#[tokio::test]
async fn a_streamed_reply_from_a_verified_query_streams_its_source_and_stores_it() {
    let chat = verified_chat(count_and_search_then_answer()).await;
    let response = chat
        .post_streamed(
            "alice",
            "/api/chat",
            json!({"message": "How many notes mention transactions?"}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let parts = sse_data(&response.text().await.unwrap());

    let sources: Vec<&Value> = parts
        .iter()
        .filter(|p| p["type"].as_str().is_some_and(|t| t.starts_with("source-")))
        .collect();
    assert_eq!(sources.len(), 2, "{parts:?}");
    assert_eq!(
        *sources[0],
        json!({"type": "source-document", "sourceId": "verified:note_count",
               "mediaType": "text/plain", "title": "verified: note_count"})
    );
    assert_eq!(sources[1]["sourceId"], "S1");
    let finish = parts
        .iter()
        .find(|p| p["type"] == "finish")
        .expect("finish");
    let listed = &finish["messageMetadata"]["sources"];
    assert_eq!(listed[0], note_count_source());

    let conversation = finish["messageMetadata"]["conversationId"]
        .as_str()
        .unwrap();
    let messages = chat.messages("alice", conversation).await;
    assert_eq!(&messages[1]["sources"], listed);
}

#[tokio::test]
async fn a_verified_query_that_failed_or_was_never_called_is_no_source() {
    let chat = verified_chat(vec![
        // An empty word is refused before it reaches the query.
        Step::call("verified_note_count", r#"{"word": ""}"#),
        Step::text("I could not count them."),
        Step::call("search_notes", r#"{"query": "lock"}"#),
        Step::text("LOCK TABLE [S1]."),
    ])
    .await;
    let first = chat
        .turn(
            "alice",
            json!({"message": "How many notes mention nothing?"}),
        )
        .await;
    assert_eq!(first["traces"][0]["is_error"], true, "{first}");
    assert_eq!(first["sources"], json!([]));

    // A later turn of the same conversation lists only its own sources.
    let conversation = first["conversation_id"].as_str().unwrap();
    let second = chat
        .turn(
            "alice",
            json!({"message": "And locks?", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(ids(&second["sources"]), ["S1"]);
}
