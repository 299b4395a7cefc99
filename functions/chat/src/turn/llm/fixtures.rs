//! Test fixtures shared by both dialects' and the retry tests: one config, one history, one
//! tool, and a way to decode a JSON value as `Llm::respond` decodes a body.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Item, LlmApi, LlmConfig, LlmError, Reply, ToolCall, ToolDef};

pub(crate) fn config() -> LlmConfig {
    LlmConfig {
        api: LlmApi::Responses,
        base_url: url::Url::parse("http://127.0.0.1:1/v1/").unwrap(),
        model: "gpt-test".to_owned(),
        api_key: None,
        retry: parley_core::retry::RetrySettings {
            timeout: Duration::from_secs(5),
            max_retries: 0,
            retry_budget: Duration::ZERO,
        },
        max_output_tokens: None,
        temperature: None,
        top_p: None,
        max_response_bytes: 1024 * 1024,
    }
}

/// `body` as a dialect's wire type, failing as [`super::decode`] does.
pub(crate) fn decode_value<T: serde::de::DeserializeOwned>(body: &Value) -> Result<T, LlmError> {
    super::decode(&serde_json::to_vec(body).unwrap(), None)
}

/// A deadline no test reaches.
pub(crate) fn far_deadline() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(3600)
}

/// user, assistant, two parallel calls, their outputs, the final assistant text.
pub(crate) fn history() -> Vec<Item> {
    vec![
        Item::User("How many orders?".to_owned()),
        Item::Assistant("Let me look.".to_owned()),
        Item::Call(ToolCall {
            call_id: "call_a".to_owned(),
            name: "count_orders".to_owned(),
            arguments: "{}".to_owned(),
        }),
        Item::Call(ToolCall {
            call_id: "call_b".to_owned(),
            name: "list_customers".to_owned(),
            arguments: "{\"limit\":2}".to_owned(),
        }),
        Item::Output {
            call_id: "call_a".to_owned(),
            output: "42".to_owned(),
        },
        Item::Output {
            call_id: "call_b".to_owned(),
            output: "[\"Ada\",\"Bob\"]".to_owned(),
        },
        Item::Assistant("There are 42 orders.".to_owned()),
        Item::User("Thanks".to_owned()),
    ]
}

pub(crate) fn tools() -> Vec<ToolDef> {
    vec![ToolDef::new(
        "count_orders",
        "Counts orders.",
        &json!({"type": "object", "properties": {}}),
    )]
}

/// A reply's calls as (call id, name, arguments), for comparing.
pub(crate) fn call_triples(reply: &Reply) -> Vec<(&str, &str, &str)> {
    reply
        .calls
        .iter()
        .map(|c| (c.call_id.as_str(), c.name.as_str(), c.arguments.as_str()))
        .collect()
}
