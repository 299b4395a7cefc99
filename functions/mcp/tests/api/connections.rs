//! What a keep-alive client sees on its connection: an oversize body refused before it was
//! read comes with `Connection: close`, so the client does not send its next request into a
//! connection the server is closing.

use parley_testkit::raw_http::post_oversize;

use crate::helpers::{Options, TOKEN, env, spawn};

#[tokio::test]
async fn an_oversize_body_is_refused_with_connection_close() {
    let app = spawn(Options {
        extra_env: env(&[("MCP_MAX_BODY_BYTES", "4096")]),
        ..Options::default()
    })
    .await;
    let auth = format!("Bearer {TOKEN}");
    let answer = post_oversize(
        &app.base,
        "/mcp",
        &[
            ("Authorization", &auth),
            ("Accept", "application/json, text/event-stream"),
            ("Content-Type", "application/json"),
        ],
    )
    .await;
    answer.assert_refused_and_closed(413, "payload_too_large");
}
