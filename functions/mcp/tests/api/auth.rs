//! Bearer auth on `/mcp`: no token, a wrong token and the right one, for raw HTTP and for a
//! real MCP client.

use serde_json::{Value, json};

use crate::helpers::{Options, TOKEN, spawn, spawn_app};

fn list_tools() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string()
}

#[tokio::test]
async fn requests_without_a_token_get_401_with_a_bearer_challenge() {
    let app = spawn_app().await;
    let response = app
        .post_mcp(
            list_tools(),
            &[("accept", "application/json, text/event-stream")],
        )
        .await;
    assert_eq!(response.status(), 401);
    assert!(
        response.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
}

#[tokio::test]
async fn a_wrong_token_gets_401_and_never_reaches_the_tools() {
    let app = spawn_app().await;
    for header in [
        "Bearer wrong",
        &format!("Bearer {TOKEN}x"),
        &format!("Basic {TOKEN}"),
        "Bearer",
    ] {
        let response = app
            .post_mcp(
                list_tools(),
                &[
                    ("accept", "application/json, text/event-stream"),
                    ("authorization", header),
                ],
            )
            .await;
        assert_eq!(response.status(), 401, "{header}");
    }
}

#[tokio::test]
async fn the_right_token_is_accepted_in_any_scheme_case() {
    let app = spawn_app().await;
    let header = format!("bearer {TOKEN}");
    let response = app
        .post_mcp(
            list_tools(),
            &[
                ("accept", "application/json, text/event-stream"),
                ("authorization", &header),
                ("mcp-protocol-version", "2025-06-18"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn a_real_client_with_the_wrong_token_cannot_connect() {
    let app = spawn_app().await;
    let refused = app.client_with(Some("not-the-token")).await;
    assert!(refused.is_err());
    let client = app
        .client_with(Some(TOKEN))
        .await
        .expect("right token connects");
    assert_eq!(client.list_all_tools().await.unwrap().len(), 5);
}

#[tokio::test]
async fn without_a_configured_token_auth_is_off() {
    let app = spawn(Options {
        token: None,
        ..Options::default()
    })
    .await;
    let (status, body) = app.rpc("tools/list", json!({})).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn health_needs_no_token() {
    let app = spawn_app().await;
    assert_eq!(app.get("/health").await.status(), 200);
}
