//! What a page of another site could make a browser send to a chat run as the quick start runs
//! it (`CHAT_AUTH=none`): a `text/plain` body, a cross-site `Origin` or `Sec-Fetch-Site`, a
//! `Host` that DNS rebinding points at loopback. Each is refused before a turn runs or a
//! conversation is read; the chat's own page (same origin, JSON) is served.

use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::helpers::{Options, TestChat, spawn};

/// A chat with authentication off, as `scripts/dev` starts it, and a model that answers `Hi.`
async fn chat_without_auth() -> TestChat {
    spawn(Options {
        steps: vec![Step::text("Hi.")],
        extra_env: vec![("CHAT_AUTH", "none".to_owned())],
        ..Options::default()
    })
    .await
}

/// `method path` with `headers` and, for a POST, `body`; status, `Retry-After` and JSON body.
async fn send(
    chat: &TestChat,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, format!("{}{path}", chat.base));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    if let Some(body) = body {
        request = request.body(body.to_owned());
    }
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

const TURN: &str = r#"{"message": "Say hi"}"#;
const COMPLETION: &str =
    r#"{"model": "parley", "messages": [{"role": "user", "content": "Say hi"}]}"#;

/// Every API route: method, path, and a JSON body for the POSTs.
fn routes(conversation: &str) -> Vec<(reqwest::Method, String, Option<&'static str>)> {
    use reqwest::Method;
    vec![
        (Method::POST, "/api/chat".to_owned(), Some(TURN)),
        (Method::GET, "/api/conversations".to_owned(), None),
        (
            Method::GET,
            format!("/api/conversations/{conversation}/messages"),
            None,
        ),
        (Method::GET, "/v1/models".to_owned(), None),
        (
            Method::POST,
            "/v1/chat/completions".to_owned(),
            Some(COMPLETION),
        ),
    ]
}

#[tokio::test]
async fn a_body_that_is_not_json_is_refused_with_415_and_no_turn_runs() {
    let chat = chat_without_auth().await;
    // What a form or `fetch(url, {method: "POST", body})` sends without a preflight.
    for content_type in [
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
    ] {
        for (path, body) in [("/api/chat", TURN), ("/v1/chat/completions", COMPLETION)] {
            let (status, response) = send(
                &chat,
                reqwest::Method::POST,
                path,
                &[("content-type", content_type)],
                Some(body),
            )
            .await;
            assert_eq!(status, 415, "{path} {content_type}: {response}");
            assert_eq!(
                response["error"]["code"], "unsupported_media_type",
                "{response}"
            );
            let message = response["error"]["message"].as_str().unwrap();
            assert!(message.contains("application/json"), "{message}");
        }
    }
    assert!(chat.llm.requests().is_empty(), "no turn ran");
}

#[tokio::test]
async fn a_cross_site_origin_or_fetch_site_is_refused_on_every_api_route_without_auth() {
    let chat = chat_without_auth().await;
    let own = chat.turn("local-user", json!({"message": "Say hi"})).await;
    let conversation = own["conversation_id"].as_str().unwrap().to_owned();
    let evil_origin = [("origin", "https://evil.example")];
    let fetch_site = [("sec-fetch-site", "cross-site")];
    // Another port of the same host is another origin (a dev server, another local app).
    let other_port = [
        ("origin", "http://127.0.0.1:5173"),
        ("sec-fetch-site", "same-site"),
    ];
    for (method, path, body) in routes(&conversation) {
        for headers in [&evil_origin[..], &fetch_site[..], &other_port[..]] {
            let mut headers = headers.to_vec();
            headers.push(("content-type", "application/json"));
            let (status, response) = send(&chat, method.clone(), &path, &headers, body).await;
            assert_eq!(status, 403, "{method} {path} {headers:?}: {response}");
            assert_eq!(
                response["error"]["code"], "cross_site_request",
                "{response}"
            );
        }
    }
    assert_eq!(chat.llm.requests().len(), 1, "only the chat's own turn ran");
}

#[tokio::test]
async fn a_host_other_than_loopback_is_refused_as_a_rebound_name_would_be() {
    let chat = chat_without_auth().await;
    let own = chat.turn("local-user", json!({"message": "Say hi"})).await;
    let conversation = own["conversation_id"].as_str().unwrap().to_owned();
    let port = chat.base.rsplit(':').next().unwrap().to_owned();
    // The attacker's name, rebound to 127.0.0.1: the browser sends it as the Host.
    let host = format!("rebind.evil.example:{port}");
    for (method, path, body) in routes(&conversation) {
        let headers = [
            ("host", host.as_str()),
            ("content-type", "application/json"),
        ];
        let (status, response) = send(&chat, method.clone(), &path, &headers, body).await;
        assert_eq!(status, 403, "{method} {path}: {response}");
        assert_eq!(response["error"]["code"], "host_not_allowed", "{response}");
        let message = response["error"]["message"].as_str().unwrap();
        assert!(message.contains("CHAT_ALLOWED_HOSTS"), "{message}");
    }
    assert_eq!(chat.llm.requests().len(), 1, "only the chat's own turn ran");
}

#[tokio::test]
async fn the_pages_own_same_origin_json_requests_are_served() {
    let chat = chat_without_auth().await;
    let origin = chat.base.clone();
    // What the page's `fetch` sends: its own origin, `same-origin`, a JSON body.
    let page = [
        ("origin", origin.as_str()),
        ("sec-fetch-site", "same-origin"),
        ("content-type", "application/json"),
    ];
    let (status, turn) = send(&chat, reqwest::Method::POST, "/api/chat", &page, Some(TURN)).await;
    assert_eq!(status, 200, "{turn}");
    assert_eq!(turn["reply"], "Hi.");
    let conversation = turn["conversation_id"].as_str().unwrap();
    let (status, list) = send(
        &chat,
        reqwest::Method::GET,
        "/api/conversations",
        &page[..2],
        None,
    )
    .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["conversations"][0]["id"], conversation, "{list}");
    let path = format!("/api/conversations/{conversation}/messages");
    let (status, messages) = send(&chat, reqwest::Method::GET, &path, &page[..2], None).await;
    assert_eq!(status, 200, "{messages}");
    assert_eq!(messages["messages"][1]["content"], "Hi.", "{messages}");
    // The page's files are served to any navigation, `localhost` included.
    let port = chat.base.rsplit(':').next().unwrap();
    let localhost = format!("localhost:{port}");
    let (status, _) = send(
        &chat,
        reqwest::Method::GET,
        "/v1/models",
        &[("host", &localhost)],
        None,
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_host_named_in_chat_allowed_hosts_is_served() {
    let chat = spawn(Options {
        steps: vec![Step::text("Hi.")],
        extra_env: vec![
            ("CHAT_AUTH", "none".to_owned()),
            ("CHAT_ALLOWED_HOSTS", "chat.internal,127.0.0.1".to_owned()),
        ],
        ..Options::default()
    })
    .await;
    let port = chat.base.rsplit(':').next().unwrap();
    let named = format!("chat.internal:{port}");
    let (status, body) = send(
        &chat,
        reqwest::Method::GET,
        "/api/conversations",
        &[("host", &named)],
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // Listing names replaces the loopback default.
    let localhost = format!("localhost:{port}");
    let (status, body) = send(
        &chat,
        reqwest::Method::GET,
        "/api/conversations",
        &[("host", &localhost)],
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
}
