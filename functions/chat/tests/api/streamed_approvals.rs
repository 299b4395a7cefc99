//! Tool approval in the streamed interface, as the AI SDK's `useChat` speaks it: a paused
//! stream asks with `tool-approval-request`, the next request carries the UI messages with
//! the answered parts (`approval-responded`), and the resumed stream settles those calls
//! (`tool-output-available` / `tool-output-denied`) before the model's continuation. Checked
//! on the bytes here, and with the AI SDK's own `Chat` (tests/interop/ui_approval.mjs).

use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::approvals::{chat_with_a_task, delete_calls, task_exists};
use crate::clients;
use crate::helpers::{TestChat, sse_data, token};

async fn stream(chat: &TestChat, body: Value) -> Vec<Value> {
    let response = chat.post_streamed("alice", "/api/chat", body).await;
    assert_eq!(response.status(), 200);
    sse_data(&response.text().await.unwrap())
}

fn of_type<'a>(parts: &'a [Value], kind: &str) -> Vec<&'a Value> {
    parts.iter().filter(|p| p["type"] == kind).collect()
}

/// What a paused stream told its client: the conversation, the approval id and the call id.
struct Paused {
    conversation: String,
    approval: String,
    call: String,
}

async fn pause(chat: &TestChat) -> (Vec<Value>, Paused) {
    let parts = stream(chat, json!({"message": "Delete my passport task"})).await;
    let finish = &parts[parts.len() - 2];
    assert_eq!(finish["type"], "finish", "{parts:?}");
    let metadata = &finish["messageMetadata"];
    assert_eq!(metadata["status"], "awaiting_approval", "{metadata}");
    let paused = Paused {
        conversation: metadata["conversationId"].as_str().unwrap().to_owned(),
        approval: metadata["pendingApprovals"][0]["id"]
            .as_str()
            .unwrap()
            .to_owned(),
        call: metadata["pendingApprovals"][0]["call_id"]
            .as_str()
            .unwrap()
            .to_owned(),
    };
    (parts, paused)
}

/// The body `useChat`'s default transport sends after `addToolApprovalResponse`: the chat's
/// UI messages, the last the paused assistant message with its part answered.
fn use_chat_answer(paused: &Paused, id: i64, approval: Value) -> Value {
    json!({
        "id": "chat_1",
        "trigger": "submit-message",
        "messages": [
            {"id": "u1", "role": "user",
             "parts": [{"type": "text", "text": "Delete my passport task"}]},
            {"id": "msg_paused", "role": "assistant",
             "metadata": {"conversationId": paused.conversation, "status": "awaiting_approval"},
             "parts": [
                {"type": "step-start"},
                {"type": "dynamic-tool", "toolName": "delete_task", "toolCallId": paused.call,
                 "state": "approval-responded", "input": {"id": id}, "approval": approval},
             ]},
        ],
    })
}

