//! The chat function as an MCP client: one connection per configured server, kept across warm
//! invocations, with the tool list cached, so a warm turn costs one HTTP request per tool call.
//!
//! Connections use the one-request `server/discover` lifecycle (2026-07-28) when the server
//! offers it and fall back to the classic `initialize` handshake. A dead connection is replaced
//! and the call retried once, but only for tools annotated read-only or idempotent: a call
//! whose answer was lost may have run, and running a write twice is worse than not knowing.
//! A server that is down becomes a tool error, never a failed turn.
//! A 401 from the `parley` server fetches its token from Secrets Manager again (rate-limited),
//! reconnects with it and retries once, so a rotated token needs no cold start.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use parley_core::config::ExposeSecret;
use parley_core::secrets::{RotatingSecret, Secrets};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation, ProtocolVersion,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService, ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpClientTransportConfig, StreamableHttpError,
    StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use serde_json::{Map, Value};
use tokio::sync::Mutex;

use crate::config::McpServer;
use crate::llm::ToolDef;

type Client = RunningService<RoleClient, ClientConfig>;

/// All configured MCP servers and the tools they offer.
pub struct McpClients {
    servers: Vec<Server>,
    http: reqwest::Client,
    timeout: Duration,
    catalog: Mutex<Option<Arc<Catalog>>>,
}

struct Server {
    config: McpServer,
    /// The token in use and its generation: a request refused with 401 retries only if the
    /// token changed since its connection was made.
    token: RotatingSecret,
    client: Mutex<Option<Connected>>,
}

/// A live client and the generation of the token it sends.
#[derive(Clone)]
struct Connected {
    client: Arc<Client>,
    token_generation: u64,
}

/// Why connecting failed; `unauthorized` when the server answered 401 (or 403 with a challenge).
struct ConnectFailure {
    message: String,
    unauthorized: bool,
    token_generation: u64,
}

/// The tools offered to the model, under the names the model uses.
#[derive(Debug, Default)]
pub struct Catalog {
    pub tools: Vec<ToolDef>,
    routes: HashMap<String, Route>,
    /// A server could not be listed; its tools are missing and the next turn tries again.
    incomplete: bool,
}

#[derive(Debug, Clone)]
struct Route {
    server: usize,
    remote_name: String,
    schema: Value,
    /// The server says calling it twice does no more than once (`readOnlyHint` or
    /// `idempotentHint`), so a call whose answer was lost may be sent again.
    resendable: bool,
}

impl Catalog {
    pub fn contains(&self, name: &str) -> bool {
        self.routes.contains_key(name)
    }

    /// Some server could not be listed, so some tools may be missing.
    pub fn is_incomplete(&self) -> bool {
        self.incomplete
    }

    /// No tools, because listing them took longer than the turn may: calls become tool errors
    /// saying a server cannot be reached.
    pub fn unavailable() -> Self {
        Self {
            incomplete: true,
            ..Self::default()
        }
    }
}

/// A tool call's outcome as the model and the trace see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub output: Value,
    pub is_error: bool,
}

impl ToolOutcome {
    fn error(message: impl Into<String>) -> Self {
        Self {
            output: Value::String(message.into()),
            is_error: true,
        }
    }
}

impl McpClients {
    pub fn new(servers: Vec<McpServer>, http: reqwest::Client, timeout: Duration) -> Self {
        Self {
            servers: servers
                .into_iter()
                .map(|config| Server {
                    token: RotatingSecret::new(
                        config.token_setting.unwrap_or("MCP_SERVERS"),
                        config.token.clone(),
                        None,
                    ),
                    config,
                    client: Mutex::new(None),
                })
                .collect(),
            http,
            timeout,
            catalog: Mutex::new(None),
        }
    }

    /// Takes rotated tokens from `secrets` when a server refuses the current one.
    /// Only servers whose token comes from a setting (`MCP_URL`'s) can have one.
    pub fn with_secrets(mut self, secrets: Option<Secrets>) -> Self {
        for server in &mut self.servers {
            if let Some(setting) = server.config.token_setting {
                server.token =
                    RotatingSecret::new(setting, server.config.token.clone(), secrets.clone());
            }
        }
        self
    }

