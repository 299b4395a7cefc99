//! `ScriptedLlm`: an OpenAI-compatible HTTP server on 127.0.0.1 that answers from a script, in
//! whichever dialect it is asked in (Responses or Chat Completions), whole or streamed as
//! server-sent events when the request says `"stream": true`, and records every request (with
//! when it came, when its first text went out and when it was answered) so tests and the bench
//! can assert what the model was sent and subtract what it took. The one stand-in for an LLM:
//! Rust tests use it as a library, the Python and shell runners as `parley-llm-stub`.

mod script;

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

pub use script::{ScriptError, ScriptFile};

/// Token counts every answered request reports by default, in the dialect's own field names
/// (`input_tokens`/`output_tokens` or `prompt_tokens`/`completion_tokens`).
pub const USAGE_INPUT_TOKENS: u64 = 100;
pub const USAGE_OUTPUT_TOKENS: u64 = 20;
pub const USAGE_TOTAL_TOKENS: u64 = 120;

/// One planned answer.
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
    /// The inner step, answered after this delay (for timeouts, or a model that takes 1 s).
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

    /// The tool calls this step makes (through any delay).
    fn tool_calls(&self) -> &[(String, String)] {
        match self {
            Step::Calls(calls) | Step::TextAndCalls(_, calls) => calls,
            Step::Delay(_, inner) => inner.tool_calls(),
            _ => &[],
        }
    }
}

/// Picks the answer to a request from its body (the bench's model, which reads the user's
/// message and the tool's output).
pub type Respond = Arc<dyn Fn(&Value) -> Step + Send + Sync>;

/// Called with each request body before it is answered (`parley-llm-stub`'s request log).
pub type Observe = Arc<dyn Fn(&Value) + Send + Sync>;

/// Which step answers a request.
#[derive(Clone)]
pub enum Plan {
    /// Each request consumes the next step, in order, then 500 "script exhausted".
    InOrder(Vec<Step>),
    /// Every request gets this step (step-cap tests).
    Forever(Step),
    /// Per turn, as a model answers a conversation: step `k` answers a request whose current
    /// turn (the items after its last user message) holds `k` rounds of tool results, the last
    /// step every later round. A step calling a tool the request does not offer is passed over,
    /// as a model never calls one. Concurrent and repeated turns each get the whole script.
    PerTurn(Vec<Step>),
    /// Whatever the function answers for the request's body.
    Respond(Respond),
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Plan::InOrder(steps) => f.debug_tuple("InOrder").field(steps).finish(),
            Plan::Forever(step) => f.debug_tuple("Forever").field(step).finish(),
            Plan::PerTurn(steps) => f.debug_tuple("PerTurn").field(steps).finish(),
            Plan::Respond(_) => f.write_str("Respond(..)"),
        }
    }
}

/// How a streamed answer is cut into pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece {
    /// This many characters a piece, as a model streams tokens.
    Chars(usize),
    /// One word a piece, its trailing space included.
    Words,
}

/// How fast the model writes: one piece of text (and, with `arguments`, of a call's
/// arguments) every `every`, on a fixed schedule from the answer's start so timer slack does
/// not add up. An answer not streamed comes whole after the time its pieces would take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    pub every: Duration,
    pub piece: Piece,
    pub arguments: bool,
}

impl Default for Pace {
    /// All at once, in pieces of 4 characters.
    fn default() -> Pace {
        Pace {
            every: Duration::ZERO,
            piece: Piece::Chars(4),
            arguments: true,
        }
    }
}

/// The token counts each answer reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
}

impl Default for Usage {
    fn default() -> Usage {
        Usage {
            input: USAGE_INPUT_TOKENS,
            output: USAGE_OUTPUT_TOKENS,
        }
    }
}

/// One request the server received, and when it answered it.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The body (a body that is not JSON is recorded as a string).
    pub request: Value,
    /// e.g. `/v1/responses`.
    pub path: String,
    pub authorization: Option<String>,
    /// When the whole request had been read.
    pub received: Instant,
    times: Arc<Mutex<Times>>,
}

#[derive(Debug, Default)]
struct Times {
    first_text: Option<Instant>,
    answered: Option<Instant>,
}

impl Exchange {
    /// When the first piece of streamed text was handed to the connection.
    pub fn first_text(&self) -> Option<Instant> {
        lock(&self.times).first_text
    }

    /// When the answer was complete: the whole body built, or a stream's last event sent.
    /// `None` while it is under way, or for an answer that never ends.
    pub fn answered(&self) -> Option<Instant> {
        lock(&self.times).answered
    }