#[tokio::test]
async fn a_paused_stream_asks_for_each_waiting_call_after_its_input() {
    let (chat, db, id) = chat_with_a_task(&[], |id| {
        vec![Step::calls([
            ("list_tasks", "{}".to_owned()),
            ("delete_task", format!(r#"{{"id":{id}}}"#)),
        ])]
    })
    .await;

    let (parts, paused) = pause(&chat).await;

    let kinds: Vec<&str> = parts.iter().filter_map(|p| p["type"].as_str()).collect();
    let asked = kinds
        .iter()
        .position(|k| *k == "tool-approval-request")
        .expect("an approval request");
    let input = parts
        .iter()
        .position(|p| p["type"] == "tool-input-available" && p["toolName"] == "delete_task")
        .expect("the waiting call's input");
    assert!(input < asked, "{kinds:?}");
    assert_eq!(
        kinds[asked..],
        ["tool-approval-request", "finish"],
        "asked at the end of the paused step, then finished: {kinds:?}"
    );
    let requests = of_type(&parts, "tool-approval-request");
    assert_eq!(requests.len(), 1, "only the destructive call waits");
    assert_eq!(
        *requests[0],
        json!({"type": "tool-approval-request", "approvalId": paused.approval,
               "toolCallId": paused.call})
    );
    assert_eq!(
        of_type(&parts, "tool-output-available").len(),
        1,
        "list_tasks ran"
    );
    assert!(task_exists(&db, id).await);
}

#[tokio::test]
async fn use_chats_approval_resumes_the_stream_with_the_calls_output_first() {
    let (chat, db, id) = chat_with_a_task(&[], |id| {
        vec![
            Step::call("delete_task", format!(r#"{{"id":{id}}}"#)),
            Step::text("Deleted \"Renew my passport\"."),
        ]
    })
    .await;
    let (_, paused) = pause(&chat).await;

    let body = use_chat_answer(
        &paused,
        id,
        json!({"id": paused.approval, "approved": true}),
    );
    let parts = stream(&chat, body.clone()).await;

    let kinds: Vec<&str> = parts.iter().filter_map(|p| p["type"].as_str()).collect();
    assert_eq!(
        kinds[..3],
        ["start", "tool-output-available", "start-step"],
        "{kinds:?}"
    );
    assert_eq!(
        parts[0]["messageId"], "msg_paused",
        "the stream goes on in the paused message"
    );
    assert_eq!(
        parts[0]["messageMetadata"]["conversationId"],
        paused.conversation
    );
    assert_eq!(parts[1]["toolCallId"], paused.call.as_str());
    assert_eq!(parts[1]["output"]["rows"][0]["id"], id);
    let text: String = of_type(&parts, "text-delta")
        .iter()
        .filter_map(|p| p["delta"].as_str())
        .collect();
    assert_eq!(text, "Deleted \"Renew my passport\".");
    let finish = &parts[parts.len() - 2];
    assert_eq!(finish["messageMetadata"]["status"], "answered", "{finish}");
    assert!(!task_exists(&db, id).await);
    assert_eq!(delete_calls(&chat).len(), 1);

    // The same request again (a retry): the stored outcome, nothing runs, the model is not asked.
    let again = stream(&chat, body).await;
    let finish = &again[again.len() - 2];
    assert_eq!(
        finish["messageMetadata"]["status"], "already_decided",
        "{again:?}"
    );
    assert_eq!(delete_calls(&chat).len(), 1, "no second run");
    assert_eq!(chat.llm.requests().len(), 2);
}

#[tokio::test]
async fn use_chats_denial_settles_the_call_as_denied_and_the_model_is_told() {
    let (chat, db, id) = chat_with_a_task(&[], |id| {
        vec![
            Step::call("delete_task", format!(r#"{{"id":{id}}}"#)),
            Step::text("I left it alone."),
        ]
    })
    .await;
    let (_, paused) = pause(&chat).await;

    let parts = stream(
        &chat,
        use_chat_answer(
            &paused,
            id,
            json!({"id": paused.approval, "approved": false, "reason": "I still need it"}),
        ),
    )
    .await;

    assert_eq!(
        parts[1],
        json!({"type": "tool-output-denied", "toolCallId": paused.call})
    );
    assert!(
        of_type(&parts, "tool-output-available").is_empty(),
        "{parts:?}"
    );
    assert!(task_exists(&db, id).await);
    assert!(delete_calls(&chat).is_empty());
    let stored = &chat.messages("alice", &paused.conversation).await[1]["approvals"][0];
    assert_eq!(stored["decision"], "denied", "{stored}");
    assert_eq!(stored["reason"], "I still need it");
}

#[tokio::test]
async fn use_chats_answer_naming_an_unknown_approval_is_refused_as_the_json_one_is() {
    let (chat, db, id) = chat_with_a_task(&[], |id| {
        vec![Step::call("delete_task", format!(r#"{{"id":{id}}}"#))]
    })
    .await;
    let (_, paused) = pause(&chat).await;

    let unknown = json!({"id": "0b9f8c1e-2d3a-4b5c-8d7e-6f5a4b3c2d1e", "approved": true});
    let response = chat
        .post_streamed("alice", "/api/chat", use_chat_answer(&paused, id, unknown))
        .await;
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "approval_not_found", "{body}");

    let not_an_id = json!({"id": "approval-1", "approved": true});
    let response = chat
        .post_streamed(
            "alice",
            "/api/chat",
            use_chat_answer(&paused, id, not_an_id),
        )
        .await;
    assert_eq!(response.status(), 422);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_approvals", "{body}");

    let response = chat
        .post_streamed(
            "bob",
            "/api/chat",
            use_chat_answer(
                &paused,
                id,
                json!({"id": paused.approval, "approved": true}),
            ),
        )
        .await;
    assert_eq!(response.status(), 404, "another user's conversation");
    assert!(task_exists(&db, id).await);
    assert!(delete_calls(&chat).is_empty());
}

/// The AI SDK's own `Chat` (tests/interop/ui_approval.mjs under Node 22): `sendMessage` reads
/// the paused turn to `approval-requested`, `addToolApprovalResponse` answers it, and
/// `lastAssistantMessageIsCompleteWithApprovalResponses` sends the answer and reads the
/// resumed turn into the same message.
async fn ai_sdk_chat(decision: &str) -> (Value, bool, usize) {
    let (chat, db, id) = chat_with_a_task(&[], |id| {
        vec![
            Step::call("delete_task", format!(r#"{{"id":{id}}}"#)),
            Step::text("Done as you said."),
        ]
    })
    .await;
    let out = clients::node(
        "ui_approval.mjs",
        &[
            &format!("{}/api/chat", chat.base),
            &token("alice"),
            "Delete my passport task",
            decision,
        ],
    )
    .await;
    let requested = &out["paused"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "dynamic-tool")
        .cloned()
        .expect("the tool part");
    assert_eq!(requested["state"], "approval-requested", "{out}");
    assert_eq!(requested["toolName"], "delete_task");
    assert_eq!(requested["input"], json!({"id": id}));
    let sent = &out["requests"][1]["messages"];
    let answered = sent.as_array().unwrap().last().unwrap();
    assert_eq!(answered["role"], "assistant", "{sent}");
    assert!(
        answered["parts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["state"] == "approval-responded"),
        "{answered}"
    );
    let messages = out["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        2,
        "the answer went on in the paused message: {out}"
    );
    let last = &messages[1];
    assert_eq!(last["metadata"]["status"], "answered", "{last}");
    let texts: Vec<&str> = last["parts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect();
    assert_eq!(texts, ["Done as you said."], "{last}");
    let tool = last["parts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "dynamic-tool")
        .cloned()
        .unwrap();
    (tool, task_exists(&db, id).await, delete_calls(&chat).len())
}

#[tokio::test]
async fn the_ai_sdks_chat_approves_a_call_and_reads_the_resumed_turn() {
    let (tool, exists, calls) = ai_sdk_chat("approve").await;
    assert_eq!(tool["state"], "output-available", "{tool}");
    assert_eq!(tool["approval"]["approved"], true);
    assert_eq!(tool["output"]["rows"][0]["title"], "Renew my passport");
    assert!(!exists, "the task was deleted");
    assert_eq!(calls, 1, "once");
}

#[tokio::test]
async fn the_ai_sdks_chat_denies_a_call_and_reads_the_resumed_turn() {
    let (tool, exists, calls) = ai_sdk_chat("deny").await;
    assert_eq!(tool["state"], "output-denied", "{tool}");
    assert_eq!(tool["approval"]["approved"], false);
    assert!(exists, "the task is still there");
    assert_eq!(calls, 0);
}
