//! Tokens that name a user badly, through the real HTTP surface: a subject that is empty or
//! carries control characters, a caller assertion that has expired or would outlive its
//! minute. Each is refused with 401 and a message that says what is wrong with it.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use parley_core::config::SecretString;
use parley_core::jwt::assertion::{AUDIENCE, ISSUER, Signer};
use parley_testkit::TestDb;
use serde_json::{Map, Value, json};

use crate::helpers::{Options, TestApp, env, spawn_on};

/// Signs user tokens (the identity provider's).
const SECRET: &str = "an-identity-test-secret-of-32-bytes+";
/// Signs caller assertions (the chat's); not the same key.
const CALLER_KEY: &str = "an-identity-test-caller-key-32-bytes+";

const TOOLS: &str = r#"
[[tool]]
name = "who_am_i"
description = "The caller's subject."
sql = "SELECT :sub AS sub"
[tool.params.sub]
from = "caller.sub"
"#;

/// Service token, user tokens and caller assertions all on, as deployed.
async fn spawn_identities() -> TestApp {
    spawn_on(
        TestDb::migrated().await,
        Options {
            tools_toml: Some(TOOLS.into()),
            extra_env: env(&[
                ("JWT_SECRET", SECRET),
                ("MCP_RESOURCE_URL", "http://127.0.0.1/mcp"),
                ("MCP_CALLER_KEY", CALLER_KEY),
            ]),
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts")
}

fn signed(claims: &Value, key: &str) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(key.as_bytes()),
    )
    .expect("token")
}

/// `who_am_i` as `token`: the HTTP status and the body.
async fn who_am_i(app: &TestApp, token: &str) -> (u16, Value) {
    app.rpc_with(
        Some(token),
        "tools/call",
        json!({"name": "who_am_i", "arguments": {}}),
    )
    .await
}

fn refusal(answer: &(u16, Value)) -> &str {
    assert_eq!(answer.0, 401, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], "unauthorized", "{}", answer.1);
    answer.1["error"]["message"].as_str().expect("a message")
}

#[tokio::test]
async fn a_user_token_with_an_empty_or_control_character_subject_is_refused() {
    let app = spawn_identities().await;
    let exp = get_current_timestamp() + 600;
    for sub in ["", "alice\u{7}", "bob\nINFO forged"] {
        let answer = who_am_i(&app, &signed(&json!({"sub": sub, "exp": exp}), SECRET)).await;
        assert_eq!(
            refusal(&answer),
            "invalid token: the sub claim must be 1 to 255 characters without control characters",
            "{sub:?}"
        );
        // Nor can the chat's assertion carry one.
        let assertion = Signer::new(&SecretString::from(CALLER_KEY))
            .sign(sub, &Map::new(), get_current_timestamp())
            .unwrap();
        let answer = who_am_i(&app, &assertion).await;
        assert!(
            refusal(&answer).contains("the sub claim must be"),
            "{sub:?}"
        );
    }
    let fine = who_am_i(&app, &signed(&json!({"sub": "alice", "exp": exp}), SECRET)).await;
    assert_eq!(fine.0, 200, "{}", fine.1);
    assert_eq!(
        fine.1["result"]["structuredContent"]["rows"][0]["sub"],
        "alice"
    );
}

#[tokio::test]
async fn an_expired_caller_assertion_is_reported_as_expired_not_as_a_bad_signature() {
    let app = spawn_identities().await;
    let old = Signer::new(&SecretString::from(CALLER_KEY))
        .sign("alice", &Map::new(), get_current_timestamp() - 3600)
        .unwrap();
    assert_eq!(
        refusal(&who_am_i(&app, &old).await),
        "the token has expired"
    );
    // A fresh one is alice.
    let fresh = Signer::new(&SecretString::from(CALLER_KEY))
        .sign("alice", &Map::new(), get_current_timestamp())
        .unwrap();
    let answer = who_am_i(&app, &fresh).await;
    assert_eq!(answer.0, 200, "{}", answer.1);
}

#[tokio::test]
async fn a_caller_assertion_that_would_outlive_its_minute_is_refused() {
    let app = spawn_identities().await;
    let now = get_current_timestamp();
    let lasting = signed(
        &json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 86_400}),
        CALLER_KEY,
    );
    let answer = who_am_i(&app, &lasting).await;
    let message = refusal(&answer);
    assert!(
        message.starts_with("invalid token: the token lives ")
            && message.ends_with("longer than the 90 s such tokens may (exp too far ahead)"),
        "{message}"
    );
}
