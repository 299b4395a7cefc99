//! The Responses API dialect: builds the `POST {base}/responses` body from a [`Prompt`] (items
//! as `input`, `store: false` so the server keeps nothing) and reads the `output` items of the
//! answer, typed by their `type` (unknown ones ignored), back into a [`Reply`].

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{
    Item, LlmConfig, LlmError, Prompt, Reply, ToolCall, ToolDef, Usage, WireUsage, arguments,
    assign_missing_ids, non_empty,
};

/// The request body, serialized straight from borrowed parts (no intermediate JSON tree).
/// `stream` asks for the answer as server-sent events.
pub(super) fn request(config: &LlmConfig, prompt: Prompt<'_>, stream: bool) -> Vec<u8> {
    let body = Body {
        model: &config.model,
        instructions: prompt.instructions,
        input: prompt.items.iter().map(Input::from).collect(),
        // Some compatible servers reject an empty `tools` array, so none is sent at all.
        tools: prompt.tools.iter().map(Tool::from).collect(),
        store: false,
        parallel_tool_calls: true,
        max_output_tokens: config.max_output_tokens,
        temperature: config.temperature,
        top_p: config.top_p,
        stream: stream.then_some(true),
    };
    serde_json::to_vec(&body).expect("a request body always serializes")
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    instructions: &'a str,
    input: Vec<Input<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    store: bool,
    parallel_tool_calls: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Input<'a> {
    Message {
        role: &'static str,
        content: &'a str,
    },
    Typed {
        r#type: &'static str,
        call_id: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        arguments: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        output: Option<&'a str>,
    },
}

impl<'a> From<&'a Item> for Input<'a> {
    fn from(item: &'a Item) -> Self {
        match item {
            Item::User(text) => Input::Message {
                role: "user",
                content: text,
            },
            Item::Assistant(text) => Input::Message {
                role: "assistant",
                content: text,
            },
            Item::Call(call) => Input::Typed {
                r#type: "function_call",
                call_id: &call.call_id,
                name: Some(&call.name),
                arguments: Some(&call.arguments),
                output: None,
            },
            Item::Output { call_id, output } => Input::Typed {
                r#type: "function_call_output",
                call_id,
                name: None,
                arguments: None,
                output: Some(output),
            },
        }
    }
}

#[derive(Serialize)]
struct Tool<'a> {
    r#type: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a RawValue,
}

impl<'a> From<&'a ToolDef> for Tool<'a> {
    fn from(tool: &'a ToolDef) -> Self {
        Tool {
            r#type: "function",
            name: &tool.name,
            description: &tool.description,
            parameters: &tool.parameters,
        }
    }
}

