//! The MCP server: rmcp's `ServerHandler` over the tool engine (`parley_tools`: tools and
//! prompts), served statelessly over Streamable HTTP (no sessions, JSON responses, POST only)
//! so any Lambda instance can answer any request. `tools/call` and `tools/list` usually skip
//! rmcp's per-request service through the direct path in [`direct`]; everything else goes
//! through rmcp's `StreamableHttpService`. Both hand the engine's pipeline
//! (`parley_tools::call::Engine::call`: audit record and metrics included) the verified
//! `Caller` from the request, and both answer through [`outcome::to_call_result`].

mod direct;
pub mod listing;
pub mod outcome;

pub use direct::McpService;
pub use outcome::to_call_result;

use std::sync::Arc;

use indexmap::IndexMap;
use parley_tools::call::{Caller, Engine, Request};
use rmcp::model::{
    CallToolRequestMethod, CallToolRequestParams, CallToolResponse, CallToolResult, ConstString,
    CustomRequest, CustomResult, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    Implementation, JsonObject, ListPromptsResult, ListToolsResult, PaginatedRequestParams,
    PromptMessage, Role, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};

use crate::auth;
use crate::config::McpConfig;

/// What every deployment says about its tools, whatever the data; each tools file's own
/// `instructions` follow it.
const INSTRUCTIONS: &str = "Parley answers over a Postgres database through the tools listed \
here. Each tool runs one declared SQL statement and returns JSON rows (`rows`, `row_count`, and \
`truncated` when more rows matched than were returned). Tools annotated read-only change \
nothing; the others change data only as their descriptions say. Prefer the most specific tool \
and quote values exactly as returned.";

/// The handler rmcp calls for each request; cheap to clone (`Arc`s).
#[derive(Clone)]
pub struct ParleyMcp {
    engine: Engine,
    instructions: Arc<str>,
    listed: Arc<[rmcp::model::Tool]>,
    prompts: Arc<[rmcp::model::Prompt]>,
}

impl ParleyMcp {
    /// The engine's tools and prompts as MCP publishes them, the ad-hoc SQL tools (when on)
    /// listed after the declared ones.
    pub fn new(engine: Engine) -> Self {
        let catalog = engine.catalog();
        let mut instructions = std::iter::once(INSTRUCTIONS)
            .chain(catalog.instructions().iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("\n\n");
        let sql = engine.sql().map(|sql| sql.listed()).unwrap_or_default();
        if engine.sql().is_some() {
            instructions = format!("{instructions}\n\n{SQL_INSTRUCTIONS}");
        }
        let listed = catalog
            .listed()
            .iter()
            .chain(sql)
            .map(listing::tool)
            .collect();
        let prompts = catalog.prompts().iter().map(listing::prompt).collect();
        Self {
            instructions: instructions.into(),
            listed,
            prompts,
            engine,
        }
    }
}

/// Added to the instructions when the ad-hoc SQL tools are on.
const SQL_INSTRUCTIONS: &str = "For questions no other tool answers, write SQL: list_tables and describe_table show what there is, explain_sql shows a plan, run_sql runs one read-only query. Prefer a specific tool when one fits.";

/// The verified caller and request id of the request rmcp's transport kept.
fn origin_of(context: &RequestContext<RoleServer>) -> (Caller, String) {
    match context.extensions.get::<http::request::Parts>() {
        Some(parts) => (auth::caller_of(parts), request_id(parts)),
        None => (Caller::Service, "none".into()),
    }
}

/// The request's id (`x-request-id`, set by the serving layer) as the engine may put it in SQL
/// comments (`parley_tools::audit::request_id`).
fn request_id(parts: &http::request::Parts) -> String {
    parley_tools::audit::request_id(
        parts
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok()),
    )
}

impl ServerHandler for ParleyMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .build(),
        )
        .with_server_info(
            Implementation::new("parley-mcp", env!("CARGO_PKG_VERSION"))
                .with_title("Parley")
                .with_description("Tools over Postgres, declared in tools files."),
        )
        .with_instructions(self.instructions.to_string())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(self.prompts.to_vec()))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.prompt(&request.name, request.arguments.as_ref())
            .map(Into::into)
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
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // rmcp moved the request's `_meta` into the context.
        let (caller, request_id) = origin_of(&context);
        self.call(request, &context.meta.0.0, &caller, &request_id)
            .await
            .map(Into::into)
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
        ListToolsResult::with_all_items(self.listed.to_vec())
    }

    /// `prompts/get`: the prompt's text with its arguments in place. Arguments are strings;
    /// an unknown prompt, an unknown or non-string argument or a missing required one is an
    /// invalid-params error.
    fn prompt(
        &self,
        name: &str,
        arguments: Option<&JsonObject>,
    ) -> Result<GetPromptResult, ErrorData> {
        let Some(prompt) = self.engine.catalog().prompt(name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt `{name}`; call prompts/list for the available prompts"),
                None,
            ));
        };
        let mut given = IndexMap::new();
        for (key, value) in arguments.into_iter().flatten() {
            if !prompt.arguments.iter().any(|a| &a.name == key) {
                return Err(ErrorData::invalid_params(
                    format!("prompt `{name}` takes no argument `{key}`"),
                    None,
                ));
            }
            let Some(text) = value.as_str() else {
                return Err(ErrorData::invalid_params(
                    format!("argument `{key}` of prompt `{name}` must be a string"),
                    None,
                ));
            };
            given.insert(key.clone(), text.to_owned());
        }
        if let Some(missing) = prompt
            .arguments
            .iter()
            .find(|a| a.required && !given.contains_key(&a.name))
        {
            return Err(ErrorData::invalid_params(
                format!("prompt `{name}` needs the argument `{}`", missing.name),
                None,
            ));
        }
        let mut result = GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            prompt.render(&given),
        )]);
        result.description = prompt.description.clone();
        Ok(result)
    }

    /// `tools/call`, for rmcp's handler and the direct path alike: `meta` is the request's
    /// `_meta` (the idempotency key, the user's approval), `caller` the verified caller the
    /// auth layer found, `request_id` the request's (already safe to put in SQL comments).
    /// The engine runs the call to its end and audits it, refused ones included; a call that
    /// reached no tool is a JSON-RPC error (invalid params, or internal while shutting down).
    pub(crate) async fn call(
        &self,
        request: CallToolRequestParams,
        meta: &JsonObject,
        caller: &Caller,
        request_id: &str,
    ) -> Result<CallToolResult, ErrorData> {
        let request = Request {
            tool: request.name.into_owned(),
            arguments: request.arguments,
            meta: meta.clone(),
            request_id: request_id.to_owned(),
        };
        self.engine
            .call(request, caller)
            .await
            .map(to_call_result)
            .map_err(outcome::to_error)
    }
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
