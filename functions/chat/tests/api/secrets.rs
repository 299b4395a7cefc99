//! Settings from Secrets Manager (a local moto server): the chat and mcp functions read the same
//! application secret for the MCP token, and when it is rotated mid-run the chat reconnects with
//! the new token after the mcp function's 401, so tool calls keep working without a restart.

use parley_core::config::Env;
use parley_testkit::llm::{ScriptedLlm, Step};
use parley_testkit::{Moto, TestDb};
use serde_json::{Value, json};

use crate::helpers::{FEEDBACK_ROWS, JWT_SECRET, spawn_chat_from, spawn_mcp_from};

const OLD_TOKEN: &str = "old-mcp-token-0123456789";
const NEW_TOKEN: &str = "new-mcp-token-9876543210";

fn with_secrets(moto: &Moto, secret: &str, pairs: &[(&str, &str)]) -> Env {
    let mut env = moto.env();
    env.push(("SECRET_IDS".into(), secret.into()));
    // Each refused token fetches again at once (the default waits 30 s between fetches).
    env.push(("SECRETS_MIN_REFRESH_MS".into(), "0".into()));
    env.extend(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    );
    Env::from_pairs(env)
}

/// The status of a `tools/list` sent straight to the mcp function with `token`.
async fn tools_list(mcp_url: &str, token: &str) -> u16 {
    reqwest::Client::new()
        .post(mcp_url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string())
        .send()
        .await
        .expect("request sent")
        .status()
        .as_u16()
}

fn the_only_trace(body: &Value) -> &Value {
    let traces = body["traces"].as_array().expect("traces");
    assert_eq!(traces.len(), 1, "{body}");
    &traces[0]
}

#[tokio::test]
async fn a_rotated_mcp_token_is_fetched_again_and_the_next_tool_call_succeeds() {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let moto = Moto::start();
    let secret = moto
        .create_secret("parley/app", &json!({"MCP_AUTH_TOKEN": OLD_TOKEN}))
        .await;
    let mcp = spawn_mcp_from(with_secrets(
        &moto,
        &secret,
        &[("DATABASE_URL", &db.readonly_url)],
    ))
    .await;
    let mcp_url = mcp.url.clone();
    let llm = ScriptedLlm::start(vec![
        Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
        Step::text("Leeds is E08000035."),
        Step::call("lad_by_ref", r#"{"ref":"Bristol"}"#),
        Step::text("Bristol is E06000023."),
    ])
    .await;
    let llm_url = llm.base_url();
    let chat = spawn_chat_from(
        with_secrets(
            &moto,
            &secret,
            &[
                ("DATABASE_URL", &db.url),
                ("JWT_SECRET", JWT_SECRET),
                ("MCP_URL", &mcp_url),
                ("LLM_BASE_URL", &llm_url),
                ("LLM_MODEL", "scripted-model"),
                ("LLM_API_KEY", "sk-test-not-a-real-key"),
                ("MCP_TIMEOUT_MS", "5000"),
            ],
        ),
        llm,
        Some(mcp),
    )
    .await;
    let first = chat
        .turn("alice", json!({"message": "Tell me about Leeds"}))
        .await;
    let trace = the_only_trace(&first);
    assert_eq!(trace["is_error"], false, "{trace}");
    assert_eq!(trace["output"]["rows"][0]["code"], "E08000035");

    moto.put_secret(&secret, &json!({"MCP_AUTH_TOKEN": NEW_TOKEN}))
        .await;
    // The mcp function keeps accepting the old token until it fetches the secret again, which a
    // request with another token (here, a client that has the new one) makes it do. From then
    // on the chat's cached connection, made with the old token, is refused.
    assert_eq!(tools_list(&mcp_url, NEW_TOKEN).await, 200);
    assert_eq!(tools_list(&mcp_url, OLD_TOKEN).await, 401);

    let second = chat
        .turn(
            "alice",
            json!({"message": "And Bristol?", "conversation_id": first["conversation_id"]}),
        )
        .await;
    let trace = the_only_trace(&second);
    assert_eq!(trace["is_error"], false, "{trace}");
    assert_eq!(trace["output"]["rows"][0]["code"], "E06000023");
    assert_eq!(second["reply"], "Bristol is E06000023.");
}
