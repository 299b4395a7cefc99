//! The signed-in user reaches the tools: each tool call to the `parley` server is sent with a
//! fresh assertion of the turn's user (signed with `MCP_CALLER_KEY`, verified by the real mcp
//! function), while listing keeps the service token and other servers never see a user.
//! What the mcp function received is read from its recorded POSTs.

use parley_core::config::Env;
use parley_testkit::TestDb;
use parley_testkit::llm::{ScriptedLlm, Step};
use serde_json::json;

use crate::helpers::{
    FEEDBACK_ROWS, JWT_SECRET, MCP_TOKEN, McpPost, Options, jwt_payload, now, spawn,
    spawn_chat_from, spawn_mcp_from, token_with,
};

fn lookup(place: &str) -> Step {
    Step::call("lad_by_ref", format!(r#"{{"ref":"{place}"}}"#))
}

/// The subject of the assertion a `tools/call` carried.
fn sub_of(post: &McpPost) -> String {
    let bearer = post.bearer.as_deref().expect("a bearer token");
    jwt_payload(bearer)["sub"]
        .as_str()
        .expect("a sub")
        .to_owned()
}

#[tokio::test]
async fn each_users_tool_calls_carry_that_user_and_listing_keeps_the_service_token() {
    let chat = spawn(Options {
        steps: vec![
            lookup("Leeds"),
            Step::text("Leeds is E08000035."),
            lookup("Bristol"),
            Step::text("Bristol is E06000023."),
        ],
        ..Options::default()
    })
    .await;
    let alice = token_with(
        json!({"sub": "alice", "email": "alice@example.com", "exp": now() + 3600}),
        JWT_SECRET,
    );
    let (status, first) = chat
        .post_raw(
            Some(&alice),
            json!({"message": "Tell me about Leeds"}).to_string(),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    let second = chat
        .turn("bob", json!({"message": "Tell me about Bristol"}))
        .await;
    // The mcp function verified each assertion and ran the call.
    for body in [&first, &second] {
        assert_eq!(body["traces"][0]["is_error"], false, "{body}");
    }

    let calls = chat.mcp().posts("tools/call");
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(sub_of(&calls[0]), "alice");
    assert_eq!(sub_of(&calls[1]), "bob");
    let assertion = jwt_payload(calls[0].bearer.as_deref().unwrap());
    assert_eq!(assertion["iss"], "parley-chat");
    assert_eq!(assertion["aud"], "parley-mcp");
    assert_eq!(assertion["email"], "alice@example.com", "claims go along");
    assert_eq!(
        assertion["exp"].as_i64().unwrap() - assertion["iat"].as_i64().unwrap(),
        60
    );
    for (call, body) in calls.iter().zip([&first, &second]) {
        assert_ne!(call.bearer.as_deref(), Some(MCP_TOKEN));
        // Only a reference to the assertion was in the message, and it was taken out.
        assert!(call.meta.get("parley/caller").is_none(), "{:?}", call.meta);
        let key = call.meta["parley/idempotency_key"].as_str().expect("a key");
        let call_id = body["traces"][0]["call_id"].as_str().unwrap();
        assert!(key.ends_with(&format!(":{call_id}")), "{key}");
    }
    assert_ne!(
        calls[0].meta["parley/idempotency_key"],
        calls[1].meta["parley/idempotency_key"]
    );

    let lists = chat.mcp().posts("tools/list");
    assert!(!lists.is_empty());
    for list in lists {
        assert_eq!(list.bearer.as_deref(), Some(MCP_TOKEN));
    }
}

#[tokio::test]
async fn with_auth_off_the_tools_see_the_local_user_without_claims() {
    let chat = spawn(Options {
        steps: vec![lookup("Leeds"), Step::text("Leeds.")],
        extra_env: vec![("CHAT_AUTH", "none".into())],
        ..Options::default()
    })
    .await;
    let (status, body) = chat
        .post_raw(None, json!({"message": "Leeds?"}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["traces"][0]["is_error"], false, "{body}");
    let calls = chat.mcp().posts("tools/call");
    let assertion = jwt_payload(calls[0].bearer.as_deref().unwrap());
    let mut names: Vec<&str> = assertion
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["aud", "exp", "iat", "iss", "sub"]);
    assert_eq!(assertion["sub"], "local-user");
}

#[tokio::test]
async fn a_server_from_mcp_servers_never_receives_a_users_assertion() {
    const DOCS_TOKEN: &str = "docs-server-token-0123456789";
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let parley = spawn_mcp_from(Env::from_pairs([
        ("DATABASE_URL", db.readonly_url.as_str()),
        ("MCP_AUTH_TOKEN", MCP_TOKEN),
    ]))
    .await;
    let docs = spawn_mcp_from(Env::from_pairs([
        ("DATABASE_URL", db.readonly_url.as_str()),
        ("MCP_AUTH_TOKEN", DOCS_TOKEN),
    ]))
    .await;
    // Both offer the same tools, so each name is prefixed with its server's.
    let llm = ScriptedLlm::start(vec![
        Step::calls(vec![
            ("parley__lad_by_ref", r#"{"ref":"Leeds"}"#),
            ("docs__lad_by_ref", r#"{"ref":"Leeds"}"#),
        ]),
        Step::text("Leeds, twice."),
    ])
    .await;
    let servers = json!([{"name": "docs", "url": docs.url, "token": DOCS_TOKEN}]);
    let env = Env::from_pairs([
        ("DATABASE_URL", db.url.clone()),
        ("JWT_SECRET", JWT_SECRET.to_owned()),
        ("MCP_URL", parley.url.clone()),
        ("MCP_AUTH_TOKEN", MCP_TOKEN.to_owned()),
        ("MCP_SERVERS", servers.to_string()),
        ("LLM_BASE_URL", llm.base_url()),
        ("LLM_API_KEY", "sk-test-not-a-real-key".to_owned()),
    ]);
    let chat = spawn_chat_from(env, llm, Some(docs)).await;
    let body = chat.turn("alice", json!({"message": "Leeds?"})).await;
    let traces = body["traces"].as_array().unwrap();
    assert!(traces.iter().all(|t| t["is_error"] == false), "{body}");

    let to_docs = chat.mcp().posts("tools/call");
    assert_eq!(to_docs.len(), 1);
    assert_eq!(to_docs[0].bearer.as_deref(), Some(DOCS_TOKEN));
    assert!(to_docs[0].meta.get("parley/caller").is_none());
    assert!(to_docs[0].meta["parley/idempotency_key"].is_string());
    let to_parley = parley.posts("tools/call");
    assert_eq!(to_parley.len(), 1);
    assert_eq!(sub_of(&to_parley[0]), "alice");
}

#[tokio::test]
async fn an_assertion_the_mcp_function_refuses_is_a_tool_error_naming_the_identity() {
    let chat = spawn(Options {
        steps: vec![lookup("Leeds"), Step::text("I could not look it up.")],
        // Not the mcp function's key.
        extra_env: vec![(
            "MCP_CALLER_KEY",
            "another-caller-key-of-at-least-32-bytes".into(),
        )],
        ..Options::default()
    })
    .await;
    let body = chat.turn("alice", json!({"message": "Leeds?"})).await;
    let trace = &body["traces"][0];
    assert_eq!(trace["is_error"], true, "{body}");
    assert_eq!(
        trace["output"],
        "the tool server `parley` did not accept the user's identity; try again later or \
answer without it"
    );
    // Listing went through with the service token; the call was never sent without a user.
    assert!(!chat.mcp().posts("tools/list").is_empty());
    for call in chat.mcp().posts("tools/call") {
        assert_ne!(call.bearer.as_deref(), Some(MCP_TOKEN));
    }
}

#[tokio::test]
async fn a_user_whose_claims_outgrow_an_assertion_gets_a_tool_error_saying_so_and_nothing_is_sent()
{
    let chat = spawn(Options {
        steps: vec![lookup("Leeds"), Step::text("I could not look it up.")],
        ..Options::default()
    })
    .await;
    // A token just under the 16 KiB the chat accepts: the assertion of its claims, with the
    // assertion's own iss, aud and iat added, is over what the mcp function accepts.
    let big = |n: usize| {
        token_with(
            json!({"sub": "alice", "exp": now() + 3600, "profile": "x".repeat(n)}),
            JWT_SECRET,
        )
    };
    let mut n = 12_300;
    while big(n).len() > parley_core::jwt::MAX_TOKEN_BYTES - 8 {
        n -= 1;
    }
    let (status, body) = chat
        .post_raw(Some(&big(n)), json!({"message": "Leeds?"}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    let output = body["traces"][0]["output"].as_str().expect("a trace");
    assert!(
        output.starts_with(
            "the tool server `parley` cannot be called for this user: the signed-in user's \
             claims make a caller assertion of "
        ) && output.ends_with(
            "bytes, more than the 16384 the mcp function accepts (the identity provider's \
             token carries too many claims); nothing was run, and retrying will not help"
        ),
        "{output}"
    );
    assert!(chat.mcp().posts("tools/call").is_empty());
}
