//! The MCP server: rmcp's `ServerHandler` over the tool catalog, served statelessly over
//! Streamable HTTP (no sessions, JSON responses, POST only) so any Lambda instance can answer
//! any request. `tools/call` and `tools/list` usually skip rmcp's per-request service through
//! the direct path in [`fast`]; everything else goes through rmcp's `StreamableHttpService`.

mod fast;

pub use fast::McpService;

use std::sync::Arc;

use deadpool_postgres::Pool;
use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, CallToolResponse, CallToolResult, ConstString,
    CustomRequest, CustomResult, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};

use crate::config::McpConfig;
use crate::tools::{self, Catalog, ToolError};

const INSTRUCTIONS: &str = "Parley answers questions over a Postgres database. Every tool is a \
read-only query that returns JSON rows (`rows`, `row_count`, and `truncated` when more rows \
matched than were returned). Prefer the most specific tool, resolve place names with the \
lookup tools before filtering by them, and quote numbers exactly as returned.";

/// The handler rmcp calls for each request; cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct ParleyMcp {
    catalog: Arc<Catalog>,
    pool: Pool,
}

impl ParleyMcp {
    pub fn new(catalog: Arc<Catalog>, pool: Pool) -> Self {
        Self { catalog, pool }
    }
}

impl ServerHandler for ParleyMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("parley-mcp", env!("CARGO_PKG_VERSION"))
                    .with_title("Parley")
                    .with_description("Read-only tools over Postgres, declared in a tools file."),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(self.list())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request).await.map(Into::into)
    }

    /// rmcp parses a `tools/call` whose params are missing or lack `name` as a request for an
    /// unknown method; for the client it is a known method called with bad params (-32602).
    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if request.method == CallToolRequestMethod::VALUE {
            return Err(ErrorData::invalid_params(
                "tools/call needs `params` with the tool's `name` (and its `arguments`)",
                None,
            ));
        }
        Err(ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            request.method,
            None,
        ))
    }
}

impl ParleyMcp {
    /// `tools/list`: every declared tool, in one page.
    fn list(&self) -> ListToolsResult {
        ListToolsResult::with_all_items(self.catalog.listed().to_vec())
    }

    /// `tools/call`, for rmcp's handler and the direct path alike.
    async fn call(&self, request: CallToolRequestParams) -> Result<CallToolResult, ErrorData> {
        // An unknown tool is a protocol error (the spec's -32602); everything after this point
        // is a tool result the model can read and act on.
        let Some(tool) = self.catalog.get(&request.name) else {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{}`; call tools/list for the available tools",
                    request.name
                ),
                None,
            ));
        };
        let started = std::time::Instant::now();
        let outcome = match tools::params::parse_arguments(&tool.params, request.arguments.as_ref())
        {
            Ok(args) => tools::exec::run(&self.pool, tool, &args)
                .await
                .map_err(ToolError::from),
            Err(e) => Err(ToolError::from(e)),
        };
        match &outcome {
            Ok(out) => tracing::info!(
                tool = %tool.name,
                rows = out.row_count,
                truncated = out.truncated.is_some(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "tool call"
            ),
            Err(e) => {
                tracing::info!(tool = %tool.name, error = %e.log_kind(), "tool call refused or failed")
            }
        }
        Ok(tools::to_call_result(outcome))
    }
}

/// `Content-Type` names JSON, parameters aside (rmcp's own test; `application/jsonx` is not).
pub(crate) fn is_json_media_type(value: &str) -> bool {
    let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
    essence.trim().eq_ignore_ascii_case("application/json")
}

/// The tower service mounted at `/mcp`: the direct path in front of rmcp's transport.
pub fn service(config: &McpConfig, handler: ParleyMcp) -> McpService {
    McpService::new(config, handler.clone(), transport(config, handler))
}

/// rmcp's Streamable HTTP transport, stateless with JSON responses.
fn transport(
    config: &McpConfig,
    handler: ParleyMcp,
) -> StreamableHttpService<ParleyMcp, NeverSessionManager> {
    let mut http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_sse_retry(None)
        .with_max_request_body_bytes(config.max_body_bytes);
    http = match &config.allowed_hosts {
        Some(hosts) => http.with_allowed_hosts(hosts.clone()),
        None => http.disable_allowed_hosts(),
    };
    if !config.allowed_origins.is_empty() {
        http = http.with_allowed_origins(config.allowed_origins.clone());
    }
    StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(NeverSessionManager::default()),
        http,
    )
}
