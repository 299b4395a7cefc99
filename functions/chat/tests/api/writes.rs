//! Tools that write: a call whose answer is lost after the server committed is sent again with
//! the same idempotency key, and the server answers it with the first attempt's rows instead of
//! writing twice. (A write without that guarantee is never re-sent: `mcp_client`'s unit tests.)
//! The tools here are declared `destructive = false`, so their calls run without waiting for
//! the user's approval (approvals.rs).

use std::net::SocketAddr;

use parley_core::config::Env;
use parley_testkit::llm::{ScriptedLlm, Step};
use parley_testkit::{TcpProxy, TestDb};
use serde_json::json;

use crate::helpers::{
    JWT_SECRET, MCP_TOKEN, TestChat, jwt_payload, spawn_chat_from, spawn_mcp_from,
};

const ADD_NOTE: &str = r#"
[[tool]]
name = "add_note"
description = "Records one feedback item."
writes = true
destructive = false
role = "parley_chat_test_writer"
sql = """
INSERT INTO feedback (lad_code, category, rating, sentiment, title, body, status, created_at)
VALUES ('E08000035', 'roads', 3, 'neutral', :title, 'from the chat', 'open', now())
RETURNING id
"""
[tool.params.title]
type = "string"
required = true
"#;

/// What the proxy in front of the mcp function does once it has lost the first answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AfterLoss {
    PassThrough,
    /// The server is gone, as after a redeploy or a crash: every later connection is refused.
    Gone,
}

/// The role the test tools write as (`role` in their declarations): may change `feedback` and,
/// as every write role, record idempotency keys.
const WRITER: &str = "parley_chat_test_writer";

/// A chat whose mcp function serves `tools` (as the database owner: the read-only role may not
/// write) through a [`TcpProxy`] that loses the answer to the first `tools/call` (after the
/// server answered, so the write is committed), kept alive by the caller, and a model that
/// makes `call` then says `reply`.
async fn chat_losing_first_answer(
    db: &TestDb,
    tools: &str,
    call: (&str, &str),
    reply: &str,
) -> (TestChat, TcpProxy) {
    chat_losing_first_answer_then(db, tools, call, reply, AfterLoss::PassThrough).await
}

async fn chat_losing_first_answer_then(
    db: &TestDb,
    tools: &str,
    call: (&str, &str),
    reply: &str,
    after: AfterLoss,
) -> (TestChat, TcpProxy) {
    db.writer_role(
        WRITER,
        &format!(
            "GRANT SELECT, INSERT, UPDATE ON feedback TO {WRITER};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {WRITER};"
        ),
    )
    .await;
    let tools_file =
        std::env::temp_dir().join(format!("parley-writes-{}.toml", uuid::Uuid::new_v4()));
    std::fs::write(&tools_file, tools).expect("write tools file");
    let mcp = spawn_mcp_from(Env::from_pairs([
        ("DATABASE_URL", db.url.as_str()),
        ("MCP_AUTH_TOKEN", MCP_TOKEN),
        ("TOOLS_FILE", &tools_file.display().to_string()),
    ]))
    .await;
    let _ = std::fs::remove_file(&tools_file);
    let upstream: SocketAddr = url::Url::parse(&mcp.url)
        .expect("mcp url")
        .socket_addrs(|| None)
        .expect("mcp address")[0];
    let proxy = TcpProxy::start(upstream).await;
    match after {
        AfterLoss::PassThrough => proxy.lose_first_answer(b"tools/call", b"\"result\""),
        AfterLoss::Gone => proxy.lose_first_answer_then_go(b"tools/call", b"\"result\""),
    }
    let llm = ScriptedLlm::start(vec![Step::call(call.0, call.1), Step::text(reply)]).await;
    let env = Env::from_pairs([
        ("DATABASE_URL", db.url.clone()),
        ("JWT_SECRET", JWT_SECRET.to_owned()),
        ("MCP_URL", format!("http://{}/mcp", proxy.addr)),
        ("MCP_AUTH_TOKEN", MCP_TOKEN.to_owned()),
        ("LLM_BASE_URL", llm.base_url()),
        ("LLM_API_KEY", "sk-test-not-a-real-key".to_owned()),
        ("MCP_TIMEOUT_MS", "5000".to_owned()),
    ]);
    (spawn_chat_from(env, llm, Some(mcp)).await, proxy)
}

