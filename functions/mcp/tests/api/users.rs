//! User JWTs on `/mcp`: with `JWT_*` settings a verified user token is a caller like the service
//! token, refusals say where to get a token (RFC 9728), and the metadata document is served;
//! without them a JWT is just a wrong token and there is no metadata.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use serde_json::{Value, json};

use crate::helpers::{Options, TOKEN, TestApp, env, spawn};

const SECRET: &str = "a-test-secret-that-is-at-least-32-bytes-long";
const ISSUER: &str = "https://idp.example";
const AUDIENCE: &str = "parley-mcp";
const METADATA: &str = "/.well-known/oauth-protected-resource";

async fn spawn_with_users() -> TestApp {
    spawn(Options {
        extra_env: env(&[
            ("JWT_SECRET", SECRET),
            ("JWT_ISSUER", ISSUER),
            ("JWT_AUDIENCE", AUDIENCE),
            ("MCP_RESOURCE_URL", "https://api.example/mcp"),
        ]),
        ..Options::default()
    })
    .await
}

fn token(claims: Value, secret: &str) -> String {
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap()
}

fn claims(sub: &str) -> Value {
    json!({"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "exp": get_current_timestamp() + 600})
}

fn user_token(sub: &str) -> String {
    token(claims(sub), SECRET)
}

/// A POST of `tools/list` with `authorization` (or none): status, challenge and error body.
async fn refusal(app: &TestApp, authorization: Option<&str>) -> (u16, String, Value) {
    let mut headers = vec![("accept", "application/json, text/event-stream")];
    if let Some(value) = authorization {
        headers.push(("authorization", value));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let response = app.post_mcp(body, &headers).await;
    let status = response.status().as_u16();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (
        status,
        challenge,
        response.json().await.unwrap_or(Value::Null),
    )
}

const CHALLENGE: &str = "Bearer realm=\"parley-mcp\", resource_metadata=\
\"https://api.example/.well-known/oauth-protected-resource/mcp\"";

#[tokio::test]
async fn a_valid_user_token_lists_and_calls_tools() {
    let app = spawn_with_users().await;
    let jwt = user_token("user-42");
    let (status, body) = app.rpc_with(Some(&jwt), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["tools"].as_array().unwrap().len(), 5);

    let (status, body) = app
        .rpc_with(
            Some(&jwt),
            "tools/call",
            json!({"name": "lad_by_ref", "arguments": {"ref": "Leeds"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["result"]["isError"], false, "{body}");
    assert_eq!(
        body["result"]["structuredContent"]["rows"][0]["code"],
        "E08000035"
    );
}

#[tokio::test]
async fn a_real_client_connects_with_a_user_token_through_rmcps_path() {
    let app = spawn_with_users().await;
    // `initialize` is answered by rmcp's transport, `tools/list` by the direct path: both sit
    // behind the same check.
    let client = app
        .client_with(Some(&user_token("user-42")))
        .await
        .expect("a user token connects");
    assert_eq!(client.list_all_tools().await.unwrap().len(), 5);
    assert!(
        app.client_with(Some(&user_token("u").replace('.', "x")))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn the_service_token_still_works_beside_user_tokens() {
    let app = spawn_with_users().await;
    let (status, body) = app.rpc_with(Some(TOKEN), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn refused_user_tokens_get_401_with_the_metadata_challenge() {
    let app = spawn_with_users().await;
    let now = get_current_timestamp();
    let mut expired = claims("u");
    expired["exp"] = json!(now - 600);
    let mut wrong_audience = claims("u");
    wrong_audience["aud"] = json!("another-api");
    let mut wrong_issuer = claims("u");
    wrong_issuer["iss"] = json!("https://evil.example");
    let cases = [
        (token(expired, SECRET), "the token has expired"),
        (
            token(claims("u"), "another-secret-that-is-also-32-bytes-long"),
            "signature",
        ),
        (token(wrong_audience, SECRET), "audience"),
        (token(wrong_issuer, SECRET), "issuer"),
    ];
    for (jwt, why) in cases {
        let (status, challenge, body) = refusal(&app, Some(&format!("Bearer {jwt}"))).await;
        assert_eq!(status, 401, "{why}: {body}");
        assert_eq!(
            challenge,
            format!("{CHALLENGE}, error=\"invalid_token\""),
            "{why}"
        );
        assert_eq!(body["error"]["code"], "unauthorized");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{why}: {message}");
        assert!(!message.contains(&jwt), "{message}");
    }

    let (status, challenge, _) = refusal(&app, Some("Bearer not-a-token")).await;
    assert_eq!(
        (status, challenge.as_str()),
        (401, &*format!("{CHALLENGE}, error=\"invalid_token\""))
    );
    // No token at all: the challenge without an error code (RFC 6750 §3.1).
    let (status, challenge, _) = refusal(&app, None).await;
    assert_eq!((status, challenge.as_str()), (401, CHALLENGE));
}

#[tokio::test]
async fn the_protected_resource_metadata_names_the_resource_and_the_issuer() {
    let app = spawn_with_users().await;
    for path in [METADATA.to_owned(), format!("{METADATA}/mcp")] {
        let response = app.get(&path).await;
        assert_eq!(response.status(), 200, "{path}");
        let document: Value = response.json().await.unwrap();
        assert_eq!(
            document,
            json!({
                "resource": "https://api.example/mcp",
                "authorization_servers": [ISSUER],
                "bearer_methods_supported": ["header"],
            }),
            "{path}"
        );
    }
}

#[tokio::test]
async fn without_jwt_settings_a_jwt_is_refused_and_there_is_no_metadata() {
    let app = spawn(Options::default()).await;
    let (status, challenge, body) =
        refusal(&app, Some(&format!("Bearer {}", user_token("u")))).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge, "Bearer realm=\"parley-mcp\"");
    assert_eq!(body["error"]["message"], "the bearer token is not valid");
    for path in [METADATA.to_owned(), format!("{METADATA}/mcp")] {
        assert_eq!(app.get(&path).await.status(), 404, "{path}");
    }
}

#[tokio::test]
async fn user_tokens_alone_turn_auth_on() {
    let app = spawn(Options {
        token: None,
        extra_env: env(&[
            ("JWT_SECRET", SECRET),
            ("MCP_RESOURCE_URL", "http://127.0.0.1/mcp"),
        ]),
        ..Options::default()
    })
    .await;
    let (status, challenge, _) = refusal(&app, None).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("resource_metadata="), "{challenge}");
    let jwt = token(
        json!({"sub": "u", "exp": get_current_timestamp() + 600}),
        SECRET,
    );
    let (status, body) = app.rpc_with(Some(&jwt), "tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
    // Without JWT_ISSUER the document names no authorization server.
    let document: Value = app.get(METADATA).await.json().await.unwrap();
    assert!(
        document.get("authorization_servers").is_none(),
        "{document}"
    );
}
