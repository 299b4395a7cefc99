//! One chat turn: reload the history, ask the model, run every tool call it makes (several
//! at once when it asks for several), loop up to the step limit, and record the outcome.
//!
//! The user's message is stored before the first LLM call and the rest in one transaction
//! after, so a failed turn still leaves the question and the error on record.

use std::borrow::Cow;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::AppState;
use crate::auth::UserId;
use crate::conversation::{self, ConversationId, Trace, TurnRecord, TurnStart};
use crate::error::ApiError;
use crate::instructions::{self, UiContext};
use crate::llm::{Item, Prompt, ToolCall, ToolDef, Usage};
use crate::mcp_client::{Catalog, ToolOutcome};
use crate::{nul, replay};

/// A checked `POST /api/chat` request.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub message: String,
    pub context: Option<UiContext>,
    pub conversation: Option<ConversationId>,
    /// Narrows the tools offered to the model to these names.
    pub tools: Option<Vec<String>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TurnResponse {
    pub conversation_id: ConversationId,
    pub reply: String,
    pub traces: Vec<Trace>,
    pub usage: Usage,
    pub steps: u32,
}

pub async fn run(
    state: &AppState,
    user: &UserId,
    request: TurnRequest,
) -> Result<TurnResponse, ApiError> {
    let catalog = state.mcp.catalog().await;
    let tools = offered_tools(&catalog, request.tools.as_deref())?;
    let narrowed = request.tools.is_some().then_some(&*tools);
    let context_json = request.context.as_ref().map(UiContext::as_json);
    let turn = conversation::begin(
        &state.pool,
        TurnStart {
            owner: user,
            conversation: request.conversation,
            message: &request.message,
            context: context_json.as_ref(),
            history_limit: state.limits.history,
            lock_wait: state.limits.turn_lock_wait,
            lease: state.limits.turn_lease,
        },
    )
    .await?;
    let conversation_id = turn.conversation;

    let mut items = replay::replay(&turn.history, state.limits.replay_chars);
    items.push(Item::User(request.message.clone()));
    let instructions = instructions::build(chrono::Utc::now(), request.context.as_ref(), &tools);

    let mut usage = Usage::default();
    let mut traces: Vec<Trace> = Vec::new();
    let mut steps = 0u32;
    let outcome = loop {
        let prompt = Prompt {
            instructions: &instructions,
            items: &items,
            tools: &tools,
        };
        let mut reply = match state.llm.respond(prompt).await {
            Ok(r) => r,
            Err(e) => break Err(e),
        };
        nul::clean_reply(&mut reply);
        usage += reply.usage;
        if reply.calls.is_empty() {
            break Ok(reply.text.unwrap_or_default());
        }
        if steps == state.limits.max_steps {
            break Ok(format!(
                "I stopped after {steps} rounds of tool calls, the most one turn may use, before \
reaching an answer. The results gathered so far are in the traces; try a narrower question."
            ));
        }
        steps += 1;
        if let Some(text) = reply.text.filter(|t| !t.trim().is_empty()) {
            items.push(Item::Assistant(text));
        }
        let results = futures::future::join_all(
            reply
                .calls
                .iter()
                .map(|call| run_call(state, &catalog, narrowed, call, steps)),
        )
        .await;
        items.extend(reply.calls.iter().cloned().map(Item::Call));
        for trace in results {
            items.push(Item::Output {
                call_id: trace.call_id.clone(),
                output: replay::output_text(&trace.output),
            });
            traces.push(trace);
        }
    };

    match outcome {
        Ok(reply) => {
            turn.finish(TurnRecord {
                reply: &reply,
                traces: &traces,
                usage,
                steps,
                error: None,
            })
            .await?;
            Ok(TurnResponse {
                conversation_id,
                reply,
                traces,
                usage,
                steps,
            })
        }
        Err(e) => {
            let e = ApiError::Llm(e);
            // The record is shown to the user later: a stable code and a plain sentence; the
            // details (hosts, upstream bodies) went to the log.
            let error = e.public_summary();
            if let Err(record_error) = turn
                .finish(TurnRecord {
                    reply: "",
                    traces: &traces,
                    usage,
                    steps,
                    error: Some(&error),
                })
                .await
            {
                tracing::error!(error = %record_error, "could not record the failed turn");
            }
            Err(e)
        }
    }
}

/// The catalog's tools, or only the ones the request names (each must exist).
fn offered_tools<'a>(
    catalog: &'a Catalog,
    wanted: Option<&[String]>,
) -> Result<Cow<'a, [ToolDef]>, ApiError> {
    let Some(wanted) = wanted else {
        return Ok(Cow::Borrowed(&catalog.tools));
    };
    // With a server unreachable its tools are missing from the catalog; that is an outage,
    // not a bad request, so the names are let through and any call to them becomes a tool
    // error.
    if let Some(unknown) = wanted
        .iter()
        .find(|n| !catalog.contains(n) && !catalog.is_incomplete())
    {
        let known: Vec<&str> = catalog.tools.iter().map(|t| t.name.as_str()).collect();
        return Err(ApiError::Invalid {
            code: "unknown_tool",
            message: format!(
                "`tools` names `{unknown}`, which is not available; available: {}",
                known.join(", ")
            ),
        });
    }
    Ok(Cow::Owned(
        catalog
            .tools
            .iter()
            .filter(|t| wanted.contains(&t.name))
            .cloned()
            .collect(),
    ))
}

/// Runs one call. Arguments that are not a JSON object become a tool error the model sees.
async fn run_call(
    state: &AppState,
    catalog: &Catalog,
    narrowed: Option<&[ToolDef]>,
    call: &ToolCall,
    step: u32,
) -> Trace {
    let started = Instant::now();
    let (args, outcome) = match parse_arguments(&call.arguments) {
        // A request that narrowed the tools is obeyed even if the model calls another one.
        Ok(map) if narrowed.is_some_and(|offered| !offered.iter().any(|t| t.name == call.name)) => {
            (
                Value::Object(map),
                ToolOutcome {
                    output: Value::String(format!(
                        "the tool `{}` is not available in this conversation turn",
                        call.name
                    )),
                    is_error: true,
                },
            )
        }
        Ok(map) => {
            let args = Value::Object(map.clone());
            (args, state.mcp.call(catalog, &call.name, map).await)
        }
        Err(problem) => (
            Value::String(call.arguments.clone()),
            ToolOutcome {
                output: Value::String(problem),
                is_error: true,
            },
        ),
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    tracing::info!(tool = %call.name, is_error = outcome.is_error, duration_ms, "tool call");
    Trace {
        call_id: call.call_id.clone(),
        step,
        name: call.name.clone(),
        // Arguments parse `\u0000` escapes into NULs; tool servers may send them too.
        args: nul::clean_json(args),
        output: nul::clean_json(outcome.output),
        is_error: outcome.is_error,
        duration_ms,
    }
}

fn parse_arguments(raw: &str) -> Result<Map<String, Value>, String> {
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
