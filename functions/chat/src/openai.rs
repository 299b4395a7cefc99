//! The OpenAI-compatible surface: `GET /v1/models` and `POST /v1/chat/completions`, streamed or
//! not, so chat front ends that speak the OpenAI API (Open WebUI, LibreChat, editor plugins)
//! can talk to Parley. The assistant runs its tools itself; clients see them in the text.
//!
//! The last user message is the question. The conversation is kept server-side: its id comes
//! from the `x-parley-conversation-id` header or a `conversation_id` field and is returned in
//! the same header. Without one a new conversation starts, seeded with the earlier messages the
//! client sent, as stateless OpenAI clients expect.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::User;
use crate::conversation::{ConversationId, Trace};
use crate::error::ApiError;
use crate::llm::Usage;
use crate::request::{self, Completion, CompletionBody, Wire};
use crate::stream::{self, DONE, Update, frame};
use crate::turn::{self, Progress, TurnEvent, TurnResponse};

/// The header a client sends, and gets back, to keep talking in one conversation.
pub const CONVERSATION_HEADER: &str = "x-parley-conversation-id";

/// `GET /v1/models`: the assistant is the one model.
pub async fn models(State(state): State<AppState>, _user: User) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [model(&state)],
    }))
}

fn model(state: &AppState) -> Value {
    json!({
        "id": state.model_id,
        "object": "model",
        "created": 0,
        "owned_by": "parley",
    })
}

/// A completion request, read and checked: the model must be this server's, and the
/// conversation header, when sent, names the conversation.
fn parse(bytes: &[u8], headers: &HeaderMap, state: &AppState) -> Result<Completion, ApiError> {
    let mut body: CompletionBody = request::parse_json(bytes)?;
    if *body.model != *state.model_id {
        return Err(ApiError::NotFound {
            code: "model_not_found",
            message: format!(
                "the model `{}` does not exist; this server's is `{}`",
                body.model, state.model_id
            ),
        });
    }
    if let Some(header) = headers.get(CONVERSATION_HEADER) {
        let id = header.to_str().map_err(|_| ApiError::Invalid {
            code: "invalid_conversation_id",
            message: format!("`{CONVERSATION_HEADER}` must be a UUID"),
        })?;
        body.conversation_id = Some(id.to_owned());
    }
    Ok(Completion::try_from(Wire {
        body,
        limits: &state.limits,
    })?)
}

/// `POST /v1/chat/completions`.
pub async fn completions(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = request::body_bytes(body, state.limits.max_body_bytes)?;
    let completion = parse(&bytes, &headers, &state)?;
    let model = state.model_id.to_string();
    let tool_blocks = completion.tool_blocks.unwrap_or(state.v1_tool_blocks);
    if completion.stream {
        let (conversation, updates) = stream::begin(state, user, completion.turn).await?;
        return Ok(streamed(
            updates,
            conversation,
            model,
            completion.include_usage,
            tool_blocks,
        ));
    }
    let response = turn::run(&state, &user, completion.turn, Progress::none()).await?;
    let mut content = String::new();
    if tool_blocks {
        for trace in &response.traces {
            content.push_str(&tool_block(trace));
        }
    }
    content.push_str(&response.reply);
    let body = json!({
        "id": completion_id(),
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": finish_reason(&response),
        }],
        "usage": usage(&response.usage),
        "conversation_id": response.conversation_id,
        "parley": parley_fields(&response),
    });
    Ok(with_conversation(
        Json(body).into_response(),
        response.conversation_id,
    ))
}

/// The streamed answer: `chat.completion.chunk`s whose content is the reply as it is written,
/// with each tool call as a block once its output is in (unless `tool_blocks` is off).
fn streamed(
    updates: stream::Updates,
    conversation: Option<ConversationId>,
    model: String,
    include_usage: bool,
    tool_blocks: bool,
) -> Response {
    let mut chunks = Chunks {
        id: completion_id(),
        created: now(),
        model,
        include_usage,
        tool_blocks,
        started: false,
        at_line_start: true,
        pending: Vec::new(),
    };
    let body = stream::body(updates, move |update, out| chunks.encode(update, out));
    let response = stream::event_stream(body, false);
    match conversation {
        Some(id) => with_conversation(response, id),
        None => response,
    }
}

/// The state of one streamed completion.
struct Chunks {
    id: String,
    created: i64,
    model: String,
    include_usage: bool,
    /// Tool calls are written as `<details>` blocks (`V1_TOOL_BLOCKS`, `tool_blocks`).
    tool_blocks: bool,
    /// The first chunk (the role) has gone out.
    started: bool,
    /// The content so far ends a line, so a block can start on its own.
    at_line_start: bool,
    /// Calls whose output is not in yet: id, name, arguments.
    pending: Vec<(String, String, Value)>,
}

