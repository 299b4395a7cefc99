//! `ScriptedLlm`: an OpenAI-compatible HTTP server on 127.0.0.1 that replays planned answers in
//! order, in whichever dialect it is asked in (Responses or Chat Completions), and records every
//! request so tests can assert what the model was sent. The one stand-in for an LLM in tests.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
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
    let model = parsed
        .ok()
        .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "scripted".to_owned());

    let mut step = step;
    let (text, calls) = loop {
        match step {
            Step::Delay(delay, inner) => {
                tokio::time::sleep(delay).await;
                step = *inner;
            }
            Step::Text(text) => break (Some(text), Vec::new()),
            Step::Calls(calls) => break (None, calls),
            Step::TextAndCalls(text, calls) => break (Some(text), calls),
            Step::Status {
                status,
                retry_after,
                body,
            } => return status_response(status, retry_after, body),
        }
    };
    let (n, calls) = {
        let mut s = lock(&script);
        s.responses += 1;
        let n = s.responses;
        let calls: Vec<(String, String, String)> = calls
            .into_iter()
            .map(|(name, args)| {
                s.calls += 1;
                (format!("call_{}", s.calls), name, args)
            })
            .collect();
        (n, calls)
    };
    let body = match dialect {
        Dialect::Responses => responses_body(n, &model, text, &calls),
        Dialect::ChatCompletions => chat_completions_body(n, &model, text, &calls),
    };
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// A Responses API body as OpenAI sends it (`object: "response"`, `output` items).
fn responses_body(
    n: u64,
    model: &str,
    text: Option<String>,
    calls: &[(String, String, String)],
) -> Value {
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
fn chat_completions_body(
    n: u64,
    model: &str,
    text: Option<String>,
    calls: &[(String, String, String)],
) -> Value {
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
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        let status = raw[9..12].parse().unwrap();
        let (_, payload) = raw.split_once("\r\n\r\n").unwrap();
        (status, serde_json::from_str(payload).unwrap_or(Value::Null))
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
