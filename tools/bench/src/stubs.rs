//! What `parley-bench chat` puts around the chat function: an LLM that answers instantly and a
//! counting proxy in front of the mcp function. Both time what they do (in µs, from the moment
//! their handler has the whole request to the moment the answer is ready), so the bench can
//! subtract the model's and the tools' time from a turn and keep the chat function's own.
//!
//! They run on their own runtime thread, so the bench's client never delays their answers, and
//! measure into a shared [`Meter`] that the bench reads and resets around each turn.
//!
//! For the streamed turns the LLM can also write like a model: a reply of [`Pace`]'s words,
//! one every interval, streamed as Responses API events when the request says `stream: true`
//! (and, not streamed, sent whole after the same time). It notes when it sent the first word,
//! so the bench can tell how long the chat took to pass it on.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use serde_json::{Value, json};

/// The tool every turn calls.
pub const TOOL: &str = "lad_by_ref";

/// What the LLM and the tools did since the last [`Meter::take`].
#[derive(Debug, Default, Clone)]
pub struct Window {
    pub llm_requests: u32,
    pub llm: Duration,
    pub mcp_requests: u32,
    pub mcp: Duration,
    /// `METHOD jsonrpc-method` of each request that reached the mcp function, in order.
    pub mcp_kinds: Vec<String>,
    /// Answers the LLM could not give (a request it did not expect); any fails the run.
    pub llm_errors: Vec<String>,
    /// When the LLM handed the first word of a streamed reply to its connection.
    pub first_word: Option<Instant>,
}

/// How the LLM writes its text replies: `words` words after the sentence (0: the sentence
/// alone), one every `interval`.
#[derive(Debug, Default)]
pub struct Pace {
    words: AtomicUsize,
    interval_us: AtomicU64,
}

impl Pace {
    pub fn set(&self, words: usize, interval: Duration) {
        self.words.store(words, Ordering::Relaxed);
        self.interval_us
            .store(interval.as_micros() as u64, Ordering::Relaxed);
    }

    fn get(&self) -> (usize, Duration) {
        (
            self.words.load(Ordering::Relaxed),
            Duration::from_micros(self.interval_us.load(Ordering::Relaxed)),
        )
    }
}

#[derive(Debug, Default)]
pub struct Meter {
    window: Mutex<Window>,
}

impl Meter {
    /// Everything recorded since the last call, and a fresh window.
    pub fn take(&self) -> Window {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running stubs. Their thread ends with the process.
pub struct Stubs {
    pub meter: Arc<Meter>,
    pub pace: Arc<Pace>,
    /// `LLM_BASE_URL` for the chat function.
    pub llm_base: String,
    /// `MCP_URL` for the chat function: the proxy's `/mcp`.
    pub mcp_url: String,
}

impl Stubs {
    /// Starts the LLM and a proxy to `mcp_base` (e.g. `http://127.0.0.1:PORT`).
    pub fn start(mcp_base: &str) -> anyhow::Result<Self> {
        let meter = Arc::new(Meter::default());
        let pace = Arc::new(Pace::default());
        let llm_pace = pace.clone();
        let llm_listener = listener()?;
        let proxy_listener = listener()?;
        let llm_addr = llm_listener.local_addr()?;
        let proxy_addr = proxy_listener.local_addr()?;
        let upstream = mcp_base.trim_end_matches('/').to_owned();
        let (llm_meter, proxy_meter) = (meter.clone(), meter.clone());
        // Two workers: the proxy and the LLM answer at once when turns run concurrently.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bench-stubs")
            .enable_all()
            .build()
            .context("starting the stubs' runtime")?;
        std::thread::Builder::new()
            .name("bench-stubs".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let llm = Router::new()
                        .route("/v1/responses", post(respond))
                        .with_state(Arc::new(Llm {
                            meter: llm_meter,
                            pace: llm_pace,
                            responses: AtomicU64::new(0),
                        }));
                    let http = reqwest::Client::builder()
                        .tcp_nodelay(true)
                        .build()
                        .expect("the proxy's HTTP client");
                    let proxy = Router::new().fallback(forward).with_state(Arc::new(Proxy {
                        meter: proxy_meter,
                        http,
                        upstream,
                    }));
                    let serve = |listener: TcpListener, router: Router| async move {
                        // Without TCP_NODELAY each small SSE event would wait for the
                        // previous one's ACK (Nagle), tens of ms the chat did not cause.
                        let listener = tokio::net::TcpListener::from_std(listener)
                            .expect("registering a stub's listener")
                            .tap_io(|tcp| {
                                let _ = tcp.set_nodelay(true);
                            });
                        if let Err(e) = axum::serve(listener, router).await {
                            eprintln!("error: a bench stub stopped: {e}");
                        }
                    };
                    tokio::join!(serve(llm_listener, llm), serve(proxy_listener, proxy));
                });
            })
            .context("starting the stubs' thread")?;
        Ok(Self {
            meter,
            pace,
            llm_base: format!("http://{llm_addr}/v1"),
            mcp_url: format!("http://{proxy_addr}/mcp"),
        })
    }
}

