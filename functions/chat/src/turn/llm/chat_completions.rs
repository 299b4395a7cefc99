//! The Chat Completions dialect (what Ollama, vLLM and LiteLLM speak best): builds the
//! `POST {base}/chat/completions` body, folding consecutive calls into one assistant message
//! with `tool_calls`, and reads `choices[0].message` back into a [`Reply`].

use std::iter::Peekable;
use std::slice::Iter;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{
    Item, LlmConfig, LlmError, Prompt, Reply, ToolCall, ToolDef, Usage, WireUsage, arguments,
    assign_missing_ids, non_empty,
};

/// The request body, serialized straight from borrowed parts (no intermediate JSON tree).
/// `stream` asks for the answer as server-sent chunks, with the usage in a last chunk of its
/// own (without `include_usage` a stream reports none).
pub(super) fn request(config: &LlmConfig, prompt: Prompt<'_>, stream: bool) -> Vec<u8> {
    let mut messages = Vec::with_capacity(prompt.items.len() + 1);
    if !prompt.instructions.is_empty() {
        messages.push(Message::text("system", prompt.instructions));
    }
    let mut items = prompt.items.iter().peekable();
    while let Some(item) = items.next() {
        messages.push(match item {
            Item::User(text) => Message::text("user", text),
            // Text said in the same response as calls shares their message, as the model
            // produced it.
            Item::Assistant(text) if matches!(items.peek(), Some(Item::Call(_))) => Message {
                role: "assistant",
                content: Some(text),
                tool_calls: Some(following_calls(&mut items)),
                tool_call_id: None,
            },
            Item::Assistant(text) => Message::text("assistant", text),
            Item::Call(first) => {
                let mut calls = vec![Call::from(first)];
                calls.extend(following_calls(&mut items));
                Message {
                    role: "assistant",
                    content: None,
                    tool_calls: Some(calls),
                    tool_call_id: None,
                }
            }
            Item::Output { call_id, output } => Message {
                role: "tool",
                content: Some(output),
                tool_calls: None,
                tool_call_id: Some(call_id),
            },
        });
    }
    let tools: Vec<Tool<'_>> = prompt.tools.iter().map(Tool::from).collect();
    // OpenAI deprecated `max_tokens` for `max_completion_tokens`, and its reasoning models
    // refuse the old name; compatible servers (Ollama, llama.cpp) know only the old one.
    let (max_tokens, max_completion_tokens) = if config.is_openai() {
        (None, config.max_output_tokens)
    } else {
        (config.max_output_tokens, None)
    };
    let body = Body {
        model: &config.model,
        messages,
        // Servers reject `parallel_tool_calls` without tools, and some reject an empty array.
        parallel_tool_calls: (!tools.is_empty()).then_some(true),
        tools,
        max_tokens,
        max_completion_tokens,
        temperature: config.temperature,
        top_p: config.top_p,
        stream: stream.then_some(true),
        stream_options: stream.then_some(StreamOptions {
            include_usage: true,
        }),
    };
    serde_json::to_vec(&body).expect("a request body always serializes")
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Tool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    /// `null` (not absent) on an assistant message that only calls tools.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<Call<'a>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

impl<'a> Message<'a> {
    fn text(role: &'static str, content: &'a str) -> Self {
        Self {
            role,
            content: Some(content),
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

#[derive(Serialize)]
struct Call<'a> {
    id: &'a str,
    r#type: &'static str,
    function: Function<'a>,
}

#[derive(Serialize)]
struct Function<'a> {
    name: &'a str,
    arguments: &'a str,
}

impl<'a> From<&'a ToolCall> for Call<'a> {
    fn from(call: &'a ToolCall) -> Self {
        Call {
            id: &call.call_id,
            r#type: "function",
            function: Function {
                name: &call.name,
                arguments: &call.arguments,
            },
        }
    }
}

#[derive(Serialize)]
struct Tool<'a> {
    r#type: &'static str,
    function: ToolFunction<'a>,
}

#[derive(Serialize)]
struct ToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a RawValue,
}

impl<'a> From<&'a ToolDef> for Tool<'a> {
    fn from(tool: &'a ToolDef) -> Self {
        Tool {
            r#type: "function",
            function: ToolFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        }
    }
}

/// The calls that come next in the history, consumed.
fn following_calls<'a>(items: &mut Peekable<Iter<'a, Item>>) -> Vec<Call<'a>> {
    let mut calls = Vec::new();
    while let Some(&item) = items.peek() {
        let Item::Call(call) = item else { break };
        calls.push(Call::from(call));
        items.next();
    }
    calls
}

/// The parts of a Chat Completions body the chat reads; everything else is ignored.
#[derive(Deserialize)]
pub(super) struct Answer {
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<WireMessage>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<Content>,
    refusal: Option<Content>,
    tool_calls: Option<Vec<WireCall>>,
}