    /// What answering took, once it is done.
    pub fn took(&self) -> Option<Duration> {
        self.answered().map(|at| at.duration_since(self.received))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Responses,
    ChatCompletions,
}

/// How a streamed answer ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    Complete,
    Stall,
    Fail(String),
}

struct Script {
    plan: Plan,
    exchanges: Vec<Exchange>,
    observe: Option<Observe>,
    /// Responses answered, to number response ids.
    responses: u64,
    /// Tool calls made, to number call ids across the whole script.
    calls: u64,
    /// Number call ids from `call_0` in each response instead, as some OpenAI-compatible
    /// servers do, so the same id comes back in the next step.
    ids_per_response: bool,
    pace: Pace,
    usage: Usage,
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Script")
            .field("plan", &self.plan)
            .field("exchanges", &self.exchanges.len())
            .field("pace", &self.pace)
            .finish_non_exhaustive()
    }
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
        Self::serve(Plan::InOrder(steps), 0)
            .await
            .expect("binding the scripted LLM to 127.0.0.1:0")
    }

    /// [`Self::start`], numbering call ids from `call_0` in each response, as servers that
    /// number calls per response do: the same ids come back in every step.
    pub async fn numbering_calls_per_response(steps: Vec<Step>) -> ScriptedLlm {
        let llm = Self::start(steps).await;
        lock(&llm.script).ids_per_response = true;
        llm
    }

    /// Starts a server that answers every request with one call to `name` (step-cap tests).
    pub async fn endless_calls(name: &str, arguments: &str) -> ScriptedLlm {
        Self::serve(Plan::Forever(Step::call(name, arguments)), 0)
            .await
            .expect("binding the scripted LLM to 127.0.0.1:0")
    }

    /// Starts a server answering each turn with `steps` ([`Plan::PerTurn`]).
    pub async fn per_turn(steps: Vec<Step>) -> ScriptedLlm {
        Self::serve(Plan::PerTurn(steps), 0)
            .await
            .expect("binding the scripted LLM to 127.0.0.1:0")
    }

    /// Starts a server answering each request with `respond(body)`.
    pub async fn responding(
        respond: impl Fn(&Value) -> Step + Send + Sync + 'static,
    ) -> ScriptedLlm {
        Self::serve(Plan::Respond(Arc::new(respond)), 0)
            .await
            .expect("binding the scripted LLM to 127.0.0.1:0")
    }

    /// Serves `plan` on `127.0.0.1:port` (0: any free port). Must run inside a Tokio runtime,
    /// which then runs the server.
    pub async fn serve(plan: Plan, port: u16) -> std::io::Result<ScriptedLlm> {
        let script: Shared = Arc::new(Mutex::new(Script {
            plan,
            exchanges: Vec::new(),
            observe: None,
            responses: 0,
            calls: 0,
            ids_per_response: false,
            pace: Pace::default(),
            usage: Usage::default(),
        }));
        let router = Router::new()
            .route("/responses", post(answer))
            .route("/v1/responses", post(answer))
            .route("/chat/completions", post(answer))
            .route("/v1/chat/completions", post(answer))
            // A real model takes a long history; axum's 2 MB default refused a turn that had
            // sent a 10 MB tool call (tests/page's show_chart size refusal) with a 413.
            .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        // Without TCP_NODELAY each small event waits for the ACK of the one before (Nagle,
        // about 40 ms on Linux): time the model did not take, which the bench would count.
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                eprintln!("scripted LLM stopped: {e}");
            }
        });
        Ok(ScriptedLlm { addr, script, task })
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
        self.lock()
            .exchanges
            .iter()
            .map(|e| e.request.clone())
            .collect()
    }

    /// Request paths received, in order (e.g. `/v1/responses`).
    pub fn paths(&self) -> Vec<String> {
        self.lock()
            .exchanges
            .iter()
            .map(|e| e.path.clone())
            .collect()
    }

    /// The `Authorization` header of each request, in order.
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.lock()
            .exchanges
            .iter()
            .map(|e| e.authorization.clone())
            .collect()
    }

    /// The requests received since the last call, with their times, and forgets them (a
    /// bench's thousands of turns are not kept).
    pub fn take_exchanges(&self) -> Vec<Exchange> {
        std::mem::take(&mut self.lock().exchanges)
    }

    /// Appends a step to an in-order script.
    ///
    /// # Panics
    /// When the plan is not [`Plan::InOrder`].
    pub fn push(&self, step: Step) {
        match &mut self.lock().plan {
            Plan::InOrder(steps) => steps.push(step),
            other => panic!("push onto a {other:?} plan"),
        }
    }

    /// Steps of an in-order script not answered yet (0 for other plans).
    pub fn remaining(&self) -> usize {
        match &self.lock().plan {
            Plan::InOrder(steps) => steps.len(),
            _ => 0,
        }
    }

    /// Sets the wait before each streamed piece (4 characters) of text or of a call's
    /// arguments, as a model writing at a fixed rate; zero (the default) sends them at once.
    pub fn set_pace(&self, every: Duration) {
        self.set_pacing(Pace {
            every,
            ..Pace::default()
        });
    }

    /// Sets how fast, and in what pieces, the model writes.
    pub fn set_pacing(&self, pace: Pace) {
        self.lock().pace = pace;
    }

    /// Sets the token counts each answer reports.
    pub fn set_usage(&self, usage: Usage) {
        self.lock().usage = usage;
    }

    /// Calls `observe` with each request body before answering it.
    pub fn observe(&self, observe: impl Fn(&Value) + Send + Sync + 'static) {
        self.lock().observe = Some(Arc::new(observe));
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
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The step of a [`Plan::PerTurn`] script that answers `request`.
fn turn_step(steps: &[Step], request: &Value) -> Option<Step> {
    let last = steps.len().checked_sub(1)?;
    let offered = offered_tools(request);
    let mut k = tool_rounds(request).min(last);
    while k < last
        && steps[k]
            .tool_calls()
            .iter()
            .any(|(name, _)| !offered.contains(name.as_str()))
    {
        k += 1;
    }
    Some(steps[k].clone())
}

/// Rounds of tool results in the request's current turn: runs of `function_call_output`
/// items (Responses) or `tool` messages (Chat Completions) after its last user message.
fn tool_rounds(request: &Value) -> usize {
    let items = request
        .get("input")
        .or_else(|| request.get("messages"))
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let turn_start = items
        .iter()
        .rposition(|item| item["role"] == "user")
        .map_or(0, |i| i + 1);
    let is_result = |item: &Value| item["type"] == "function_call_output" || item["role"] == "tool";
    let mut rounds = 0;
    let mut in_run = false;
    for item in &items[turn_start..] {
        let result = is_result(item);
        if result && !in_run {
            rounds += 1;
        }
        in_run = result;
    }
    rounds
}

/// The names of the tools a request offers, in either dialect's shape.
fn offered_tools(request: &Value) -> HashSet<&str> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t["name"]
                .as_str()
                .or_else(|| t["function"]["name"].as_str())
        })
        .collect()
}

