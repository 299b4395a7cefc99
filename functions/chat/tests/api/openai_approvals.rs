//! Tool approval through `/v1/chat/completions`, over the real mcp function (the tasks domain,
//! whose `delete_task` is destructive) and Postgres: a paused turn asks in words, and the next
//! user message ("yes", "no, <reason>", anything else) decides, exactly once, as the JSON
//! route's `approvals` do; streamed and not, with the conversation named or (as Open WebUI and
//! LibreChat do) only the whole history resent, and from the official `openai` Python package.

use parley_testkit::TestDb;
use parley_testkit::llm::{ScriptedLlm, Step};
use serde_json::{Value, json};

use crate::clients;
use crate::helpers::{FEEDBACK_ROWS, TestChat, input_of, spawn_chat_with_settings, sse_data};

const CONVERSATION: &str = "x-parley-conversation-id";

/// A chat over the demo domains with `settings`, alice's tasks `titles` (their ids are
/// returned), and a model that plays the steps `steps` makes of those ids.
async fn chat_with_tasks(
    settings: &[(&str, &str)],
    titles: &[&str],
    steps: impl FnOnce(&[i64]) -> Vec<Step>,
) -> (TestChat, TestDb, Vec<i64>) {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let mut ids = Vec::new();
    for title in titles {
        let id: i64 = db
            .client()
            .await
            .query_one(
                "INSERT INTO tasks (owner, title, notes) VALUES ('alice', $1, '') RETURNING id",
                &[title],
            )
            .await
            .expect("a task")
            .get(0);
        ids.push(id);
    }
    let tools = parley_testkit::domains::all_tools();
    let chat = spawn_chat_with_settings(
        &db,
        &[("TOOLS_FILE", tools.as_str())],
        settings,
        ScriptedLlm::start(steps(&ids)).await,
    )
    .await;
    (chat, db, ids)
}

/// Alice's task "Renew my passport" (its id is returned) and a model that first calls
/// `delete_task` on it, then says `after`, one step each.
async fn chat_deleting_a_task(after: &[&str]) -> (TestChat, TestDb, i64) {
    let (chat, db, ids) = chat_with_tasks(&[], &["Renew my passport"], |ids| {
        let mut steps = vec![delete(ids[0])];
        steps.extend(after.iter().map(|text| Step::text(*text)));
        steps
    })
    .await;
    (chat, db, ids[0])
}

