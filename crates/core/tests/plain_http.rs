//! The plain-HTTP server against real sockets: slow or idle clients are cut off, the connection
//! cap holds new connections back while open ones are served, and an answer given before the
//! request's body was read tells the client to close.

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::{get, post};
use parley_core::config::HttpLimits;
use parley_core::plain_http;
use parley_testkit::raw_http::{RawConnection, post_oversize};
use tokio::net::TcpListener;

fn app() -> Router {
    Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/echo", post(|body: String| async move { body }))
        // Answers without reading the body, as a size limit checked on the header does.
        .route("/refuse", post(|| async { StatusCode::PAYLOAD_TOO_LARGE }))
}

async fn start(limits: HttpLimits) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(plain_http::serve(
        listener,
        app(),
        limits,
        std::future::pending(),
    ));
    format!("http://{addr}")
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";

#[tokio::test]
async fn a_client_that_sends_half_a_request_head_is_disconnected() {
    let base = start(HttpLimits {
        header_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    })
    .await;
    let mut conn = RawConnection::open(&base).await;
    conn.send(b"GET / HTTP/1.1\r\nHost: local").await.unwrap();
    assert!(conn.closed_by_server().await);
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed() {
    let base = start(HttpLimits {
        header_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    })
    .await;
    let mut conn = RawConnection::open(&base).await;
    conn.send(GET).await.unwrap();
    let head = conn.read_head().await.expect("an answer");
    assert_eq!(head.status, 200);
    assert_eq!(conn.read_body(&head).await, b"ok");
    assert!(conn.closed_by_server().await);
}

#[tokio::test]
async fn a_body_that_stops_arriving_is_cut_off() {
    let base = start(HttpLimits {
        body_timeout: Duration::from_millis(300),
        ..HttpLimits::default()
    })
    .await;
    let mut conn = RawConnection::open(&base).await;
    conn.send(b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\nonly ten b")
        .await
        .unwrap();
    let head = conn.read_head().await.expect("an answer");
    assert_eq!(head.status, 400);
    assert_eq!(head.header("connection"), Some("close"));
    assert!(conn.closed_by_server().await);
}

#[tokio::test]
async fn an_answer_before_the_body_was_read_says_connection_close() {
    let base = start(HttpLimits::default()).await;
    let answer = post_oversize(&base, "/refuse", &[]).await;
    assert_eq!(answer.head.status, 413);
    assert_eq!(answer.head.header("connection"), Some("close"));
    assert!(answer.closed);
}

#[tokio::test]
async fn a_body_read_to_its_end_keeps_the_connection_alive() {
    let base = start(HttpLimits::default()).await;
    let mut conn = RawConnection::open(&base).await;
    for _ in 0..2 {
        conn.send(b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello")
            .await
            .unwrap();
        let head = conn.read_head().await.expect("an answer");
        assert_eq!(head.status, 200);
        assert_eq!(head.header("connection"), None);
        assert_eq!(conn.read_body(&head).await, b"hello");
    }
}

#[tokio::test]
async fn past_the_cap_new_connections_wait_while_open_ones_are_served() {
    let base = start(HttpLimits {
        max_connections: 1,
        ..HttpLimits::default()
    })
    .await;
    let mut first = RawConnection::open(&base).await;
    first.send(GET).await.unwrap();
    let head = first.read_head().await.expect("an answer");
    first.read_body(&head).await;

    let mut second = RawConnection::open(&base).await;
    second.send(GET).await.unwrap();
    // The open connection is still served while the new one waits.
    first.send(GET).await.unwrap();
    let head = first
        .read_head()
        .await
        .expect("the open connection is served");
    assert_eq!(head.status, 200);
    first.read_body(&head).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), second.read_head())
            .await
            .is_err(),
        "a connection past the cap was served"
    );

    drop(first);
    let head = second
        .read_head()
        .await
        .expect("served once a slot is free");
    assert_eq!(head.status, 200);
}

/// A refusal's status, and its body in the JSON error shape.
async fn refusal(request: &[u8]) -> (u16, serde_json::Value, Option<String>) {
    let base = start(HttpLimits {
        max_uri_bytes: 1024,
        max_header_bytes: 4096,
        ..HttpLimits::default()
    })
    .await;
    let mut conn = RawConnection::open(&base).await;
    conn.send(request).await.unwrap();
    let head = conn.read_head().await.expect("an answer");
    assert_eq!(head.header("content-type"), Some("application/json"));
    let body = serde_json::from_slice(&conn.read_body(&head).await).expect("a JSON body");
    (
        head.status,
        body,
        head.header("connection").map(str::to_owned),
    )
}

#[tokio::test]
async fn a_long_uri_gets_414_in_the_json_error_shape() {
    let request = format!(
        "GET /{} HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "a".repeat(2000)
    );
    let (status, body, _) = refusal(request.as_bytes()).await;
    assert_eq!(status, 414);
    assert_eq!(body["error"]["code"], "uri_too_long");
    assert_eq!(
        body["error"]["message"],
        "the request's URI is longer than 1024 bytes"
    );
}

#[tokio::test]
async fn large_headers_get_431_in_the_json_error_shape() {
    let request = format!(
        "GET / HTTP/1.1\r\nHost: localhost\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(5000)
    );
    let (status, body, connection) = refusal(request.as_bytes()).await;
    assert_eq!(status, 431);
    assert_eq!(body["error"]["code"], "headers_too_large");
    assert_eq!(connection.as_deref(), Some("close"));
}

#[tokio::test]
async fn two_host_headers_are_refused() {
    let (status, body, _) =
        refusal(b"GET / HTTP/1.1\r\nHost: localhost\r\nHost: elsewhere.example\r\n\r\n").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "duplicate_host");
}
