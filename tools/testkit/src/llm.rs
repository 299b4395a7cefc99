//! `ScriptedLlm`: an OpenAI-compatible HTTP server on 127.0.0.1 that replays planned answers in
//! order, in whichever dialect it is asked in (Responses or Chat Completions), whole or streamed
//! as server-sent events when the request says `"stream": true`, and records every request so
//! tests can assert what the model was sent. The one stand-in for an LLM in tests.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// Token counts every answered request reports, in the dialect's own field names
/// (`input_tokens`/`output_tokens` or `prompt_tokens`/`completion_tokens`).
pub const USAGE_INPUT_TOKENS: u64 = 100;
pub const USAGE_OUTPUT_TOKENS: u64 = 20;
pub const USAGE_TOTAL_TOKENS: u64 = 120;

/// One planned answer. Each request consumes one step, in order.
#[derive(Debug, Clone)]
pub enum Step {
    /// A final answer: text and no tool calls.
    Text(String),
    /// One response holding these tool calls, in order: `(name, raw arguments JSON text)`. The
    /// arguments are sent as given, so they may be invalid JSON. Call ids are `call_1`,
    /// `call_2`, ... numbered across the whole script, so they never repeat.
    Calls(Vec<(String, String)>),
    /// Text and tool calls in the same response.
    TextAndCalls(String, Vec<(String, String)>),
    /// An answer with this status and this body verbatim (sent as JSON when it parses as JSON),
    /// plus `Retry-After: <seconds>` when given. A 2xx status with a non-JSON body tests how the
    /// client handles a broken server.
    Status {
        status: u16,
        retry_after: Option<u64>,
        body: String,
    },
    /// The inner step, answered after this delay (for timeouts).
    Delay(Duration, Box<Step>),
    /// Streams this text, then holds the connection open without ever finishing (for deadline
    /// and disconnect tests). A request that is not streamed is never answered at all.
    Stall(String),
    /// Streams this text, then fails the answer with `message` the way the dialect reports a
    /// failure mid-stream (`response.failed`; a chunk holding an `error`). A request that is
    /// not streamed gets a 500 with `message`.
    FailMidStream { text: String, message: String },
}

impl Step {
    pub fn text(text: impl Into<String>) -> Step {
        Step::Text(text.into())
    }

    /// One tool call.
    pub fn call(name: impl Into<String>, arguments: impl Into<String>) -> Step {
        Step::Calls(vec![(name.into(), arguments.into())])
    }

    /// Several tool calls in one response (parallel calls).
    pub fn calls<N: Into<String>, A: Into<String>>(
        calls: impl IntoIterator<Item = (N, A)>,
    ) -> Step {
        Step::Calls(
            calls
                .into_iter()
                .map(|(n, a)| (n.into(), a.into()))
                .collect(),
        )
    }

    /// An error status with an OpenAI-shaped body: `{"error":{"message","type","code"}}`.
    pub fn error(status: u16, message: impl Into<String>) -> Step {
        let body = json!({
            "error": {"message": message.into(), "type": "server_error", "param": null, "code": null}
        });
        Step::Status {
            status,
            retry_after: None,
            body: body.to_string(),
        }
    }

    /// A 429 with an OpenAI-shaped body and `Retry-After: <seconds>`.
    pub fn rate_limited(retry_after_secs: u64) -> Step {
        let body = json!({
            "error": {
                "message": "Rate limit reached (scripted)",
                "type": "requests",
                "param": null,
                "code": "rate_limit_exceeded"
            }
        });
        Step::Status {
            status: 429,
            retry_after: Some(retry_after_secs),
            body: body.to_string(),
        }
    }

    /// This step, answered after `delay`.
    pub fn delayed(delay: Duration, step: Step) -> Step {
        Step::Delay(delay, Box::new(step))
    }

    /// Streams `text`, then never finishes.
    pub fn stall(text: impl Into<String>) -> Step {
        Step::Stall(text.into())
    }
}

/// How a streamed answer ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    Complete,
    Stall,
    Fail(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Responses,
    ChatCompletions,
}