/// `content` is a string or null; some servers send an array of `{type: "text", text}` parts.
#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
    /// Anything else carries no text we can show.
    Other(serde::de::IgnoredAny),
}

#[derive(Deserialize)]
struct Part {
    text: Option<String>,
}

#[derive(Deserialize)]
struct WireCall {
    id: Option<String>,
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    name: Option<String>,
    arguments: Option<Value>,
}

pub(super) fn parse(answer: Answer) -> Result<Reply, LlmError> {
    let choice = answer
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| LlmError::BadResponse("the response has no `choices`".to_owned()))?;
    let message = choice
        .message
        .ok_or_else(|| LlmError::BadResponse("the first choice has no `message`".to_owned()))?;
    let text = message
        .content
        .and_then(Content::text)
        // A refusal is what the model said; the user should see it.
        .or_else(|| message.refusal.and_then(Content::text));
    let mut calls = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(call)
        .collect::<Result<Vec<_>, _>>()?;
    if text.is_none() && calls.is_empty() {
        // Cut off before saying anything: better reported than answered with nothing.
        if let Some(reason @ ("length" | "content_filter")) = choice.finish_reason.as_deref() {
            return Err(LlmError::BadResponse(format!(
                "the response has no usable output: finish_reason {reason}"
            )));
        }
    }
    assign_missing_ids(&mut calls);
    Ok(Reply {
        text,
        calls,
        usage: answer.usage.map(Usage::from).unwrap_or_default(),
    })
}

/// One tool call put together from a stream's deltas: `(id, name, arguments)`, any of them
/// possibly empty.
pub(super) type StreamedCall = (String, String, String);

/// What a stream of chunks added up to, read as [`parse`] reads a whole answer, so a streamed
/// reply and a whole one are checked alike (a call needs a name, an answer cut off before any
/// output is an error, ids are made unique).
pub(super) fn assembled(
    content: String,
    refusal: String,
    calls: Vec<StreamedCall>,
    finish_reason: Option<String>,
    usage: Option<WireUsage>,
) -> Result<Reply, LlmError> {
    let tool_calls = calls
        .into_iter()
        .map(|(id, name, args)| WireCall {
            id: Some(id),
            function: Some(WireFunction {
                name: Some(name),
                // A call streamed without argument deltas has no arguments, as one sent whole
                // without the field.
                arguments: (!args.is_empty()).then_some(Value::String(args)),
            }),
        })
        .collect();
    parse(Answer {
        choices: vec![Choice {
            message: Some(WireMessage {
                content: Some(Content::Text(content)),
                refusal: Some(Content::Text(refusal)),
                tool_calls: Some(tool_calls),
            }),
            finish_reason,
        }],
        usage,
    })
}

impl Content {
    fn text(self) -> Option<String> {
        let text = match self {
            Content::Text(text) => text,
            Content::Parts(parts) => parts.into_iter().filter_map(|p| p.text).collect(),
            Content::Other(_) => return None,
        };
        (!text.is_empty()).then_some(text)
    }
}

