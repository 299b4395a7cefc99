//! The OpenAI-compatible endpoint over real HTTP: the model list, completions streamed and not,
//! the conversation kept server-side by its header, tool calls in the text, refusals.

use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::clients;
use crate::helpers::{Options, input_of, spawn, spawn_chat, sse_data};

const CONVERSATION: &str = "x-parley-conversation-id";

fn question(text: &str) -> Value {
    json!({"model": "parley", "messages": [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": text},
    ]})
}

#[tokio::test]
async fn the_assistant_is_the_one_model_listed() {
    let chat = spawn_chat(vec![]).await;
    let (status, body) = chat.get(Some("alice"), "/v1/models").await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"][0]["id"], "parley");
    assert_eq!(body["data"][0]["object"], "model");
    let (status, _) = chat.get(None, "/v1/models").await;
    assert_eq!(status, 401, "the same auth as the rest of the chat API");
}

#[tokio::test]
async fn a_completion_runs_the_tools_and_keeps_the_conversation_by_its_header() {
    let chat = spawn_chat(vec![
        Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
        Step::text("Leeds is E08000035."),
        Step::text("It is in West Yorkshire."),
    ])
    .await;
    let (status, headers, body) = chat
        .post_json(
            "alice",
            "/v1/chat/completions",
            &[],
            question("Tell me about Leeds"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "parley");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        content.starts_with("<details type=\"tool_calls\" done=\"true\""),
        "{content}"
    );
    assert!(content.contains("name=\"lad_by_ref\""), "{content}");
    assert!(content.ends_with("Leeds is E08000035."), "{content}");
    assert_eq!(body["usage"]["total_tokens"], 240);
    let id = headers[CONVERSATION].to_str().unwrap().to_owned();
    assert_eq!(body["conversation_id"], id);

    // The next question in the same conversation: the model sees the first turn, from the
    // server's own record.
    let (status, headers, body) = chat
        .post_json(
            "alice",
            "/v1/chat/completions",
            &[(CONVERSATION, &id)],
            question("Where is it?"),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(headers[CONVERSATION], id.as_str());
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "It is in West Yorkshire."
    );
    let sent = input_of(&chat.llm.requests()[2]);
    let said: Vec<String> = sent.iter().map(Value::to_string).collect();
    assert!(
        said.iter().any(|s| s.contains("Leeds is E08000035.")),
        "{said:?}"
    );
    assert_eq!(chat.messages("alice", &id).await.len(), 4);
}

#[tokio::test]
async fn without_a_conversation_the_earlier_messages_the_client_sent_come_first() {
    let chat = spawn_chat(vec![Step::text("Yes: 3 of them.")]).await;
    let body = json!({"model": "parley", "messages": [
        {"role": "user", "content": "How many complaints in Leeds?"},
        {"role": "assistant", "content": "<details type=\"tool_calls\" done=\"true\" id=\"c\" name=\"x\" arguments=\"{}\" result=\"1\">\n<summary>Tool Executed</summary>\n</details>\nThree."},
        {"role": "user", "content": [{"type": "text", "text": "Really?"}]},
    ]});
    let (status, _, response) = chat
        .post_json("alice", "/v1/chat/completions", &[], body)
        .await;
    assert_eq!(status, 200, "{response}");
    let sent = input_of(&chat.llm.requests()[0]);
    let texts: Vec<String> = sent.iter().map(Value::to_string).collect();
    let joined = texts.join("\n");
    assert!(joined.contains("How many complaints in Leeds?"), "{joined}");
    assert!(joined.contains("Three."), "{joined}");
    assert!(
        !joined.contains("tool_calls"),
        "tool blocks are not replayed"
    );
    assert!(joined.contains("Really?"), "{joined}");
}

#[tokio::test]
async fn a_streamed_completion_is_chunks_of_the_reply_then_usage_then_done() {
    let chat = spawn_chat(vec![
        Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
        Step::text("Leeds is E08000035, in West Yorkshire."),
    ])
    .await;
    let mut body = question("Tell me about Leeds");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let response = chat
        .post_streamed("alice", "/v1/chat/completions", body)
        .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let id = response.headers()[CONVERSATION]
        .to_str()
        .unwrap()
        .to_owned();
    let parts = sse_data(&response.text().await.unwrap());
    assert_eq!(parts.last(), Some(&json!("[DONE]")));
    let chunks = &parts[..parts.len() - 1];
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(content.contains("name=\"lad_by_ref\""), "{content}");
    assert!(
        content.ends_with("Leeds is E08000035, in West Yorkshire."),
        "{content}"
    );
    let finished: Vec<&Value> = chunks
        .iter()
        .filter(|c| c["choices"][0]["finish_reason"] == "stop")
        .collect();
    assert_eq!(finished.len(), 1);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["total_tokens"], 240);
    let stored = chat.messages("alice", &id).await;
    assert_eq!(
        stored[1]["content"],
        "Leeds is E08000035, in West Yorkshire."
    );
}

