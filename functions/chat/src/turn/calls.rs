//! One step's tool calls: which tools are on offer, which calls wait for the user's approval
//! instead of running, and how a call runs (or is refused in words the model can act on).
//! The chat's own tool, `show_chart` ([`chart`]), is offered beside the servers' tools and run
//! here by the chat ([`run_chart`]), never sent to a server nor held for approval.

use std::borrow::Cow;

use serde_json::{Map, Value};
use tokio::time::Instant;
use tracing::Instrument;

use super::Deps;
use super::outcome::TurnError;
use crate::auth::User;
use crate::nul;
use crate::turn::approval::{self, Pending, PendingApproval};
use crate::turn::chart::{self, ChartLimits};
use crate::turn::conversation::{Chart, Trace};
use crate::turn::llm::{ToolCall, ToolDef};
use crate::turn::mcp_client::{CallFor, Catalog, IdempotencyKey, ToolOutcome};

/// The call as it waits for the user's approval, when it does: the policy says its tool waits,
/// and it would run (its arguments are an object that fits the tool's schema, it is within the
/// step's cap and offered). A call that would be refused is not asked about: it runs as far as
/// its refusal, which the model reads and can correct, and is never sent.
pub(super) fn waiting(
    deps: &Deps<'_>,
    catalog: &Catalog,
    narrowed: Option<&[ToolDef]>,
    Call {
        call,
        step,
        over_cap,
        key,
    }: &Call<'_>,
) -> Option<Pending> {
    if *over_cap || not_offered(narrowed, &call.name) {
        return None;
    }
    let about = catalog.about(&call.name, deps.approval.policy)?;
    let arguments = parse_arguments(&call.arguments).ok()?;
    catalog.check_arguments(&call.name, &arguments).ok()?;
    let ttl = chrono::Duration::from_std(deps.approval.ttl).unwrap_or(chrono::Duration::MAX);
    Some(Pending {
        public: PendingApproval {
            id: approval::ApprovalId::new(),
            tool: call.name.clone(),
            server: catalog.server_of(&call.name).unwrap_or_default().to_owned(),
            arguments: nul::clean_json(Value::Object(arguments)),
            call_id: call.call_id.clone(),
            expires_at: chrono::Utc::now() + ttl,
            about,
        },
        step: *step,
        idempotency_key: key.as_str().to_owned(),
    })
}

/// The catalog's tools and, when there is any, `show_chart`; or only the tools the request
/// names (each must exist; `show_chart` is offered then only when named). A server's own tool
/// named `show_chart` is never offered: the name is the chat's.
pub(super) fn offered_tools<'a>(
    catalog: &'a Catalog,
    wanted: Option<&[String]>,
) -> Result<Cow<'a, [ToolDef]>, TurnError> {
    let servers = || catalog.tools.iter().filter(|t| t.name != chart::TOOL_NAME);
    let Some(wanted) = wanted else {
        if catalog.tools.is_empty() {
            return Ok(Cow::Borrowed(&catalog.tools));
        }
        return Ok(Cow::Owned(
            servers().cloned().chain([chart::tool_def()]).collect(),
        ));
    };
    // With a server unreachable its tools are missing from the catalog; that is an outage,
    // not a bad request, so the names are let through and any call to them becomes a tool
    // error.
    if let Some(unknown) = wanted
        .iter()
        .find(|n| *n != chart::TOOL_NAME && !catalog.contains(n) && !catalog.is_incomplete())
    {
        let known: Vec<&str> = servers()
            .map(|t| t.name.as_str())
            .chain([chart::TOOL_NAME])
            .collect();
        return Err(TurnError::UnknownTool {
            unknown: unknown.clone(),
            available: known.join(", "),
        });
    }
    let chart = wanted
        .iter()
        .any(|n| n == chart::TOOL_NAME)
        .then(chart::tool_def);
    Ok(Cow::Owned(
        servers()
            .filter(|t| wanted.contains(&t.name))
            .cloned()
            .chain(chart)
            .collect(),
    ))
}

/// One tool call the model made, where it stands in the turn.
pub(super) struct Call<'a> {
    pub(super) call: &'a ToolCall,
    pub(super) step: u32,
    /// Past `MAX_TOOL_CALLS_PER_STEP`: not run.
    pub(super) over_cap: bool,
    pub(super) key: IdempotencyKey,
}

/// Runs one call for `user`. Arguments that are not a JSON object become a tool error the
/// model sees, as does a call past `MAX_TOOL_CALLS_PER_STEP`, which is not run.
pub(super) async fn run_call(
    deps: &Deps<'_>,
    catalog: &Catalog,
    narrowed: Option<&[ToolDef]>,
    user: &User,
    Call {
        call,
        step,
        over_cap,
        key,
    }: Call<'_>,
    deadline: Instant,
) -> Trace {
    let started = Instant::now();
    let span = tool_span(call);
    let (args, outcome) = async {
        match parse_arguments(&call.arguments) {
            Ok(map) if over_cap => (
                Value::Object(map),
                ToolOutcome::error(over_cap_error(deps.limits.max_calls_per_step)),
            ),
            // A request that narrowed the tools is obeyed even if the model calls another one.
            Ok(map) if not_offered(narrowed, &call.name) => (
                Value::Object(map),
                ToolOutcome::error(not_offered_error(&call.name)),
            ),
            Ok(map) => {
                let args = Value::Object(map.clone());
                (
                    args,
                    deps.mcp
                        .call(
                            catalog,
                            &call.name,
                            map,
                            CallFor {
                                user,
                                key: &key,
                                approved: None,
                            },
                            deadline,
                        )
                        .await,
                )
            }
            Err(problem) => (
                Value::String(call.arguments.clone()),
                ToolOutcome::error(problem),
            ),
        }
    }
    .instrument(span.clone())
    .await;
    ended(&span, call, &outcome.output, outcome.is_error);
    traced(call, step, args, outcome.output, outcome.is_error, started)
}