impl Chunks {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }

    fn content(&mut self, out: &mut String, text: &str) {
        if text.is_empty() {
            return;
        }
        self.at_line_start = text.ends_with('\n');
        frame(out, &self.chunk(json!({"content": text}), None));
    }

    fn encode(&mut self, update: Update, out: &mut String) {
        if !std::mem::replace(&mut self.started, true) {
            frame(
                out,
                &self.chunk(json!({"role": "assistant", "content": ""}), None),
            );
        }
        match update {
            Update::Event(TurnEvent::TextDelta(text)) => self.content(out, &text),
            Update::Event(TurnEvent::ToolInput {
                call_id,
                name,
                args,
            }) if self.tool_blocks => self.pending.push((call_id, name, args)),
            Update::Event(TurnEvent::ToolOutput {
                call_id,
                output,
                is_error,
            }) => {
                if let Some(i) = self.pending.iter().position(|(id, ..)| *id == call_id) {
                    let (call_id, name, args) = self.pending.remove(i);
                    let mut block = String::new();
                    if !self.at_line_start {
                        block.push_str("\n\n");
                    }
                    block.push_str(&details(&call_id, &name, &args, &output, is_error));
                    self.content(out, &block);
                }
            }
            Update::Event(
                TurnEvent::Started { .. }
                | TurnEvent::StepStarted { .. }
                | TurnEvent::StepFinished
                | TurnEvent::ToolInput { .. },
            ) => {}
            Update::Done(Ok(response)) => {
                let mut last = self.chunk(json!({}), Some(finish_reason(&response)));
                last["parley"] = parley_fields(&response);
                frame(out, &last);
                if self.include_usage {
                    let mut usage_chunk = self.chunk(json!({}), None);
                    usage_chunk["choices"] = json!([]);
                    usage_chunk["usage"] = usage(&response.usage);
                    frame(out, &usage_chunk);
                }
                out.push_str(DONE);
            }
            Update::Done(Err(e)) => {
                // OpenAI's own mid-stream error shape, which its clients raise.
                frame(
                    out,
                    &json!({"error": {"message": e.public_summary(), "type": "server_error",
                                      "param": null, "code": null}}),
                );
                tracing::error!(error = %e, "streamed completion failed");
                out.push_str(DONE);
            }
        }
    }
}

/// The conversation id goes back in the header a client sends it in.
fn with_conversation(mut response: Response, id: ConversationId) -> Response {
    if let Ok(value) = HeaderValue::from_str(&id.to_string()) {
        response.headers_mut().insert(CONVERSATION_HEADER, value);
    }
    response
}

/// A tool call as Open WebUI writes its own into a message: a `<details type="tool_calls">`
/// element whose attributes hold the arguments and result as escaped JSON, which Open WebUI
/// shows as a collapsible tool call and other clients show as a line of HTML or text.
fn tool_block(trace: &Trace) -> String {
    details(
        &trace.call_id,
        &trace.name,
        &trace.args,
        &trace.output,
        trace.is_error,
    )
}

fn details(call_id: &str, name: &str, args: &Value, output: &Value, is_error: bool) -> String {
    let result = if is_error {
        json!({"error": output})
    } else {
        output.clone()
    };
    format!(
        "<details type=\"tool_calls\" done=\"true\" id=\"{}\" name=\"{}\" arguments=\"{}\" \
         result=\"{}\">\n<summary>Tool Executed</summary>\n</details>\n",
        escape(call_id),
        escape(name),
        escape(&args.to_string()),
        escape(&json!(result.to_string()).to_string()),
    )
}

/// HTML attribute escaping, as Python's `html.escape` (which Open WebUI uses).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

fn finish_reason(response: &TurnResponse) -> &'static str {
    if response.cut_short { "length" } else { "stop" }
}

fn usage(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    })
}

/// What only Parley knows about the answer, under one key clients ignore.
fn parley_fields(response: &TurnResponse) -> Value {
    json!({
        "conversation_id": response.conversation_id,
        "steps": response.steps,
        "cut_short": response.cut_short,
        "interrupted": response.interrupted,
        "sources": response.sources,
    })
}

fn completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::new_v4().simple())
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_blocks_escape_their_json_and_come_back_out_of_replayed_messages() {
        let block = details(
            "call_1",
            "lad_by_ref",
            &json!({"ref": "Leeds \"LS\""}),
            &json!([{"name": "<b>"}]),
            false,
        );
        assert!(
            block.contains("arguments=\"{&quot;ref&quot;:&quot;Leeds \\&quot;LS\\&quot;&quot;}\"")
        );
        assert!(!block.contains("<b>"));
        let replayed = format!("{block}\nLeeds has 3 complaints.");
        assert_eq!(
            request::strip_tool_blocks(&replayed),
            "Leeds has 3 complaints."
        );
    }
}