#[derive(Debug, Default)]
struct Script {
    steps: VecDeque<Step>,
    /// Answered when `steps` is empty; `None` means the script is exhausted.
    forever: Option<Step>,
    requests: Vec<Value>,
    paths: Vec<String>,
    authorizations: Vec<Option<String>>,
    /// Responses answered, to number response ids.
    responses: u64,
    /// Tool calls made, to number call ids across the whole script.
    calls: u64,
    /// Number call ids from `call_0` in each response instead, as some OpenAI-compatible
    /// servers do, so the same id comes back in the next step.
    ids_per_response: bool,
    /// The wait before each streamed piece of text or arguments.
    pace: Duration,
}

type Shared = Arc<Mutex<Script>>;

/// The running server; it stops when this is dropped.
#[derive(Debug)]
pub struct ScriptedLlm {
    addr: SocketAddr,
    script: Shared,
    task: JoinHandle<()>,
}

impl ScriptedLlm {
    /// Starts a server that answers with `steps`, in order, then with 500 "script exhausted".
    pub async fn start(steps: Vec<Step>) -> ScriptedLlm {
        Self::serve(Script {
            steps: steps.into(),
            ..Script::default()
        })
        .await
    }

    /// [`Self::start`], numbering call ids from `call_0` in each response, as servers that
    /// number calls per response do: the same ids come back in every step.
    pub async fn numbering_calls_per_response(steps: Vec<Step>) -> ScriptedLlm {
        Self::serve(Script {
            steps: steps.into(),
            ids_per_response: true,
            ..Script::default()
        })
        .await
    }

    /// Starts a server that answers every request with one call to `name` (step-cap tests).
    pub async fn endless_calls(name: &str, arguments: &str) -> ScriptedLlm {
        Self::serve(Script {
            forever: Some(Step::call(name, arguments)),
            ..Script::default()
        })
        .await
    }

    async fn serve(script: Script) -> ScriptedLlm {
        let script: Shared = Arc::new(Mutex::new(script));
        let router = Router::new()
            .route("/responses", post(answer))
            .route("/v1/responses", post(answer))
            .route("/chat/completions", post(answer))
            .route("/v1/chat/completions", post(answer))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding the scripted LLM to 127.0.0.1:0");
        let addr = listener
            .local_addr()
            .expect("reading the scripted LLM's address");
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("scripted LLM stopped: {e}");
            }
        });
        ScriptedLlm { addr, script, task }
    }

    /// The base URL to configure as `LLM_BASE_URL`: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Request bodies received, in order (a body that is not JSON is recorded as a string).
    pub fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    /// Request paths received, in order (e.g. `/v1/responses`).
    pub fn paths(&self) -> Vec<String> {
        self.lock().paths.clone()
    }

    /// The `Authorization` header of each request, in order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.lock().authorizations.clone()
    }

    /// Appends a step to the script.
    pub fn push(&self, step: Step) {
        self.lock().steps.push_back(step);
    }

    /// Steps not answered yet.
    pub fn remaining(&self) -> usize {
        self.lock().steps.len()
    }

    /// Sets the wait before each streamed piece (about 4 characters) of text or of a call's
    /// arguments, as a model writing at a fixed rate; zero (the default) sends them at once.
    pub fn set_pace(&self, pace: Duration) {
        self.lock().pace = pace;
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        lock(&self.script)
    }
}

