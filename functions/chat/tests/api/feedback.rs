//! Feedback on answers through the real HTTP surface: a thumbs down with a comment on a turn
//! that searched notes (sources) and ran its own SQL (run_sql), shown again with the
//! conversation, changed, cleared; another user's conversation, a question, a missing message,
//! an oversize comment and a bad rating refused with a body naming the problem; deleting the
//! conversation deletes its feedback. (`parley feedback export` of it: tools/parley/tests.)

use parley_testkit::TestDb;
use parley_testkit::llm::{ScriptedLlm, Step};
use serde_json::{Value, json};

use crate::helpers::{TestChat, spawn_chat_with_settings, sse_data, token};
use crate::sources::{NOTES_TOOLS, notes_db};

const SQL_TOOLS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/feedback/sql.toml"
);

const COUNT_SQL: &str = "SELECT count(*) AS notes FROM notes";

/// A chat over the notes whose model searches them and counts them with run_sql, then
/// answers citing the first source, every turn; comments are at most 40 characters.
async fn chat() -> (TestChat, TestDb) {
    let db = notes_db().await;
    let sql_url = db
        .sql_reader_url("GRANT SELECT ON notes TO parley_sql_reader")
        .await;
    let tools = format!("{NOTES_TOOLS},{SQL_TOOLS}");
    let llm = ScriptedLlm::per_turn(vec![
        Step::calls([
            ("search_notes", r#"{"query": "isolation"}"#.to_owned()),
            ("run_sql", json!({ "sql": COUNT_SQL }).to_string()),
        ]),
        Step::text("Read committed is the default [S1]; there are 4 notes."),
    ])
    .await;
    let chat = spawn_chat_with_settings(
        &db,
        &[("TOOLS_FILE", &tools), ("SQL_DATABASE_URL", &sql_url)],
        &[("FEEDBACK_MAX_COMMENT_CHARS", "40")],
        llm,
    )
    .await;
    (chat, db)
}

/// `PUT .../messages/{seq}/feedback` as `user` with a raw body: status and JSON body.
async fn put(
    chat: &TestChat,
    user: &str,
    conversation: &str,
    seq: &str,
    body: &str,
) -> (u16, Value) {
    let response = reqwest::Client::new()
        .put(format!(
            "{}/api/conversations/{conversation}/messages/{seq}/feedback",
            chat.base
        ))
        .bearer_auth(token(user))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Rows in `chat.feedback`.
async fn stored(db: &TestDb) -> i64 {
    db.client()
        .await
        .query_one("SELECT count(*) FROM chat.feedback", &[])
        .await
        .unwrap()
        .get(0)
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_thumbs_down_with_a_comment_is_stored_with_the_answer_shown_again_changed_and_cleared() {
    let (chat, db) = chat().await;
    let body = chat
        .turn(
            "alice",
            json!({"message": "What is the default isolation level?"}),
        )
        .await;
    let conversation = body["conversation_id"].as_str().unwrap().to_owned();
    // The answer's number, to rate it without reading the conversation back.
    assert_eq!(body["seq"], 2, "{body}");
    let names: Vec<&str> = body["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["search_notes", "run_sql"], "{body}");
    assert_eq!(body["traces"][1]["output"]["rows"][0]["notes"], 4, "{body}");
    assert!(!body["sources"].as_array().unwrap().is_empty(), "{body}");

    let (status, given) = put(
        &chat,
        "alice",
        &conversation,
        "2",
        r#"{"rating": "down", "comment": "  It should say which notes. "}"#,
    )
    .await;
    assert_eq!(status, 200, "{given}");
    assert_eq!(given["conversation_id"], conversation.as_str());
    assert_eq!(given["seq"], 2);
    assert_eq!(given["feedback"]["rating"], "down");
    assert_eq!(given["feedback"]["comment"], "It should say which notes.");

    // After a reload: on the answer, and not on the question.
    let messages = chat.messages("alice", &conversation).await;
    assert!(messages[0].get("feedback").is_none(), "{:?}", messages[0]);
    assert_eq!(messages[1]["feedback"], given["feedback"]);

    // Changed: the comment goes with a rating sent without one; the first time stays.
    let (status, changed) = put(&chat, "alice", &conversation, "2", r#"{"rating": "up"}"#).await;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["feedback"]["rating"], "up");
    assert_eq!(changed["feedback"]["comment"], Value::Null);
    assert_eq!(
        changed["feedback"]["created_at"],
        given["feedback"]["created_at"]
    );
    assert_eq!(
        chat.messages("alice", &conversation).await[1]["feedback"]["rating"],
        "up"
    );

    // Cleared: gone from the conversation.
    let (status, cleared) = put(&chat, "alice", &conversation, "2", r#"{"rating": null}"#).await;
    assert_eq!(status, 200, "{cleared}");
    assert_eq!(cleared["feedback"], Value::Null);
    assert!(
        chat.messages("alice", &conversation).await[1]
            .get("feedback")
            .is_none()
    );

    // Given again, then the conversation deleted: its feedback goes with it.
    let (status, _) = put(&chat, "alice", &conversation, "2", r#"{"rating": "down"}"#).await;
    assert_eq!(status, 200);
    assert_eq!(stored(&db).await, 1);
    let deleted = reqwest::Client::new()
        .delete(format!("{}/api/conversations/{conversation}", chat.base))
        .bearer_auth(token("alice"))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(stored(&db).await, 0);
}

#[tokio::test]
async fn feedback_on_what_is_not_the_callers_answer_or_not_well_formed_is_refused_by_name() {
    let (chat, db) = chat().await;
    let body = chat
        .turn(
            "alice",
            json!({"message": "What is the default isolation level?"}),
        )
        .await;
    let conversation = body["conversation_id"].as_str().unwrap().to_owned();
    let down = r#"{"rating": "down"}"#;

    // Another user's conversation looks missing, as everywhere in the API.
    let (status, refused) = put(&chat, "bob", &conversation, "2", down).await;
    assert_eq!(
        (status, code(&refused)),
        (404, "conversation_not_found"),
        "{refused}"
    );
    // The question is the user's own message.
    let (status, refused) = put(&chat, "alice", &conversation, "1", down).await;
    assert_eq!(
        (status, code(&refused)),
        (422, "not_an_answer"),
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("message 1 is the question"),
        "{refused}"
    );
    // No such message, or not a message number.
    for seq in ["3", "0", "two"] {
        let (status, refused) = put(&chat, "alice", &conversation, seq, down).await;
        assert_eq!(
            (status, code(&refused)),
            (404, "message_not_found"),
            "{seq}: {refused}"
        );
    }
    // A comment over FEEDBACK_MAX_COMMENT_CHARS (40 here).
    let long = json!({"rating": "down", "comment": "x".repeat(41)}).to_string();
    let (status, refused) = put(&chat, "alice", &conversation, "2", &long).await;
    assert_eq!(
        (status, code(&refused)),
        (422, "comment_too_long"),
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("FEEDBACK_MAX_COMMENT_CHARS"),
        "{refused}"
    );
    // A rating that is not up or down, or none at all, names the field.
    for body in [r#"{"rating": "meh"}"#, r#"{"comment": "no rating"}"#] {
        let (status, refused) = put(&chat, "alice", &conversation, "2", body).await;
        assert_eq!(
            (status, code(&refused)),
            (422, "invalid_request"),
            "{refused}"
        );
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("rating"),
            "{refused}"
        );
    }
    let (status, refused) = put(&chat, "alice", &conversation, "2", "{").await;
    assert_eq!((status, code(&refused)), (400, "invalid_json"), "{refused}");

    // None of that stored anything.
    assert_eq!(stored(&db).await, 0);
}

#[tokio::test]
async fn a_streamed_answer_says_its_seq_when_it_finishes_and_takes_feedback_by_it() {
    let (chat, _db) = chat().await;
    let first = chat
        .turn(
            "alice",
            json!({"message": "What is the default isolation level?"}),
        )
        .await;
    let conversation = first["conversation_id"].as_str().unwrap().to_owned();
    let streamed = chat
        .post_streamed(
            "alice",
            "/api/chat",
            json!({"conversation_id": conversation, "message": "And the strictest?"}),
        )
        .await;
    assert_eq!(streamed.status(), 200);
    let parts = sse_data(&streamed.text().await.unwrap());
    let finish = parts
        .iter()
        .find(|p| p["type"] == "finish")
        .unwrap_or_else(|| panic!("no finish in {parts:?}"));
    assert_eq!(finish["messageMetadata"]["seq"], 4, "{finish}");
    assert_eq!(
        finish["messageMetadata"]["conversationId"],
        conversation.as_str()
    );
    let (status, given) = put(&chat, "alice", &conversation, "4", r#"{"rating": "up"}"#).await;
    assert_eq!(status, 200, "{given}");
    let messages = chat.messages("alice", &conversation).await;
    assert_eq!(messages[3]["role"], "assistant");
    assert_eq!(messages[3]["feedback"]["rating"], "up");
    assert!(messages[1].get("feedback").is_none());
}
