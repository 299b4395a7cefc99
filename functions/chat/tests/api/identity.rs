//! Caller identity: every endpoint needs a valid token; `CHAT_AUTH=none` is an explicit,
//! local-only opt-out.

use base64::Engine;
use parley_testkit::llm::Step;
use serde_json::json;

use crate::helpers::{JWT_SECRET, Options, now, spawn, spawn_chat, token_with};

#[tokio::test]
async fn missing_expired_forged_and_unsigned_tokens_get_401() {
    let chat = spawn_chat(vec![Step::Text("never".into())]).await;
    let b64 = |v: serde_json::Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let unsigned = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "JWT"})),
        b64(json!({"sub": "alice", "exp": now() + 3600}))
    );
    let tokens = [
        None,
        Some("not-a-jwt".to_owned()),
        Some(token_with(
            json!({"sub": "alice", "exp": now() - 3600}),
            JWT_SECRET,
        )),
        Some(token_with(
            json!({"sub": "alice", "exp": now() + 3600}),
            "some-other-secret-of-enough-length-000",
        )),
        Some(token_with(json!({"exp": now() + 3600}), JWT_SECRET)),
        Some(unsigned),
    ];
    for t in tokens {
        let (status, body) = chat
            .post_raw(t.as_deref(), json!({"message": "hi"}).to_string())
            .await;
        assert_eq!(status, 401, "{t:?}: {body}");
        assert_eq!(body["error"]["code"], "unauthorized");
        let (status, _) = chat.get(None, "/api/conversations").await;
        assert_eq!(status, 401);
    }
    assert!(chat.llm.requests().is_empty());
}

#[tokio::test]
async fn with_auth_off_every_request_is_the_local_user() {
    let chat = spawn(Options {
        steps: vec![Step::Text("hello".into())],
        extra_env: vec![("CHAT_AUTH", "none".into())],
        ..Options::default()
    })
    .await;
    let (status, body) = chat
        .post_raw(None, json!({"message": "hi"}).to_string())
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, list) = chat.get(None, "/api/conversations").await;
    assert_eq!(status, 200);
    assert_eq!(list["conversations"].as_array().unwrap().len(), 1);
}
