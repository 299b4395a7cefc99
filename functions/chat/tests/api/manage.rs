//! What the page needs to keep a person's list tidy: a failed turn names the conversation it
//! stored the question in (so a retry joins it), and renaming and deleting a conversation.

use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::helpers::{Options, TestChat, hold_conversation, spawn, token};

/// `method path` as `user` with an optional JSON body: status and JSON body (`null` if none).
async fn send(
    chat: &TestChat,
    method: &str,
    user: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let http = reqwest::Client::new();
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = http
        .request(method, format!("{}{path}", chat.base))
        .bearer_auth(token(user));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    let text = response.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn titles(chat: &TestChat, user: &str) -> Vec<String> {
    let (status, list) = chat.get(Some(user), "/api/conversations").await;
    assert_eq!(status, 200, "{list}");
    list["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["title"].as_str().unwrap().to_owned())
        .collect()
}

fn failing() -> Step {
    Step::Status {
        status: 500,
        retry_after: None,
        body: "{}".into(),
    }
}

/// Friction 6: the question is stored before the model is asked, so a turn whose model failed
/// had created a conversation the client was never told about, and every retry made another.
#[tokio::test]
async fn a_turn_that_fails_after_storing_the_question_names_its_conversation_for_the_retry() {
    let chat = spawn(Options {
        steps: vec![failing(), Step::text("Here now.")],
        extra_env: vec![("LLM_MAX_RETRIES", "0".into())],
        ..Options::default()
    })
    .await;
    let (status, failed) = chat
        .post("alice", json!({"message": "are you there?"}))
        .await;
    assert_eq!(status, 502, "{failed}");
    assert_eq!(failed["error"]["code"], "llm_unavailable");
    let id = failed["conversation_id"]
        .as_str()
        .expect("the conversation's id")
        .to_owned();

    let retried = chat
        .turn(
            "alice",
            json!({"message": "are you there?", "conversation_id": id}),
        )
        .await;
    assert_eq!(retried["conversation_id"], id.as_str());
    assert_eq!(
        titles(&chat, "alice").await,
        ["are you there?"],
        "one conversation, not two"
    );
}

#[tokio::test]
async fn the_owner_renames_a_conversation_and_nobody_else_can() {
    let chat = spawn(Options {
        steps: vec![Step::text("Hello.")],
        ..Options::default()
    })
    .await;
    let id = chat.turn("alice", json!({"message": "hello there"})).await["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/conversations/{id}");

    let (status, renamed) = send(
        &chat,
        "PATCH",
        "alice",
        &path,
        Some(json!({"title": "  Kent  "})),
    )
    .await;
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(renamed["title"], "Kent");
    assert_eq!(renamed["id"], id.as_str());
    assert_eq!(titles(&chat, "alice").await, ["Kent"]);

    // Another user's conversation is as missing as one that never was.
    let (status, body) = send(&chat, "PATCH", "bob", &path, Some(json!({"title": "mine"}))).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("conversation_not_found"))
    );
    let (status, _) = send(
        &chat,
        "PATCH",
        "alice",
        "/api/conversations/not-a-uuid",
        Some(json!({"title": "x"})),
    )
    .await;
    assert_eq!(status, 404);

    for (body, code) in [
        (json!({"title": "   "}), "invalid_title"),
        (json!({"title": "two\nlines"}), "invalid_title"),
        (json!({"title": "x".repeat(201)}), "invalid_title"),
        (json!({"title": 7}), "invalid_request"),
        (json!({"title": "ok", "colour": "red"}), "invalid_request"),
    ] {
        let (status, answer) = send(&chat, "PATCH", "alice", &path, Some(body.clone())).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (422, Some(code)),
            "{body}"
        );
    }
    let (status, answer) = send(&chat, "PATCH", "alice", &path, None).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("invalid_json"))
    );
    assert_eq!(
        titles(&chat, "alice").await,
        ["Kent"],
        "no refused rename changed it"
    );
    let (status, _) = send(
        &chat,
        "PATCH",
        "alice",
        &path,
        Some(json!({"title": "y".repeat(200)})),
    )
    .await;
    assert_eq!(status, 200, "200 characters is the limit, not past it");
}

#[tokio::test]
async fn the_owner_deletes_a_conversation_with_its_messages_unless_a_turn_runs_in_it() {
    let chat = spawn(Options {
        steps: vec![Step::text("One."), Step::text("Two.")],
        extra_env: vec![("TURN_LEASE_MS", "60000".into())],
        ..Options::default()
    })
    .await;
    let first = chat.turn("alice", json!({"message": "first"})).await["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = chat.turn("alice", json!({"message": "second"})).await["conversation_id"]
        .as_str()
        .unwrap()
        .to_owned();

    let (status, body) = send(
        &chat,
        "DELETE",
        "bob",
        &format!("/api/conversations/{first}"),
        None,
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (404, &json!("conversation_not_found"))
    );

    // A turn (of another instance, say) holds the second conversation: deleting it now would
    // lose that turn's reply, so the owner is told to wait.
    let held = hold_conversation(&chat, "alice", &second, "still thinking").await;
    let (status, body) = send(
        &chat,
        "DELETE",
        "alice",
        &format!("/api/conversations/{second}"),
        None,
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (409, &json!("conversation_busy"))
    );
    drop(held);

    let (status, body) = send(
        &chat,
        "DELETE",
        "alice",
        &format!("/api/conversations/{first}"),
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    assert_eq!(titles(&chat, "alice").await, ["second"]);
    let (status, _) = chat
        .get(
            Some("alice"),
            &format!("/api/conversations/{first}/messages"),
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = send(
        &chat,
        "DELETE",
        "alice",
        &format!("/api/conversations/{first}"),
        None,
    )
    .await;
    assert_eq!(status, 404, "deleting twice finds nothing the second time");

    let (db, connection) = tokio_postgres::connect(
        chat.db_url.as_deref().expect("the chat's database"),
        tokio_postgres::NoTls,
    )
    .await
    .expect("a connection");
    tokio::spawn(connection);
    let left: i64 = db
        .query_one(
            "SELECT count(*) FROM chat.messages WHERE conversation_id = $1::text::uuid",
            &[&first],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "the messages went with their conversation");
    // The role the chat runs as when deployed may delete too.
    let may: bool = db
        .query_one(
            "SELECT has_table_privilege('parley_chat_writer', 'chat.conversations', 'DELETE')
                AND has_table_privilege('parley_chat_writer', 'chat.messages', 'DELETE')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(may, "parley_chat_writer may not delete conversations");
}