    /// The tools of every reachable server; listed once per instance, not per turn.
    pub async fn catalog(&self) -> Arc<Catalog> {
        let mut cached = self.catalog.lock().await;
        if let Some(c) = cached.as_ref().filter(|c| !c.incomplete) {
            return c.clone();
        }
        let mut listed: Vec<(usize, Vec<rmcp::model::Tool>)> = Vec::new();
        let mut incomplete = false;
        for (i, server) in self.servers.iter().enumerate() {
            match self.list(server).await {
                Ok(tools) => listed.push((i, tools)),
                Err(e) => {
                    incomplete = true;
                    tracing::warn!(server = %server.config.name, error = %e, "cannot list MCP tools; the turn goes on without them");
                }
            }
        }
        let catalog = Arc::new(build_catalog(&self.servers, listed, incomplete));
        *cached = Some(catalog.clone());
        catalog
    }

    async fn list(&self, server: &Server) -> Result<Vec<rmcp::model::Tool>, String> {
        for attempt in 1..=2 {
            let connected = self.connect_authorized(server).await?;
            match tokio::time::timeout(self.timeout, connected.client.list_all_tools()).await {
                Ok(Ok(tools)) => return Ok(tools),
                Ok(Err(e)) => {
                    self.forget(server, &connected.client).await;
                    let renewed = attempt == 1
                        && e.auth_challenge().is_some()
                        && self.renew_token(server, connected.token_generation).await;
                    if !renewed {
                        return Err(e.to_string());
                    }
                }
                Err(_) => return Err("timed out".into()),
            }
        }
        Err("the server refused the renewed token".into())
    }

    /// Runs one call by the name the model used, giving up at `deadline` (the turn's). Never
    /// fails: problems become tool errors.
    pub async fn call(
        &self,
        catalog: &Catalog,
        name: &str,
        arguments: Map<String, Value>,
        deadline: tokio::time::Instant,
    ) -> ToolOutcome {
        let resendable = catalog.routes.get(name).is_some_and(|r| r.resendable);
        match tokio::time::timeout_at(deadline, self.call_by_route(catalog, name, arguments)).await
        {
            Ok(outcome) => outcome,
            Err(_) if resendable => {
                ToolOutcome::error("the tool did not answer before the turn ran out of time")
            }
            Err(_) => ToolOutcome::error(outcome_unknown(
                name,
                "it did not answer before the turn ran out of time",
            )),
        }
    }

