//! The chat function as an MCP client: one connection per configured server, kept across warm
//! invocations, with the tool list cached, so a warm turn costs one HTTP request per tool call.
//!
//! Connections use the one-request `server/discover` lifecycle (2026-07-28) when the server
//! offers it and fall back to the classic `initialize` handshake. A dead connection is replaced
//! and the call retried once, but only for tools that are read-only, idempotent or keyed
//! (`_meta["parley/idempotency_key"]`): a call whose answer was lost may have run, and running
//! a write twice is worse than not knowing. A server that is down becomes a tool error, never a
//! failed turn. A 401 from the `parley` server fetches its token from Secrets Manager again
//! (rate-limited), reconnects with it and retries once, so a rotated token needs no cold start.
//!
//! Identity is per call, never per connection: listing and the handshake send the service
//! token, and with `MCP_CALLER_KEY` each `tools/call` to the `parley` server is sent with a
//! fresh assertion of the turn's user instead (see [`http`]), so one warm client serves every
//! user. Every `tools/call` carries an idempotency key in `_meta["parley/idempotency_key"]`.

mod catalog;
mod http_client;

use std::sync::Arc;
use std::time::Duration;

use parley_core::config::{ExposeSecret, SecretString};
use parley_core::jwt::assertion::Signer;
use parley_core::secrets::{RotatingSecret, Secrets};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation, MetaObject, ProtocolVersion, RequestMetaObject,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService, ServiceError,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Map, Value};
use tokio::sync::Mutex;
use uuid::Uuid;

pub use catalog::{Catalog, ServerGuidance, ToolTraits};
pub use parley_wire::IdempotencyKey;

use crate::auth::User;
use catalog::Listing;
use http_client::{Assertions, CALLER_META, UrlFree};
use parley_wire::{META_APPROVED, META_IDEMPOTENCY_KEY};

type Client = RunningService<RoleClient, ClientConfig>;

/// All configured MCP servers and the tools they offer.
pub struct McpClients {
    servers: Vec<Server>,
    http: reqwest::Client,
    timeout: Duration,
    catalog: Mutex<Option<Arc<Catalog>>>,
    /// Signs caller assertions (`MCP_CALLER_KEY`); `None` sends none.
    signer: Option<Signer>,
    assertions: Assertions,
}

/// The idempotency key of one tool call of a turn: `<turn>:<step>.<index>:<call id>`, or
/// `<turn>:<step>.<index>` when the model's call id is empty, not printable ASCII or too long
/// for a key. The turn id is unique per turn and the step and index place the call in it: a
/// call id alone is not, as servers that number calls per response (`call_0`) reuse it in the
/// next step, and a shared key would make the second write a replay of the first. A retry of
/// the same call keeps its key, so a server that records keys runs it once.
pub fn key_for_call(turn: &Uuid, call_id: &str, step: u32, index: usize) -> IdempotencyKey {
    let place = format!("{turn}:{step}.{index}");
    let printable = !call_id.is_empty() && call_id.bytes().all(|b| b.is_ascii_graphic());
    printable
        .then(|| IdempotencyKey::new(format!("{place}:{call_id}")).ok())
        .flatten()
        .unwrap_or_else(|| {
            IdempotencyKey::new(place).expect("a UUID and two numbers make a valid key")
        })
}

/// Who a tool call acts for, and its idempotency key.
#[derive(Debug, Clone, Copy)]
pub struct CallFor<'a> {
    pub user: &'a User,
    pub key: &'a IdempotencyKey,
    /// The user's approval of the call (`_meta["parley/approved"]`), for the server's audit.
    pub approved: Option<&'a Value>,
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

/// A tool call's outcome as the model and the trace see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    pub output: Value,
    pub is_error: bool,
    /// The call may have taken effect but its answer never arrived, and sending it again
    /// under the same idempotency key is safe: it runs once and answers with its first result.
    /// Such an outcome is not final (an approved call's is not stored as its result).
    pub unsettled: bool,
}