/// Alice's tasks `titles` (their ids are returned) and a model that deletes them all in one
/// response, then says `after`.
async fn chat_deleting_in_one_step(titles: &[&str], after: &str) -> (TestChat, TestDb, Vec<i64>) {
    chat_with_tasks(&[], titles, |ids| {
        vec![
            Step::calls(
                ids.iter()
                    .map(|id| ("delete_task", format!(r#"{{"id":{id}}}"#))),
            ),
            Step::text(after),
        ]
    })
    .await
}

fn delete(id: i64) -> Step {
    Step::call("delete_task", format!(r#"{{"id":{id}}}"#))
}

async fn task_exists(db: &TestDb, id: i64) -> bool {
    db.client()
        .await
        .query_opt("SELECT 1 FROM tasks WHERE id = $1", &[&id])
        .await
        .expect("query")
        .is_some()
}

/// How many times the mcp function was asked to run `delete_task`.
fn deletions(chat: &TestChat) -> usize {
    chat.mcp()
        .posts("tools/call")
        .into_iter()
        .filter(|p| p.tool == "delete_task")
        .count()
}

/// The output the model was given for the call that waited, in its latest request.
fn told_the_model(chat: &TestChat) -> String {
    let requests = chat.llm.requests();
    let last = requests.last().expect("a model request");
    input_of(last)
        .into_iter()
        .find(|i| i["type"] == "function_call_output")
        .unwrap_or_else(|| panic!("no call output in {last}"))["output"]
        .as_str()
        .expect("text output")
        .to_owned()
}

/// `/v1/chat/completions` as a stateless client sends it: the whole history, the conversation
/// by its header once known. Returns the content, the conversation and the whole body.
async fn complete(
    chat: &TestChat,
    conversation: Option<&str>,
    messages: &[(&str, &str)],
) -> (String, String, Value) {
    let (status, content, id, body) = complete_as(chat, "alice", conversation, messages).await;
    assert_eq!(status, 200, "{body}");
    (content, id, body)
}

/// [`complete`] as `user`, whatever the status.
async fn complete_as(
    chat: &TestChat,
    user: &str,
    conversation: Option<&str>,
    messages: &[(&str, &str)],
) -> (u16, String, String, Value) {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let headers: Vec<(&str, &str)> = conversation
        .map(|c| (CONVERSATION, c))
        .into_iter()
        .collect();
    let (status, headers, body) = chat
        .post_json(
            user,
            "/v1/chat/completions",
            &headers,
            json!({"model": "parley", "messages": messages}),
        )
        .await;
    let content = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let id = headers
        .get(CONVERSATION)
        .map(|h| h.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content, id, body)
}

const ASK: &str = "Delete my passport task";

/// The line a question ends with so a stateless client's answer finds its conversation and
/// the question it answers (the approval of its first call).
fn reference(conversation: &str, first: &str) -> String {
    format!("(Parley approval ref: {conversation} {first})")
}

/// The approval id of a paused turn's first waiting call, from the `parley` object.
fn first_waiting(parley: &Value) -> String {
    parley["pending_approvals"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no waiting call in {parley}"))
        .to_owned()
}

/// Every text the model was given in its latest request, whoever it was said to come from.
fn model_input_texts(chat: &TestChat) -> Vec<String> {
    let requests = chat.llm.requests();
    input_of(requests.last().expect("a model request"))
        .iter()
        .map(|item| item["content"].to_string())
        .collect()
}

/// The stored decision on the first waiting call of alice's `conversation`.
async fn decision(chat: &TestChat, conversation: &str) -> Value {
    chat.messages("alice", conversation).await[1]["approvals"][0]["decision"].clone()
}

#[tokio::test]
async fn a_paused_turn_asks_in_words_and_yes_runs_the_call_once_even_when_retried() {
    let (chat, db, id) = chat_deleting_a_task(&["Deleted.", "You're welcome."]).await;

    let (question, conversation, body) = complete(&chat, None, &[("user", ASK)]).await;
    assert!(
        question.contains(&format!(
            "I need your approval to run delete_task with id = {id}."
        )) && question.contains("Reply \"yes\" to approve or \"no\" to decline")
            && question.contains(" UTC."),
        "{question}"
    );
    assert_eq!(body["parley"]["status"], "awaiting_approval", "{body}");
    assert_eq!(
        body["parley"]["pending_approvals"][0]["tool"],
        "delete_task"
    );
    assert!(task_exists(&db, id).await, "nothing runs before the answer");

    let answered = [("user", ASK), ("assistant", &question), ("user", "Yes.")];
    let (content, _, body) = complete(&chat, Some(&conversation), &answered).await;
    assert!(content.ends_with("\n</details>\nDeleted."), "{body}");
    assert!(!task_exists(&db, id).await, "the approved call ran");
    assert_eq!(deletions(&chat), 1);
    let stored = chat.messages("alice", &conversation).await;
    assert_eq!(stored[1]["approvals"][0]["decision"], "approved");
    assert_eq!(stored[1]["approvals"][0]["decided_by"], "alice");

    // The client retries the same request (its answer was lost): the stored outcome, and
    // nothing runs or is asked again.
    let (content, _, body) = complete(&chat, Some(&conversation), &answered).await;
    assert!(content.ends_with("\n</details>\nDeleted."), "{body}");
    assert_eq!(body["parley"]["status"], "already_decided", "{body}");
    assert_eq!(deletions(&chat), 1, "the call ran once");
    assert_eq!(chat.llm.requests().len(), 2);

    // Now nothing waits: "yes" is a message like any other.
    let later = [
        ("user", ASK),
        ("assistant", &question),
        ("user", "Yes."),
        ("assistant", "Deleted."),
        ("user", "yes"),
    ];
    let (content, _, _) = complete(&chat, Some(&conversation), &later).await;
    assert_eq!(content, "You're welcome.");
    let sent = input_of(chat.llm.requests().last().unwrap());
    assert_eq!(sent.last().unwrap()["content"], "yes", "{sent:?}");
    assert_eq!(deletions(&chat), 1);
}

#[tokio::test]
async fn no_with_a_reason_declines_and_the_model_is_told_the_reason() {
    let (chat, db, id) = chat_deleting_a_task(&["Kept it."]).await;
    let (question, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;

    // Only the owner answers: bob's "yes" in alice's conversation finds no conversation.
    let bobs = [("user", ASK), ("assistant", &question), ("user", "yes")];
    let (status, _, _, body) = complete_as(&chat, "bob", Some(&conversation), &bobs).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "conversation_not_found", "{body}");
    assert!(task_exists(&db, id).await);

    let answer = [
        ("user", ASK),
        ("assistant", &question),
        ("user", "No, keep it"),
    ];
    let (content, _, _) = complete(&chat, Some(&conversation), &answer).await;

    assert!(content.ends_with("</details>\nKept it."), "{content}");
    assert!(task_exists(&db, id).await);
    assert_eq!(deletions(&chat), 0);
    assert_eq!(
        told_the_model(&chat),
        "not run: the user declined this call, saying: keep it"
    );
    let stored = chat.messages("alice", &conversation).await;
    assert_eq!(stored[1]["approvals"][0]["decision"], "denied");
    assert_eq!(stored[1]["approvals"][0]["reason"], "keep it");
}

#[tokio::test]
async fn any_other_message_declines_what_waits_and_goes_to_the_model() {
    let (chat, db, id) = chat_deleting_a_task(&["You have one task."]).await;
    let (question, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;

    let other = [
        ("user", ASK),
        ("assistant", &question),
        ("user", "yes please, but first list my tasks"),
    ];
    let (content, _, _) = complete(&chat, Some(&conversation), &other).await;

    assert_eq!(content, "You have one task.");
    assert!(task_exists(&db, id).await);
    assert_eq!(deletions(&chat), 0);
    assert!(
        told_the_model(&chat).contains("the user sent a new message instead of answering"),
        "{}",
        told_the_model(&chat)
    );
    let sent = input_of(chat.llm.requests().last().unwrap());
    assert_eq!(
        sent.last().unwrap()["content"],
        "yes please, but first list my tasks"
    );
}

#[tokio::test]
async fn several_waiting_calls_are_numbered_and_answered_one_by_one() {
    let titles = ["Renew my passport", "Water the plants"];
    let (chat, db, ids) =
        chat_deleting_in_one_step(&titles, "Deleted the first, kept the second.").await;
    let (question, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;
    assert!(
        question.contains(&format!(
            "approval for 2 actions:\n1. run delete_task with id = {}\n2. run delete_task with \
             id = {}\n",
            ids[0], ids[1]
        )),
        "{question}"
    );

    let answer = [
        ("user", ASK),
        ("assistant", &question),
        ("user", "1: yes; 2: no"),
    ];
    let (content, _, _) = complete(&chat, Some(&conversation), &answer).await;

    assert!(content.ends_with("kept the second."), "{content}");
    assert!(!task_exists(&db, ids[0]).await);
    assert!(task_exists(&db, ids[1]).await);
    assert_eq!(deletions(&chat), 1);
}

#[tokio::test]
async fn a_yes_after_the_request_expired_runs_nothing() {
    let (chat, db, ids) = chat_with_tasks(
        &[("APPROVAL_TTL_MS", "1000")],
        &["Renew my passport"],
        |ids| vec![delete(ids[0]), Step::text("It expired.")],
    )
    .await;
    let (question, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;

    let answer = [("user", ASK), ("assistant", &question), ("user", "yes")];
    let (content, _, _) = complete(&chat, Some(&conversation), &answer).await;

    assert!(content.ends_with("It expired."), "{content}");
    assert!(task_exists(&db, ids[0]).await);
    assert_eq!(deletions(&chat), 0);
    assert_eq!(
        told_the_model(&chat),
        "not run: the approval expired before the user answered"
    );
}

/// The content and the last chunk's `parley` of a streamed completion.
async fn streamed(chat: &TestChat, body: Value) -> (String, Value) {
    let response = chat
        .post_streamed("alice", "/v1/chat/completions", body)
        .await;
    assert_eq!(response.status(), 200);
    let parts = sse_data(&response.text().await.unwrap());
    assert_eq!(parts.last(), Some(&json!("[DONE]")));
    let content: String = parts
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    let finish = parts
        .iter()
        .find(|c| c["choices"][0]["finish_reason"] == "stop")
        .expect("a finish chunk");
    (content, finish["parley"].clone())
}

#[tokio::test]
async fn a_streamed_completion_pauses_with_the_question_and_resumes_on_yes() {
    let (chat, db, id) = chat_deleting_a_task(&["Deleted it."]).await;
    let (question, parley) = streamed(
        &chat,
        json!({"model": "parley", "stream": true,
               "messages": [{"role": "user", "content": ASK}]}),
    )
    .await;
    assert!(
        question.contains(&format!("approval to run delete_task with id = {id}.")),
        "{question}"
    );
    assert_eq!(parley["status"], "awaiting_approval", "{parley}");
    let conversation = parley["conversation_id"].as_str().unwrap();
    assert!(
        question.ends_with(&format!(
            "\n\n{}",
            reference(conversation, &first_waiting(&parley))
        )),
        "{question}"
    );
    assert!(task_exists(&db, id).await);

    let yes = json!({"model": "parley", "stream": true, "conversation_id": conversation,
                     "messages": [{"role": "user", "content": ASK},
                                  {"role": "assistant", "content": question},
                                  {"role": "user", "content": "yes"}]});
    let (content, parley) = streamed(&chat, yes.clone()).await;
    assert!(content.ends_with("Deleted it."), "{content}");
    assert_eq!(parley["status"], "answered", "{parley}");
    assert!(!task_exists(&db, id).await);
    assert_eq!(deletions(&chat), 1);

    // Retried, the stream tells the stored outcome and runs nothing again.
    let (again, parley) = streamed(&chat, yes).await;
    assert_eq!(again, content);
    assert_eq!(parley["status"], "already_decided", "{parley}");
    assert_eq!(deletions(&chat), 1);
}

/// The official `openai` Python package (tests/interop/openai_approval.py) reads the question
/// and answers "yes" by resending the history, with no conversation id, then retries that.
#[tokio::test]
async fn the_official_openai_client_approves_a_call_by_answering_yes() {
    let (chat, db, id) = chat_deleting_a_task(&["Deleted."]).await;
    let out = clients::python(
        "openai_approval.py",
        &[&chat.base, &crate::helpers::token("alice")],
    )
    .await;
    let question = out["question"].as_str().unwrap();
    assert!(
        question.contains(&format!("run delete_task with id = {id}.")),
        "{question}"
    );
    let answer = out["answer"].as_str().unwrap();
    assert!(answer.ends_with("</details>\nDeleted."), "{answer}");
    assert_eq!(out["same_conversation"], true, "{out}");
    assert_eq!(out["retried_status"], "already_decided", "{out}");
    assert!(!task_exists(&db, id).await);
    assert_eq!(deletions(&chat), 1);
}

#[tokio::test]
async fn a_client_that_resends_the_history_without_the_conversation_answers_yes_and_the_call_runs_once()
 {
    let (chat, db, id) = chat_deleting_a_task(&["Deleted."]).await;
    let (question, conversation, body) = complete(&chat, None, &[("user", ASK)]).await;
    assert!(
        question.ends_with(&format!(
            "UTC.\n\n{}",
            reference(&conversation, &first_waiting(&body["parley"]))
        )),
        "{question}"
    );

    // As the official openai package, Open WebUI or LibreChat send it: no header, no field.
    let answered = [("user", ASK), ("assistant", &question), ("user", "yes")];
    let (content, resumed, body) = complete(&chat, None, &answered).await;
    assert_eq!(
        resumed, conversation,
        "the answer went on in the paused conversation"
    );
    assert!(content.ends_with("\n</details>\nDeleted."), "{body}");
    assert_eq!(body["parley"]["status"], "answered", "{body}");
    assert!(!task_exists(&db, id).await, "the approved call ran");
    assert_eq!(deletions(&chat), 1);
    assert_eq!(decision(&chat, &conversation).await, "approved");

    // The same request again (its answer was lost): the stored outcome, nothing runs.
    let (again, resumed, body) = complete(&chat, None, &answered).await;
    assert_eq!(resumed, conversation);
    assert_eq!(body["parley"]["status"], "already_decided", "{body}");
    assert!(again.ends_with("Deleted."), "{body}");
    assert_eq!(deletions(&chat), 1, "the call ran once");
    assert_eq!(
        chat.llm.requests().len(),
        2,
        "the model was not asked again"
    );
}

#[tokio::test]
async fn a_client_that_resends_the_history_answers_no_and_the_task_is_kept() {
    let (chat, db, id) = chat_deleting_a_task(&["Kept it."]).await;
    let (question, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;

    let answer = [("user", ASK), ("assistant", &question), ("user", "no")];
    let (content, resumed, _) = complete(&chat, None, &answer).await;

    assert_eq!(resumed, conversation);
    assert!(content.ends_with("Kept it."), "{content}");
    assert!(task_exists(&db, id).await);
    assert_eq!(deletions(&chat), 0);
    assert_eq!(decision(&chat, &conversation).await, "denied");
    assert_eq!(
        told_the_model(&chat),
        "not run: the user declined this call"
    );
    // The stored conversation goes on: the model sees its history, not the client's copy with
    // the reference line.
    let texts = model_input_texts(&chat);
    assert!(
        texts.iter().all(|t| !t.contains("Parley approval ref")),
        "{texts:?}"
    );
}

#[tokio::test]
async fn another_message_from_a_client_that_resends_the_history_declines_what_waits() {
    let (chat, db, id) = chat_deleting_a_task(&["You have one task."]).await;
    let (question, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;

    let other = [
        ("user", ASK),
        ("assistant", &question),
        ("user", "list my tasks first"),
    ];
    let (content, resumed, _) = complete(&chat, None, &other).await;

    assert_eq!(resumed, conversation);
    assert_eq!(content, "You have one task.");
    assert!(task_exists(&db, id).await);
    assert_eq!(decision(&chat, &conversation).await, "denied");
    assert!(
        told_the_model(&chat).contains("the user sent a new message instead of answering"),
        "{}",
        told_the_model(&chat)
    );
}

#[tokio::test]
async fn another_user_resending_the_history_with_its_reference_starts_a_conversation_of_their_own()
{
    let (chat, db, id) = chat_deleting_a_task(&["I see no such task.", "Deleted."]).await;
    let (question, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;

    // Bob holds a copy of alice's chat (shared with him, say): its reference is no reference
    // for him, and the request is answered as a stateless client's first, seeded with it.
    let bobs = [("user", ASK), ("assistant", &question), ("user", "yes")];
    let (status, content, bobs_conversation, body) = complete_as(&chat, "bob", None, &bobs).await;
    assert_eq!(status, 200, "{body}");
    assert_ne!(bobs_conversation, conversation);
    assert_eq!(content, "I see no such task.");
    assert!(task_exists(&db, id).await);
    assert_eq!(deletions(&chat), 0);
    assert_eq!(decision(&chat, &conversation).await, "pending");
    // The seeded history keeps the question but not its reference line, and bob's "yes" is
    // his message.
    let texts = model_input_texts(&chat);
    assert!(
        texts.iter().any(|t| t.contains("I need your approval"))
            && texts.iter().all(|t| !t.contains("Parley approval ref")),
        "{texts:?}"
    );
    assert_eq!(texts.last().map(String::as_str), Some("\"yes\""));

    // Alice's own answer still decides her call.
    let (content, resumed, _) = complete(&chat, None, &bobs).await;
    assert_eq!(resumed, conversation);
    assert!(content.ends_with("Deleted."), "{content}");
    assert!(!task_exists(&db, id).await);
    assert_eq!(deletions(&chat), 1);
}

#[tokio::test]
async fn a_reference_in_a_user_message_or_to_no_stored_conversation_is_no_reference() {
    let (chat, db, id) = chat_deleting_a_task(&[
        "Nothing to approve.",
        "Still nothing.",
        "Nor here.",
        "Nor there.",
    ])
    .await;
    let (question, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;

    // The question, reference and all, pasted as the user's own message.
    let forged = [("user", ASK), ("user", &question), ("user", "yes")];
    let (content, elsewhere, _) = complete(&chat, None, &forged).await;
    assert_ne!(elsewhere, conversation);
    assert_eq!(content, "Nothing to approve.");

    // An assistant message naming a conversation that does not exist, or no UUID.
    let any = uuid::Uuid::new_v4().to_string();
    for unknown in [
        reference(&uuid::Uuid::new_v4().to_string(), &any),
        reference("42", &any),
        format!("(Parley approval ref: {})", uuid::Uuid::new_v4()),
    ] {
        let history = [("user", ASK), ("assistant", &unknown), ("user", "yes")];
        let (_, elsewhere, _) = complete(&chat, None, &history).await;
        assert_ne!(elsewhere, conversation);
    }

    assert!(task_exists(&db, id).await);
    assert_eq!(deletions(&chat), 0);
    assert_eq!(decision(&chat, &conversation).await, "pending");
}

/// The stored messages of alice's `conversation` said by `role`.
async fn said_by(chat: &TestChat, conversation: &str, role: &str) -> Vec<Value> {
    chat.messages("alice", conversation)
        .await
        .into_iter()
        .filter(|m| m["role"] == role)
        .collect()
}

/// Issue 32: the client answers "yes" to question 1, the model then asks question 2, and the
/// response carrying it is lost; the client resends the same request. That retry is bound to
/// question 1: it must not approve question 2, which the user never saw.
#[tokio::test]
async fn a_retried_yes_is_bound_to_its_question_and_never_approves_a_later_one() {
    let titles = ["Renew my passport", "Water the plants"];
    let (chat, db, ids) = chat_with_tasks(&[], &titles, |ids| {
        vec![delete(ids[0]), delete(ids[1]), Step::text("Both deleted.")]
    })
    .await;
    let (first, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;
    let yes = [("user", ASK), ("assistant", &first), ("user", "yes")];
    let (second, _, body) = complete(&chat, Some(&conversation), &yes).await;
    assert_eq!(body["parley"]["status"], "awaiting_approval", "{body}");
    assert!(
        second.contains(&format!("run delete_task with id = {}.", ids[1])),
        "{second}"
    );
    assert!(!task_exists(&db, ids[0]).await && task_exists(&db, ids[1]).await);

    // The second question never reached the client, which resends its answer to the first.
    let (again, _, body) = complete(&chat, Some(&conversation), &yes).await;
    assert_eq!(body["parley"]["status"], "already_decided", "{body}");
    assert!(task_exists(&db, ids[1]).await, "the second task is kept");
    assert_eq!(deletions(&chat), 1);
    // The stored outcome is what waits now: the second question, which the client sees at last.
    assert!(
        again.contains(&format!("run delete_task with id = {}.", ids[1])),
        "{again}"
    );
    let messages = chat.messages("alice", &conversation).await;
    let waiting = &messages.last().unwrap()["approvals"][0];
    assert_eq!(waiting["decision"], "pending", "{messages:?}");

    // Answered where it was asked, the second question is decided.
    let both = [
        ("user", ASK),
        ("assistant", &first),
        ("user", "yes"),
        ("assistant", &again),
        ("user", "yes"),
    ];
    let (content, _, body) = complete(&chat, Some(&conversation), &both).await;
    assert_eq!(body["parley"]["status"], "answered", "{body}");
    assert!(content.ends_with("Both deleted."), "{content}");
    assert!(!task_exists(&db, ids[1]).await);
    assert_eq!(deletions(&chat), 2);
    assert_eq!(said_by(&chat, &conversation, "user").await.len(), 1);
}

/// Issue 32: numbered answers to a question some of whose calls were decided meanwhile (from
/// the page, or by a concurrent retry of the same answer) are still answers to that question,
/// numbered as it numbered them, never a new message.
#[tokio::test]
async fn a_numbered_answer_keeps_its_numbers_when_part_of_its_question_was_decided() {
    let titles = ["Renew my passport", "Water the plants"];
    let (chat, db, ids) =
        chat_deleting_in_one_step(&titles, "Deleted the first, kept the second.").await;
    let (question, conversation, body) = complete(&chat, None, &[("user", ASK)]).await;
    let first = first_waiting(&body["parley"]);
    // The first call is approved elsewhere; the second still waits.
    let partly = chat
        .turn(
            "alice",
            json!({"conversation_id": conversation,
                   "approvals": [{"id": first, "approved": true}]}),
        )
        .await;
    assert_eq!(partly["status"], "awaiting_approval", "{partly}");

    let answer = [
        ("user", ASK),
        ("assistant", &question),
        ("user", "1 yes, 2 no"),
    ];
    let (content, _, body) = complete(&chat, Some(&conversation), &answer).await;

    assert_eq!(body["parley"]["status"], "answered", "{body}");
    assert!(content.ends_with("kept the second."), "{content}");
    assert!(!task_exists(&db, ids[0]).await);
    assert!(task_exists(&db, ids[1]).await);
    assert_eq!(deletions(&chat), 1);
    assert_eq!(
        said_by(&chat, &conversation, "user").await.len(),
        1,
        "the answer is no message"
    );
}

/// Issue 32: many identical numbered answers sent at once decide each call once; none becomes
/// a message for the model.
#[tokio::test]
async fn identical_answers_sent_at_once_decide_once_and_none_becomes_a_message() {
    let titles = ["One", "Two", "Three", "Four"];
    let (chat, db, ids) = chat_deleting_in_one_step(&titles, "Done.").await;
    let (question, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;
    let answer = [
        ("user", ASK),
        ("assistant", &question),
        ("user", "1 yes, 2 no, 3 yes, 4 no"),
    ];

    let answers = futures::future::join_all(
        (0..8).map(|_| complete_as(&chat, "alice", Some(&conversation), &answer)),
    )
    .await;

    let mut statuses: Vec<String> = answers
        .iter()
        .map(|(status, _, _, body)| match status {
            200 => body["parley"]["status"].as_str().unwrap().to_owned(),
            409 => body["error"]["code"].as_str().unwrap().to_owned(),
            other => panic!("{other}: {body}"),
        })
        .collect();
    statuses.sort();
    statuses.dedup();
    assert!(
        statuses
            .iter()
            .all(|s| ["answered", "already_decided", "conversation_busy"].contains(&s.as_str())),
        "{statuses:?}"
    );
    assert_eq!(deletions(&chat), 2);
    let left: Vec<bool> =
        futures::future::join_all(ids.iter().map(|id| task_exists(&db, *id))).await;
    assert_eq!(left, [false, true, false, true]);
    assert_eq!(said_by(&chat, &conversation, "user").await.len(), 1);
    assert_eq!(
        chat.llm.requests().len(),
        2,
        "the model was asked once more"
    );
}

/// An answer that follows no question (a client that sends only its new message) cannot say
/// which question the user saw: while calls wait it is refused, and nothing is decided.
#[tokio::test]
async fn a_yes_that_follows_no_question_while_calls_wait_is_refused() {
    let (chat, db, id) = chat_deleting_a_task(&["Deleted."]).await;
    let (_, conversation, _) = complete(&chat, None, &[("user", ASK)]).await;

    let (status, _, _, body) =
        complete_as(&chat, "alice", Some(&conversation), &[("user", "yes")]).await;

    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "approval_question_missing", "{body}");
    assert!(task_exists(&db, id).await);
    assert_eq!(decision(&chat, &conversation).await, "pending");
    assert_eq!(said_by(&chat, &conversation, "user").await.len(), 1);
}
