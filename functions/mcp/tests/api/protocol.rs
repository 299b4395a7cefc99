//! The transport contract: stateless Streamable HTTP, JSON responses, every protocol version
//! rmcp negotiates, Host and body-size protection, and protocol-level errors.

use serde_json::{Value, json};

use crate::helpers::{Options, TOKEN, env, spawn, spawn_app};

fn initialize(version: &str) -> String {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {},
                   "clientInfo": {"name": "raw-http", "version": "1"}}
    })
    .to_string()
}

#[tokio::test]
async fn initialize_negotiates_each_supported_protocol_version_without_a_session() {
    let app = spawn_app().await;
    let auth = format!("Bearer {TOKEN}");
    for version in ["2025-03-26", "2025-06-18", "2025-11-25"] {
        let response = app
            .post_mcp(
                initialize(version),
                &[
                    ("accept", "application/json, text/event-stream"),
                    ("authorization", &auth),
                ],
            )
            .await;
        assert_eq!(response.status(), 200);
        assert!(
            response.headers().get("mcp-session-id").is_none(),
            "stateless: no session id"
        );
        assert_eq!(response.headers()["content-type"], "application/json");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["result"]["protocolVersion"], version);
        assert_eq!(body["result"]["serverInfo"]["name"], "parley-mcp");
        assert!(
            body["result"]["instructions"]
                .as_str()
                .unwrap()
                .contains("read-only")
        );
    }
}

#[tokio::test]
async fn the_2026_07_28_discovery_answers_in_one_request() {
    let app = spawn_app().await;
    let auth = format!("Bearer {TOKEN}");
    let body = json!({
        "jsonrpc": "2.0", "id": 7, "method": "server/discover",
        "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw-http", "version": "1"}
        }}
    });
    let response = app
        .post_mcp(
            body.to_string(),
            &[
                ("accept", "application/json, text/event-stream"),
                ("authorization", &auth),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "server/discover"),
            ],
        )
        .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let result = &body["result"];
    let versions: Vec<&str> = result["supportedVersions"]
        .as_array()
        .unwrap_or_else(|| panic!("no version list in {body}"))
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for v in ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"] {
        assert!(versions.contains(&v), "{v} missing from {versions:?}");
    }
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "parley-mcp"
    );
}

#[tokio::test]
async fn a_2026_07_28_client_lists_and_calls_tools_without_a_handshake() {
    let app = spawn_app().await;
    let client = app.discover_client().await;
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(tools.len(), 5);
    let result =
        crate::helpers::client_call(&client, "lad_by_ref", json!({"ref": "Cardiff"})).await;
    assert_eq!(
        result.structured_content.unwrap()["rows"][0]["code"],
        "W06000015"
    );
}

#[tokio::test]
async fn a_request_needs_no_prior_handshake_so_any_instance_can_answer_it() {
    // Two separate servers over one database stand in for two Lambda instances.
    let first = spawn_app().await;
    let (status, listed) = first.rpc("tools/list", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 5);
    let (status, called) = first
        .rpc(
            "tools/call",
            json!({"name": "get_feedback", "arguments": {"id": 1}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(called["result"]["structuredContent"]["rows"][0]["id"], 1);
}

#[tokio::test]
async fn only_post_is_served() {
    let app = spawn_app().await;
    let client = reqwest::Client::new();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = client
            .request(method.clone(), &app.mcp_url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("accept", "application/json, text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 405, "{method}");
    }
}

#[tokio::test]
async fn an_unknown_tool_is_a_json_rpc_invalid_params_error() {
    let app = spawn_app().await;
    let (status, body) = app
        .rpc(
            "tools/call",
            json!({"name": "drop_everything", "arguments": {}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["error"]["code"], -32602);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("drop_everything")
    );
}

#[tokio::test]
async fn malformed_json_rpc_gets_a_clear_error_not_a_crash() {
    let app = spawn_app().await;
    let auth = format!("Bearer {TOKEN}");
    let response = app
        .post_mcp(
            "{not json".into(),
            &[
                ("accept", "application/json, text/event-stream"),
                ("authorization", &auth),
            ],
        )
        .await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.expect("a JSON error body");
    assert_eq!(body["error"]["code"], "parse_error", "{body}");
}

#[tokio::test]
async fn foreign_host_headers_are_refused_to_stop_dns_rebinding() {
    let app = spawn_app().await;
    let auth = format!("Bearer {TOKEN}");
    let response = app
        .post_mcp(
            initialize("2025-06-18"),
            &[
                ("accept", "application/json, text/event-stream"),
                ("authorization", &auth),
                ("host", "attacker.example"),
            ],
        )
        .await;
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "forbidden");
}

#[tokio::test]
async fn configured_host_names_are_accepted_behind_a_gateway() {
    let app = spawn(Options {
        extra_env: env(&[(
            "MCP_ALLOWED_HOSTS",
            "abc123.execute-api.eu-west-2.amazonaws.com",
        )]),
        ..Options::default()
    })
    .await;
    let auth = format!("Bearer {TOKEN}");
    let headers = |host: &'static str| {
        vec![
            ("accept", "application/json, text/event-stream"),
            ("authorization", auth.as_str()),
            ("host", host),
        ]
    };
    let ok = app
        .post_mcp(
            initialize("2025-06-18"),
            &headers("abc123.execute-api.eu-west-2.amazonaws.com"),
        )
        .await;
    assert_eq!(ok.status(), 200);
    let refused = app
        .post_mcp(initialize("2025-06-18"), &headers("localhost"))
        .await;
    assert_eq!(refused.status(), 403);
}

#[tokio::test]
async fn oversize_bodies_are_refused_with_413() {
    let app = spawn(Options {
        extra_env: env(&[("MCP_MAX_BODY_BYTES", "4096")]),
        ..Options::default()
    })
    .await;
    let auth = format!("Bearer {TOKEN}");
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "lad_by_ref", "arguments": {"ref": "x".repeat(10_000)}}});
    let response = app
        .post_mcp(
            big.to_string(),
            &[
                ("accept", "application/json, text/event-stream"),
                ("authorization", &auth),
            ],
        )
        .await;
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "payload_too_large");
}

#[tokio::test]
async fn health_reports_the_database() {
    let app = spawn_app().await;
    let response = app.get("/health").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap()["status"], "ok");
}

#[tokio::test]
async fn a_content_type_that_is_not_json_gets_415_naming_the_expected_type() {
    let app = spawn_app().await;
    for content_type in ["application/jsonx", "text/plain", "application/json-seq"] {
        let response = reqwest::Client::new()
            .post(&app.mcp_url)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("accept", "application/json, text/event-stream")
            .header("content-type", content_type)
            .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 415, "{content_type}");
        let body: Value = response.json().await.expect("a JSON error body");
        assert_eq!(body["error"]["code"], "unsupported_media_type", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("application/json"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn tools_call_without_a_tool_name_is_invalid_params_not_an_unknown_method() {
    let app = spawn_app().await;
    let auth = format!("Bearer {TOKEN}");
    for request in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}}),
    ] {
        let response = app
            .post_mcp(
                request.to_string(),
                &[
                    ("accept", "application/json, text/event-stream"),
                    ("authorization", &auth),
                ],
            )
            .await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32602, "{request} -> {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains("name"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn an_unknown_method_is_still_method_not_found() {
    let app = spawn_app().await;
    let (status, body) = app.rpc("tools/frobnicate", json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(body["error"]["code"], -32601, "{body}");
}
