//! Sources end to end: the mcp function serves tools whose rows are sources (a `citation` in
//! `tests/data/notes.toml`, over a small `notes` table), the chat numbers those rows across the
//! turn, the model sees each row's `cite`, and the reply's `[S<n>]` citations order the
//! `sources` the turn returns, stores and the messages endpoint gives back.

use parley_testkit::TestDb;
use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::helpers::{TestChat, input_of, spawn_chat_with_tools};

pub const NOTES_TOOLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/notes.toml");

/// A chat whose mcp function serves only the notes tools, over a fresh database with four
/// notes, and a model that plays `steps`.
async fn notes_chat(steps: Vec<Step>) -> TestChat {
    let db = notes_db().await;
    spawn_chat_with_tools(&db, NOTES_TOOLS, steps).await
}

/// A fresh database with a `notes` table of four notes the read-only role may read.
pub async fn notes_db() -> TestDb {
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute(
            "CREATE TABLE notes (id int PRIMARY KEY, slug text NOT NULL, title text NOT NULL,
                                 body text NOT NULL);
             INSERT INTO notes VALUES
               (1, 'isolation', 'Isolation levels',
                'Read committed sees each statement''s snapshot; a transaction can ask for more.'),
               (2, 'set-transaction', 'SET TRANSACTION',
                'Sets the isolation level of the current transaction.'),
               (3, 'locks', 'Explicit locking',
                'LOCK TABLE takes a table-level lock until the transaction ends.'),
               (4, 'vacuum', 'Routine vacuuming', 'Reclaims storage from dead rows.');
             GRANT SELECT ON notes TO parley_readonly;",
        )
        .await
        .expect("notes table");
    db
}

/// Two searches in one response whose hits overlap, then a read of the note both found.
fn search_twice_then_read() -> Vec<Step> {
    vec![
        Step::calls([
            ("search_notes", r#"{"query": "isolation"}"#),
            ("search_notes", r#"{"query": "transaction"}"#),
        ]),
        Step::call("read_note", r#"{"note_id": 2}"#),
    ]
}

/// The `cite` of each row of the tool output the model was sent for `call_id`, by note id.
fn cites_sent(request: &Value, call_id: &str) -> Vec<(i64, String)> {
    let input = input_of(request);
    let output = input
        .iter()
        .find(|i| i["type"] == "function_call_output" && i["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no output for {call_id} in {input:?}"));
    let sent: Value = serde_json::from_str(output["output"].as_str().unwrap()).unwrap();
    sent["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["note_id"].as_i64().unwrap(),
                r["cite"].as_str().unwrap_or("(none)").to_owned(),
            )
        })
        .collect()
}

fn ids_and_flags(sources: &Value) -> Vec<(String, bool)> {
    sources
        .as_array()
        .unwrap_or_else(|| panic!("sources: {sources}"))
        .iter()
        .map(|s| (s["id"].as_str().unwrap().to_owned(), s["cited"] == true))
        .collect()
}

#[tokio::test]
async fn a_turn_that_searches_and_reads_returns_its_sources_cited_first() {
    let mut steps = search_twice_then_read();
    steps.push(Step::text(
        "Use SET TRANSACTION [S2]; read committed is the default [S1]. [S9] is not a source.",
    ));
    let chat = notes_chat(steps).await;
    let body = chat
        .turn(
            "alice",
            json!({"message": "How do I choose an isolation level?"}),
        )
        .await;

    // "isolation" finds notes 1 and 2; "transaction" finds 2 (title) then 1 and 3 (text).
    let requests = chat.llm.requests();
    assert_eq!(
        cites_sent(&requests[1], "call_1"),
        [(1, "S1".into()), (2, "S2".into())]
    );
    assert_eq!(
        cites_sent(&requests[1], "call_2"),
        [(2, "S2".into()), (1, "S1".into()), (3, "S3".into())],
        "a source found again keeps its number"
    );
    assert_eq!(cites_sent(&requests[2], "call_3"), [(2, "S2".into())]);
    let instructions = requests[0]["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("Rows of tool results that have a `cite` field"),
        "{instructions}"
    );

    assert_eq!(
        ids_and_flags(&body["sources"]),
        [
            ("S2".into(), true),
            ("S1".into(), true),
            ("S3".into(), false)
        ]
    );
    assert_eq!(
        body["sources"][0],
        json!({
            "id": "S2", "title": "SET TRANSACTION", "uri": "notes/set-transaction",
            "snippet": "Sets the isolation level of the current ", "score": 0.5,
            "tool": "search_notes", "call_id": "call_1", "cited": true
        })
    );
    assert_eq!(body["sources"][2]["call_id"], "call_2");
    // The trace stores what the model saw.
    assert_eq!(body["traces"][2]["output"]["rows"][0]["cite"], "S2");

    let conversation = body["conversation_id"].as_str().unwrap();
    let messages = chat.messages("alice", conversation).await;
    assert_eq!(messages.len(), 2);
    assert!(messages[0].get("sources").is_none(), "a question has none");
    assert_eq!(messages[1]["sources"], body["sources"]);
    assert_eq!(messages[1]["traces"], body["traces"]);
}

#[tokio::test]
async fn a_later_turn_numbers_its_own_sources_and_replays_none_of_the_old_numbers() {
    let chat = notes_chat(vec![
        Step::call("search_notes", r#"{"query": "vacuum"}"#),
        Step::text("Vacuuming reclaims storage [S1]."),
        Step::call("search_notes", r#"{"query": "lock"}"#),
        Step::text("LOCK TABLE [S1]."),
    ])
    .await;
    let first = chat
        .turn("alice", json!({"message": "What does vacuum do?"}))
        .await;
    let conversation = first["conversation_id"].as_str().unwrap();
    let second = chat
        .turn(
            "alice",
            json!({"message": "And locks?", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(second["sources"][0]["title"], "Explicit locking");
    assert_eq!(ids_and_flags(&second["sources"]), [("S1".into(), true)]);

    // The second turn's model saw the first turn without its numbers.
    let replayed = input_of(&chat.llm.requests()[2]);
    let text = Value::Array(replayed).to_string();
    assert!(!text.contains("S1"), "{text}");
    assert!(text.contains("Vacuuming reclaims storage."), "{text}");
}

#[tokio::test]
async fn a_failed_turn_stores_the_sources_its_tools_found() {
    let mut steps = search_twice_then_read();
    steps.push(Step::error(400, "scripted failure"));
    let chat = notes_chat(steps).await;
    let (status, body) = chat
        .post(
            "alice",
            json!({"message": "How do I choose an isolation level?"}),
        )
        .await;
    assert_eq!(status, 502, "{body}");
    let (_, list) = chat.get(Some("alice"), "/api/conversations").await;
    let conversation = list["conversations"][0]["id"].as_str().unwrap().to_owned();
    let messages = chat.messages("alice", &conversation).await;
    assert!(messages[1]["error"].is_string(), "{:?}", messages[1]);
    assert_eq!(
        ids_and_flags(&messages[1]["sources"]),
        [
            ("S1".into(), false),
            ("S2".into(), false),
            ("S3".into(), false)
        ]
    );
}
