//! What a keep-alive client sees on its connection: an oversize body refused before it was
//! read comes with `Connection: close`, so the client does not send its next request into a
//! connection the server is closing.

use parley_testkit::raw_http::post_oversize;

use crate::helpers::{spawn_chat, token};

#[tokio::test]
async fn an_oversize_body_is_refused_with_connection_close() {
    let chat = spawn_chat(Vec::new()).await;
    let auth = format!("Bearer {}", token("alice"));
    let answer = post_oversize(
        &chat.base,
        "/api/chat",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
    )
    .await;
    answer.assert_refused_and_closed(413, "payload_too_large");
    assert!(chat.llm.requests().is_empty());
}