fn listener() -> anyhow::Result<TcpListener> {
    let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .context("binding a stub to loopback")?;
    l.set_nonblocking(true)?;
    Ok(l)
}

struct Llm {
    meter: Arc<Meter>,
    pace: Arc<Pace>,
    /// Numbers response and call ids, so they never repeat within a conversation.
    responses: AtomicU64,
}

/// The model, in the Responses API: a request whose last input item is the user's message gets
/// one `lad_by_ref` call for the district the message names (after `district: `); a request
/// whose last item is that call's output gets a one-sentence reply quoting the result. Anything
/// else is an error, recorded so the bench fails loudly.
async fn respond(State(llm): State<Arc<Llm>>, body: Bytes) -> Response {
    let started = Instant::now();
    let n = llm.responses.fetch_add(1, Ordering::Relaxed) + 1;
    let (words, interval) = llm.pace.get();
    let request =
        serde_json::from_slice::<Value>(&body).map_err(|e| format!("the body is not JSON: {e}"));
    let streamed = request.as_ref().is_ok_and(|r| r["stream"] == true);
    let answer = match request.and_then(|r| answer(&r, n, words)) {
        Ok(answer) if streamed => return stream(llm.clone(), answer, interval, started),
        other => other,
    };
    if let Ok(answer) = &answer
        && let Some(text) = reply_text(answer)
    {
        // A model takes as long to write a reply it does not stream.
        tokio::time::sleep(interval * text.split(' ').count() as u32).await;
    }
    let response = match &answer {
        Ok(v) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            serde_json::to_vec(v).unwrap_or_default(),
        )
            .into_response(),
        Err(problem) => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": problem, "type": "invalid_request_error"}})),
        )
            .into_response(),
    };
    let elapsed = started.elapsed();
    let mut w = llm.meter.lock();
    w.llm_requests += 1;
    w.llm += elapsed;
    if let Err(problem) = answer {
        w.llm_errors.push(problem);
    }
    response
}

/// The text of a reply (`None` for a tool call).
fn reply_text(answer: &Value) -> Option<&str> {
    answer["output"][0]["content"][0]["text"].as_str()
}

/// `answer` as the Responses API streams it: the text word by word, one every `interval`, then
/// `response.completed` with the whole response. The LLM's time is counted to the last event.
fn stream(llm: Arc<Llm>, answer: Value, interval: Duration, started: Instant) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let event = |v: Value| {
            Bytes::from(format!(
                "event: {}\ndata: {v}\n\n",
                v["type"].as_str().unwrap_or("")
            ))
        };
        let mut created = answer.clone();
        created["status"] = json!("in_progress");
        created["output"] = json!([]);
        let _ = tx
            .send(event(
                json!({"type": "response.created", "response": created}),
            ))
            .await;
        if let Some(text) = reply_text(&answer) {
            let item = &answer["output"][0];
            let _ = tx
                .send(event(
                    json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "message", "id": item["id"], "status": "in_progress",
                             "role": "assistant", "content": []}}),
                ))
                .await;
            // On a fixed schedule, so the timer's granularity does not add up word by word.
            let writing = tokio::time::Instant::now();
            for (i, word) in text.split_inclusive(' ').enumerate() {
                tokio::time::sleep_until(writing + interval * (i as u32 + 1)).await;
                let sent = tx
                    .send(event(json!({"type": "response.output_text.delta",
                        "item_id": item["id"], "output_index": 0, "content_index": 0,
                        "delta": word})))
                    .await;
                if i == 0 {
                    llm.meter.lock().first_word = Some(Instant::now());
                }
                if sent.is_err() {
                    return;
                }
            }
            let _ = tx
                .send(event(
                    json!({"type": "response.output_item.done", "output_index": 0,
                    "item": item}),
                ))
                .await;
        } else {
            for (i, item) in answer["output"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let _ = tx
                    .send(event(json!({"type": "response.output_item.done",
                        "output_index": i, "item": item})))
                    .await;
            }
        }
        let _ = tx
            .send(event(
                json!({"type": "response.completed", "response": answer}),
            ))
            .await;
        let mut w = llm.meter.lock();
        w.llm_requests += 1;
        w.llm += started.elapsed();
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), rx))
    });
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        )],
        Body::from_stream(body),
    )
        .into_response()
}