    async fn call_by_route(
        &self,
        catalog: &Catalog,
        name: &str,
        arguments: Map<String, Value>,
    ) -> ToolOutcome {
        let Some(route) = catalog.routes.get(name) else {
            return ToolOutcome::error(if catalog.incomplete {
                format!(
                    "the tool `{name}` is unavailable right now: a tool server cannot be reached"
                )
            } else {
                format!("unknown tool `{name}`; use one of the tools offered")
            });
        };
        if let Err(problem) = check_arguments(&route.schema, &arguments) {
            return ToolOutcome::error(format!("invalid arguments: {problem}"));
        }
        let server = &self.servers[route.server];
        let params =
            CallToolRequestParams::new(route.remote_name.clone()).with_arguments(arguments);
        // Two attempts: the first may find a connection that died while the instance was
        // frozen or the server restarted; the second uses a fresh one.
        for attempt in 1..=2 {
            let connected = match self.connect_authorized(server).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(server = %server.config.name, error = %e, "MCP server unreachable");
                    return ToolOutcome::error(format!(
                        "the tool server `{}` is unavailable right now; try again later or answer without it",
                        server.config.name
                    ));
                }
            };
            let client = connected.client;
            match tokio::time::timeout(self.timeout, client.call_tool(params.clone())).await {
                Ok(Ok(result)) => return outcome(result),
                Ok(Err(ServiceError::McpError(e))) => {
                    // -32602 is how servers say "no such tool": the cached list is stale (the
                    // server was redeployed), so the next turn lists the tools again.
                    if e.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                        *self.catalog.lock().await = None;
                    }
                    return ToolOutcome::error(e.message.to_string());
                }
                Ok(Err(e)) if attempt == 1 && e.auth_challenge().is_some() => {
                    self.forget(server, &client).await;
                    if !self.renew_token(server, connected.token_generation).await {
                        tracing::warn!(server = %server.config.name, "MCP server refused the token");
                        return ToolOutcome::error(format!(
                            "the tool server `{}` refused Parley's credentials; try again later or answer without it",
                            server.config.name
                        ));
                    }
                }
                Ok(Err(e)) if attempt == 1 && route.resendable => {
                    tracing::info!(server = %server.config.name, error = %e, "MCP connection failed; reconnecting");
                    self.forget(server, &client).await;
                }
                Ok(Err(e)) if !route.resendable => {
                    self.forget(server, &client).await;
                    tracing::warn!(server = %server.config.name, tool = %name, error = %e, "MCP call failed; not repeated, the tool is not idempotent");
                    return ToolOutcome::error(outcome_unknown(
                        name,
                        "the connection to its server failed before the answer arrived",
                    ));
                }
                Ok(Err(e)) => {
                    self.forget(server, &client).await;
                    tracing::warn!(server = %server.config.name, error = %e, "MCP call failed");
                    return ToolOutcome::error(format!(
                        "the tool server `{}` failed to answer; try again later",
                        server.config.name
                    ));
                }
                Err(_) if !route.resendable => {
                    return ToolOutcome::error(outcome_unknown(
                        name,
                        &format!("it did not answer within {} ms", self.timeout.as_millis()),
                    ));
                }
                Err(_) => {
                    return ToolOutcome::error(format!(
                        "the tool did not answer within {} ms",
                        self.timeout.as_millis()
                    ));
                }
            }
        }
        unreachable!("the loop returns on its second attempt")
    }

    /// [`Self::connect`], renewing the token once if the server refuses it.
    async fn connect_authorized(&self, server: &Server) -> Result<Connected, String> {
        match self.connect(server).await {
            Err(refused) if refused.unauthorized => {
                if self.renew_token(server, refused.token_generation).await {
                    self.connect(server).await.map_err(|f| f.message)
                } else {
                    Err(refused.message)
                }
            }
            other => other.map_err(|f| f.message),
        }
    }

    async fn connect(&self, server: &Server) -> Result<Connected, ConnectFailure> {
        let mut slot = server.client.lock().await;
        if let Some(connected) = slot.as_ref().filter(|c| !c.client.is_transport_closed()) {
            return Ok(connected.clone());
        }
        let (token_generation, token) = server.token.peek();
        let failure = |message: String, unauthorized: bool| ConnectFailure {
            message,
            unauthorized,
            token_generation,
        };
        let mut config = StreamableHttpClientTransportConfig::with_uri(server.config.url.as_str());
        if let Some(token) = &token {
            config = config.auth_header(token.expose_secret().to_owned());
        }
        let transport =
            StreamableHttpClientTransport::with_client(UrlFree(self.http.clone()), config);
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("parley-chat", env!("CARGO_PKG_VERSION")),
        );
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        };
        let client = tokio::time::timeout(
            self.timeout,
            info.serve_with_lifecycle(transport, lifecycle),
        )
        .await
        .map_err(|_| failure("connecting timed out".to_owned(), false))?
        .map_err(|e| failure(e.to_string(), e.auth_challenge().is_some()))?;
        let connected = Connected {
            client: Arc::new(client),
            token_generation,
        };
        *slot = Some(connected.clone());
        Ok(connected)
    }

    /// After a 401 on a connection made with token `used`: whether a newer token is there to
    /// retry with, fetching the secrets again (rate-limited, shared) if need be.
    async fn renew_token(&self, server: &Server, used: u64) -> bool {
        tracing::info!(server = %server.config.name, "MCP server refused the token; fetching it again");
        server.token.renew(used).await
    }

    async fn forget(&self, server: &Server, dead: &Arc<Client>) {
        let mut slot = server.client.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(&c.client, dead)) {
            *slot = None;
        }
    }
}

/// The HTTP client the MCP transport uses: reqwest's, with the URL taken out of its errors the
/// way the LLM client does (`reqwest::Error::without_url`). `MCP_URL` may carry a credential in
/// its query string, and the transport's errors reach the log, rmcp's own included. Only the
/// methods the transport calls are passed through; the rest keep the trait's defaults.
#[derive(Clone)]
struct UrlFree(reqwest::Client);

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;
type SseStream = BoxStream<'static, Result<sse_stream::Sse, SseError>>;

fn url_free<T>(result: HttpResult<T>) -> HttpResult<T> {
    result.map_err(|e| match e {
        StreamableHttpError::Client(e) => StreamableHttpError::Client(e.without_url()),
        other => other,
    })
}