impl Drop for ScriptedLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A panic in a test thread holding the lock must not hide the script from the other threads.
fn lock(script: &Shared) -> MutexGuard<'_, Script> {
    script
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn answer(
    State(script): State<Shared>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let dialect = if path.ends_with("/chat/completions") {
        Dialect::ChatCompletions
    } else {
        Dialect::Responses
    };
    let parsed = serde_json::from_slice::<Value>(&body);
    let step = {
        let mut s = lock(&script);
        s.requests.push(match &parsed {
            Ok(v) => v.clone(),
            Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()),
        });
        s.paths.push(path);
        s.authorizations.push(
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        );
        if parsed.is_err() {
            // What the real APIs do; the script is not consumed by a request it cannot answer.
            return error_response(400, "scripted LLM: the request body is not JSON");
        }
        match s.steps.pop_front().or_else(|| s.forever.clone()) {
            Some(step) => step,
            None => return error_response(500, "scripted LLM: script exhausted"),
        }
    };
    let request = parsed.unwrap_or_default();
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_owned();
    let streamed = request.get("stream").and_then(Value::as_bool) == Some(true);

    let mut step = step;
    let (text, calls, ending) = loop {
        match step {
            Step::Delay(delay, inner) => {
                tokio::time::sleep(delay).await;
                step = *inner;
            }
            Step::Text(text) => break (Some(text), Vec::new(), Ending::Complete),
            Step::Calls(calls) => break (None, calls, Ending::Complete),
            Step::TextAndCalls(text, calls) => break (Some(text), calls, Ending::Complete),
            Step::Stall(text) => break (Some(text), Vec::new(), Ending::Stall),
            Step::FailMidStream { text, message } => {
                break (Some(text), Vec::new(), Ending::Fail(message));
            }
            Step::Status {
                status,
                retry_after,
                body,
            } => return status_response(status, retry_after, body),
        }
    };
    if !streamed {
        match &ending {
            Ending::Complete => {}
            Ending::Stall => return std::future::pending().await,
            Ending::Fail(message) => return error_response(500, message),
        }
    }
    let (n, calls, pace) = {
        let mut s = lock(&script);
        s.responses += 1;
        let n = s.responses;
        let per_response = s.ids_per_response;
        let calls: Vec<(String, String, String)> = calls
            .into_iter()
            .enumerate()
            .map(|(i, (name, args))| {
                s.calls += 1;
                let id = if per_response { i as u64 } else { s.calls };
                (format!("call_{id}"), name, args)
            })
            .collect();
        (n, calls, s.pace)
    };
    let answer = Answer {
        n,
        model: &model,
        text: text.as_deref(),
        calls: &calls,
    };
    if !streamed {
        let body = match dialect {
            Dialect::Responses => responses_body(&answer),
            Dialect::ChatCompletions => chat_completions_body(&answer),
        };
        return (StatusCode::OK, axum::Json(body)).into_response();
    }
    let frames = match dialect {
        Dialect::Responses => responses_events(&answer, &ending),
        Dialect::ChatCompletions => {
            let include_usage =
                request.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
            chat_completions_chunks(&answer, &ending, include_usage)
        }
    };
    event_stream(frames, pace, ending == Ending::Stall)
}

/// What one answered request says, before it is put in a dialect's shape.
struct Answer<'a> {
    /// The response's number, for its ids.
    n: u64,
    model: &'a str,
    text: Option<&'a str>,
    /// `(call id, name, arguments)`.
    calls: &'a [(String, String, String)],
}

/// One server-sent event, and whether the pace applies before it (text and argument deltas).
struct Frame {
    paced: bool,
    bytes: Bytes,
}