fn answer(request: &Value, n: u64, words: usize) -> Result<Value, String> {
    let offered = request["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["name"] == TOOL));
    if !offered {
        return Err(format!("the request offers no `{TOOL}` tool"));
    }
    let input = request["input"].as_array().ok_or("no `input` array")?;
    let last = input.last().ok_or("`input` is empty")?;
    let output = if last["type"] == "function_call_output" {
        let result: Value = last["output"]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok())
            .ok_or_else(|| format!("the tool output is not JSON: {}", last["output"]))?;
        let row = &result["rows"][0];
        let (name, feedback) = (&row["name"], &row["feedback"]);
        if !name.is_string() {
            return Err(format!("the tool output has no district: {result}"));
        }
        let mut text = format!(
            "{} has {} feedback items, {} of them open, with an average rating of {}.",
            name.as_str().unwrap_or_default(),
            feedback["total"],
            feedback["open"],
            feedback["average_rating"]
        );
        for i in 0..words {
            text.push_str(if i % 2 == 0 { " more" } else { " words" });
        }
        json!([{
            "type": "message",
            "id": format!("msg_{n}"),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}]
        }])
    } else if last["role"] == "user" {
        let message = last["content"]
            .as_str()
            .ok_or("the user message is not text")?;
        let district = message
            .split_once("district: ")
            .map(|(_, rest)| rest.split_once('?').map_or(rest, |(d, _)| d))
            .ok_or_else(|| format!("the message names no district: {message}"))?;
        json!([{
            "type": "function_call",
            "id": format!("fc_{n}"),
            "call_id": format!("call_{n}"),
            "name": TOOL,
            "arguments": json!({"ref": district}).to_string(),
            "status": "completed"
        }])
    } else {
        return Err(format!("unexpected last input item: {last}"));
    };
    Ok(json!({
        "id": format!("resp_{n}"),
        "object": "response",
        "status": "completed",
        "model": request["model"],
        "output": output,
        "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
    }))
}

struct Proxy {
    meter: Arc<Meter>,
    http: reqwest::Client,
    upstream: String,
}

/// Forwards any request to the mcp function unchanged (minus hop-by-hop headers), buffering
/// both bodies (the mcp function answers JSON, never a stream), and counts it.
async fn forward(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let rpc_method = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "-".to_owned());
    let kind = format!("{} {rpc_method}", parts.method);
    let mut headers = parts.headers;
    for h in [
        header::HOST,
        header::CONNECTION,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
    ] {
        headers.remove(h);
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let sent = proxy
        .http
        .request(parts.method, format!("{}{path}", proxy.upstream))
        .headers(headers)
        .body(body)
        .send()
        .await;
    let response = match sent {
        Ok(r) => {
            let status = r.status();
            let mut headers = r.headers().clone();
            match r.bytes().await {
                Ok(bytes) => {
                    for h in [
                        header::CONNECTION,
                        header::CONTENT_LENGTH,
                        header::TRANSFER_ENCODING,
                    ] {
                        headers.remove(h);
                    }
                    let mut response = Response::new(Body::from(bytes));
                    *response.status_mut() = status;
                    *response.headers_mut() = headers;
                    response
                }
                Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
            }
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let elapsed = started.elapsed();
    let mut w = proxy.meter.lock();
    w.mcp_requests += 1;
    w.mcp += elapsed;
    w.mcp_kinds.push(kind);
    response
}
