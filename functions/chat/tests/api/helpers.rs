//! `spawn_chat`: the chat function on `127.0.0.1:0` over a fresh database, wired to the real
//! mcp function (also on loopback, its requests counted and recorded) and a scripted LLM.
//! Both share [`CALLER_KEY`] unless a test sets `MCP_CALLER_KEY` itself, so tool calls carry
//! the signed-in user as they do when deployed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use jsonwebtoken::{EncodingKey, Header, encode};
use parley_core::config::Env;
use parley_core::metrics::{Recorded, Sink};
use parley_testkit::llm::{ScriptedLlm, Step};
use parley_testkit::{TcpProxy, TestDb};
use serde_json::{Value, json};

pub const JWT_SECRET: &str = "test-secret-0123456789abcdef0123456789abcdef";
pub const MCP_TOKEN: &str = "mcp-test-token-0123456789";
pub const FEEDBACK_ROWS: u64 = 2_000;
/// `MCP_CALLER_KEY` of both functions, unless a test sets its own.
pub const CALLER_KEY: &str = "chat-test-caller-key-0123456789abcdef";

/// The feedback demo domain's tools, which every test's mcp function serves unless it says
/// otherwise (`TOOLS_FILE`).
pub const FEEDBACK_TOOLS_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/feedback/tools.toml"
);

pub struct TestChat {
    pub base: String,
    pub llm: ScriptedLlm,
    pub mcp: Option<McpHandle>,
    /// What the chat's database connections go through, with [`Options::db_proxy`].
    pub db_proxy: Option<TcpProxy>,
    /// The chat's database, for a test that plays another instance on it.
    pub db_url: Option<String>,
    /// The metrics documents the chat wrote (`METRICS=emf` unless a test sets `METRICS`).
    pub metrics: Recorded,
    http: reqwest::Client,
    /// Keeps the chat's database alive as long as the chat (the last clone drops it).
    _db: Option<TestDb>,
}

/// The mcp function the chat talks to, how many HTTP requests reached it, and what each POST
/// to `/mcp` said.
pub struct McpHandle {
    pub url: String,
    pub requests: Arc<AtomicUsize>,
    /// The metrics documents the mcp function wrote.
    pub metrics: Recorded,
    posts: Arc<Mutex<Vec<McpPost>>>,
    server: tokio::task::JoinHandle<()>,
}

/// One JSON-RPC POST as the mcp function received it.
#[derive(Debug, Clone)]
pub struct McpPost {
    /// `method` of the JSON-RPC message (`tools/call`, `tools/list`, ...), or "" for none.
    pub method: String,
    /// The bearer token of its `Authorization` header.
    pub bearer: Option<String>,
    /// `params._meta`, or null.
    pub meta: Value,
    /// `params.name`: the tool of a `tools/call`, or "".
    pub tool: String,
}

impl McpHandle {
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// The POSTs whose JSON-RPC method is `method`, in order of arrival.
    pub fn posts(&self, method: &str) -> Vec<McpPost> {
        self.posts
            .lock()
            .expect("posts")
            .iter()
            .filter(|p| p.method == method)
            .cloned()
            .collect()
    }

    /// Stops the server (the chat's cached connection to it dies with it).
    pub fn stop(&self) {
        self.server.abort();
    }
}

pub struct Options {
    pub api: &'static str,
    pub steps: Vec<Step>,
    pub extra_env: Vec<(&'static str, String)>,
    /// Point MCP_URL at a closed port instead of a running mcp function.
    pub mcp_down: bool,
    /// A model that answers every request with this one tool call (name, arguments).
    pub endless: Option<(&'static str, &'static str)>,
    /// Route the chat's database connections through a [`TcpProxy`] the test can sever.
    pub db_proxy: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            api: "responses",
            steps: Vec::new(),
            extra_env: Vec::new(),
            mcp_down: false,
            endless: None,
            db_proxy: false,
        }
    }
}

pub async fn spawn_chat(steps: Vec<Step>) -> TestChat {
    spawn(Options {
        steps,
        ..Options::default()
    })
    .await
}

