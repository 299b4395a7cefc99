//! What `parley-bench chat` puts around the chat function: the testkit's scripted LLM,
//! answering as a model that calls [`TOOL`] for the district a message names and then quotes
//! its result, and a counting proxy in front of the mcp function. Both time what they do (in
//! µs, from the moment the whole request is in to the moment the answer is complete), so the
//! bench can subtract the model's and the tools' time from a turn and keep the chat function's.
//!
//! They run on their own runtime thread, so the bench's client never delays their answers.
//! For the streamed turns the model can also write like one: a reply of [`Stubs::set_pace`]'s
//! words, one every interval (not streamed, sent whole after the same time); the LLM notes
//! when it sent the first word, so the bench can tell how long the chat took to pass it on.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use parley_testkit::llm::{Pace, Piece, Plan, ScriptedLlm, Step};
use serde_json::{Value, json};

/// The tool every turn calls.
pub const TOOL: &str = "lad_by_ref";

/// What the LLM and the tools did since the last [`Stubs::take`].
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

/// What the proxy counted and the model could not answer, since the last take.
#[derive(Debug, Default)]
struct Meter {
    window: Mutex<Window>,
}

impl Meter {
    fn lock(&self) -> MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running stubs. Their thread ends with the process.
pub struct Stubs {
    llm: ScriptedLlm,
    meter: Arc<Meter>,
    /// Milliseconds the model takes for each answer (0: at once).
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
    /// Words the model writes after its sentence.
    words: Arc<AtomicUsize>,
    /// `LLM_BASE_URL` for the chat function.
    pub llm_base: String,
    /// `MCP_URL` for the chat function: the proxy's `/mcp`.
    pub mcp_url: String,
}

impl Stubs {
    /// Starts the LLM and a proxy to `mcp_base` (e.g. `http://127.0.0.1:PORT`).
    pub fn start(mcp_base: &str) -> anyhow::Result<Self> {
        let meter = Arc::new(Meter::default());
        let words = Arc::new(AtomicUsize::new(0));
        let delay_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let model_delay = delay_ms.clone();
        let proxy_listener = listener()?;
        let proxy_addr = proxy_listener.local_addr()?;
        let upstream = mcp_base.trim_end_matches('/').to_owned();
        let (model_meter, proxy_meter, model_words) = (meter.clone(), meter.clone(), words.clone());
        let respond = move |request: &Value| {
            let step = match answer(request, model_words.load(Ordering::Relaxed)) {
                Ok(step) => step,
                Err(problem) => {
                    model_meter.lock().llm_errors.push(problem.clone());
                    return Step::error(400, problem);
                }
            };
            match model_delay.load(Ordering::Relaxed) {
                0 => step,
                ms => Step::delayed(Duration::from_millis(ms), step),
            }
        };
        // Two workers: the proxy and the LLM answer at once when turns run concurrently.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bench-stubs")
            .enable_all()
            .build()
            .context("starting the stubs' runtime")?;
        let (started, llm) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("bench-stubs".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let _ =
                        started.send(ScriptedLlm::serve(Plan::Respond(Arc::new(respond)), 0).await);
                    let http = reqwest::Client::builder()
                        .tcp_nodelay(true)
                        .build()
                        .expect("the proxy's HTTP client");
                    let proxy = Router::new().fallback(forward).with_state(Arc::new(Proxy {
                        meter: proxy_meter,
                        http,
                        upstream,
                    }));
                    // Without TCP_NODELAY each small answer would wait for the previous
                    // one's ACK (Nagle), tens of ms the chat did not cause.
                    let listener = tokio::net::TcpListener::from_std(proxy_listener)
                        .expect("registering the proxy's listener")
                        .tap_io(|tcp| {
                            let _ = tcp.set_nodelay(true);
                        });
                    if let Err(e) = axum::serve(listener, proxy).await {
                        eprintln!("error: the bench's mcp proxy stopped: {e}");
                    }
                });
            })
            .context("starting the stubs' thread")?;
        let llm = llm
            .recv()
            .context("the stubs' thread ended before the LLM started")?
            .context("binding the scripted LLM to loopback")?;
        Ok(Self {
            llm_base: llm.base_url(),
            llm,
            meter,
            delay_ms,
            words,
            mcp_url: format!("http://{proxy_addr}/mcp"),
        })
    }

    /// The chat function's settings that point it at these stubs: the proxy to mcp (with
    /// mcp's `token`) and the scripted model, in the Responses API.
    pub fn chat_env(&self, token: &str) -> [(&'static str, String); 6] {
        [
            ("MCP_URL", self.mcp_url.clone()),
            ("MCP_AUTH_TOKEN", token.to_owned()),
            ("LLM_API", "responses".to_owned()),
            ("LLM_BASE_URL", self.llm_base.clone()),
            ("LLM_MODEL", "bench-model".to_owned()),
            ("LLM_API_KEY", "sk-bench-not-a-real-key".to_owned()),
        ]
    }

    /// Everything recorded since the last call, and a fresh window.
    pub fn take(&self) -> Window {
        let mut window = std::mem::take(&mut *self.meter.lock());
        for exchange in self.llm.take_exchanges() {
            window.llm_requests += 1;
            window.llm += exchange.took().unwrap_or_default();
            if let Some(at) = exchange.first_text() {
                window.first_word = Some(window.first_word.map_or(at, |first| first.min(at)));
            }
        }
        window
    }

    /// The model takes `delay` for each answer, as a real one thinks (the concurrency curve's
    /// chat turns).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms.store(
            u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// The model's replies get `words` words after the sentence (0: the sentence alone),
    /// written one every `interval`; its tool calls come at once.
    pub fn set_pace(&self, words: usize, interval: Duration) {
        self.words.store(words, Ordering::Relaxed);
        self.llm.set_pacing(Pace {
            every: interval,
            piece: Piece::Words,
            arguments: false,
        });
    }
}

