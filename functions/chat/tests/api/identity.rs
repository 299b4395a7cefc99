//! Caller identity: every endpoint needs a valid token; `CHAT_AUTH=none` is an explicit,
//! local-only opt-out.

use base64::Engine;
use parley_testkit::keys;
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

/// A JSON Web Key Set served on loopback, as an identity provider (Better Auth's JWT plugin, say)
/// publishes it; returns its URL.
async fn serve_jwks(jwks: &'static str) -> String {
    let app = axum::Router::new().route("/jwks", axum::routing::get(move || async move { jwks }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/jwks")
}

fn eddsa_token(pem: &[u8], sub: &str) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::EdDSA);
    header.kid = Some("test-ed".to_owned());
    let key = jsonwebtoken::EncodingKey::from_ed_pem(pem).unwrap();
    jsonwebtoken::encode(&header, &json!({"sub": sub, "exp": now() + 3600}), &key).unwrap()
}

#[tokio::test]
async fn eddsa_tokens_verify_against_the_jwks_and_forged_ones_get_401() {
    let chat = spawn(Options {
        steps: vec![Step::Text("hello".into())],
        extra_env: vec![("JWT_JWKS_URL", serve_jwks(keys::JWKS).await)],
        ..Options::default()
    })
    .await;
    let message = json!({"message": "hi"}).to_string();

    let forged = eddsa_token(keys::ED25519_OTHER_PEM, "ed-user");
    let (status, body) = chat.post_raw(Some(&forged), message.clone()).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    assert!(chat.llm.requests().is_empty());

    let genuine = eddsa_token(keys::ED25519_PEM, "ed-user");
    let (status, body) = chat.post_raw(Some(&genuine), message).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["reply"], "hello", "{body}");
    // The turn belongs to the token's subject.
    let (status, list) = chat.get(Some("ed-user"), "/api/conversations").await;
    assert_eq!(status, 200);
    assert_eq!(list["conversations"].as_array().unwrap().len(), 1);
}
