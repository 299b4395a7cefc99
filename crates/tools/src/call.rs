//! One tool call, the one pipeline every user of the engine goes through (the mcp function, and
//! `parley eval`, the bench and the tests through [`bind`]): the approval read, the arguments
//! checked, the caller's values bound, the idempotency key read, the texts embedded, then the
//! statement in its transaction (settings, caller, role, reset) or an ad-hoc SQL tool, and one
//! audit record and one metrics document (docs/metrics.md) whatever happens. It knows no
//! transport: [`Engine::call`] takes the verified [`Caller`] and the request's parts, and
//! returns the rows, a [`ToolError`] (a tool result) or a [`CallError`] (no tool was reached).

mod error;

pub use error::{CallError, ToolError};

use std::sync::Arc;
use std::time::Instant;

use deadpool_postgres::Pool;
use parley_core::db::Statements;
use parley_core::jwt::VerifiedClaims;
use parley_core::metrics::{Document, Metrics};
use parley_embed::Embedder;
use parley_wire::{IdempotencyKey, META_APPROVED};
use serde_json::{Map, Value};
use tracing::Instrument;

use crate::adhoc::{self, SqlTools};
use crate::audit::{self, Approval, Audit, Marker, Outcome, Record};
use crate::catalog::Catalog;
use crate::output::ToolOutput;
use crate::rerank::{self, Reranker};
use crate::tools::params::{self, SqlValue};
use crate::tools::{self, ToolSpec, exec};

/// Who a call runs for, as the edge verified it from the request's credentials; never from an
/// argument or a header the engine reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Caller {
    /// The service token (or auth off): a trusted caller that carries no user.
    Service,
    /// A user JWT whose signature and registered claims were verified.
    User(VerifiedClaims),
}

impl Caller {
    /// The user's verified claims; `None` for the service.
    pub fn user(&self) -> Option<&VerifiedClaims> {
        match self {
            Caller::User(claims) => Some(claims),
            Caller::Service => None,
        }
    }

    /// How the audit names the caller: the user's subject, or `service`.
    fn audit_name(&self) -> String {
        match self {
            Caller::User(claims) => claims.subject.clone(),
            Caller::Service => "service".into(),
        }
    }
}

/// One `tools/call` as the edge received it.
#[derive(Debug, Clone)]
pub struct Request {
    /// The tool's name, as the client sent it (not yet known to exist).
    pub tool: String,
    pub arguments: Option<Map<String, Value>>,
    /// The request's `_meta`: the idempotency key, the user's approval.
    pub meta: Map<String, Value>,
    /// The request's id, already safe for SQL comments (`audit::request_id`).
    pub request_id: String,
}

/// A declared tool's arguments checked and its caller-bound values filled in, with the rows
/// the call asked for: what [`Engine::call`] binds before anything else runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    /// One value per parameter, in the order of `tool.params`; computed ones (embeddings, the
    /// model id) are still `Null`.
    pub values: Vec<SqlValue>,
    /// The call's limit argument within the tool's `max_rows` (`exec::row_limit`).
    pub row_limit: u64,
}

/// `arguments` checked against `tool`'s parameters and the caller's claims bound: the only
/// place a call's values are made, for the engine's calls and for whoever runs a tool's
/// statement another way (`parley eval`, the bench's floors).
pub fn bind(
    tool: &ToolSpec,
    arguments: Option<&Map<String, Value>>,
    caller: &Caller,
) -> Result<Bound, ToolError> {
    let mut values = params::parse_arguments(&tool.params, arguments)?;
    params::bind_caller(&tool.name, &tool.params, &mut values, caller.user())?;
    let row_limit = exec::row_limit(tool, &values);
    Ok(Bound { values, row_limit })
}

/// The engine of one deployment: the catalog, the pool and what calls need besides; cheap to
/// clone (`Arc`s and handles).
#[derive(Clone)]
pub struct Engine {
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
}

/// The `Tool` of a call's metrics when it names no tool there is.
const UNKNOWN_TOOL: &str = "(unknown)";

