//! What a turn stores when storing goes wrong, and reads that must not starve other users: a
//! reply whose store failed while Postgres restarted is stored once it is back and frees the
//! conversation; text streamed before a turn failed is kept with the error; one user's burst of
//! history reads is bounded.

use std::time::Duration;

use parley_core::config::Env;
use parley_testkit::llm::{ScriptedLlm, Step};
use parley_testkit::{TestCluster, TestDb};
use serde_json::{Value, json};

use crate::helpers::{
    JWT_SECRET, MCP_TOKEN, Options, read_until, spawn, spawn_chat_from, sse_data, streamed_text,
    token,
};

#[tokio::test]
async fn a_reply_whose_store_failed_while_postgres_restarted_is_stored_once_it_is_back_and_frees_the_conversation()
 {
    let mut cluster = TestCluster::start();
    let db = TestDb::migrated_on(&cluster.url()).await;
    let reply = "Leeds has 12 open reports.";
    // The answer comes after the database has gone down, so storing it fails.
    let llm = ScriptedLlm::start(vec![
        Step::delayed(Duration::from_millis(1500), Step::text(reply)),
        Step::text("Still 12."),
    ])
    .await;
    let nothing_listens = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let env = Env::from_pairs([
        ("DATABASE_URL", db.url.clone()),
        ("JWT_SECRET", JWT_SECRET.to_owned()),
        ("MCP_AUTH_TOKEN", MCP_TOKEN.to_owned()),
        ("MCP_URL", format!("http://{nothing_listens}/mcp")),
        ("LLM_BASE_URL", llm.base_url()),
        ("LLM_API_KEY", "sk-test-not-a-real-key".to_owned()),
        // The lease would hold the conversation for 5 minutes; a follow-up waits 10 s at most.
        ("TURN_LEASE_MS", "300000".to_owned()),
        ("TURN_LOCK_WAIT_MS", "10000".to_owned()),
    ]);
    let chat = spawn_chat_from(env, llm, None).await;

    let response = chat
        .post_streamed(
            "alice",
            "/api/chat",
            json!({"message": "How many open reports in Leeds?"}),
        )
        .await;
    assert_eq!(response.status(), 200);
    // The question is stored and the lease taken; then Postgres goes down.
    let (parts, rest) = read_until(response, |p| p["type"] == "start").await;
    let conversation = parts[0]["messageMetadata"]["conversationId"]
        .as_str()
        .unwrap()
        .to_owned();
    cluster.stop();
    let mut parts = parts;
    parts.extend(sse_data(&rest.text().await.unwrap()));
    assert_eq!(streamed_text(&parts), reply, "{parts:?}");
    let error = parts
        .iter()
        .find(|p| p["type"] == "error")
        .expect("an error part");
    assert!(
        error["errorText"]
            .as_str()
            .unwrap()
            .starts_with("database_unavailable"),
        "{error}"
    );
    cluster.restart();

    // The conversation is free again without waiting for the lease to expire.
    let (status, body) = chat
        .post(
            "alice",
            json!({"message": "And now?", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "Still 12.");
    // What the user saw was stored in its place, before the follow-up.
    let messages = chat.messages("alice", &conversation).await;
    let contents: Vec<&str> = messages
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(
        contents,
        [
            "How many open reports in Leeds?",
            reply,
            "And now?",
            "Still 12."
        ],
        "{messages:?}"
    );
}

#[tokio::test]
async fn text_streamed_before_a_turn_failed_is_stored_with_the_error() {
    let chat = spawn(Options {
        steps: vec![Step::FailMidStream {
            text: "Leeds has 12 open".to_owned(),
            message: "The model crashed.".to_owned(),
        }],
        ..Options::default()
    })
    .await;
    let response = chat
        .post_streamed("alice", "/api/chat", json!({"message": "Leeds?"}))
        .await;
    assert_eq!(response.status(), 200);
    let parts = sse_data(&response.text().await.unwrap());
    assert_eq!(streamed_text(&parts), "Leeds has 12 open", "{parts:?}");
    assert!(parts.iter().any(|p| p["type"] == "error"), "{parts:?}");
    let conversation = parts[0]["messageMetadata"]["conversationId"]
        .as_str()
        .unwrap();

    let messages = chat.messages("alice", conversation).await;
    assert_eq!(messages.len(), 2, "{messages:?}");
    let answer = &messages[1];
    assert_eq!(answer["role"], "assistant");
    assert_eq!(answer["content"], "Leeds has 12 open", "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("llm_unavailable")),
        "marked as failed: {answer}"
    );
}

#[tokio::test]
async fn one_users_burst_of_history_reads_is_bounded_and_leaves_connections_for_others() {
    let chat = spawn(Options {
        steps: vec![Step::text("Hi.")],
        extra_env: vec![
            ("DB_POOL_MAX_SIZE", "2".to_owned()),
            // Whoever waits for a connection at all is told the pool is exhausted.
            ("DB_ACQUIRE_TIMEOUT_MS", "10".to_owned()),
            ("HISTORY_READS_PER_USER", "1".to_owned()),
        ],
        ..Options::default()
    })
    .await;
    let first = chat.turn("alice", json!({"message": "Hi"})).await;
    let path = format!(
        "{}/api/conversations/{}/messages",
        chat.base,
        first["conversation_id"].as_str().unwrap()
    );
    let http = reqwest::Client::new();
    let read = |user: &'static str, url: String| {
        let http = http.clone();
        async move {
            let response = http
                .get(url)
                .bearer_auth(token(user))
                .send()
                .await
                .expect("sent");
            let status = response.status().as_u16();
            let retry_after = response.headers().get("retry-after").cloned();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            (user, status, retry_after, body)
        }
    };
    let mut reads: Vec<_> = (0..60).map(|_| read("alice", path.clone())).collect();
    let conversations = format!("{}/api/conversations", chat.base);
    reads.insert(30, read("bob", conversations));
    let answers = futures::future::join_all(reads).await;

    let mut refused = 0;
    for (user, status, retry_after, body) in &answers {
        match (*user, *status) {
            ("alice", 200) | ("bob", 200) => {}
            ("alice", 429) => {
                refused += 1;
                assert_eq!(body["error"]["code"], "too_many_reads", "{body}");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(message.contains("HISTORY_READS_PER_USER"), "{message}");
                assert_eq!(retry_after.as_ref().unwrap(), "1");
            }
            _ => panic!("{user} got {status}: {body}"),
        }
    }
    assert!(refused > 0, "60 reads at once, one allowed at a time");
}