/// A `text/event-stream` response sending `frames` in order, waiting `pace` before each paced
/// one, then ending, or with `stall` never ending (until the client goes away).
fn event_stream(frames: Vec<Frame>, pace: Duration, stall: bool) -> Response {
    let frames: VecDeque<Frame> = frames.into();
    let stream = futures_util::stream::unfold(frames, move |mut frames| async move {
        match frames.pop_front() {
            Some(frame) => {
                if frame.paced && !pace.is_zero() {
                    tokio::time::sleep(pace).await;
                }
                Some((Ok::<_, Infallible>(frame.bytes), frames))
            }
            None if stall => std::future::pending().await,
            None => None,
        }
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Text cut into pieces of 4 characters, as a model streams tokens.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars
        .chunks(4)
        .map(|piece| piece.iter().collect())
        .collect()
}

/// The Responses API's named events, numbered by `sequence_number` as OpenAI numbers them.
#[derive(Default)]
struct Events {
    frames: Vec<Frame>,
    sequence: u64,
}

impl Events {
    fn push(&mut self, paced: bool, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.frames.push(Frame {
            paced,
            bytes: Bytes::from(format!("event: {kind}\ndata: {data}\n\n")),
        });
    }
}

/// A streamed Responses API answer as OpenAI sends it: `response.created`, each output item
/// added, its deltas, done, then `response.completed` holding the whole response and usage.
fn responses_events(answer: &Answer<'_>, ending: &Ending) -> Vec<Frame> {
    let whole = responses_body(answer);
    let mut opening = whole.clone();
    opening["status"] = json!("in_progress");
    opening["output"] = json!([]);
    opening["usage"] = Value::Null;
    let mut events = Events::default();
    events.push(false, "response.created", json!({"response": opening}));
    events.push(false, "response.in_progress", json!({"response": opening}));
    let mut output_index = 0;
    if let Some(text) = answer.text {
        let item_id = format!("msg_{}", answer.n);
        let part = |text: &str| json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text});
        let at = json!({"item_id": item_id, "output_index": output_index, "content_index": 0});
        let with = |extra: Value| {
            let mut data = at.clone();
            for (k, v) in extra.as_object().into_iter().flatten() {
                data[k] = v.clone();
            }
            data
        };
        events.push(
            false,
            "response.output_item.added",
            json!({"output_index": output_index, "item": {
                "id": item_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"
            }}),
        );
        events.push(
            false,
            "response.content_part.added",
            with(json!({"part": part("")})),
        );
        for piece in pieces(text) {
            let delta = with(json!({"delta": piece, "logprobs": []}));
            events.push(true, "response.output_text.delta", delta);
        }
        match ending {
            Ending::Complete => {}
            Ending::Stall => return events.frames,
            Ending::Fail(message) => {
                let mut failed = opening.clone();
                failed["status"] = json!("failed");
                failed["error"] = json!({"code": "server_error", "message": message});
                events.push(false, "response.failed", json!({"response": failed}));
                return events.frames;
            }
        }
        let done = with(json!({"text": text, "logprobs": []}));
        events.push(false, "response.output_text.done", done);
        events.push(
            false,
            "response.content_part.done",
            with(json!({"part": part(text)})),
        );
        let item = whole["output"][output_index].clone();
        events.push(
            false,
            "response.output_item.done",
            json!({"output_index": output_index, "item": item}),
        );
        output_index += 1;
    }
    for (call_id, name, arguments) in answer.calls {
        let item = whole["output"][output_index].clone();
        let item_id = item["id"].clone();
        events.push(
            false,
            "response.output_item.added",
            json!({"output_index": output_index, "item": {
                "id": item_id, "type": "function_call", "status": "in_progress",
                "arguments": "", "call_id": call_id, "name": name
            }}),
        );
        for piece in pieces(arguments) {
            events.push(
                true,
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": output_index, "delta": piece}),
            );
        }
        events.push(
            false,
            "response.function_call_arguments.done",
            json!({"item_id": item_id, "output_index": output_index, "arguments": arguments}),
        );
        events.push(
            false,
            "response.output_item.done",
            json!({"output_index": output_index, "item": item}),
        );
        output_index += 1;
    }
    events.push(false, "response.completed", json!({"response": whole}));
    events.frames
}

