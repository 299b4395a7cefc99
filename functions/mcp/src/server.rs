//! The MCP server: rmcp's `ServerHandler` over the tool catalog (tools and prompts), served
//! statelessly over Streamable HTTP (no sessions, JSON responses, POST only) so any Lambda
//! instance can answer any request. `tools/call` and `tools/list` usually skip rmcp's
//! per-request service through the direct path in [`direct`]; everything else goes through
//! rmcp's `StreamableHttpService`. Both hand a call the verified `Caller` from the request, and
//! both answer through [`outcome::to_call_result`]. Every call leaves one metrics document
//! (docs/metrics.md), as it leaves one audit record.

mod direct;
pub mod outcome;

pub use direct::McpService;
pub use outcome::{ToolError, to_call_result};

use std::sync::Arc;

use deadpool_postgres::Pool;
use indexmap::IndexMap;
use parley_core::db::Statements;
use parley_core::jwt::VerifiedClaims;
use parley_core::metrics::{Document, Metrics};
use parley_embed::Embedder;
use parley_wire::{IdempotencyKey, META_APPROVED};
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

use crate::adhoc::{self, SqlTools};
use crate::audit::{self, Approval, Audit, Marker, Outcome, Record};
use crate::auth::Caller;
use crate::catalog::Catalog;
use crate::config::McpConfig;
use crate::output::ToolOutput;
use crate::rerank::{self, Reranker};
use crate::tools::params::SqlValue;
use crate::tools::{self, ToolSpec};

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
    catalog: Arc<Catalog>,
    pool: Pool,
    /// `MCP_STATEMENTS`: unnamed (the default) or cached per connection.
    statements: Statements,
    /// Loaded at start-up only when some tool embeds text (see `tools::embedding`).
    embedder: Option<Embedder>,
    /// `RERANK`: reorders the rows of the tools that declare `rerank` (see `crate::rerank`).
    reranker: Option<Reranker>,
    /// The ad-hoc SQL tools, when a tools file has `[sql]`.
    sql: Option<Arc<SqlTools>>,
    audit: Audit,
    metrics: Metrics,
    instructions: Arc<str>,
    listed: Arc<[rmcp::model::Tool]>,
}