/// The span of one tool call (OpenTelemetry's GenAI `execute_tool`; docs/tracing.md): the
/// tool's name and the call's id, never its arguments unless `OTEL_GENAI_CONTENT` says so.
/// A call to `MCP_URL` carries it to mcp as its parent.
fn tool_span(call: &ToolCall) -> tracing::Span {
    tracing::info_span!(
        target: parley_core::telemetry::traces::TARGET,
        "execute_tool",
        otel.name = %format_args!("execute_tool {}", call.name),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.call_id,
        "gen_ai.tool.type" = "function",
        "error.type" = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        gen_ai.tool.call.arguments = tracing::field::Empty,
        gen_ai.tool.call.result = tracing::field::Empty,
    )
}

/// The most of a call's arguments or result a span carries (`OTEL_GENAI_CONTENT`).
const CONTENT_MAX_BYTES: usize = 8 * 1024;

/// Records how a call ended on its span: a tool error as `error.type`, and with
/// `OTEL_GENAI_CONTENT` its arguments and result, cut at [`CONTENT_MAX_BYTES`].
fn ended(span: &tracing::Span, call: &ToolCall, output: &Value, is_error: bool) {
    if span.is_disabled() {
        return;
    }
    if is_error {
        span.record("error.type", "tool_error");
        span.record("otel.status_code", "ERROR");
    }
    if parley_core::telemetry::traces::content() {
        span.record("gen_ai.tool.call.arguments", cut(&call.arguments));
        span.record("gen_ai.tool.call.result", cut(&output.to_string()));
    }
}

fn cut(text: &str) -> &str {
    let mut end = text.len().min(CONTENT_MAX_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The trace of a call that ran (or was refused) from `started`, logged as one line.
fn traced(
    call: &ToolCall,
    step: u32,
    args: Value,
    output: Value,
    is_error: bool,
    started: Instant,
) -> Trace {
    let duration_ms = started.elapsed().as_millis() as u64;
    tracing::info!(tool = %call.name, is_error, duration_ms, "tool call");
    Trace {
        call_id: call.call_id.clone(),
        step,
        name: call.name.clone(),
        // Arguments parse `\u0000` escapes into NULs; tool servers may send them too, and a
        // chart's title and labels are the model's words.
        args: nul::clean_json(args),
        output: nul::clean_json(output),
        is_error,
        duration_ms,
        approval: None,
    }
}

/// Runs a `show_chart` call: draws the chart from the rows of a call among `earlier` (this
/// turn's calls so far, the step's own included), or refuses it with a tool error the model
/// reads and can correct its call from. The chart comes back beside its trace.
pub(super) fn run_chart(
    limits: &ChartLimits,
    max_calls_per_step: usize,
    narrowed: Option<&[ToolDef]>,
    Call {
        call,
        step,
        over_cap,
        ..
    }: Call<'_>,
    earlier: &[Trace],
) -> (Trace, Option<Chart>) {
    let started = Instant::now();
    let span = tool_span(call);
    let parsed = parse_arguments(&call.arguments);
    let args = match &parsed {
        Ok(map) => Value::Object(map.clone()),
        Err(_) => Value::String(call.arguments.clone()),
    };
    let drawn = match parsed {
        Ok(_) if over_cap => Err(over_cap_error(max_calls_per_step)),
        Ok(_) if not_offered(narrowed, &call.name) => Err(not_offered_error(&call.name)),
        Ok(map) => chart::draw(&map, earlier, limits),
        Err(problem) => Err(problem),
    };
    let (output, is_error, chart) = match drawn {
        Ok(drawn) => {
            let output = drawn.tool_output();
            let chart = Chart {
                id: call.call_id.clone(),
                call_id: drawn.call_id,
                // The title and labels are the model's words: stored as jsonb, which takes no
                // NUL.
                spec: nul::clean_json(drawn.spec),
            };
            (output, false, Some(chart))
        }
        Err(problem) => (Value::String(problem), true, None),
    };
    ended(&span, call, &output, is_error);
    (traced(call, step, args, output, is_error, started), chart)
}

/// A call past `MAX_TOOL_CALLS_PER_STEP`, as the model is told it.
fn over_cap_error(max: usize) -> String {
    format!(
        "not run: one response may make at most {max} tool calls; make the ones you still \
need in your next response"
    )
}

/// Whether the request narrowed the tools and left `name` out.
fn not_offered(narrowed: Option<&[ToolDef]>, name: &str) -> bool {
    narrowed.is_some_and(|offered| !offered.iter().any(|t| t.name == name))
}

fn not_offered_error(name: &str) -> String {
    format!("the tool `{name}` is not available in this conversation turn")
}

pub(super) fn parse_arguments(raw: &str) -> Result<Map<String, Value>, String> {
    // Some models send "" for a tool without parameters.
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("invalid arguments: they must be a JSON object".into()),
        Err(e) => Err(format!("invalid arguments: not valid JSON ({e})")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_a_json_object() {
        assert!(parse_arguments("{\"ref\":\"Leeds\"}").is_ok());
        assert!(parse_arguments("").unwrap().is_empty());
        assert_eq!(
            parse_arguments("[1]").unwrap_err(),
            "invalid arguments: they must be a JSON object"
        );
        assert!(
            parse_arguments("{\"ref\":")
                .unwrap_err()
                .starts_with("invalid arguments: not valid JSON")
        );
    }
}