/// A streamed Chat Completions answer as OpenAI sends it: `chat.completion.chunk`s with the
/// role, content deltas, tool-call deltas keyed by `index` (id and name in a call's first),
/// an empty delta with the finish reason, with `include_usage` a last chunk with `choices: []`
/// and the usage, then `data: [DONE]`.
fn chat_completions_chunks(
    answer: &Answer<'_>,
    ending: &Ending,
    include_usage: bool,
) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut base = json!({
        "id": format!("chatcmpl-{}", answer.n),
        "object": "chat.completion.chunk",
        "created": 1_700_000_000 + answer.n,
        "model": answer.model,
        "system_fingerprint": "fp_scripted",
    });
    if include_usage {
        // OpenAI sends `usage: null` on every chunk but the last when usage is asked for.
        base["usage"] = Value::Null;
    }
    let mut push = |paced: bool, data: Value| {
        frames.push(Frame {
            paced,
            bytes: Bytes::from(format!("data: {data}\n\n")),
        });
    };
    let chunk = |delta: Value, finish_reason: Option<&str>| {
        let mut data = base.clone();
        data["choices"] =
            json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]);
        data
    };
    let content = if answer.text.is_some() {
        json!("")
    } else {
        Value::Null
    };
    push(
        false,
        chunk(
            json!({"role": "assistant", "content": content, "refusal": null}),
            None,
        ),
    );
    for piece in pieces(answer.text.unwrap_or_default()) {
        push(true, chunk(json!({"content": piece}), None));
    }
    match ending {
        Ending::Complete => {}
        Ending::Stall => return frames,
        Ending::Fail(message) => {
            push(
                false,
                json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
            );
            return frames;
        }
    }
    for (index, (call_id, name, arguments)) in answer.calls.iter().enumerate() {
        push(
            false,
            chunk(
                json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                None,
            ),
        );
        for piece in pieces(arguments) {
            push(
                true,
                chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    None,
                ),
            );
        }
    }
    let finish_reason = if answer.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    push(false, chunk(json!({}), Some(finish_reason)));
    if include_usage {
        let mut last = base.clone();
        last["choices"] = json!([]);
        last["usage"] = json!({
            "prompt_tokens": USAGE_INPUT_TOKENS,
            "completion_tokens": USAGE_OUTPUT_TOKENS,
            "total_tokens": USAGE_TOTAL_TOKENS,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        });
        push(false, last);
    }
    frames.push(Frame {
        paced: false,
        bytes: Bytes::from_static(b"data: [DONE]\n\n"),
    });
    frames
}

/// A Responses API body as OpenAI sends it (`object: "response"`, `output` items).
fn responses_body(answer: &Answer<'_>) -> Value {
    let Answer {
        n,
        model,
        text,
        calls,
    } = *answer;
    let mut output = Vec::new();
    if let Some(text) = text {
        output.push(json!({
            "type": "message",
            "id": format!("msg_{n}"),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]
        }));
    }
    for (call_id, name, arguments) in calls {
        output.push(json!({
            "type": "function_call",
            "id": format!("fc_{}", call_id.trim_start_matches("call_")),
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
            "status": "completed"
        }));
    }
    json!({
        "id": format!("resp_{n}"),
        "object": "response",
        "created_at": 1_700_000_000 + n,
        "status": "completed",
        "error": null,
        "incomplete_details": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "store": false,
        "usage": {
            "input_tokens": USAGE_INPUT_TOKENS,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": USAGE_OUTPUT_TOKENS,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": USAGE_TOTAL_TOKENS
        }
    })
}

/// A Chat Completions body as OpenAI sends it (`object: "chat.completion"`, one choice).
fn chat_completions_body(answer: &Answer<'_>) -> Value {
    let Answer {
        n,
        model,
        text,
        calls,
    } = *answer;
    let mut message = json!({"role": "assistant", "content": text, "refusal": null});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|(id, name, arguments)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
            })
            .collect();
    }
    let finish_reason = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    json!({
        "id": format!("chatcmpl-{n}"),
        "object": "chat.completion",
        "created": 1_700_000_000 + n,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": USAGE_INPUT_TOKENS,
            "completion_tokens": USAGE_OUTPUT_TOKENS,
            "total_tokens": USAGE_TOTAL_TOKENS
        }
    })
}

