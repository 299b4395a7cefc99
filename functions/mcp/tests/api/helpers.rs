//! `spawn_app`: the MCP function on `127.0.0.1:0` over a fresh demo database, plus a
//! [`TestApp`] with one method per way a client talks to it.

use parley_core::config::Env;
use parley_core::metrics::{Recorded, Sink};
use parley_mcp::Application;
use parley_testkit::TestDb;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::ServiceExt;
use rmcp::model::ProtocolVersion;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

pub const TOKEN: &str = "test-token-0123456789abcdef";
/// The feedback demo's tools file, the one these tests serve unless they declare their own.
pub const FEEDBACK_TOOLS_FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../domains/feedback/tools.toml"
);
/// Demo rows per test database: enough for every tool to find something.
pub const FEEDBACK_ROWS: u64 = 3_000;

pub struct TestApp {
    pub base: String,
    pub mcp_url: String,
    pub token: Option<String>,
    pub db: TestDb,
    /// The metrics documents the function wrote (`METRICS=emf` unless a test sets `METRICS`).
    pub metrics: Recorded,
    http: reqwest::Client,
}

pub struct Options {
    pub token: Option<String>,
    /// A tools file's text to serve instead of [`FEEDBACK_TOOLS_FILE`].
    pub tools_toml: Option<String>,
    /// Connect as this URL instead of the test database's read-only role.
    pub database_url: Option<String>,
    pub extra_env: Vec<(String, String)>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            token: Some(TOKEN.to_owned()),
            tools_toml: None,
            database_url: None,
            extra_env: Vec::new(),
        }
    }
}

pub async fn spawn_app() -> TestApp {
    spawn(Options::default()).await
}

pub async fn spawn(options: Options) -> TestApp {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    spawn_on(db, options)
        .await
        .expect("the MCP function starts")
}

/// Starts the function over an existing database; `Err` is the start-up failure.
pub async fn spawn_on(db: TestDb, options: Options) -> Result<TestApp, String> {
    let mut env: Vec<(String, String)> = vec![(
        "DATABASE_URL".into(),
        options
            .database_url
            .clone()
            .unwrap_or_else(|| db.readonly_url.clone()),
    )];
    if let Some(token) = &options.token {
        env.push(("MCP_AUTH_TOKEN".into(), token.clone()));
    }
    let tools_file = options.tools_toml.as_ref().map(|text| {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), text).expect("write tools file");
        file
    });
    let tools_path = tools_file.as_ref().map_or_else(
        || FEEDBACK_TOOLS_FILE.to_owned(),
        |file| file.path().display().to_string(),
    );
    if !options.extra_env.iter().any(|(k, _)| k == "TOOLS_FILE") {
        env.push(("TOOLS_FILE".into(), tools_path));
    }
    env.extend(options.extra_env);
    start(env, db, options.token).await
}

/// Starts the function as its `main` does when `SECRET_IDS` is set: `env` (exactly these
/// settings, nothing from the process) goes through `parley_core::secrets::load` first.
/// `token` is what [`TestApp`]'s own requests present.
pub async fn spawn_with_secrets(
    db: TestDb,
    env: Vec<(String, String)>,
    token: Option<String>,
) -> Result<TestApp, String> {
    start(env, db, token).await
}

/// [`Application::build`] as `main` runs it, on a free loopback port; `Err` is the start-up
/// failure as `main` would print it.
async fn start(
    mut env: Vec<(String, String)>,
    db: TestDb,
    token: Option<String>,
) -> Result<TestApp, String> {
    env.push(("LISTEN_ADDR".into(), "127.0.0.1:0".into()));
    if !env.iter().any(|(k, _)| k == "METRICS") {
        env.push(("METRICS".into(), "emf".into()));
    }
    let metrics = Recorded::default();
    let app = Application::build_with_metrics(Env::from_pairs(env), Sink::Memory(metrics.clone()))
        .await
        .map_err(|e| e.to_string())?;
    let addr = app.local_addr().expect("bound outside Lambda");
    app.spawn().expect("serving plain HTTP");
    let base = format!("http://{addr}");
    Ok(TestApp {
        mcp_url: format!("{base}/mcp"),
        base,
        token,
        db,
        metrics,
        http: reqwest::Client::new(),
    })
}

impl TestApp {
    /// A POST to `/mcp` with exactly the given headers (plus the JSON content type).
    pub async fn post_mcp(&self, body: String, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self
            .http
            .post(&self.mcp_url)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        for (name, value) in headers {
            request = request.header(
                HeaderName::from_bytes(name.as_bytes()).expect("header name"),
                HeaderValue::from_str(value).expect("header value"),
            );
        }
        request.send().await.expect("request sent")
    }

    /// The headers an ordinary 2025-06-18 client sends.
    pub fn standard_headers(&self) -> Vec<(&'static str, String)> {
        let mut h = vec![
            (
                ACCEPT.as_str(),
                "application/json, text/event-stream".to_owned(),
            ),
            ("mcp-protocol-version", "2025-06-18".to_owned()),
        ];
        if let Some(token) = &self.token {
            h.push((AUTHORIZATION.as_str(), format!("Bearer {token}")));
        }
        h
    }