pub async fn spawn(options: Options) -> TestChat {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let llm = match options.endless {
        Some((name, args)) => ScriptedLlm::endless_calls(name, args).await,
        None => ScriptedLlm::start(options.steps).await,
    };
    let mcp = if options.mcp_down {
        None
    } else {
        Some(spawn_mcp(&db).await)
    };
    let mcp_url = match &mcp {
        Some(m) => m.url.clone(),
        None => format!("http://{}/mcp", closed_port().await),
    };
    let (db_url, db_proxy) = if options.db_proxy {
        let (proxy, url) = TcpProxy::in_front_of(&db.url).await;
        (url, Some(proxy))
    } else {
        (db.url.clone(), None)
    };
    let mut env: Vec<(String, String)> = vec![
        ("DATABASE_URL".into(), db_url),
        ("JWT_SECRET".into(), JWT_SECRET.into()),
        ("MCP_URL".into(), mcp_url),
        ("MCP_AUTH_TOKEN".into(), MCP_TOKEN.into()),
        ("LLM_API".into(), options.api.into()),
        ("LLM_BASE_URL".into(), llm.base_url()),
        ("LLM_MODEL".into(), "scripted-model".into()),
        ("LLM_API_KEY".into(), "sk-test-not-a-real-key".into()),
        ("MCP_TIMEOUT_MS".into(), "5000".into()),
    ];
    env.extend(
        options
            .extra_env
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v)),
    );
    let (base, metrics) = start_chat(Env::from_pairs(env)).await;
    TestChat {
        base,
        llm,
        mcp,
        db_proxy,
        db_url: Some(db.url.clone()),
        metrics,
        http: reqwest::Client::new(),
        _db: Some(db),
    }
}

async fn spawn_mcp(db: &TestDb) -> McpHandle {
    spawn_mcp_from(Env::from_pairs([
        ("DATABASE_URL", db.readonly_url.as_str()),
        ("MCP_AUTH_TOKEN", MCP_TOKEN),
    ]))
    .await
}

/// The mcp function started as its `main` does: `env` (these settings, plus [`CALLER_KEY`]
/// when it does not set `MCP_CALLER_KEY`) goes through `parley_core::secrets::load` first, so
/// `SECRET_IDS` in it is honoured. Every test's mcp function starts here.
pub async fn spawn_mcp_from(env: Env) -> McpHandle {
    let mut env = with_metrics(with_caller_key(env)).overlay([("LISTEN_ADDR", "127.0.0.1:0")]);
    if !env.is_present("TOOLS_FILE") {
        env = env.overlay([("TOOLS_FILE", FEEDBACK_TOOLS_FILE)]);
    }
    let metrics = Recorded::default();
    let requests = Arc::new(AtomicUsize::new(0));
    let posts = Arc::new(Mutex::new(Vec::new()));
    let (counter, recorder) = (requests.clone(), posts.clone());
    let router = parley_mcp::Application::build_with_metrics(env, Sink::Memory(metrics.clone()))
        .await
        .expect("mcp builds")
        .into_router()
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let (counter, recorder) = (counter.clone(), recorder.clone());
                async move {
                    let mut req = req;
                    if req.uri().path() == "/mcp" {
                        counter.fetch_add(1, Ordering::SeqCst);
                        (req, _) = record(req, &recorder).await;
                    }
                    next.run(req).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let _ = serve_on(listener, router).await;
    });
    McpHandle {
        url: format!("http://{addr}/mcp"),
        requests,
        metrics,
        posts,
        server,
    }
}

/// A chat over `db` whose mcp function serves `tools_file` (as the read-only login, the way
/// `scripts/dev` and a deployment run it), and a model that plays `steps`.
pub async fn spawn_chat_with_tools(db: &TestDb, tools_file: &str, steps: Vec<Step>) -> TestChat {
    spawn_chat_with_mcp(db, &[("TOOLS_FILE", tools_file)], steps).await
}

/// [`spawn_chat_with_tools`] with any mcp settings (`TOOLS_FILE`, `SQL_DATABASE_URL`, ...)
/// laid over the read-only login and the service token.
pub async fn spawn_chat_with_mcp(
    db: &TestDb,
    mcp_settings: &[(&str, &str)],
    steps: Vec<Step>,
) -> TestChat {
    spawn_chat_with_mcp_and_llm(db, mcp_settings, ScriptedLlm::start(steps).await).await
}

/// [`spawn_chat_with_mcp`] with a scripted model the test started itself.
pub async fn spawn_chat_with_mcp_and_llm(
    db: &TestDb,
    mcp_settings: &[(&str, &str)],
    llm: ScriptedLlm,
) -> TestChat {
    spawn_chat_with_settings(db, mcp_settings, &[], llm).await
}

/// [`spawn_chat_with_mcp_and_llm`] with chat settings (`APPROVAL`, ...) laid over its own.
pub async fn spawn_chat_with_settings(
    db: &TestDb,
    mcp_settings: &[(&str, &str)],
    chat_settings: &[(&str, &str)],
    llm: ScriptedLlm,
) -> TestChat {
    let mcp = spawn_mcp_from(mcp_env(db).overlay(mcp_settings.iter().copied())).await;
    spawn_chat_over(db, mcp, chat_settings, llm).await
}

