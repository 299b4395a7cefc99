//! What reaches the log: a credential in `MCP_URL`'s query string never does, even when the
//! MCP transport fails and reports the request it was making.

use std::io::Write;
use std::sync::{Arc, Mutex};

use parley_testkit::llm::Step;
use serde_json::json;

use crate::helpers::{Options, spawn};

const URL_SECRET: &str = "query-secret-0123456789";

/// Everything logged on this thread, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

#[tokio::test]
async fn a_credential_in_mcp_url_never_reaches_the_log() {
    let logs = Captured::default();
    let writer = logs.clone();
    // The test runtime has one thread, so the chat's and rmcp's tasks log here too.
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let chat = spawn(Options {
        mcp_down: true,
        steps: vec![
            Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
            Step::text("I could not look that up."),
        ],
        extra_env: vec![(
            "MCP_URL",
            format!("http://{closed}/mcp?api_key={URL_SECRET}"),
        )],
        ..Options::default()
    })
    .await;
    let body = chat.turn("alice", json!({"message": "Leeds?"})).await;
    assert_eq!(body["traces"][0]["is_error"], true, "{body}");

    let text = logs.text();
    assert!(
        text.contains("cannot list MCP tools"),
        "the failure was logged: {text}"
    );
    assert!(!text.contains(URL_SECRET), "{text}");
    assert!(!body.to_string().contains(URL_SECRET), "{body}");
}