async fn answer(
    State(script): State<Shared>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = Instant::now();
    let path = uri.path().to_owned();
    let dialect = if path.ends_with("/chat/completions") {
        Dialect::ChatCompletions
    } else {
        Dialect::Responses
    };
    let parsed = serde_json::from_slice::<Value>(&body);
    let times = Arc::new(Mutex::new(Times::default()));
    let (plan, observe) = {
        let mut s = lock(&script);
        s.exchanges.push(Exchange {
            request: match &parsed {
                Ok(v) => v.clone(),
                Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()),
            },
            path,
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            received,
            times: times.clone(),
        });
        if parsed.is_err() {
            // What the real APIs do; the script is not consumed by a request it cannot answer.
            return error_response(400, "scripted LLM: the request body is not JSON");
        }
        // An in-order script is consumed here, under the lock, so concurrent requests each
        // get their own step; the other plans are read without it.
        let plan = match &mut s.plan {
            Plan::InOrder(steps) if steps.is_empty() => None,
            Plan::InOrder(steps) => Some(Ok(steps.remove(0))),
            other => Some(Err(other.clone())),
        };
        (plan, s.observe.clone())
    };
    let request = parsed.unwrap_or_default();
    if let Some(observe) = observe {
        observe(&request);
    }
    let step = match plan {
        Some(Ok(step)) => Some(step),
        Some(Err(Plan::Forever(step))) => Some(step),
        Some(Err(Plan::PerTurn(steps))) => turn_step(&steps, &request),
        Some(Err(Plan::Respond(respond))) => Some(respond(&request)),
        Some(Err(Plan::InOrder(_))) | None => None,
    };
    let Some(step) = step else {
        return error_response(500, "scripted LLM: script exhausted");
    };
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
            } => {
                lock(&times).answered = Some(Instant::now());
                return status_response(status, retry_after, body);
            }
        }
    };
    if !streamed {
        match &ending {
            Ending::Complete => {}
            Ending::Stall => return std::future::pending().await,
            Ending::Fail(message) => {
                lock(&times).answered = Some(Instant::now());
                return error_response(500, message);
            }
        }
    }
    let (n, calls, pace, usage) = {
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
        (n, calls, s.pace, s.usage)
    };
    let answer = Answer {
        n,
        model: &model,
        text: text.as_deref(),
        calls: &calls,
        pace,
        usage,
    };
    if !streamed {
        let body = match dialect {
            Dialect::Responses => responses_body(&answer),
            Dialect::ChatCompletions => chat_completions_body(&answer),
        };
        // A model takes as long to write an answer it does not stream.
        let paced = answer.paced_pieces() as u32;
        if paced > 0 && !pace.every.is_zero() {
            tokio::time::sleep(pace.every * paced).await;
        }
        lock(&times).answered = Some(Instant::now());
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
    event_stream(frames, pace.every, ending == Ending::Stall, times)
}