/// The settings of an mcp function over `db`: the read-only login and the service token.
pub fn mcp_env(db: &TestDb) -> Env {
    Env::from_pairs([
        ("DATABASE_URL", db.readonly_url.as_str()),
        ("MCP_AUTH_TOKEN", MCP_TOKEN),
    ])
}

/// A chat over `db` talking to `mcp`, with `chat_settings` laid over its own.
pub async fn spawn_chat_over(
    db: &TestDb,
    mcp: McpHandle,
    chat_settings: &[(&str, &str)],
    llm: ScriptedLlm,
) -> TestChat {
    let env = Env::from_pairs([
        ("DATABASE_URL", db.url.clone()),
        ("JWT_SECRET", JWT_SECRET.to_owned()),
        ("MCP_URL", mcp.url.clone()),
        ("MCP_AUTH_TOKEN", MCP_TOKEN.to_owned()),
        ("LLM_BASE_URL", llm.base_url()),
        ("LLM_API_KEY", "sk-test-not-a-real-key".to_owned()),
        ("MCP_TIMEOUT_MS", "5000".to_owned()),
    ])
    .overlay(chat_settings.iter().copied());
    let mut chat = spawn_chat_from(env, llm, Some(mcp)).await;
    chat.db_url = Some(db.url.clone());
    chat._db = Some(db.clone());
    chat
}

/// `env` with `METRICS=emf` unless it sets `METRICS`: the documents go to memory, not stdout.
fn with_metrics(env: Env) -> Env {
    if env.is_present("METRICS") {
        env
    } else {
        env.overlay([("METRICS", "emf")])
    }
}

/// `env` with `MCP_CALLER_KEY` = [`CALLER_KEY`] unless it sets one (blank turns it off).
fn with_caller_key(env: Env) -> Env {
    if env.is_present("MCP_CALLER_KEY") {
        env
    } else {
        env.overlay([("MCP_CALLER_KEY", CALLER_KEY)])
    }
}

/// Notes a POST's method, bearer token and `_meta` in `posts`; the request goes on unchanged,
/// with its JSON-RPC method ("" for none).
async fn record(req: Request, posts: &Mutex<Vec<McpPost>>) -> (Request, String) {
    if req.method() != axum::http::Method::POST {
        return (req, String::new());
    }
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 10 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let bearer = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let method = message["method"].as_str().unwrap_or_default().to_owned();
    posts.lock().expect("posts").push(McpPost {
        method: method.clone(),
        bearer,
        meta: message["params"]["_meta"].clone(),
        tool: message["params"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    });
    (Request::from_parts(parts, Body::from(bytes)), method)
}

/// The payload of a JWT, unverified: what a test reads from an assertion it saw go by.
pub fn jwt_payload(token: &str) -> Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).expect("a JWT has a payload");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("a JSON payload")
}

/// The chat function started as its `main` does (secrets first), over `llm` and `mcp`.
pub async fn spawn_chat_from(env: Env, llm: ScriptedLlm, mcp: Option<McpHandle>) -> TestChat {
    let (base, metrics) = start_chat(env).await;
    TestChat {
        base,
        llm,
        mcp,
        db_proxy: None,
        db_url: None,
        metrics,
        http: reqwest::Client::new(),
        _db: None,
    }
}

/// [`parley_chat::Application::build`] as `main` runs it, on a free loopback port, with
/// [`CALLER_KEY`] unless `env` sets `MCP_CALLER_KEY`; the base URL and its metrics.
async fn start_chat(env: Env) -> (String, Recorded) {
    let env = with_metrics(with_caller_key(env)).overlay([("LISTEN_ADDR", "127.0.0.1:0")]);
    let metrics = Recorded::default();
    let app = parley_chat::Application::build_with_metrics(env, Sink::Memory(metrics.clone()))
        .await
        .expect("chat builds");
    let addr = app.local_addr().expect("bound outside Lambda");
    app.spawn().expect("serving plain HTTP");
    (format!("http://{addr}"), metrics)
}

/// The serving layer `main` uses, with its connection limits.
async fn serve_on(listener: tokio::net::TcpListener, router: axum::Router) -> std::io::Result<()> {
    parley_core::plain_http::serve(
        listener,
        router,
        parley_core::config::HttpLimits::default(),
        std::future::pending(),
    )
    .await
}

/// A loopback address nothing listens on.
async fn closed_port() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    listener.local_addr().expect("addr")
}