fn call(raw: WireCall) -> Result<ToolCall, LlmError> {
    let function = raw.function;
    let name = function
        .as_ref()
        .and_then(|f| non_empty(f.name.as_deref()))
        .ok_or_else(|| LlmError::BadResponse("a tool call has no function name".to_owned()))?
        .to_owned();
    Ok(ToolCall {
        call_id: raw.id.unwrap_or_default(),
        name,
        arguments: arguments(function.as_ref().and_then(|f| f.arguments.as_ref())),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::turn::llm::fixtures::{call_triples, config, decode_value, history, tools};

    fn parse_json(body: &Value) -> Result<Reply, LlmError> {
        parse(decode_value(body)?)
    }

    /// The request body as the server receives it.
    fn sent(config: &LlmConfig, prompt: Prompt<'_>) -> Value {
        serde_json::from_slice(&request(config, prompt, false)).unwrap()
    }

    #[test]
    fn the_request_folds_calls_into_one_assistant_message_and_outputs_into_tool_messages() {
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
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "How many orders?"},
                    {"role": "assistant", "content": "Let me look.", "tool_calls": [
                        {"id": "call_a", "type": "function", "function": {"name": "count_orders", "arguments": "{}"}},
                        {"id": "call_b", "type": "function", "function": {"name": "list_customers", "arguments": "{\"limit\":2}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_a", "content": "42"},
                    {"role": "tool", "tool_call_id": "call_b", "content": "[\"Ada\",\"Bob\"]"},
                    {"role": "assistant", "content": "There are 42 orders."},
                    {"role": "user", "content": "Thanks"}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "count_orders",
                    "description": "Counts orders.",
                    "parameters": {"type": "object", "properties": {}}
                }}],
                "parallel_tool_calls": true,
                "max_tokens": 500,
                "temperature": 0.2,
                "top_p": 0.9
            })
        );
    }

    #[test]
    fn openai_gets_the_output_cap_as_max_completion_tokens_and_nothing_unset() {
        let items = vec![Item::User("hi".to_owned())];
        let prompt = Prompt {
            instructions: "",
            items: &items,
            tools: &[],
        };
        let openai = LlmConfig {
            base_url: url::Url::parse("https://api.openai.com/v1/").unwrap(),
            max_output_tokens: Some(500),
            ..config()
        };
        let body = sent(&openai, prompt);
        assert_eq!(body["max_completion_tokens"], 500);
        for unset in ["max_tokens", "temperature", "top_p"] {
            assert!(body.get(unset).is_none(), "{unset}: {body}");
        }
        let body = sent(&config(), prompt);
        for unset in [
            "max_tokens",
            "max_completion_tokens",
            "temperature",
            "top_p",
        ] {
            assert!(body.get(unset).is_none(), "{unset}: {body}");
        }
    }

    #[test]
    fn calls_without_preceding_text_get_null_content_and_no_tools_means_no_parallel_flag() {
        let items = vec![
            Item::User("hi".to_owned()),
            Item::Call(ToolCall {
                call_id: "c1".to_owned(),
                name: "a".to_owned(),
                arguments: "{}".to_owned(),
            }),
            Item::Output {
                call_id: "c1".to_owned(),
                output: "ok".to_owned(),
            },
        ];
        let body = sent(
            &config(),
            Prompt {
                instructions: "",
                items: &items,
                tools: &[],
            },
        );
        assert_eq!(
            body,
            json!({"model": "gpt-test", "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}
            ]})
        );
    }

    #[test]
    fn a_text_answer_is_read_with_its_usage() {
        let reply = parse_json(&json!({
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}
        }))
        .unwrap();
        assert_eq!(reply.text.as_deref(), Some("Hello."));
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
    fn parallel_tool_calls_are_all_returned_in_order() {
        let reply = parse_json(&json!({"choices": [{"message": {
            "role": "assistant",
            "content": null,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "a", "arguments": "{\"x\":1}"}},
                {"id": "call_2", "type": "function", "function": {"name": "b", "arguments": "{bad"}}
            ]
        }, "finish_reason": "tool_calls"}]}))
        .unwrap();
        assert_eq!(reply.text, None);
        let calls = call_triples(&reply);
        assert_eq!(
            calls,
            vec![("call_1", "a", "{\"x\":1}"), ("call_2", "b", "{bad")]
        );
        assert_eq!(reply.usage, Usage::default());
    }

    #[test]
    fn calls_without_ids_and_object_arguments_are_tolerated() {
        let reply = parse_json(
            &json!({"choices": [{"message": {"content": "", "tool_calls": [
                {"type": "function", "function": {"name": "a", "arguments": {"x": 1}}},
                {"type": "function", "function": {"name": "b"}}
            ]}}]}),
        )
        .unwrap();
        assert_eq!(reply.text, None);
        assert!(reply.calls[0].call_id.starts_with("call_"));
        assert_ne!(reply.calls[0].call_id, reply.calls[1].call_id);
        assert_eq!(reply.calls[0].arguments, "{\"x\":1}");
        assert_eq!(reply.calls[1].arguments, "{}");
    }

    #[test]
    fn content_parts_and_refusals_are_read_as_text() {
        let parts = parse_json(&json!({"choices": [{"message": {"content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}
        ]}}]}))
        .unwrap();
        assert_eq!(parts.text.as_deref(), Some("ab"));
        let refusal =
            parse_json(&json!({"choices": [{"message": {"content": null, "refusal": "No."}}]}))
                .unwrap();
        assert_eq!(refusal.text.as_deref(), Some("No."));
    }

    #[test]
    fn an_answer_cut_off_before_any_output_is_a_bad_response() {
        let err = parse_json(
            &json!({"choices": [{"message": {"content": null}, "finish_reason": "length"}]}),
        )
        .unwrap_err();
        assert!(matches!(&err, LlmError::BadResponse(m) if m.contains("length")));
    }

    #[test]
    fn malformed_bodies_are_bad_responses() {
        for body in [
            json!({}),
            json!({"choices": []}),
            json!({"choices": [{"finish_reason": "stop"}]}),
            json!({"choices": [{"message": {"tool_calls": {"id": "x"}}}]}),
            json!({"choices": [{"message": {"tool_calls": [{"id": "x", "function": {}}]}}]}),
            json!({"error": {"message": "overloaded"}}),
        ] {
            assert!(
                matches!(parse_json(&body), Err(LlmError::BadResponse(_))),
                "{body}"
            );
        }
    }
}