    /// One JSON-RPC request; returns the HTTP status and the parsed body.
    pub async fn rpc(&self, method: &str, params: Value) -> (u16, Value) {
        self.rpc_with(self.token.as_deref(), method, params).await
    }

    /// [`TestApp::rpc`] presenting `token` (or no `Authorization` at all).
    pub async fn rpc_with(&self, token: Option<&str>, method: &str, params: Value) -> (u16, Value) {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let mut headers = self.standard_headers();
        headers.retain(|(name, _)| *name != AUTHORIZATION.as_str());
        if let Some(token) = token {
            headers.push((AUTHORIZATION.as_str(), format!("Bearer {token}")));
        }
        let borrowed: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let response = self.post_mcp(body, &borrowed).await;
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// `tools/call` over raw HTTP; returns the JSON-RPC `result`.
    pub async fn call(&self, tool: &str, arguments: Value) -> Value {
        let (status, body) = self
            .rpc("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        assert_eq!(status, 200, "{body}");
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result in {body}"))
    }

    /// A successful call's structured rows envelope; panics with the message on a tool error.
    pub async fn rows(&self, tool: &str, arguments: Value) -> Value {
        let result = self.call(tool, arguments).await;
        assert_eq!(result["isError"], false, "tool error: {result}");
        let structured = result["structuredContent"].clone();
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().expect("text content"))
                .expect("text content is JSON");
        assert_eq!(text, structured, "text and structured content agree");
        structured
    }

    /// A failed call's message; panics if the call succeeded.
    pub async fn tool_error(&self, tool: &str, arguments: Value) -> String {
        let result = self.call(tool, arguments).await;
        assert_eq!(result["isError"], true, "expected a tool error: {result}");
        result["content"][0]["text"]
            .as_str()
            .expect("text")
            .to_owned()
    }

    /// A real MCP client (rmcp's Streamable HTTP client) connected with `token`.
    pub async fn client_with(
        &self,
        token: Option<&str>,
    ) -> Result<RunningService<RoleClient, ClientConfig>, String> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.mcp_url.clone());
        if let Some(token) = token {
            config = config.auth_header(token.to_owned());
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("parley-tests", "0"),
        )
        .serve(transport)
        .await
        .map_err(|e| e.to_string())
    }

    /// A real client that uses the one-request 2026-07-28 lifecycle (`server/discover`).
    pub async fn discover_client(&self) -> RunningService<RoleClient, ClientConfig> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(self.mcp_url.clone());
        if let Some(token) = &self.token {
            config = config.auth_header(token.clone());
        }
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("parley-tests", "0"),
        )
        .serve_with_lifecycle(
            StreamableHttpClientTransport::from_config(config),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("discover-mode client connects")
    }

    pub async fn client(&self) -> RunningService<RoleClient, ClientConfig> {
        self.client_with(self.token.as_deref())
            .await
            .expect("client connects")
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("request sent")
    }

    /// Runs SQL on the test database as its owner; for checking what tools returned.
    pub async fn sql_one(&self, sql: &str) -> tokio_postgres::Row {
        let client = self.db.client().await;
        client.query_one(sql, &[]).await.expect("query")
    }
}

/// Calls a tool through a real MCP client.
pub async fn client_call(
    client: &RunningService<RoleClient, ClientConfig>,
    tool: &str,
    arguments: Value,
) -> CallToolResult {
    let args = match arguments {
        Value::Object(map) => map,
        _ => panic!("arguments must be an object"),
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .expect("tools/call answered")
}

/// Keys of an environment for [`Options::extra_env`].
pub fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A run_sql call's result: `Ok(structured)` or `Err(message)`.
pub async fn run_sql(app: &TestApp, sql: &str) -> Result<Value, String> {
    let result = app.call("run_sql", json!({ "sql": sql })).await;
    if result["isError"] == true {
        Err(result["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned())
    } else {
        Ok(result["structuredContent"].clone())
    }
}

/// Ingests the folder `dir` into the public collection `collection` of `db` with the `parley
/// ingest` command's own code (and `meta` as its `--meta` pairs); returns what it printed.
pub async fn ingest_folder(
    db: &TestDb,
    dir: &std::path::Path,
    collection: &str,
    meta: Vec<(String, Value)>,
) -> String {
    use parley_cli::cmd::ingest::{Args, Limits};
    let args = Args {
        paths: vec![dir.to_path_buf()],
        collection: Some(collection.into()),
        title: None,
        description: None,
        public: true,
        prune: false,
        meta,
        limits: Limits {
            max_document_bytes: 1 << 20,
            max_html_depth: 512,
            extract_timeout_ms: 10_000,
            max_pdf_pages: 100,
            max_unpacked_bytes: 1 << 20,
            ..Limits::default()
        },
    };
    let ingest_env = Env::from_pairs([
        ("DATABASE_URL", db.url.clone()),
        (
            "EMBEDDINGS_MODEL_DIR",
            parley_testkit::model_dir().display().to_string(),
        ),
    ]);
    let mut out = Vec::new();
    parley_cli::cmd::ingest::run(args, &ingest_env, &mut out)
        .await
        .unwrap_or_else(|e| panic!("ingest: {e}"));
    String::from_utf8(out).unwrap()
}
