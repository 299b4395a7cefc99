//! Every way a request can be wrong gets a clear status and a JSON body naming the problem.

use parley_testkit::llm::Step;
use serde_json::json;

use crate::helpers::{Options, spawn, spawn_chat, token};

#[tokio::test]
async fn malformed_and_misshapen_bodies_are_refused_before_the_model_is_called() {
    let chat = spawn(Options {
        steps: vec![Step::Text("never".into())],
        extra_env: vec![
            ("MAX_MESSAGE_CHARS", "50".into()),
            ("CHAT_MAX_BODY_BYTES", "2048".into()),
        ],
        ..Options::default()
    })
    .await;
    let alice = token("alice");
    let cases: Vec<(String, u16, &str)> = vec![
        ("{\"message\": ".into(), 400, "invalid_json"),
        ("not json at all".into(), 400, "invalid_json"),
        (json!({"message": 42}).to_string(), 422, "invalid_request"),
        (json!({"text": "hi"}).to_string(), 422, "invalid_request"),
        (
            json!({"message": "hi", "extra": true}).to_string(),
            422,
            "invalid_request",
        ),
        (json!({"message": "   "}).to_string(), 422, "message_empty"),
        (
            json!({"message": "x".repeat(51)}).to_string(),
            422,
            "message_too_long",
        ),
        (
            json!({"message": "hi", "context": "Leeds"}).to_string(),
            422,
            "invalid_context",
        ),
        (
            json!({"message": "hi", "conversation_id": "123"}).to_string(),
            422,
            "invalid_conversation_id",
        ),
        (
            json!({"message": "hi", "tools": ["drop_tables"]}).to_string(),
            422,
            "unknown_tool",
        ),
        (
            json!({"message": "x".repeat(3000)}).to_string(),
            413,
            "payload_too_large",
        ),
    ];
    for (body, status, code) in cases {
        let (got, response) = chat.post_raw(Some(&alice), body.clone()).await;
        assert_eq!(got, status, "{body}: {response}");
        assert_eq!(response["error"]["code"], code, "{body}: {response}");
        assert!(
            response["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    assert!(chat.llm.requests().is_empty());
}

#[tokio::test]
async fn wrong_types_name_the_field() {
    let chat = spawn_chat(vec![]).await;
    let (status, body) = chat
        .post("alice", json!({"message": "hi", "tools": "lad_by_ref"}))
        .await;
    assert_eq!(status, 422);
    assert!(
        body["error"]["message"].as_str().unwrap().contains("tools"),
        "{body}"
    );
}

#[tokio::test]
async fn bad_listing_queries_are_400_and_unknown_ids_404() {
    let chat = spawn_chat(vec![]).await;
    for query in [
        "limit=0",
        "limit=5000",
        "limit=abc",
        "cursor=garbage",
        "colour=red",
    ] {
        let (status, body) = chat
            .get(Some("alice"), &format!("/api/conversations?{query}"))
            .await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "invalid_query");
    }
    let (status, body) = chat
        .get(Some("alice"), "/api/conversations/not-a-uuid/messages")
        .await;
    assert_eq!(status, 404, "{body}");
}