impl StreamableHttpClient for UrlFree {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        url_free(
            self.0
                .post_message(uri, message, session_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        url_free(
            self.0
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    auth_header,
                    custom_headers,
                    limits,
                )
                .await,
        )
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        url_free(
            self.0
                .delete_session(uri, session_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<SseStream> {
        url_free(
            self.0
                .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<SseStream> {
        url_free(
            self.0
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await,
        )
    }
}

/// Names are kept as the servers give them, except where two servers offer the same name:
/// then each of those becomes `<server>__<tool>`.
fn build_catalog(
    servers: &[Server],
    listed: Vec<(usize, Vec<rmcp::model::Tool>)>,
    incomplete: bool,
) -> Catalog {
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (_, tools) in &listed {
        for t in tools {
            *seen.entry(t.name.to_string()).or_default() += 1;
        }
    }
    let mut catalog = Catalog {
        incomplete,
        ..Catalog::default()
    };
    for (server, tools) in listed {
        for t in tools {
            let remote_name = t.name.to_string();
            let name = if seen[&remote_name] > 1 {
                format!("{}__{}", servers[server].config.name, remote_name)
            } else {
                remote_name.clone()
            };
            let schema = Value::Object((*t.input_schema).clone());
            // Without annotations a tool may do anything, so it is taken as not idempotent.
            let resendable = t
                .annotations
                .as_ref()
                .is_some_and(|a| a.read_only_hint == Some(true) || a.idempotent_hint == Some(true));
            catalog.tools.push(ToolDef::new(
                name.clone(),
                t.description.as_deref().unwrap_or_default(),
                &schema,
            ));
            catalog.routes.insert(
                name,
                Route {
                    server,
                    remote_name,
                    schema,
                    resendable,
                },
            );
        }
    }
    catalog
}

/// What the model is told when a call that must not run twice may or may not have run.
fn outcome_unknown(name: &str, why: &str) -> String {
    format!(
        "the outcome of this call to `{name}` is unknown: {why}. It may or may not have taken \
effect, and it was not repeated because `{name}` is not idempotent. Check its effect before \
calling it again, or tell the user."
    )
}

/// The server's structured JSON when present, else its text.
fn outcome(result: CallToolResult) -> ToolOutcome {
    let is_error = result.is_error.unwrap_or(false);
    let output = match result.structured_content {
        Some(structured) if !is_error => structured,
        _ => {
            let text: Vec<String> = result
                .content
                .iter()
                .filter_map(|c| match c {
                    ContentBlock::Text(t) => Some(t.text.clone()),
                    _ => None,
                })
                .collect();
            Value::String(text.join("\n"))
        }
    };
    ToolOutcome { output, is_error }
}

/// A first check of a call against the tool's schema: an object, required names present,
/// no names the schema forbids, and the declared JSON types. The server checks everything
/// again; this catches what any server would refuse without a round trip.
pub fn check_arguments(schema: &Value, args: &Map<String, Value>) -> Result<(), String> {
    let properties = schema.get("properties").and_then(Value::as_object);
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if args.get(name).is_none_or(Value::is_null) {
                return Err(format!("missing required parameter `{name}`"));
            }
        }
    }
    if schema.get("additionalProperties") == Some(&Value::Bool(false))
        && let Some(unknown) = args
            .keys()
            .find(|k| !properties.is_some_and(|p| p.contains_key(*k)))
    {
        return Err(format!("unknown parameter `{unknown}`"));
    }
    for (name, value) in args {
        let Some(expected) = properties
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
        else {
            continue;
        };
        let fits = match expected {
            "string" => value.is_string(),
            "integer" => value.as_f64().is_some_and(|f| f.fract() == 0.0),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            _ => true,
        };
        if !fits && !value.is_null() {
            return Err(format!("parameter `{name}` must be of type {expected}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
            "additionalProperties": false
        })
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn arguments_missing_a_required_name_are_refused() {
        let e = check_arguments(&schema(), &args(json!({"limit": 3}))).unwrap_err();
        assert_eq!(e, "missing required parameter `query`");
    }

    #[test]
    fn unknown_names_and_wrong_types_are_refused() {
        assert_eq!(
            check_arguments(&schema(), &args(json!({"query": "x", "lim": 1}))).unwrap_err(),
            "unknown parameter `lim`"
        );
        assert_eq!(
            check_arguments(&schema(), &args(json!({"query": "x", "limit": "5"}))).unwrap_err(),
            "parameter `limit` must be of type integer"
        );
        assert!(check_arguments(&schema(), &args(json!({"query": "x", "limit": 5}))).is_ok());
    }

    #[test]
    fn structured_content_wins_over_text() {
        let mut r = CallToolResult::success(vec![ContentBlock::text("{\"rows\":[]}")]);
        r.structured_content = Some(json!({"rows": []}));
        assert_eq!(outcome(r).output, json!({"rows": []}));
        let e = CallToolResult::error(vec![ContentBlock::text("bad `x`")]);
        assert_eq!(
            outcome(e),
            ToolOutcome {
                output: json!("bad `x`"),
                is_error: true
            }
        );
    }
}