fn listener() -> anyhow::Result<TcpListener> {
    let l = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .context("binding a stub to loopback")?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// The model, in the Responses API: a request whose last input item is the user's message gets
/// one `lad_by_ref` call for the district the message names (after `district: `); a request
/// whose last item is that call's output gets a one-sentence reply quoting the result, and
/// `words` more words. Anything else is an error, which fails the bench.
fn answer(request: &Value, words: usize) -> Result<Step, String> {
    let offered = request["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["name"] == TOOL));
    if !offered {
        return Err(format!("the request offers no `{TOOL}` tool"));
    }
    let input = request["input"].as_array().ok_or("no `input` array")?;
    let last = input.last().ok_or("`input` is empty")?;
    if last["type"] == "function_call_output" {
        let result: Value = last["output"]
            .as_str()
            .and_then(|s| serde_json::from_str(s).ok())
            .ok_or_else(|| format!("the tool output is not JSON: {}", last["output"]))?;
        let row = &result["rows"][0];
        let (name, feedback) = (&row["name"], &row["feedback"]);
        let Some(name) = name.as_str() else {
            return Err(format!("the tool output has no district: {result}"));
        };
        let mut text = format!(
            "{name} has {} feedback items, {} of them open, with an average rating of {}.",
            feedback["total"], feedback["open"], feedback["average_rating"]
        );
        for i in 0..words {
            text.push_str(if i % 2 == 0 { " more" } else { " words" });
        }
        Ok(Step::text(text))
    } else if last["role"] == "user" {
        let message = last["content"]
            .as_str()
            .ok_or("the user message is not text")?;
        let district = message
            .split_once("district: ")
            .map(|(_, rest)| rest.split_once('?').map_or(rest, |(d, _)| d))
            .ok_or_else(|| format!("the message names no district: {message}"))?;
        Ok(Step::call(TOOL, json!({"ref": district}).to_string()))
    } else {
        Err(format!("unexpected last input item: {last}"))
    }
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