impl ParleyMcp {
    pub fn new(catalog: Arc<Catalog>, pool: Pool, embedder: Option<Embedder>) -> Self {
        let instructions = std::iter::once(INSTRUCTIONS)
            .chain(catalog.instructions().iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join("\n\n");
        let listed = catalog.listed().to_vec().into();
        Self {
            catalog,
            pool,
            statements: Statements::default(),
            embedder,
            reranker: None,
            sql: None,
            audit: Audit::Off,
            metrics: Metrics::off(),
            instructions: instructions.into(),
            listed,
        }
    }

    /// Sends the tools' statements as `statements` says.
    pub fn with_statements(mut self, statements: Statements) -> Self {
        self.statements = statements;
        self
    }

    /// Reranks the rows of the tools that declare `rerank`.
    pub fn with_reranker(mut self, reranker: Option<Reranker>) -> Self {
        self.reranker = reranker;
        self
    }

    /// Serves the ad-hoc SQL tools too, listed after the declared ones.
    pub fn with_sql(mut self, sql: Option<Arc<SqlTools>>) -> Self {
        if let Some(tools) = &sql {
            self.listed = self
                .catalog
                .listed()
                .iter()
                .chain(tools.listed())
                .cloned()
                .collect();
            self.instructions = format!("{}\n\n{SQL_INSTRUCTIONS}", self.instructions).into();
        }
        self.sql = sql;
        self
    }

    /// Where each call's audit record goes (off unless set).
    pub fn with_audit(mut self, audit: Audit) -> Self {
        self.audit = audit;
        self
    }

    /// Where each call's metrics go (nowhere unless set).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// A call's `ToolCalls`, `ToolErrors`, `ToolDuration` and `ToolRows`, by `Tool` (a name
    /// the tools files or `[sql]` declare, never one a caller made up) and by `Outcome` (the
    /// audit's).
    fn measure(
        &self,
        tool: &str,
        outcome: Result<&ToolOutput, Outcome>,
        started: std::time::Instant,
    ) {
        let (rows, outcome) = match outcome {
            Ok(out) => (out.row_count as u64, Outcome::Ok),
            Err(outcome) => (0, outcome),
        };
        self.metrics.emit(
            Document::new()
                .dimension("Tool", tool)
                .dimension("Outcome", outcome.as_str())
                .count("ToolCalls", 1)
                .count("ToolErrors", u64::from(outcome != Outcome::Ok))
                .millis("ToolDuration", started.elapsed())
                .count("ToolRows", rows),
        );
    }
}

/// Added to the instructions when the ad-hoc SQL tools are on.
const SQL_INSTRUCTIONS: &str = "For questions no other tool answers, write SQL: list_tables and describe_table show what there is, explain_sql shows a plan, run_sql runs one read-only query. Prefer a specific tool when one fits.";

/// The verified caller and request id of the request rmcp's transport kept.
fn origin_of(context: &RequestContext<RoleServer>) -> (Caller, String) {
    match context.extensions.get::<http::request::Parts>() {
        Some(parts) => (Caller::of(parts), crate::audit::request_id(parts)),
        None => (Caller::Service, "none".into()),
    }
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
        Ok(ListPromptsResult::with_all_items(
            self.catalog.listed_prompts().to_vec(),
        ))
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
        let Some(prompt) = self.catalog.prompt(name) else {
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
    /// Every call, refused ones included, leaves an audit record.
    ///
    /// The call runs in a task of its own: when the client goes away, hyper drops the
    /// request's future, and a call dropped there would still have run in Postgres (a
    /// statement runs to its end, a write may commit) with no audit record. The task runs
    /// the call and writes its record whatever happens to the answer; spawning costs a few
    /// microseconds against a call's hundreds.
    pub(crate) async fn call(
        &self,
        request: CallToolRequestParams,
        meta: &JsonObject,
        caller: &Caller,
        request_id: &str,
    ) -> Result<CallToolResult, ErrorData> {
        let this = self.clone();
        let (meta, caller, request_id) = (meta.clone(), caller.clone(), request_id.to_owned());
        let call =
            tokio::spawn(
                async move { this.call_to_end(request, &meta, &caller, &request_id).await },
            );
        match call.await {
            Ok(answer) => answer,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only a runtime shutting down cancels the task.
            Err(_) => Err(ErrorData::internal_error(
                "the server is shutting down",
                None,
            )),
        }
    }

    /// [`Self::call`]'s work, from the arguments to the audit record.
    async fn call_to_end(
        &self,
        request: CallToolRequestParams,
        meta: &JsonObject,
        caller: &Caller,
        request_id: &str,
    ) -> Result<CallToolResult, ErrorData> {
        let at = chrono::Utc::now();
        let started = std::time::Instant::now();
        // Read before anything runs: a call under an approval it may not use runs not at all.
        let approval = approval_of(meta, caller);
        let approved = match &approval {
            Ok(approval) => approval.clone(),
            Err(refusal) => refusal.claimed.clone(),
        };
        // One record per call, built only when the audit is on. An error is (outcome, what
        // went wrong in the log's words).
        let record = |sensitive: &dyn Fn(&str) -> bool,
                      statement: Option<&str>,
                      result: Result<&ToolOutput, (Outcome, String)>| {
            self.audit.record(|| {
                let (rows, truncated, outcome, error, replayed) = match result {
                    Ok(out) => (
                        Some(i32::try_from(out.row_count).unwrap_or(i32::MAX)),
                        out.truncated.is_some(),
                        Outcome::Ok,
                        None,
                        out.replayed,
                    ),
                    Err((outcome, error)) => (None, false, outcome, Some(error), false),
                };
                Record {
                    at,
                    request_id: request_id.to_owned(),
                    caller: match caller {
                        Caller::User(claims) => claims.subject.clone(),
                        Caller::Service => "service".into(),
                    },
                    tool: request.name.to_string(),
                    arguments: audit::redact(request.arguments.as_ref(), sensitive),
                    statement: statement.map(str::to_owned),
                    rows,
                    truncated,
                    duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                    outcome,
                    error,
                    approval: approved.clone(),
                    replayed,
                }
            });
        };
        if let Err(refusal) = approval {
            let known = self.catalog.get(&request.name).is_some()
                || self
                    .sql
                    .as_ref()
                    .is_some_and(|sql| sql.kind(&request.name).is_some());
            self.measure(
                if known { &request.name } else { UNKNOWN_TOOL },
                Err(Outcome::Refused),
                started,
            );
            tracing::info!(tool = %request.name, error = %refusal.why, "tool call refused");
            record(
                &|_| false,
                None,
                Err((Outcome::Refused, refusal.why.clone())),
            );
            return Err(ErrorData::invalid_params(
                format!(
                    "`_meta[\"{META_APPROVED}\"]` {}; nothing was run",
                    refusal.why
                ),
                None,
            ));
        }
        let failed = |e: &ToolError| (e.outcome(), e.log_kind());
        let marker = Marker {
            tool: &request.name,
            request_id,
        };
        if let Some((sql, kind)) = self
            .sql
            .as_ref()
            .and_then(|sql| sql.kind(&request.name).map(|kind| (sql, kind)))
        {
            let outcome = sql
                .call(kind, request.arguments.as_ref(), marker)
                .await
                .map_err(ToolError::from);
            log_call(&request.name, &outcome, started);
            self.measure(
                &request.name,
                outcome.as_ref().map_err(|e| e.outcome()),
                started,
            );
            record(
                &|_| false,
                adhoc::statement_of(request.arguments.as_ref()),
                outcome.as_ref().map_err(failed),
            );
            return Ok(to_call_result(outcome));
        }
        // An unknown tool is a protocol error (the spec's -32602); everything after this point
        // is a tool result the model can read and act on.
        let Some(tool) = self.catalog.get(&request.name) else {
            // The name is the caller's, not a declared one: it stays out of the metrics.
            self.measure(UNKNOWN_TOOL, Err(Outcome::Refused), started);
            record(
                &|_| false,
                None,
                Err((Outcome::Refused, "unknown tool".into())),
            );
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool `{}`; call tools/list for the available tools",
                    request.name
                ),
                None,
            ));
        };
        let user = match caller {
            Caller::User(claims) => Some(claims),
            Caller::Service => None,
        };
        let outcome = self
            .run(tool, request.arguments.as_ref(), meta, user, marker)
            .await;
        log_call(&tool.name, &outcome, started);
        if let Err(ToolError::Exec(tools::ExecError::PermissionDenied)) = &outcome {
            tools::privileges::log_refusal(&self.pool, tool).await;
        }
        self.measure(
            &tool.name,
            outcome.as_ref().map_err(|e| e.outcome()),
            started,
        );
        let sensitive = |name: &str| tool.params.iter().any(|p| p.sensitive && p.name == name);
        record(&sensitive, None, outcome.as_ref().map_err(failed));
        Ok(to_call_result(outcome))
    }

    /// Arguments checked, caller-bound values filled in, the key read, texts embedded (before
    /// any connection is taken from the pool), then the statement.
    async fn run(
        &self,
        tool: &ToolSpec,
        arguments: Option<&JsonObject>,
        meta: &JsonObject,
        user: Option<&VerifiedClaims>,
        marker: Marker<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let mut args = tools::params::parse_arguments(&tool.params, arguments)?;
        tools::params::bind_caller(&tool.name, &tool.params, &mut args, user)?;
        let key = IdempotencyKey::from_meta(meta)?;
        tools::embedding::bind(&tool.params, &mut args, self.embedder.as_ref()).await?;
        let (Some(declared), Some(reranker)) = (&tool.rerank, &self.reranker) else {
            return Ok(tools::exec::run(
                (&self.pool, self.statements),
                tool,
                &args,
                user,
                key.as_ref(),
                marker,
            )
            .await?);
        };
        // Fetched `depth` deep with room for as many bytes per row as the tool allows, then
        // reordered and cut to what the caller asked for.
        let row_limit = tools::exec::row_limit(tool, &args);
        let depth = rerank::fetch_depth(declared.depth, row_limit);
        let max_bytes = tool
            .max_bytes
            .saturating_mul(depth.div_ceil(row_limit.max(1)));
        let query = match &args[declared.query] {
            SqlValue::Text(text) => text.clone(),
            _ => String::new(),
        };
        if let Some(i) = tool.limit_param {
            args[i] = SqlValue::Int(i64::try_from(depth).unwrap_or(i64::MAX));
        }
        let caps = (depth, max_bytes);
        let fetched = tools::exec::run_capped(
            (&self.pool, self.statements),
            tool,
            &args,
            user,
            None,
            marker,
            caps,
        )
        .await?;
        Ok(reranker
            .reorder(
                &tool.name,
                &query,
                &declared.text,
                &fetched,
                row_limit,
                tool.max_bytes,
            )
            .await)
    }
}

