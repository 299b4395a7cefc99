//! The chat and its mcp function behind a transaction-mode pooler (PgBouncer, as RDS Proxy or
//! PgBouncer in a deployment) with one server connection per database role: a turn that calls
//! a tool, turns of several users at once, history reads, a rename, and nothing left on the
//! server sessions afterwards (no named prepared statement, setting, lock, temp table, cursor).

use futures::future::join_all;
use parley_testkit::llm::{ScriptedLlm, Step};
use parley_testkit::{PgBouncer, TestDb};
use serde_json::json;

use crate::helpers::{FEEDBACK_ROWS, spawn_chat_with_settings};

#[tokio::test]
async fn turns_through_a_transaction_pooler_leave_nothing_on_the_shared_server_sessions() {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let bouncer = PgBouncer::start(&db.url, 1);
    let mut steps = vec![
        Step::Calls(vec![("list_lads".into(), r#"{"limit":3}"#.into())]),
        Step::Text("three districts".into()),
    ];
    steps.extend((0..6).map(|n| Step::Text(format!("answer {n}"))));
    let (chat_url, mcp_url) = (bouncer.url(&db.url), bouncer.url(&db.readonly_url));
    // Four client connections in each function, one server connection per role behind them.
    let chat = spawn_chat_with_settings(
        &db,
        &[("DATABASE_URL", &mcp_url), ("DB_POOL_MAX_SIZE", "4")],
        &[("DATABASE_URL", &chat_url), ("DB_POOL_MAX_SIZE", "4")],
        ScriptedLlm::start(steps).await,
    )
    .await;

    let first = chat
        .turn("alice", json!({"message": "which districts?"}))
        .await;
    assert_eq!(first["reply"], "three districts", "{first}");
    let conversation = first["conversation_id"].as_str().unwrap().to_owned();
    let turns = ["alice", "bob", "carol"].iter().flat_map(|user| {
        let conversation = conversation.clone();
        [
            json!({"message": format!("hello from {user}")}),
            if *user == "alice" {
                json!({"message": "and again", "conversation_id": conversation})
            } else {
                json!({"message": format!("more from {user}")})
            },
        ]
        .map(move |body| (*user, body))
    });
    let answers = join_all(turns.map(|(user, body)| {
        let chat = &chat;
        async move { chat.post(user, body).await }
    }))
    .await;
    for (status, answer) in &answers {
        assert_eq!(
            *status,
            200,
            "{answer}\nPgBouncer's log:\n{}",
            bouncer.log()
        );
    }
    let messages = chat.messages("alice", &conversation).await;
    assert_eq!(messages.len(), 4, "{messages:?}");
    let (status, list) = chat.get(Some("alice"), "/api/conversations").await;
    assert_eq!(status, 200, "{list}");

    assert_eq!(
        bouncer.leftovers(&db.url).await,
        Vec::<String>::new(),
        "the server session the chat's connections shared"
    );
    assert_eq!(
        bouncer.leftovers(&db.readonly_url).await,
        Vec::<String>::new(),
        "the server session the mcp function's connections shared"
    );
}