impl ToolOutcome {
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            output: Value::String(message.into()),
            is_error: true,
            unsettled: false,
        }
    }

    /// A write whose outcome is unknown (see [`outcome_unknown`]); unsettled when it may be
    /// sent again under its key.
    fn unknown(name: &str, why: &str, resendable: bool) -> Self {
        Self {
            unsettled: resendable,
            ..Self::error(outcome_unknown(name, why, resendable))
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
            signer: None,
            assertions: Assertions::default(),
        }
    }

    /// Sends a caller assertion signed with `key` (`MCP_CALLER_KEY`) on every tool call to the
    /// servers that carry the caller (the `parley` server); `None` sends none.
    pub fn with_caller_key(mut self, key: Option<&SecretString>) -> Self {
        self.signer = key.map(Signer::new);
        self
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
        let mut listed = Vec::new();
        let mut incomplete = false;
        let mut refused = Vec::new();
        for (i, server) in self.servers.iter().enumerate() {
            match self.list(server).await {
                Ok((tools, instructions)) => listed.push(Listing {
                    server: i,
                    server_name: server.config.name.clone(),
                    tools,
                    instructions,
                }),
                Err(e) => {
                    incomplete = true;
                    if e.unauthorized {
                        refused.push(refused_credentials(&server.config));
                    }
                    tracing::warn!(server = %server.config.name, error = %e.message, unauthorized = e.unauthorized, "cannot list MCP tools; the turn goes on without them");
                }
            }
        }
        let mut catalog = Catalog::build(listed, incomplete);
        catalog.refused = refused;
        let catalog = Arc::new(catalog);
        *cached = Some(catalog.clone());
        catalog
    }

    /// The server's tools and the `instructions` of its handshake.
    async fn list(
        &self,
        server: &Server,
    ) -> Result<(Vec<rmcp::model::Tool>, Option<String>), ConnectFailure> {
        let failure = |message: String, unauthorized: bool| ConnectFailure {
            message,
            unauthorized,
            token_generation: 0,
        };
        for attempt in 1..=2 {
            let connected = self.connect_authorized(server).await?;
            match tokio::time::timeout(self.timeout, connected.client.list_all_tools()).await {
                Ok(Ok(tools)) => {
                    let instructions = connected
                        .client
                        .peer_info()
                        .and_then(|info| info.instructions.clone());
                    return Ok((tools, instructions));
                }
                Ok(Err(e)) => {
                    self.forget(server, &connected.client).await;
                    let renewed = attempt == 1
                        && e.auth_challenge().is_some()
                        && self.renew_token(server, connected.token_generation).await;
                    if !renewed {
                        return Err(failure(e.to_string(), e.auth_challenge().is_some()));
                    }
                }
                Err(_) => return Err(failure("timed out".into(), false)),
            }
        }
        Err(failure("the server refused the renewed token".into(), true))
    }

    /// Runs one call by the name the model used, for `by`, giving up at `deadline` (the
    /// turn's). Never fails: problems become tool errors.
    pub async fn call(
        &self,
        catalog: &Catalog,
        name: &str,
        arguments: Map<String, Value>,
        by: CallFor<'_>,
        deadline: tokio::time::Instant,
    ) -> ToolOutcome {
        let route = catalog.routes.get(name);
        let call = self.call_by_route(catalog, name, arguments, by);
        match tokio::time::timeout_at(deadline, call).await {
            Ok(outcome) => outcome,
            Err(_) => match route {
                Some(route) if route.traits.writes => ToolOutcome::unknown(
                    name,
                    "it did not answer before the turn ran out of time",
                    route.resendable,
                ),
                _ => ToolOutcome::error("the tool did not answer before the turn ran out of time"),
            },
        }
    }

    async fn call_by_route(
        &self,
        catalog: &Catalog,
        name: &str,
        arguments: Map<String, Value>,
        by: CallFor<'_>,
    ) -> ToolOutcome {
        let Some(route) = catalog.routes.get(name) else {
            return ToolOutcome::error(if !catalog.refused.is_empty() {
                format!(
                    "the tool `{name}` is unavailable: {}",
                    catalog.refused.join("; ")
                )
            } else if catalog.incomplete {
                format!(
                    "the tool `{name}` is unavailable right now: a tool server cannot be reached"
                )
            } else {
                format!("unknown tool `{name}`; use one of the tools offered")
            });
        };
        if let Err(problem) = route.schema.check(&arguments) {
            return ToolOutcome::error(format!("invalid arguments: {problem}"));
        }
        let server = &self.servers[route.server];
        let mut meta = Map::new();
        meta.insert(META_IDEMPOTENCY_KEY.into(), by.key.as_str().into());
        if let Some(approved) = by.approved {
            meta.insert(META_APPROVED.into(), approved.clone());
        }
        // The assertion itself stays out of the message (see `http`); the call holds its slot
        // until it ends.
        let caller = self
            .signer
            .as_ref()
            .filter(|_| server.config.carries_caller)
            .map(|signer| (signer, self.assertions.lend()));
        if let Some((_, lent)) = &caller {
            meta.insert(CALLER_META.into(), lent.reference().into());
        }
        if server.config.carries_caller {
            http_client::lend_trace_context(&mut meta);
        }
        let mut params =
            CallToolRequestParams::new(route.remote_name.clone()).with_arguments(arguments);
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
        // Once an attempt of a write was sent and its answer lost, the write may have run:
        // whatever the next attempt meets (a refused connection, a server gone, a refused
        // token), the model must hear "unknown", never "not run", or it retries with a new
        // call id (a new idempotency key) and the write happens twice.
        let mut maybe_ran = false;
        let unavailable = |maybe_ran: bool, why: &str, not_run: String| {
            if maybe_ran && route.traits.writes {
                ToolOutcome::unknown(name, why, true)
            } else {
                ToolOutcome::error(not_run)
            }
        };
        const RESEND_REFUSED: &str = "the connection to its server failed before the answer \
                                      arrived, and sending it again was refused";
        // Two attempts: the first may find a connection that died while the instance was
        // frozen or the server restarted; the second uses a fresh one.
        for attempt in 1..=2 {
            if let Some((signer, lent)) = &caller {
                // Fresh for each attempt, so a retry never sends an assertion near its expiry.
                match signer.sign(by.user.id.as_str(), &by.user.claims, unix_now()) {
                    Ok(assertion) => lent.set(assertion),
                    Err(too_large) => {
                        // Nothing was sent: the mcp function would refuse it for its length,
                        // and no retry makes the user's claims smaller.
                        tracing::warn!(server = %server.config.name, bytes = too_large.bytes, "caller assertion too large; tool call not sent");
                        return ToolOutcome::error(format!(
                            "the tool server `{}` cannot be called for this user: {too_large}; \
                             nothing was run, and retrying will not help",
                            server.config.name
                        ));
                    }
                }
            }
            let connected = match self.connect_authorized(server).await {
                Ok(c) => c,
                Err(e) if e.unauthorized => {
                    tracing::warn!(server = %server.config.name, error = %e.message, "MCP server refused the chat's credentials");
                    return ToolOutcome::error(refused_credentials(&server.config));
                }
                Err(e) => {
                    tracing::warn!(server = %server.config.name, error = %e.message, "MCP server unreachable");
                    return unavailable(
                        maybe_ran,
                        "the connection to its server failed before the answer arrived, and \
the server could not be reached to send it again",
                        format!(
                            "the tool server `{}` is unavailable right now; try again later or answer without it",
                            server.config.name
                        ),
                    );
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
                Ok(Err(e)) if caller.is_some() && e.auth_challenge().is_some() => {
                    // Only the user's assertion went with this call: renewing the service
                    // token would not help, and sending it instead would drop the user.
                    self.forget(server, &client).await;
                    tracing::warn!(server = %server.config.name, "MCP server refused the caller assertion; MCP_CALLER_KEY must be the same in the chat and mcp functions");
                    return unavailable(
                        maybe_ran,
                        RESEND_REFUSED,
                        format!(
                            "the tool server `{}` did not accept the user's identity; try again later or answer without it",
                            server.config.name
                        ),
                    );
                }
                Ok(Err(e)) if attempt == 1 && e.auth_challenge().is_some() => {
                    self.forget(server, &client).await;
                    if !self.renew_token(server, connected.token_generation).await {
                        tracing::warn!(server = %server.config.name, "MCP server refused the token");
                        return unavailable(
                            maybe_ran,
                            RESEND_REFUSED,
                            format!(
                                "the tool server `{}` refused Parley's credentials; try again later or answer without it",
                                server.config.name
                            ),
                        );
                    }
                }
                Ok(Err(e)) if attempt == 1 && route.resendable => {
                    tracing::info!(server = %server.config.name, error = %e, "MCP connection failed; reconnecting");
                    self.forget(server, &client).await;
                    // The request may have reached the server before the connection broke.
                    maybe_ran = true;
                }
                Ok(Err(e)) if !route.resendable => {
                    self.forget(server, &client).await;
                    tracing::warn!(server = %server.config.name, tool = %name, error = %e, "MCP call failed; not repeated, the tool is not idempotent");
                    return ToolOutcome::unknown(
                        name,
                        "the connection to its server failed before the answer arrived",
                        false,
                    );
                }
                Ok(Err(e)) if route.traits.writes => {
                    self.forget(server, &client).await;
                    tracing::warn!(server = %server.config.name, tool = %name, error = %e, "MCP call failed again");
                    return ToolOutcome::unknown(
                        name,
                        "the connection to its server failed twice",
                        true,
                    );
                }
                Ok(Err(e)) => {
                    self.forget(server, &client).await;
                    tracing::warn!(server = %server.config.name, error = %e, "MCP call failed");
                    return ToolOutcome::error(format!(
                        "the tool server `{}` failed to answer; try again later",
                        server.config.name
                    ));
                }
                Err(_) if route.traits.writes => {
                    return ToolOutcome::unknown(
                        name,
                        &format!("it did not answer within {} ms", self.timeout.as_millis()),
                        route.resendable,
                    );
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
    async fn connect_authorized(&self, server: &Server) -> Result<Connected, ConnectFailure> {
        match self.connect(server).await {
            Err(refused) if refused.unauthorized => {
                if self.renew_token(server, refused.token_generation).await {
                    self.connect(server).await
                } else {
                    Err(refused)
                }
            }
            other => other,
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
        let assertions = server
            .config
            .carries_caller
            .then(|| self.assertions.clone());
        let transport = StreamableHttpClientTransport::with_client(
            UrlFree::new(self.http.clone(), assertions),
            config,
        );
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("parley-chat", env!("CARGO_PKG_VERSION")),
        );
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        };
        // On a task of its own, outside the request's span: rmcp's service task keeps the span
        // current at its start for the connection's life, so a turn's span would never end
        // (nor be exported: docs/tracing.md), and later requests' log lines would name it.
        let mut connecting = tokio::spawn(info.serve_with_lifecycle(transport, lifecycle));
        let Ok(joined) = tokio::time::timeout(self.timeout, &mut connecting).await else {
            connecting.abort();
            return Err(failure("connecting timed out".to_owned(), false));
        };
        let client = joined
            .map_err(|e| failure(format!("connecting failed: {e}"), false))?
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

/// What the model (and so the user) is told of a server that answered 401 or 403: it was
/// reached and refused the chat's credentials, and the setting that holds them. Never the
/// token itself.
fn refused_credentials(server: &McpServer) -> String {
    let setting = match server.token_setting {
        Some(setting) => format!("{setting}, which must match the mcp function's"),
        None => format!("the `token` of `{}` in MCP_SERVERS", server.name),
    };
    format!(
        "the tool server `{}` refused the chat's credentials (HTTP 401/403); this needs fixing \
in the chat function's settings: check {setting}",
        server.name
    )
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What the model is told when a call that writes may or may not have run. `resendable`: the
/// call could be sent again as the same call; a new call from the model is a new call (with a
/// new idempotency key), so the model must check first either way.
fn outcome_unknown(name: &str, why: &str, resendable: bool) -> String {
    let not_repeated = if resendable {
        String::new()
    } else {
        format!(", and it was not repeated because `{name}` is not idempotent")
    };
    format!(
        "the outcome of this call to `{name}` is unknown: {why}. It may or may not have taken \
effect{not_repeated}. Check its effect before calling it again, or tell the user."
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
    ToolOutcome {
        output,
        is_error,
        unsettled: false,
    }
}

/// One MCP server whose tools the model may call.
#[derive(Debug, Clone)]
pub struct McpServer {
    pub name: String,
    pub url: url::Url,
    pub token: Option<SecretString>,
    /// The setting the token comes from when it can be re-read after a 401 (the `parley`
    /// server's `MCP_AUTH_TOKEN`, which Secrets Manager may rotate); `None` for `MCP_SERVERS`.
    pub token_setting: Option<&'static str>,
    /// Tool calls to it carry the signed-in user's assertion (with `MCP_CALLER_KEY`): true
    /// only for the `parley` server, so no other server ever receives one.
    pub carries_caller: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_idempotency_key_is_the_turn_the_place_of_the_call_and_its_id_when_that_fits() {
        let turn = Uuid::nil();
        let key = key_for_call(&turn, "call_abc", 1, 0);
        assert_eq!(key.as_str(), format!("{turn}:1.0:call_abc"));
        // The same call id in the next step is another call.
        let next = key_for_call(&turn, "call_abc", 2, 0);
        assert_ne!(key, next);
        for odd in ["", "call id", "café", &"x".repeat(240)] {
            let key = key_for_call(&turn, odd, 2, 3);
            assert_eq!(key.as_str(), format!("{turn}:2.3"), "{odd:?}");
        }
    }

    #[test]
    fn a_write_without_an_answer_is_reported_unknown_and_why_it_was_not_repeated() {
        let once = outcome_unknown("add_note", "it did not answer within 5 ms", false);
        assert!(
            once.contains("is unknown: it did not answer within 5 ms."),
            "{once}"
        );
        assert!(once.contains("not repeated because `add_note` is not idempotent"));
        let keyed = outcome_unknown("create_task", "the connection failed twice", true);
        assert!(
            keyed.contains("may or may not have taken effect. Check its effect"),
            "{keyed}"
        );
        assert!(!keyed.contains("not idempotent"));
    }

    #[test]
    fn structured_content_wins_over_text() {
        let mut r = CallToolResult::success(vec![ContentBlock::text("{\"rows\":[]}")]);
        r.structured_content = Some(json!({"rows": []}));
        assert_eq!(outcome(r).output, json!({"rows": []}));
        let e = CallToolResult::error(vec![ContentBlock::text("bad `x`")]);
        assert_eq!(outcome(e), ToolOutcome::error("bad `x`"));
    }
}