/// Why a call's `_meta["parley/approved"]` was refused, and the approval it claimed when the
/// claim was well-formed (the audit keeps it: someone used an approval that was not theirs).
struct ApprovalRefused {
    why: String,
    claimed: Option<Approval>,
}

/// The approval a call runs under (`None` when it carries none). The client's word is checked
/// for shape, and a user caller must be the one who approved: an approval covers only the
/// calls made for that user. The service token carries no user to compare with; it is trusted
/// as it is for every call, and the audit keeps `service` beside the approval's claim.
fn approval_of(meta: &JsonObject, caller: &Caller) -> Result<Option<Approval>, ApprovalRefused> {
    let Some(value) = meta.get(META_APPROVED) else {
        return Ok(None);
    };
    let approval = Approval::from_json(value).map_err(|e| ApprovalRefused {
        why: e.to_string(),
        claimed: None,
    })?;
    match caller {
        Caller::User(claims) if claims.subject != approval.decided_by => Err(ApprovalRefused {
            why: "was decided by another user than the one calling: an approval covers only \
                  calls made for the user who gave it"
                .into(),
            claimed: Some(approval),
        }),
        _ => Ok(Some(approval)),
    }
}

/// The `Tool` of a call's metrics when it names no tool there is.
const UNKNOWN_TOOL: &str = "(unknown)";

/// The call's log line: counts and kinds, never a value the caller sent.
fn log_call(tool: &str, outcome: &Result<ToolOutput, ToolError>, started: std::time::Instant) {
    match outcome {
        Ok(out) => tracing::info!(
            tool = %tool,
            rows = out.row_count,
            truncated = out.truncated.is_some(),
            replayed = out.replayed,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "tool call"
        ),
        Err(e) => {
            tracing::info!(tool = %tool, error = %e.log_kind(), "tool call refused or failed")
        }
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