fn status_response(status: u16, retry_after: Option<u64>, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if serde_json::from_str::<Value>(&body).is_ok() {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

fn error_response(status: u16, message: &str) -> Response {
    let body =
        json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}});
    status_response(status, None, body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn post(llm: &ScriptedLlm, path: &str, body: Value) -> (u16, Value) {
        let raw = post_raw(llm, path, body, Duration::from_secs(10)).await;
        let status = raw[9..12].parse().unwrap();
        let (_, payload) = raw.split_once("\r\n\r\n").unwrap();
        (status, serde_json::from_str(payload).unwrap_or(Value::Null))
    }

    /// The raw response, read until the server closes or `wait` is over.
    async fn post_raw(llm: &ScriptedLlm, path: &str, body: Value, wait: Duration) -> String {
        // A bare HTTP/1.1 client keeps testkit free of an HTTP client dependency.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.to_string();
        let mut stream = tokio::net::TcpStream::connect(llm.addr()).await.unwrap();
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let _ = tokio::time::timeout(wait, stream.read_to_end(&mut raw)).await;
        String::from_utf8(raw).unwrap()
    }

    /// The JSON of each `data:` line of a streamed body (each event is its own HTTP chunk, so
    /// the chunk-size lines between them never start with `data:`), and the raw `[DONE]`s.
    fn data_lines(raw: &str) -> Vec<Value> {
        raw.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).unwrap_or_else(|_| json!(data)))
            .collect()
    }

    #[tokio::test]
    async fn a_streamed_responses_answer_is_named_events_ending_in_the_whole_response() {
        let llm = ScriptedLlm::start(vec![Step::TextAndCalls(
            "Checking now.".to_owned(),
            vec![("a".to_owned(), "{\"x\":1}".to_owned())],
        )])
        .await;
        let body = json!({"model": "m", "stream": true});
        let raw = post_raw(&llm, "/v1/responses", body, Duration::from_secs(10)).await;
        assert!(raw.contains("content-type: text/event-stream"), "{raw}");
        let kinds: Vec<&str> = raw
            .lines()
            .filter_map(|line| line.strip_prefix("event: "))
            .collect();
        assert_eq!(kinds.first(), Some(&"response.created"));
        assert_eq!(kinds.last(), Some(&"response.completed"));
        let events = data_lines(&raw);
        assert_eq!(events.len(), kinds.len());
        for (i, (event, kind)) in events.iter().zip(&kinds).enumerate() {
            assert_eq!(event["type"], *kind);
            assert_eq!(event["sequence_number"], i);
        }
        let deltas = |kind: &str| -> String {
            events
                .iter()
                .filter(|e| e["type"] == kind)
                .map(|e| e["delta"].as_str().unwrap())
                .collect()
        };
        assert_eq!(deltas("response.output_text.delta"), "Checking now.");
        assert_eq!(
            events
                .iter()
                .filter(|e| e["type"] == "response.output_text.delta")
                .count(),
            4,
            "13 characters in pieces of 4"
        );
        assert_eq!(
            deltas("response.function_call_arguments.delta"),
            "{\"x\":1}"
        );
        let done = events.last().unwrap();
        assert_eq!(done["response"]["output"][1]["call_id"], "call_1");
        assert_eq!(done["response"]["usage"]["total_tokens"], 120);
    }

    #[tokio::test]
    async fn streamed_chat_chunks_carry_indexed_call_deltas_then_usage_then_done() {
        let llm = ScriptedLlm::start(vec![Step::calls([("a", "{}"), ("b", "{\"y\":22}")])]).await;
        let body = json!({"model": "m", "stream": true, "stream_options": {"include_usage": true}});
        let raw = post_raw(&llm, "/v1/chat/completions", body, Duration::from_secs(10)).await;
        let chunks = data_lines(&raw);
        assert_eq!(chunks.last(), Some(&json!("[DONE]")));
        let usage = &chunks[chunks.len() - 2];
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["prompt_tokens"], 100);
        let deltas: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
            .collect();
        assert_eq!(deltas[0]["id"], "call_1");
        assert_eq!(deltas[0]["function"]["name"], "a");
        let arguments = |index: u64| -> String {
            deltas
                .iter()
                .filter(|d| d["index"] == index)
                .filter_map(|d| d["function"]["arguments"].as_str())
                .collect()
        };
        assert_eq!(
            (arguments(0), arguments(1)),
            ("{}".to_owned(), "{\"y\":22}".to_owned())
        );
        assert_eq!(
            chunks[chunks.len() - 3]["choices"][0]["finish_reason"],
            "tool_calls"
        );
        assert!(
            chunks
                .iter()
                .all(|c| c.get("object").is_none_or(|o| o == "chat.completion.chunk"))
        );
    }

    #[tokio::test]
    async fn without_include_usage_a_chat_stream_reports_no_usage() {
        let llm = ScriptedLlm::start(vec![Step::text("hi")]).await;
        let body = json!({"model": "m", "stream": true});
        let raw = post_raw(&llm, "/chat/completions", body, Duration::from_secs(10)).await;
        let chunks = data_lines(&raw);
        assert!(chunks.iter().all(|c| c.get("usage").is_none()), "{raw}");
    }

    #[tokio::test]
    async fn a_stall_streams_its_text_then_holds_the_connection_open() {
        let llm = ScriptedLlm::start(vec![Step::stall("Half an ans")]).await;
        let body = json!({"model": "m", "stream": true});
        let raw = post_raw(&llm, "/v1/responses", body, Duration::from_millis(300)).await;
        let text: String = data_lines(&raw)
            .iter()
            .filter_map(|e| e["delta"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(text, "Half an ans");
        assert!(!raw.contains("response.completed"), "{raw}");
        assert!(!raw.ends_with("0\r\n\r\n"), "the body never ends: {raw}");
    }

    #[tokio::test]
    async fn the_pace_spaces_the_streamed_pieces() {
        let llm = ScriptedLlm::start(vec![Step::text("abcdefgh")]).await;
        llm.set_pace(Duration::from_millis(100));
        let started = std::time::Instant::now();
        let body = json!({"model": "m", "stream": true});
        post_raw(&llm, "/v1/chat/completions", body, Duration::from_secs(10)).await;
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "two pieces, 100 ms each"
        );
    }

    #[tokio::test]
    async fn a_failure_mid_stream_is_the_dialects_error_and_a_500_unstreamed() {
        let fail = || Step::FailMidStream {
            text: "So far".to_owned(),
            message: "overloaded".to_owned(),
        };
        let llm = ScriptedLlm::start(vec![fail(), fail(), fail()]).await;
        let streamed = json!({"model": "m", "stream": true});
        let raw = post_raw(
            &llm,
            "/v1/responses",
            streamed.clone(),
            Duration::from_secs(10),
        )
        .await;
        let last = data_lines(&raw).pop().unwrap();
        assert_eq!(last["type"], "response.failed");
        assert_eq!(last["response"]["error"]["message"], "overloaded");
        let raw = post_raw(&llm, "/chat/completions", streamed, Duration::from_secs(10)).await;
        let last = data_lines(&raw).pop().unwrap();
        assert_eq!(last["error"]["message"], "overloaded");
        let (status, body) = post(&llm, "/v1/responses", json!({"model": "m"})).await;
        assert_eq!(
            (status, &body["error"]["message"]),
            (500, &json!("overloaded"))
        );
    }

    #[tokio::test]
    async fn steps_are_answered_in_order_in_the_dialect_of_the_path() {
        let llm = ScriptedLlm::start(vec![
            Step::calls([("a", "{}"), ("b", "{\"x\":1}")]),
            Step::text("done"),
        ])
        .await;
        let (status, first) = post(&llm, "/v1/responses", json!({"model": "m"})).await;
        assert_eq!(status, 200);
        assert_eq!(first["output"][0]["type"], "function_call");
        assert_eq!(first["output"][0]["call_id"], "call_1");
        assert_eq!(first["output"][1]["call_id"], "call_2");
        assert_eq!(first["output"][1]["arguments"], "{\"x\":1}");
        assert_eq!(first["usage"]["total_tokens"], 120);
        let (_, second) = post(&llm, "/chat/completions", json!({"model": "m"})).await;
        assert_eq!(second["choices"][0]["message"]["content"], "done");
        assert_eq!(second["choices"][0]["finish_reason"], "stop");
        assert_eq!(second["usage"]["prompt_tokens"], 100);
        assert_eq!(llm.paths(), vec!["/v1/responses", "/chat/completions"]);
        assert_eq!(llm.requests().len(), 2);
    }

    #[tokio::test]
    async fn an_exhausted_script_answers_500_saying_so() {
        let llm = ScriptedLlm::start(vec![]).await;
        let (status, body) = post(&llm, "/v1/responses", json!({})).await;
        assert_eq!(status, 500);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("script exhausted")
        );
    }

    #[tokio::test]
    async fn endless_calls_never_run_out() {
        let llm = ScriptedLlm::endless_calls("loop", "{}").await;
        for _ in 0..3 {
            let (_, body) = post(&llm, "/v1/chat/completions", json!({})).await;
            assert_eq!(
                body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
                "loop"
            );
        }
    }
}