/// What one answered request says, before it is put in a dialect's shape.
struct Answer<'a> {
    /// The response's number, for its ids.
    n: u64,
    model: &'a str,
    text: Option<&'a str>,
    /// `(call id, name, arguments)`.
    calls: &'a [(String, String, String)],
    pace: Pace,
    usage: Usage,
}

impl Answer<'_> {
    /// Text cut into the pieces the pace writes.
    fn pieces(&self, text: &str) -> Vec<String> {
        match self.pace.piece {
            Piece::Words => text.split_inclusive(' ').map(str::to_owned).collect(),
            Piece::Chars(n) => {
                let chars: Vec<char> = text.chars().collect();
                chars
                    .chunks(n.max(1))
                    .map(|piece| piece.iter().collect())
                    .collect()
            }
        }
    }

    /// A call's arguments in pieces: the pace's when it applies to them, else whole.
    fn argument_pieces(&self, arguments: &str) -> Vec<String> {
        if self.pace.arguments {
            self.pieces(arguments)
        } else {
            vec![arguments.to_owned()]
        }
    }

    /// How a stream sends a call's arguments: at the pace, or at once.
    fn argument_kind(&self) -> Kind {
        if self.pace.arguments {
            Kind::Arguments
        } else {
            Kind::Meta
        }
    }

    /// Pieces written at the pace, as a stream would send them.
    fn paced_pieces(&self) -> usize {
        let text = self.text.map_or(0, |t| self.pieces(t).len());
        let arguments = if self.pace.arguments {
            self.calls
                .iter()
                .map(|(_, _, a)| self.pieces(a).len())
                .sum()
        } else {
            0
        };
        text + arguments
    }
}

/// What a server-sent event carries, for when it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Sent at once.
    Meta,
    /// A text delta: paced, and the first one's time is recorded.
    Text,
    /// A call's arguments delta: paced when the pace covers arguments.
    Arguments,
}

/// One server-sent event.
struct Frame {
    kind: Kind,
    bytes: Bytes,
}