/// The parts of a Responses API body the chat reads; everything else is ignored.
#[derive(Deserialize)]
pub(super) struct Answer {
    output: Option<Vec<OutputItem>>,
    status: Option<String>,
    error: Option<Failure>,
    incomplete_details: Option<Incomplete>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutputItem {
    Message {
        #[serde(default)]
        content: Vec<ContentPart>,
    },
    FunctionCall {
        /// The id outputs must quote; `id` is the item's own, used by servers that send only it.
        call_id: Option<String>,
        id: Option<String>,
        name: Option<String>,
        arguments: Option<Value>,
    },
    /// `reasoning`, built-in tool calls and whatever comes next carry nothing for us.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentPart {
    OutputText {
        text: String,
    },
    /// A refusal is what the model said; the user should see it.
    Refusal {
        refusal: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct Failure {
    message: Option<String>,
}

#[derive(Deserialize)]
struct Incomplete {
    reason: Option<String>,
}

impl Answer {
    /// The answer with `items` as its output when it lists none: a streamed answer's final
    /// response may leave them to the `output_item.done` events before it.
    pub(super) fn or_items(mut self, items: &[Box<RawValue>]) -> serde_json::Result<Answer> {
        if self.output.as_ref().is_none_or(Vec::is_empty) && !items.is_empty() {
            let items = items.iter().map(|item| serde_json::from_str(item.get()));
            self.output = Some(items.collect::<Result<_, _>>()?);
        }
        Ok(self)
    }
}

pub(super) fn parse(answer: Answer) -> Result<Reply, LlmError> {
    let Some(output) = &answer.output else {
        // A failed response may come back as a 2xx without output; its error says why.
        return Err(LlmError::BadResponse(match failure_reason(&answer) {
            Some(reason) => format!("the response has no output: {reason}"),
            None => "the response has no `output` array".to_owned(),
        }));
    };
    let mut messages: Vec<String> = Vec::new();
    let mut calls = Vec::new();
    for item in output {
        match item {
            OutputItem::Message { content } => {
                let text: String = content
                    .iter()
                    .filter_map(|part| match part {
                        ContentPart::OutputText { text } => Some(text.as_str()),
                        ContentPart::Refusal { refusal } => Some(refusal.as_str()),
                        ContentPart::Other => None,
                    })
                    .collect();
                if !text.is_empty() {
                    messages.push(text);
                }
            }
            OutputItem::FunctionCall {
                call_id,
                id,
                name,
                arguments: args,
            } => {
                let name = non_empty(name.as_deref()).ok_or_else(|| {
                    LlmError::BadResponse("a function_call has no name".to_owned())
                })?;
                calls.push(ToolCall {
                    call_id: non_empty(call_id.as_deref())
                        .or_else(|| non_empty(id.as_deref()))
                        .unwrap_or_default()
                        .to_owned(),
                    name: name.to_owned(),
                    arguments: arguments(args.as_ref()),
                });
            }
            OutputItem::Other => {}
        }
    }
    let text = (!messages.is_empty()).then(|| messages.join("\n\n"));
    if text.is_none()
        && calls.is_empty()
        && let Some(reason) = failure_reason(&answer)
    {
        return Err(LlmError::BadResponse(format!(
            "the response has no usable output: {reason}"
        )));
    }
    assign_missing_ids(&mut calls);
    Ok(Reply {
        text,
        calls,
        usage: answer.usage.map(Usage::from).unwrap_or_default(),
    })
}

/// Why a response that is `failed` or `incomplete` stopped, if it is one of those.
fn failure_reason(answer: &Answer) -> Option<String> {
    let status = answer.status.as_deref();
    let error = answer.error.as_ref().and_then(|e| e.message.as_deref());
    let incomplete = answer
        .incomplete_details
        .as_ref()
        .and_then(|d| d.reason.as_deref());
    match (status, error, incomplete) {
        (_, Some(message), _) => Some(format!("{} ({message})", status.unwrap_or("failed"))),
        (Some("incomplete"), None, Some(reason)) => Some(format!("incomplete ({reason})")),
        (Some(status @ ("incomplete" | "failed" | "cancelled")), None, None) => {
            Some(status.to_owned())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::turn::llm::fixtures::{call_triples, config, decode_value, history, tools};

    /// A body as the server would send it, decoded as `Llm::respond` does.
    fn parse_json(body: &Value) -> Result<Reply, LlmError> {
        parse(decode_value(body)?)
    }

    /// The request body as the server receives it.
    fn sent(config: &LlmConfig, prompt: Prompt<'_>) -> Value {
        serde_json::from_slice(&request(config, prompt, false)).unwrap()
    }

    #[test]
    fn the_request_carries_the_whole_history_as_input_items() {
        let items = history();
        let tools = tools();
        let mut config = config();
        config.max_output_tokens = Some(500);
        config.temperature = Some(0.2);
        config.top_p = Some(0.9);
        let prompt = Prompt {
            instructions: "Be brief.",
            items: &items,
            tools: &tools,
        };
        assert_eq!(
            sent(&config, prompt),
            json!({
                "model": "gpt-test",
                "instructions": "Be brief.",
                "input": [
                    {"role": "user", "content": "How many orders?"},
                    {"role": "assistant", "content": "Let me look."},
                    {"type": "function_call", "call_id": "call_a", "name": "count_orders", "arguments": "{}"},
                    {"type": "function_call", "call_id": "call_b", "name": "list_customers", "arguments": "{\"limit\":2}"},
                    {"type": "function_call_output", "call_id": "call_a", "output": "42"},
                    {"type": "function_call_output", "call_id": "call_b", "output": "[\"Ada\",\"Bob\"]"},
                    {"role": "assistant", "content": "There are 42 orders."},
                    {"role": "user", "content": "Thanks"}
                ],
                "tools": [{
                    "type": "function",
                    "name": "count_orders",
                    "description": "Counts orders.",
                    "parameters": {"type": "object", "properties": {}}
                }],
                "store": false,
                "parallel_tool_calls": true,
                "max_output_tokens": 500,
                "temperature": 0.2,
                "top_p": 0.9
            })
        );
    }

    #[test]
    fn a_request_without_tools_sends_no_tools_field() {
        let items = vec![Item::User("hi".to_owned())];
        let body = sent(
            &config(),
            Prompt {
                instructions: "",
                items: &items,
                tools: &[],
            },
        );
        assert!(body.get("tools").is_none());
        for unset in ["max_output_tokens", "temperature", "top_p"] {
            assert!(body.get(unset).is_none(), "{unset}");
        }
    }

    #[test]
    fn a_text_answer_joins_its_text_parts_and_skips_reasoning() {
        let reply = parse_json(&json!({
            "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "role": "assistant", "content": [
                    {"type": "output_text", "text": "Hello, ", "annotations": []},
                    {"type": "output_text", "text": "world.", "annotations": []}
                ]}
            ],
            "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}
        }))
        .unwrap();
        assert_eq!(reply.text.as_deref(), Some("Hello, world."));
        assert!(reply.calls.is_empty());
        assert_eq!(
            reply.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 3,
                total_tokens: 13
            }
        );
    }

    #[test]
    fn a_refusal_is_read_as_text() {
        let reply = parse_json(&json!({"output": [{"type": "message", "role": "assistant",
            "content": [{"type": "refusal", "refusal": "I can't help with that."}]}]}))
        .unwrap();
        assert_eq!(reply.text.as_deref(), Some("I can't help with that."));
    }

    #[test]
    fn parallel_calls_are_all_returned_in_order_with_the_text() {
        let reply = parse_json(&json!({
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "a", "arguments": "{\"x\":1}"},
                {"type": "function_call", "id": "fc_2", "call_id": "call_2", "name": "b", "arguments": "not json"}
            ]
        }))
        .unwrap();
        assert_eq!(reply.text.as_deref(), Some("Checking."));
        let calls = call_triples(&reply);
        assert_eq!(
            calls,
            vec![("call_1", "a", "{\"x\":1}"), ("call_2", "b", "not json")]
        );
    }

    #[test]
    fn calls_without_ids_or_with_repeated_ids_get_fresh_ones() {
        let reply = parse_json(&json!({"output": [
            {"type": "function_call", "name": "a", "arguments": "{}"},
            {"type": "function_call", "call_id": "same", "name": "b", "arguments": "{}"},
            {"type": "function_call", "call_id": "same", "name": "c"}
        ]}))
        .unwrap();
        let ids: Vec<_> = reply.calls.iter().map(|c| c.call_id.clone()).collect();
        assert!(ids[0].starts_with("call_"));
        assert_eq!(ids[1], "same");
        assert!(ids[2].starts_with("call_") && ids[2] != ids[0]);
        assert_eq!(reply.calls[2].arguments, "{}");
    }

    #[test]
    fn missing_usage_is_zero_and_a_missing_total_is_the_sum() {
        let none = parse_json(&json!({"output": []})).unwrap();
        assert_eq!(none.usage, Usage::default());
        let partial =
            parse_json(&json!({"output": [], "usage": {"input_tokens": 7, "output_tokens": 2}}))
                .unwrap();
        assert_eq!(partial.usage.total_tokens, 9);
    }

    #[test]
    fn an_incomplete_response_without_output_is_a_bad_response_naming_the_reason() {
        let err = parse_json(&json!({
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "reasoning", "summary": []}]
        }))
        .unwrap_err();
        assert!(
            matches!(&err, LlmError::BadResponse(m) if m.contains("max_output_tokens")),
            "{err:?}"
        );
    }

    #[test]
    fn a_failed_response_is_a_bad_response_with_its_error_message() {
        let err = parse_json(&json!({
            "status": "failed",
            "error": {"code": "server_error", "message": "The model crashed."},
            "output": []
        }))
        .unwrap_err();
        assert!(matches!(&err, LlmError::BadResponse(m) if m.contains("The model crashed.")));
    }

    #[test]
    fn an_incomplete_response_with_text_is_still_used() {
        let reply = parse_json(&json!({
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "Partial"}]}]
        }))
        .unwrap();
        assert_eq!(reply.text.as_deref(), Some("Partial"));
    }

    #[test]
    fn malformed_bodies_are_bad_responses() {
        for body in [
            json!({}),
            json!([]),
            json!("text"),
            json!({"output": {"type": "message"}}),
            json!({"output": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}),
        ] {
            assert!(
                matches!(parse_json(&body), Err(LlmError::BadResponse(_))),
                "{body}"
            );
        }
    }
}
