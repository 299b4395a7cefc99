//! The direct path for `tools/call` and `tools/list` answers exactly as rmcp's transport does:
//! the same request sent with a weighted `Accept` (which the direct path leaves to rmcp) gets
//! the same status, headers and body; and every transport check still applies to it.

use serde_json::{Value, json};

use crate::helpers::{TOKEN, spawn_app};

/// `Accept` as ordinary clients send it (direct path) and with weights (rmcp's path).
const DIRECT: &str = "application/json, text/event-stream";
const VIA_RMCP: &str = "application/json;q=1, text/event-stream;q=1";

async fn post(
    url: &str,
    body: &Value,
    accept: &str,
    extra: &[(&str, &str)],
) -> (u16, Vec<String>, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("accept", accept)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    let mut headers: Vec<String> = response
        .headers()
        .iter()
        .filter(|(name, _)| !["date", "content-length", "x-request-id"].contains(&name.as_str()))
        .map(|(name, value)| format!("{name}: {}", value.to_str().unwrap_or("?")))
        .collect();
    headers.sort();
    let text = response.text().await.expect("body");
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, headers, body)
}

#[tokio::test]
async fn tool_requests_get_the_same_answers_as_through_rmcp() {
    let app = spawn_app().await;
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}),
        json!({"jsonrpc": "2.0", "id": "call-a", "method": "tools/call",
               "params": {"name": "lad_by_ref", "arguments": {"ref": "Cardiff"}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
               "params": {"name": "get_feedback", "arguments": {"id": 1},
                          "_meta": {"progressToken": 9}}}),
        // A tool error the model can act on, and a protocol error.
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
               "params": {"name": "get_feedback", "arguments": {"id": "one"}}}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
               "params": {"name": "drop_everything", "arguments": {}}}),
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "lad_by_ref", "arguments": {"ref": "Cardiff", "extra": 1}}}),
    ];
    for version in [
        None,
        Some("2025-03-26"),
        Some("2025-06-18"),
        Some("2025-11-25"),
    ] {
        let extra: Vec<(&str, &str)> = version
            .map(|v| ("mcp-protocol-version", v))
            .into_iter()
            .collect();
        for request in &requests {
            let direct = post(&app.mcp_url, request, DIRECT, &extra).await;
            let via_rmcp = post(&app.mcp_url, request, VIA_RMCP, &extra).await;
            assert_eq!(direct.0, 200, "{request}: {direct:?}");
            assert_eq!(direct, via_rmcp, "{version:?} {request}");
        }
    }
}

#[tokio::test]
async fn tool_requests_still_get_every_transport_check() {
    let app = spawn_app().await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "get_feedback", "arguments": {"id": 1}}});
    // (extra headers, Accept, status, error code)
    type Case = (
        &'static [(&'static str, &'static str)],
        &'static str,
        u16,
        &'static str,
    );
    let cases: [Case; 5] = [
        (&[("host", "attacker.example")], DIRECT, 403, "forbidden"),
        (&[], "application/json", 406, "not_acceptable"),
        (&[], "text/event-stream", 406, "not_acceptable"),
        (
            &[("mcp-protocol-version", "1999-01-01")],
            DIRECT,
            400,
            "bad_request",
        ),
        (&[("origin", "https://attacker.example")], DIRECT, 200, ""),
    ];
    for (extra, accept, status, code) in cases {
        let (got, _, body) = post(&app.mcp_url, &call, accept, extra).await;
        assert_eq!(got, status, "{extra:?} {accept}: {body}");
        if !code.is_empty() {
            assert_eq!(body["error"]["code"], code, "{extra:?}: {body}");
        }
    }
    // Bearer auth is a layer in front of both paths.
    let response = reqwest::Client::new()
        .post(&app.mcp_url)
        .header("accept", DIRECT)
        .header("content-type", "application/json")
        .body(call.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
}