impl Engine {
    pub fn new(catalog: Arc<Catalog>, pool: Pool, embedder: Option<Embedder>) -> Self {
        Self {
            catalog,
            pool,
            statements: Statements::default(),
            embedder,
            reranker: None,
            sql: None,
            audit: Audit::Off,
            metrics: Metrics::off(),
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

    /// Serves the ad-hoc SQL tools too.
    pub fn with_sql(mut self, sql: Option<Arc<SqlTools>>) -> Self {
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

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The ad-hoc SQL tools, when they are on.
    pub fn sql(&self) -> Option<&SqlTools> {
        self.sql.as_deref()
    }

    /// One call for `caller`. Every call, refused ones included, leaves an audit record.
    ///
    /// The call runs in a task of its own: when the client goes away, hyper drops the
    /// request's future, and a call dropped there would still have run in Postgres (a
    /// statement runs to its end, a write may commit) with no audit record. The task runs
    /// the call and writes its record whatever happens to the answer; spawning costs a few
    /// microseconds against a call's hundreds.
    pub async fn call(
        &self,
        request: Request,
        caller: &Caller,
    ) -> Result<Result<ToolOutput, ToolError>, CallError> {
        let this = self.clone();
        let caller = caller.clone();
        let span = self.span(&request.tool);
        let call = tokio::spawn(
            async move { this.call_to_end(&request, &caller).await }.instrument(span.clone()),
        );
        match call.await {
            Ok(answer) => {
                if !span.is_disabled() {
                    call_ended(&span, &answer);
                }
                answer
            }
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Only a runtime shutting down cancels the task.
            Err(_) => Err(CallError::ShuttingDown),
        }
    }

    /// The span of one call (OpenTelemetry's GenAI `execute_tool`; docs/tracing.md), a child
    /// of the request's (whose parent is the chat's call, by its `traceparent`), named as its
    /// parent since rmcp's own span stands between them: the tool's
    /// name when the tools files or `[sql]` declare it (else `unknown`, as in the metrics),
    /// never its arguments.
    fn span(&self, tool: &str) -> tracing::Span {
        tracing::info_span!(
            target: parley_core::telemetry::traces::TARGET,
            parent: parley_core::telemetry::traces::exported_parent(),
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", self.known_name(tool)),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = self.known_name(tool),
            "gen_ai.tool.type" = "function",
            parley.tool.outcome = tracing::field::Empty,
            "error.type" = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    }

    /// `tool` if declared, else [`UNKNOWN_TOOL`]: a caller's made-up name is not recorded.
    fn known_name<'a>(&self, tool: &'a str) -> &'a str {
        let known = self.catalog.get(tool).is_some()
            || self
                .sql
                .as_ref()
                .is_some_and(|sql| sql.kind(tool).is_some());
        if known { tool } else { UNKNOWN_TOOL }
    }

    /// [`Self::call`]'s work, from the arguments to the audit record.
    async fn call_to_end(
        &self,
        request: &Request,
        caller: &Caller,
    ) -> Result<Result<ToolOutput, ToolError>, CallError> {
        let at = chrono::Utc::now();
        let started = Instant::now();
        // Read before anything runs: a call under an approval it may not use runs not at all.
        let approval = approval_of(&request.meta, caller);
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
                    request_id: request.request_id.clone(),
                    caller: caller.audit_name(),
                    tool: request.tool.clone(),
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
            let known = self.catalog.get(&request.tool).is_some()
                || self
                    .sql
                    .as_ref()
                    .is_some_and(|sql| sql.kind(&request.tool).is_some());
            self.measure(
                if known { &request.tool } else { UNKNOWN_TOOL },
                Err(Outcome::Refused),
                started,
            );
            tracing::info!(tool = %request.tool, error = %refusal.why, "tool call refused");
            record(
                &|_| false,
                None,
                Err((Outcome::Refused, refusal.why.clone())),
            );
            return Err(CallError::Approval(refusal.why));
        }
        let failed = |e: &ToolError| (e.outcome(), e.log_kind());
        let marker = Marker {
            tool: &request.tool,
            request_id: &request.request_id,
        };
        if let Some((sql, kind)) = self
            .sql
            .as_ref()
            .and_then(|sql| sql.kind(&request.tool).map(|kind| (sql, kind)))
        {
            let outcome = sql
                .call(kind, request.arguments.as_ref(), marker)
                .await
                .map_err(ToolError::from);
            log_call(&request.tool, &outcome, started);
            self.measure(
                &request.tool,
                outcome.as_ref().map_err(|e| e.outcome()),
                started,
            );
            record(
                &|_| false,
                adhoc::statement_of(request.arguments.as_ref()),
                outcome.as_ref().map_err(failed),
            );
            return Ok(outcome);
        }
        // An unknown tool is a protocol error; everything after this point is a tool result
        // the model can read and act on.
        let Some(tool) = self.catalog.get(&request.tool) else {
            // The name is the caller's, not a declared one: it stays out of the metrics.
            self.measure(UNKNOWN_TOOL, Err(Outcome::Refused), started);
            record(
                &|_| false,
                None,
                Err((Outcome::Refused, "unknown tool".into())),
            );
            return Err(CallError::UnknownTool(request.tool.clone()));
        };
        let outcome = self
            .run(
                tool,
                request.arguments.as_ref(),
                &request.meta,
                caller,
                marker,
            )
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
        Ok(outcome)
    }

    /// Arguments checked, caller-bound values filled in, the key read, texts embedded (before
    /// any connection is taken from the pool), then the statement.
    async fn run(
        &self,
        tool: &ToolSpec,
        arguments: Option<&Map<String, Value>>,
        meta: &Map<String, Value>,
        caller: &Caller,
        marker: Marker<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let Bound {
            values: mut args,
            row_limit,
        } = bind(tool, arguments, caller)?;
        let user = caller.user();
        let key = IdempotencyKey::from_meta(meta)?;
        tools::embedding::bind(&tool.params, &mut args, self.embedder.as_ref()).await?;
        let (Some(declared), Some(reranker)) = (&tool.rerank, &self.reranker) else {
            return Ok(exec::run(
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
        let fetched = exec::run_capped(
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

    /// A call's `ToolCalls`, `ToolErrors`, `ToolDuration` and `ToolRows`, by `Tool` (a name
    /// the tools files or `[sql]` declare, never one a caller made up) and by `Outcome` (the
    /// audit's).
    fn measure(&self, tool: &str, outcome: Result<&ToolOutput, Outcome>, started: Instant) {
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

/// Records a call's outcome (the audit's word) on its span; a failure's kind as `error.type`.
fn call_ended(span: &tracing::Span, answer: &Result<Result<ToolOutput, ToolError>, CallError>) {
    let outcome = match answer {
        Ok(Ok(_)) => Outcome::Ok,
        Ok(Err(e)) => e.outcome(),
        Err(CallError::UnknownTool(_) | CallError::Approval(_)) => Outcome::Refused,
        Err(CallError::ShuttingDown) => Outcome::ToolError,
    };
    span.record("parley.tool.outcome", outcome.as_str());
    if outcome != Outcome::Ok {
        span.record("error.type", outcome.as_str());
        span.record("otel.status_code", "ERROR");
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
fn approval_of(
    meta: &Map<String, Value>,
    caller: &Caller,
) -> Result<Option<Approval>, ApprovalRefused> {
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

/// The call's log line: counts and kinds, never a value the caller sent.
fn log_call(tool: &str, outcome: &Result<ToolOutput, ToolError>, started: Instant) {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::catalog::file;
    use crate::output::Limits;
    use crate::tools::params::ArgumentError;

    /// A tool that reads the caller's own rows, with a limit argument (`max_rows` 100).
    fn mine() -> ToolSpec {
        let text = "[[tool]]\nname = \"mine\"\ndescription = \"d\"\nlimit_param = \"limit\"\n\
                    sql = \"SELECT :owner AS o LIMIT :limit\"\n\
                    [tool.params.owner]\ntype = \"string\"\nfrom = \"caller.sub\"\n\
                    [tool.params.limit]\ntype = \"integer\"\n";
        file::parse(text, Limits::default())
            .unwrap()
            .tools
            .remove(0)
    }

    fn user(sub: &str) -> Caller {
        Caller::User(VerifiedClaims {
            subject: sub.into(),
            claims: Map::from_iter([("sub".into(), json!(sub))]),
        })
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn binding_fills_the_callers_values_and_caps_the_limit() {
        let spec = mine();
        let bound = bind(&spec, Some(&args(json!({"limit": 5000}))), &user("u-1")).unwrap();
        assert_eq!(bound.values[spec.limit_param.unwrap()], SqlValue::Int(5000));
        assert!(bound.values.contains(&SqlValue::Text("u-1".into())));
        assert_eq!(bound.row_limit, spec.max_rows);
        let bound = bind(&spec, None, &user("u-1")).unwrap();
        assert_eq!(bound.row_limit, spec.max_rows);
        let bound = bind(&spec, Some(&args(json!({"limit": 3}))), &user("u-1")).unwrap();
        assert_eq!(bound.row_limit, 3);
    }

    #[test]
    fn binding_refuses_a_caller_named_as_an_argument_and_a_missing_user() {
        let spec = mine();
        let named = bind(&spec, Some(&args(json!({"owner": "u-2"}))), &user("u-1"));
        assert!(
            matches!(named, Err(ToolError::Arguments(ArgumentError::FromCaller(ref p))) if p == "owner"),
            "{named:?}"
        );
        let service = bind(&spec, None, &Caller::Service);
        assert!(matches!(service, Err(ToolError::Caller(_))), "{service:?}");
    }
}