#[tokio::test]
async fn refusals_name_the_problem() {
    let chat = spawn_chat(vec![]).await;
    let mut wrong_model = question("Hi");
    wrong_model["model"] = json!("gpt-4o");
    let (status, _, body) = chat
        .post_json("alice", "/v1/chat/completions", &[], wrong_model)
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "model_not_found");

    let last_not_user = json!({"model": "parley", "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]});
    let (status, _, body) = chat
        .post_json("alice", "/v1/chat/completions", &[], last_not_user)
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["code"], "last_message_not_user");

    let (status, _, body) = chat
        .post_json(
            "alice",
            "/v1/chat/completions",
            &[(CONVERSATION, "nope")],
            question("Hi"),
        )
        .await;
    assert_eq!(status, 422);
    assert_eq!(body["error"]["code"], "invalid_conversation_id");
    assert!(chat.llm.requests().is_empty());
}

/// The official `openai` Python package as the client (tests/interop/openai_client.py): the
/// model list, a completion, the same conversation streamed by its header, a wrong model.
#[tokio::test]
async fn the_official_openai_client_lists_completes_and_streams() {
    let chat = spawn_chat(vec![
        Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
        Step::text("Leeds is E08000035."),
        Step::text("It is in West Yorkshire, in the north of England."),
    ])
    .await;
    let out = clients::python(
        "openai_client.py",
        &[&chat.base, &crate::helpers::token("alice")],
    )
    .await;
    assert_eq!(out["models"], json!(["parley"]));
    let first = &out["first"];
    let content = first["content"].as_str().unwrap();
    assert!(content.contains("name=\"lad_by_ref\""), "{content}");
    assert!(content.ends_with("Leeds is E08000035."), "{content}");
    assert_eq!(first["finish_reason"], "stop");
    assert_eq!(first["total_tokens"], 240);
    let conversation = first["conversation"].as_str().unwrap();

    let second = &out["second"];
    assert_eq!(
        second["content"],
        "It is in West Yorkshire, in the north of England."
    );
    assert!(second["pieces"].as_u64().unwrap() > 1, "{second}");
    assert_eq!(second["finish_reason"], "stop");
    assert_eq!(second["total_tokens"], 120);
    assert_eq!(out["wrong_model"], 404);
    // Both turns are in the one conversation, kept by the server.
    assert_eq!(chat.messages("alice", conversation).await.len(), 4);
}

#[tokio::test]
async fn tool_blocks_are_left_out_by_the_setting_or_by_the_request() {
    let chat = spawn(Options {
        steps: vec![
            Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
            Step::text("Leeds is E08000035."),
            Step::call("lad_by_ref", r#"{"ref":"York"}"#),
            Step::text("York is E06000014."),
            Step::call("lad_by_ref", r#"{"ref":"Bristol"}"#),
            Step::text("Bristol is E06000023."),
        ],
        extra_env: vec![("V1_TOOL_BLOCKS", "false".into())],
        ..Options::default()
    })
    .await;
    let (status, _, body) = chat
        .post_json("alice", "/v1/chat/completions", &[], question("Leeds?"))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"], "Leeds is E08000035.",
        "{body}"
    );

    // Streamed, the same: only the reply.
    let mut streamed = question("York?");
    streamed["stream"] = json!(true);
    let response = chat
        .post_streamed("alice", "/v1/chat/completions", streamed)
        .await;
    let content: String = sse_data(&response.text().await.unwrap())
        .iter()
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(content, "York is E06000014.");

    // A request asks for them back for itself.
    let mut wanted = question("Bristol?");
    wanted["tool_blocks"] = json!(true);
    let (_, _, body) = chat
        .post_json("alice", "/v1/chat/completions", &[], wanted)
        .await;
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        content.starts_with("<details type=\"tool_calls\"") && content.contains("Bristol"),
        "{content}"
    );
}

#[tokio::test]
async fn a_request_leaves_the_tool_blocks_out_for_itself() {
    let chat = spawn_chat(vec![
        Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
        Step::text("Leeds is E08000035."),
    ])
    .await;
    let mut body = question("Leeds?");
    body["tool_blocks"] = json!(false);
    let (status, _, body) = chat
        .post_json("alice", "/v1/chat/completions", &[], body)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["choices"][0]["message"]["content"], "Leeds is E08000035.",
        "{body}"
    );
}