#[tokio::test]
async fn a_write_whose_answer_is_lost_is_sent_again_with_its_key_and_written_once() {
    let db = TestDb::with_demo_data(100).await;
    let (chat, _proxy) = chat_losing_first_answer(
        &db,
        ADD_NOTE,
        ("add_note", r#"{"title":"Pothole on Briggate"}"#),
        "Recorded.",
    )
    .await;

    let body = chat
        .turn(
            "alice",
            json!({"message": "Report the pothole on Briggate"}),
        )
        .await;

    let ids: Vec<i64> = db
        .client()
        .await
        .query(
            "SELECT id FROM feedback WHERE title = 'Pothole on Briggate'",
            &[],
        )
        .await
        .expect("count")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(ids.len(), 1, "sent twice, written once: {ids:?}");
    // The second attempt carried the first one's key, so the server answered with the rows
    // the first attempt wrote instead of writing again.
    let trace = &body["traces"][0];
    assert_eq!(trace["is_error"], false, "{body}");
    assert_eq!(trace["output"]["rows"][0]["id"], ids[0], "{body}");
    let attempts = chat.mcp().posts("tools/call");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    assert_eq!(
        attempts[0].meta["parley/idempotency_key"], attempts[1].meta["parley/idempotency_key"],
        "{attempts:?}"
    );
}

#[tokio::test]
async fn a_write_declared_idempotent_is_sent_again_when_its_answer_is_lost() {
    let close = r#"
[[tool]]
name = "close_feedback"
description = "Marks one feedback item closed."
writes = true
destructive = false
role = "parley_chat_test_writer"
idempotent = true
sql = "UPDATE feedback SET status = 'closed' WHERE id = :id RETURNING id, status"
[tool.params.id]
type = "integer"
required = true
"#;
    let db = TestDb::with_demo_data(100).await;
    let (chat, _proxy) =
        chat_losing_first_answer(&db, close, ("close_feedback", r#"{"id":1}"#), "Closed.").await;

    let body = chat.turn("alice", json!({"message": "Close item 1"})).await;

    let trace = &body["traces"][0];
    assert_eq!(trace["is_error"], false, "sent again and answered: {body}");
    assert_eq!(trace["output"]["rows"][0]["status"], "closed", "{body}");
    assert_eq!(body["reply"], "Closed.");
    // Both attempts reached the server as the same call of the same user: one idempotency
    // key, each with its own fresh assertion.
    let attempts = chat.mcp().posts("tools/call");
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    let key = &attempts[0].meta["parley/idempotency_key"];
    assert!(key.is_string(), "{attempts:?}");
    assert_eq!(&attempts[1].meta["parley/idempotency_key"], key);
    for attempt in &attempts {
        let bearer = attempt.bearer.as_deref().expect("an assertion");
        assert_eq!(jwt_payload(bearer)["sub"], "alice");
    }
}

#[tokio::test]
async fn a_write_whose_answer_is_lost_and_whose_server_is_then_gone_is_reported_unknown_not_unavailable()
 {
    let db = TestDb::with_demo_data(100).await;
    let (chat, _proxy) = chat_losing_first_answer_then(
        &db,
        ADD_NOTE,
        ("add_note", r#"{"title":"Pothole on Kirkgate"}"#),
        "I could not confirm it was recorded.",
        AfterLoss::Gone,
    )
    .await;

    let body = chat
        .turn(
            "alice",
            json!({"message": "Report the pothole on Kirkgate"}),
        )
        .await;

    // The first attempt committed; the re-send could not connect.
    let rows: i64 = db
        .client()
        .await
        .query_one(
            "SELECT count(*) FROM feedback WHERE title = 'Pothole on Kirkgate'",
            &[],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(rows, 1, "{body}");
    assert_eq!(chat.mcp().posts("tools/call").len(), 1, "{body}");
    // "Unavailable, try again later" would have the model call again under a new key and
    // write a second row; it must hear that the call may have run.
    let trace = &body["traces"][0];
    assert_eq!(trace["is_error"], true, "{body}");
    let said = trace["output"].as_str().expect("an error text");
    assert!(
        said.contains("the outcome of this call to `add_note` is unknown")
            && said.contains("Check its effect before calling it again"),
        "{said}"
    );
    assert!(!said.contains("unavailable"), "{said}");
    let requests = chat.llm.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(
        requests[1].to_string().contains("is unknown"),
        "the model was told: {}",
        requests[1]
    );
}
