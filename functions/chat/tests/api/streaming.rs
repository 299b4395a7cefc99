//! Streamed turns (`Accept: text/event-stream`): the AI SDK UI message stream as a client reads
//! it, what is stored matching what was streamed, a client that goes away, the deadline, and
//! refusals that still come before the stream as plain JSON errors.

use std::time::Duration;

use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::clients;
use crate::helpers::{Options, TestChat, read_until, spawn, spawn_chat, sse_data, streamed_text};

fn call(name: &str, args: &str) -> (String, String) {
    (name.to_owned(), args.to_owned())
}

/// A model that looks up Leeds and Bristol at once, then answers `reply`.
fn two_lookups_then(reply: &str) -> Vec<Step> {
    vec![
        Step::Calls(vec![
            call("lad_by_ref", r#"{"ref":"Leeds"}"#),
            call("lad_by_ref", r#"{"ref":"Bristol"}"#),
        ]),
        Step::Text(reply.to_owned()),
    ]
}

fn types(parts: &[Value]) -> Vec<&str> {
    parts
        .iter()
        .map(|p| p["type"].as_str().unwrap_or_else(|| p.as_str().unwrap()))
        .collect()
}

async fn stream_all(chat: &TestChat, body: Value) -> (reqwest::header::HeaderMap, Vec<Value>) {
    let response = chat.post_streamed("alice", "/api/chat", body).await;
    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    (headers, sse_data(&text))
}

#[tokio::test]
async fn a_turn_with_parallel_calls_and_a_long_reply_streams_as_ui_message_parts() {
    let long_reply = "Leeds and Bristol, compared. ".repeat(40);
    let chat = spawn_chat(two_lookups_then(&long_reply)).await;
    let (headers, parts) = stream_all(&chat, json!({"message": "Compare Leeds and Bristol"})).await;
    assert_eq!(headers["content-type"], "text/event-stream");
    assert_eq!(headers["x-vercel-ai-ui-message-stream"], "v1");

    let kinds = types(&parts);
    let deltas = kinds.iter().filter(|k| **k == "text-delta").count();
    // The model writes its words at once: the first go out at once, those that follow
    // within `STREAM_FLUSH_MS` together.
    assert!(deltas >= 2, "the reply came in pieces: {deltas}");
    let mut expected = vec![
        "start",
        "start-step",
        "tool-input-available",
        "tool-input-available",
        "tool-output-available",
        "tool-output-available",
        "finish-step",
        "start-step",
        "text-start",
    ];
    expected.extend(std::iter::repeat_n("text-delta", deltas));
    expected.extend(["text-end", "finish-step", "finish", "[DONE]"]);
    assert_eq!(kinds, expected);

    let conversation = parts[0]["messageMetadata"]["conversationId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(parts[2]["toolName"], "lad_by_ref");
    assert_eq!(parts[2]["input"], json!({"ref": "Leeds"}));
    assert_eq!(parts[4]["toolCallId"], parts[2]["toolCallId"]);
    assert_eq!(parts[5]["output"]["rows"][0]["code"], "E06000023");
    assert_eq!(streamed_text(&parts), long_reply);
    let finish = &parts[parts.len() - 2];
    assert_eq!(
        finish["messageMetadata"]["usage"],
        json!({"input_tokens": 200, "output_tokens": 40, "total_tokens": 240})
    );
    assert_eq!(finish["messageMetadata"]["cutShort"], false);

    // The stored turn is the streamed one.
    let messages = chat.messages("alice", &conversation).await;
    assert_eq!(messages.len(), 2);
    let stored = &messages[1];
    assert_eq!(stored["content"], long_reply);
    let traces = stored["traces"].as_array().unwrap();
    assert_eq!(traces.len(), 2);
    for (trace, output) in traces.iter().zip([&parts[4], &parts[5]]) {
        assert_eq!(trace["call_id"], output["toolCallId"]);
        assert_eq!(trace["output"], output["output"]);
    }
    assert_eq!(stored["usage"], finish["messageMetadata"]["usage"]);
    // The model was asked to stream both times.
    assert!(chat.llm.requests().iter().all(|r| r["stream"] == true));
}

#[tokio::test]
async fn the_first_text_arrives_while_the_model_is_still_writing_and_a_client_that_leaves_stops_the_turn()
 {
    // The model writes part of its answer, then never finishes: whatever reaches the client
    // reached it before the answer was complete.
    let chat = spawn_chat(vec![Step::Stall("Leeds is a city in".into())]).await;
    let response = chat
        .post_streamed(
            "alice",
            "/api/chat",
            json!({"message": "Tell me about Leeds"}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let (parts, response) = read_until(response, |p| p["type"] == "text-delta").await;
    let conversation = parts[0]["messageMetadata"]["conversationId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!types(&parts).contains(&"finish"));
    drop(response);

    // The turn notices, stops and stores what it had, marked interrupted.
    let mut stored = Value::Null;
    for _ in 0..200 {
        let messages = chat.messages("alice", &conversation).await;
        if messages.len() == 2 {
            stored = messages[1].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stored["interrupted"], true, "{stored}");
    let content = stored["content"].as_str().unwrap();
    assert!(
        "Leeds is a city in".starts_with(content) && !content.is_empty(),
        "{content:?}"
    );
    // No further model request after the client left.
    assert_eq!(chat.llm.requests().len(), 1);
}

#[tokio::test]
async fn a_streamed_turn_that_reaches_its_deadline_ends_with_the_partial_reply_stored_alike() {
    let chat = spawn(Options {
        steps: vec![Step::Stall("Leeds is a city in".into())],
        extra_env: vec![("STREAM_TURN_DEADLINE_MS", "1500".into())],
        ..Options::default()
    })
    .await;
    let (_, parts) = stream_all(&chat, json!({"message": "Tell me about Leeds"})).await;
    let text = streamed_text(&parts);
    assert!(text.starts_with("Leeds is a city in"), "{text}");
    assert!(text.contains("I ran out of time"), "{text}");
    let finish = parts.iter().find(|p| p["type"] == "finish").unwrap();
    assert_eq!(finish["messageMetadata"]["cutShort"], true);
    assert_eq!(types(&parts).last(), Some(&"[DONE]"));

    let conversation = parts[0]["messageMetadata"]["conversationId"]
        .as_str()
        .unwrap();
    let messages = chat.messages("alice", conversation).await;
    assert_eq!(messages[1]["content"], text);
    assert_eq!(messages[1]["cut_short"], true);
}

#[tokio::test]
async fn a_model_failure_mid_turn_is_an_error_part_and_stored_as_the_turns_error() {
    let chat = spawn_chat(vec![
        Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
        Step::error(400, "context too long"),
    ])
    .await;
    let (_, parts) = stream_all(&chat, json!({"message": "Tell me about Leeds"})).await;
    let kinds = types(&parts);
    assert!(kinds.contains(&"tool-output-available"), "{kinds:?}");
    let error = parts.iter().find(|p| p["type"] == "error").unwrap();
    assert!(
        error["errorText"].as_str().unwrap().starts_with("llm_"),
        "{error}"
    );
    assert_eq!(kinds.last(), Some(&"[DONE]"));
    assert!(!kinds.contains(&"finish"));
    let conversation = parts[0]["messageMetadata"]["conversationId"]
        .as_str()
        .unwrap();
    let messages = chat.messages("alice", conversation).await;
    assert_eq!(messages[1]["error"], error["errorText"]);
}

#[tokio::test]
async fn refusals_before_the_turn_begins_are_plain_json_errors_with_their_status() {
    let chat = spawn_chat(vec![]).await;
    let response = chat
        .post_streamed(
            "alice",
            "/api/chat",
            json!({"message": "Hi", "conversation_id": "00000000-0000-4000-8000-000000000000"}),
        )
        .await;
    assert_eq!(response.status(), 404);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "conversation_not_found");

    let response = chat
        .post_streamed("alice", "/api/chat", json!({"message": "  "}))
        .await;
    assert_eq!(response.status(), 422);
    assert!(chat.llm.requests().is_empty());
}

/// The AI SDK's own reader (tests/interop/ui_stream.mjs under Node 22) reads a streamed turn
/// with parallel tool calls and folds it into the message `useChat` would show.
#[tokio::test]
async fn the_ai_sdks_reader_folds_the_stream_into_the_stored_turn() {
    let reply = "Leeds is E08000035 and Bristol E06000023. ".repeat(10);
    let chat = spawn_chat(two_lookups_then(&reply)).await;
    let out = clients::node(
        "ui_stream.mjs",
        &[
            &format!("{}/api/chat", chat.base),
            &crate::helpers::token("alice"),
            &json!({"message": "Compare Leeds and Bristol"}).to_string(),
        ],
    )
    .await;
    assert_eq!(out["status"], 200);
    assert_eq!(out["protocol"], "v1");
    let message = &out["message"];
    assert_eq!(message["role"], "assistant");
    let parts = message["parts"].as_array().unwrap();
    let kinds: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "step-start",
            "dynamic-tool",
            "dynamic-tool",
            "step-start",
            "text"
        ]
    );
    for tool in &parts[1..3] {
        assert_eq!(tool["toolName"], "lad_by_ref");
        assert_eq!(tool["state"], "output-available");
    }
    assert_eq!(parts[2]["output"]["rows"][0]["code"], "E06000023");
    assert_eq!(parts[4]["text"], reply);
    assert_eq!(parts[4]["state"], "done");
    let metadata = &message["metadata"];
    let conversation = metadata["conversationId"].as_str().unwrap();
    assert_eq!(metadata["usage"]["total_tokens"], 240);
    let stored = chat.messages("alice", conversation).await;
    assert_eq!(stored[1]["content"], reply);
}