/// A `text/event-stream` response sending `frames` in order, each paced one at its place on
/// a schedule of one every `every` from the start, then ending (and recording when), or with
/// `stall` never ending (until the client goes away).
fn event_stream(
    frames: Vec<Frame>,
    every: Duration,
    stall: bool,
    times: Arc<Mutex<Times>>,
) -> Response {
    let frames: VecDeque<Frame> = frames.into();
    let start = tokio::time::Instant::now();
    let state = (frames, 0u32, times);
    let stream =
        futures_util::stream::unfold(state, move |(mut frames, mut paced, times)| async move {
            match frames.pop_front() {
                Some(frame) => {
                    if frame.kind != Kind::Meta && !every.is_zero() {
                        paced += 1;
                        tokio::time::sleep_until(start + every * paced).await;
                    }
                    {
                        let mut t = lock(&times);
                        if frame.kind == Kind::Text && t.first_text.is_none() {
                            t.first_text = Some(Instant::now());
                        }
                        if frames.is_empty() && !stall {
                            t.answered = Some(Instant::now());
                        }
                    }
                    Some((Ok::<_, Infallible>(frame.bytes), (frames, paced, times)))
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

/// The Responses API's named events, numbered by `sequence_number` as OpenAI numbers them.
#[derive(Default)]
struct Events {
    frames: Vec<Frame>,
    sequence: u64,
}

impl Events {
    fn push(&mut self, kind: Kind, name: &str, mut data: Value) {
        data["type"] = json!(name);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.frames.push(Frame {
            kind,
            bytes: Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
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
    events.push(Kind::Meta, "response.created", json!({"response": opening}));
    events.push(
        Kind::Meta,
        "response.in_progress",
        json!({"response": opening}),
    );
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
            Kind::Meta,
            "response.output_item.added",
            json!({"output_index": output_index, "item": {
                "id": item_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"
            }}),
        );
        events.push(
            Kind::Meta,
            "response.content_part.added",
            with(json!({"part": part("")})),
        );
        for piece in answer.pieces(text) {
            let delta = with(json!({"delta": piece, "logprobs": []}));
            events.push(Kind::Text, "response.output_text.delta", delta);
        }
        match ending {
            Ending::Complete => {}
            Ending::Stall => return events.frames,
            Ending::Fail(message) => {
                let mut failed = opening.clone();
                failed["status"] = json!("failed");
                failed["error"] = json!({"code": "server_error", "message": message});
                events.push(Kind::Meta, "response.failed", json!({"response": failed}));
                return events.frames;
            }
        }
        let done = with(json!({"text": text, "logprobs": []}));
        events.push(Kind::Meta, "response.output_text.done", done);
        events.push(
            Kind::Meta,
            "response.content_part.done",
            with(json!({"part": part(text)})),
        );
        let item = whole["output"][output_index].clone();
        events.push(
            Kind::Meta,
            "response.output_item.done",
            json!({"output_index": output_index, "item": item}),
        );
        output_index += 1;
    }
    for (call_id, name, arguments) in answer.calls {
        let item = whole["output"][output_index].clone();
        let item_id = item["id"].clone();
        events.push(
            Kind::Meta,
            "response.output_item.added",
            json!({"output_index": output_index, "item": {
                "id": item_id, "type": "function_call", "status": "in_progress",
                "arguments": "", "call_id": call_id, "name": name
            }}),
        );
        for piece in answer.argument_pieces(arguments) {
            events.push(
                answer.argument_kind(),
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": output_index, "delta": piece}),
            );
        }
        events.push(
            Kind::Meta,
            "response.function_call_arguments.done",
            json!({"item_id": item_id, "output_index": output_index, "arguments": arguments}),
        );
        events.push(
            Kind::Meta,
            "response.output_item.done",
            json!({"output_index": output_index, "item": item}),
        );
        output_index += 1;
    }
    events.push(Kind::Meta, "response.completed", json!({"response": whole}));
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
    let mut push = |kind: Kind, data: Value| {
        frames.push(Frame {
            kind,
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
        Kind::Meta,
        chunk(
            json!({"role": "assistant", "content": content, "refusal": null}),
            None,
        ),
    );
    for piece in answer.pieces(answer.text.unwrap_or_default()) {
        push(Kind::Text, chunk(json!({"content": piece}), None));
    }
    match ending {
        Ending::Complete => {}
        Ending::Stall => return frames,
        Ending::Fail(message) => {
            push(
                Kind::Meta,
                json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
            );
            return frames;
        }
    }
    for (index, (call_id, name, arguments)) in answer.calls.iter().enumerate() {
        push(
            Kind::Meta,
            chunk(
                json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                None,
            ),
        );
        for piece in answer.argument_pieces(arguments) {
            push(
                answer.argument_kind(),
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
    push(Kind::Meta, chunk(json!({}), Some(finish_reason)));
    if include_usage {
        let mut last = base.clone();
        last["choices"] = json!([]);
        last["usage"] = json!({
            "prompt_tokens": answer.usage.input,
            "completion_tokens": answer.usage.output,
            "total_tokens": answer.usage.input + answer.usage.output,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        });
        push(Kind::Meta, last);
    }
    frames.push(Frame {
        kind: Kind::Meta,
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
        usage,
        ..
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
            "input_tokens": usage.input,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage.output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.input + usage.output
        }
    })
}

/// A Chat Completions body as OpenAI sends it (`object: "chat.completion"`, one choice).
fn chat_completions_body(answer: &Answer<'_>) -> Value {
    let (n, text, calls, usage) = (answer.n, answer.text, answer.calls, answer.usage);
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
        "model": answer.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": usage.input,
            "completion_tokens": usage.output,
            "total_tokens": usage.input + usage.output
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

    fn turn(items: Value) -> Value {
        json!({"model": "m", "tools": [{"type": "function", "name": "look"}], "input": items})
    }

    #[tokio::test]
    async fn a_per_turn_script_answers_by_the_rounds_of_tool_results_in_the_current_turn() {
        let llm = ScriptedLlm::per_turn(vec![Step::call("look", "{}"), Step::text("found")]).await;
        let user = |text: &str| json!({"role": "user", "content": text});
        let call =
            json!({"type": "function_call", "call_id": "c", "name": "look", "arguments": "{}"});
        let output = json!({"type": "function_call_output", "call_id": "c", "output": "[]"});
        let said = json!({"type": "message", "role": "assistant", "content": "found"});
        let (_, first) = post(&llm, "/v1/responses", turn(json!([user("a")]))).await;
        assert_eq!(first["output"][0]["name"], "look");
        let done = json!([user("a"), call, output]);
        let (_, second) = post(&llm, "/v1/responses", turn(done)).await;
        assert_eq!(second["output"][0]["content"][0]["text"], "found");
        let next_turn = json!([user("a"), call, output, said, user("b")]);
        let (_, third) = post(&llm, "/v1/responses", turn(next_turn)).await;
        assert_eq!(
            third["output"][0]["name"], "look",
            "a new turn starts the script again"
        );
        let chat = json!({"model": "m", "tools": [{"type": "function", "function": {"name": "look"}}],
            "messages": [{"role": "user", "content": "a"},
                {"role": "assistant", "tool_calls": [{"id": "c"}]},
                {"role": "tool", "tool_call_id": "c", "content": "[]"}]});
        let (_, fourth) = post(&llm, "/v1/chat/completions", chat).await;
        assert_eq!(fourth["choices"][0]["message"]["content"], "found");
    }

    #[tokio::test]
    async fn a_per_turn_script_passes_over_calls_to_tools_the_request_does_not_offer() {
        let llm =
            ScriptedLlm::per_turn(vec![Step::call("look", "{}"), Step::text("no tools")]).await;
        let request = json!({"model": "m", "input": [{"role": "user", "content": "a"}]});
        let (_, answer) = post(&llm, "/v1/responses", request).await;
        assert_eq!(answer["output"][0]["content"][0]["text"], "no tools");
    }

    #[tokio::test]
    async fn a_responder_answers_from_the_request_and_usage_is_what_was_set() {
        let llm = ScriptedLlm::responding(|request| {
            Step::text(format!("you said {}", request["input"][0]["content"]))
        })
        .await;
        llm.set_usage(Usage {
            input: 1200,
            output: 80,
        });
        let (_, answer) = post(
            &llm,
            "/v1/responses",
            turn(json!([{"role": "user", "content": "hi"}])),
        )
        .await;
        assert_eq!(answer["output"][0]["content"][0]["text"], "you said \"hi\"");
        assert_eq!(
            (
                &answer["usage"]["input_tokens"],
                &answer["usage"]["total_tokens"]
            ),
            (&json!(1200), &json!(1280))
        );
    }

    #[tokio::test]
    async fn exchanges_record_when_the_first_word_went_out_and_when_the_answer_ended() {
        let llm = ScriptedLlm::start(vec![
            Step::text("one two three"),
            Step::text("one two three"),
        ])
        .await;
        llm.set_pacing(Pace {
            every: Duration::from_millis(60),
            piece: Piece::Words,
            arguments: false,
        });
        let streamed = json!({"model": "m", "stream": true});
        let raw = post_raw(&llm, "/v1/responses", streamed, Duration::from_secs(10)).await;
        let words: Vec<String> = data_lines(&raw)
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| e["delta"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(words, ["one ", "two ", "three"]);
        post(&llm, "/v1/responses", json!({"model": "m"})).await;
        let exchanges = llm.take_exchanges();
        assert_eq!(exchanges.len(), 2);
        let first_word = exchanges[0]
            .first_text()
            .unwrap()
            .duration_since(exchanges[0].received);
        assert!(
            first_word >= Duration::from_millis(60) && first_word < Duration::from_millis(120),
            "the first word goes out one interval in: {first_word:?}"
        );
        for exchange in &exchanges {
            let took = exchange.took().unwrap();
            assert!(
                took >= Duration::from_millis(180),
                "three words, 60 ms each: {took:?}"
            );
        }
        assert_eq!(exchanges[1].first_text(), None, "an answer not streamed");
        assert!(llm.take_exchanges().is_empty(), "taken once");
    }
}