/// An HS256 token for `sub`, valid for an hour.
pub fn token(sub: &str) -> String {
    token_with(json!({"sub": sub, "exp": now() + 3600}), JWT_SECRET)
}

pub fn token_with(claims: Value, secret: &str) -> String {
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("token")
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

impl TestChat {
    /// `POST /api/chat` with a raw body and optional bearer token.
    pub async fn post_raw(
        &self,
        token: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .post(format!("{}/api/chat", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn post(&self, user: &str, body: Value) -> (u16, Value) {
        self.post_raw(Some(&token(user)), body.to_string()).await
    }

    /// A turn that must succeed; returns the response body.
    pub async fn turn(&self, user: &str, body: Value) -> Value {
        let (status, response) = self.post(user, body).await;
        assert_eq!(status, 200, "{response}");
        response
    }

    pub async fn get(&self, user: Option<&str>, path: &str) -> (u16, Value) {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(u) = user {
            request = request.bearer_auth(token(u));
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub async fn messages(&self, user: &str, conversation: &str) -> Vec<Value> {
        let (status, body) = self
            .get(
                Some(user),
                &format!("/api/conversations/{conversation}/messages"),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["messages"].as_array().expect("messages").clone()
    }

    /// `POST path` with `body` as `user` and `Accept: text/event-stream`; the response is
    /// returned unread, to be read as it arrives.
    pub async fn post_streamed(&self, user: &str, path: &str, body: Value) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token(user))
            .header("accept", "text/event-stream")
            .json(&body)
            .send()
            .await
            .expect("request sent")
    }

    /// `POST path` with `body` as `user`, plus extra headers; status, headers and JSON body.
    pub async fn post_json(
        &self,
        user: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Value,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(token(user))
            .json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.expect("body");
        (
            status,
            headers,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub fn mcp(&self) -> &McpHandle {
        self.mcp.as_ref().expect("this chat has an mcp function")
    }
}

/// The `input` (Responses) of the n-th request the model received.
pub fn input_of(request: &Value) -> Vec<Value> {
    request["input"].as_array().expect("input array").clone()
}

/// The `data:` payloads of a server-sent event stream, each parsed as JSON (`[DONE]` as the
/// string "[DONE]"). Panics on anything that is not a well-formed `data:` frame.
pub fn sse_data(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|frame| !frame.trim().is_empty())
        .map(|frame| {
            let data = frame
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data frame: {frame:?}"));
            assert!(!data.contains('\n'), "a frame of one line: {frame:?}");
            if data == "[DONE]" {
                Value::String(data.to_owned())
            } else {
                serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data}"))
            }
        })
        .collect()
}

/// Reads a streamed response until a part satisfies `until`; the parts so far and the rest of
/// the response, still open.
pub async fn read_until(
    mut response: reqwest::Response,
    until: impl Fn(&Value) -> bool,
) -> (Vec<Value>, reqwest::Response) {
    let mut text = String::new();
    loop {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(30), response.chunk())
            .await
            .expect("the stream went quiet")
            .unwrap()
            .expect("the stream ended early");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        // Only whole frames.
        let whole = match text.rfind("\n\n") {
            Some(end) => &text[..end + 2],
            None => continue,
        };
        let parts = sse_data(whole);
        if parts.iter().any(&until) {
            return (parts, response);
        }
    }
}

/// The text of a stream's `text-delta` parts, in order.
pub fn streamed_text(parts: &[Value]) -> String {
    parts
        .iter()
        .filter(|p| p["type"] == "text-delta")
        .map(|p| p["delta"].as_str().unwrap())
        .collect()
}

/// A turn of another instance holding `conversation` for `owner`: begun (its question stored),
/// not finished, its lease held for a minute. Dropping it gives the lease back.
pub async fn hold_conversation(
    chat: &TestChat,
    owner: &str,
    conversation: &str,
    message: &str,
) -> parley_chat::turn::conversation::Turn {
    use parley_chat::auth::UserId;
    use parley_chat::turn::conversation::{self, ConversationId, TurnStart};
    let url = chat.db_url.clone().expect("the chat's database");
    let pool =
        parley_core::db::pool(&parley_core::db::DbConfig::from_url(&url).unwrap()).expect("a pool");
    let owner = UserId::new(owner).unwrap();
    conversation::begin(
        &pool,
        TurnStart {
            owner: &owner,
            conversation: ConversationId::parse(conversation),
            message: Some(message),
            context: None,
            history_limit: 0,
            lock_wait: std::time::Duration::from_secs(1),
            lease: std::time::Duration::from_secs(60),
        },
    )
    .await
    .expect("the other instance's turn begins")
}
