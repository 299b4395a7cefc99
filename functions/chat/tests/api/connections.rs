//! What a keep-alive client sees on its connection: an oversize body refused before it was
//! read comes with `Connection: close`, so the client does not send its next request into a
//! connection the server is closing.

use parley_testkit::raw_http::RawConnection;
use serde_json::Value;

use crate::helpers::{spawn_chat, token};

#[tokio::test]
async fn an_oversize_body_is_refused_with_connection_close() {
    let chat = spawn_chat(Vec::new()).await;
    let host = chat.base.trim_start_matches("http://");
    let alice = token("alice");
    let mut conn = RawConnection::open(&chat.base).await;
    let mut request = format!(
        "POST /api/chat HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {alice}\r\n\
         Content-Type: application/json\r\nContent-Length: 2000000\r\n\r\n"
    )
    .into_bytes();
    request.extend(std::iter::repeat_n(b' ', 64 * 1024));
    conn.send(&request).await.unwrap();
    let head = conn.read_head().await.expect("an answer");
    assert_eq!(head.status, 413);
    assert_eq!(head.header("connection"), Some("close"));
    let body: Value = serde_json::from_slice(&conn.read_body(&head).await).unwrap();
    assert_eq!(body["error"]["code"], "payload_too_large");
    assert!(conn.closed_by_server().await);
    assert!(chat.llm.requests().is_empty());
}
