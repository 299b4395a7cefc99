//! One chat turn: reload the history, ask the model, run every tool call it makes (several
//! at once when it asks for several), loop up to the step limit, and record the outcome with
//! its sources (see [`sources`]): the verified queries it was answered from, then the rows the
//! tools returned, cited ones first.
//!
//! The user's message is stored before the first LLM call and the rest in one transaction
//! after, so a failed turn still leaves the question and the error on record. A turn that
//! reaches `TURN_DEADLINE_MS` stops there and stores what it has, marked cut short, so the
//! client gets an answer before the platform's own timeout ends the invocation.
//!
//! A streamed turn ([`Progress::channel`]) also reports what happens as it happens
//! ([`TurnEvent`]): the model's text as it is written, each tool call and its output. If the
//! client goes away, the turn stops calling the model and tools and stores what it has, marked
//! interrupted.
//!
//! The model may also call the chat's own tool, `show_chart` ([`chart`]): the chat draws it
//! after the step's other calls are in, from the rows of a call of this turn, and the chart
//! goes to the client (a [`TurnEvent::Chart`], the outcome's `charts`) and is stored with the
//! turn; a chart it cannot draw is a tool error the model reads and can correct.
//!
//! A call of a tool whose calls wait for the user's approval ([`approval`]) is not run: the
//! step's other calls are, and the turn stores its message with the waiting calls and ends
//! (`awaiting_approval`). A request answering them takes the conversation's lease again,
//! decides each once, runs the approved ones under their stored keys, and the loop goes on.
//!
//! Every turn leaves one metrics document ([`Meter`]): its duration, the time spent waiting
//! for the model and for tools, its steps and tokens, and its outcome as a stable code.
//!
//! The turn knows no HTTP: it is handed what it needs of the instance ([`Deps`]) and returns
//! its own [`TurnOutcome`] or [`TurnError`], which the edge (`crate::http`) renders. Its own
//! parts: the conversation's storage and lease ([`conversation`]), approvals ([`approval`]),
//! what the model is told ([`instructions`]) and given back of earlier turns ([`replay`]),
//! citable rows ([`sources`]), the model ([`llm`]) and the tools ([`mcp_client`]).

pub mod approval;
mod calls;
pub mod chart;
pub mod conversation;
mod id;
pub mod instructions;
pub mod llm;
pub mod mcp_client;
mod meter;
mod outcome;
mod progress;
pub mod quota;
pub mod replay;
pub mod request;
mod resume;
pub mod sources;

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use parley_core::metrics::Metrics;
use tokio::time::Instant;
use uuid::Uuid;

use crate::auth::User;
use crate::limits::Limits;
use crate::nul;
use approval::Pending;
use calls::{Call, offered_tools, parse_arguments, run_call, run_chart, waiting};
use chart::ChartLimits;
use conversation::{Chart, Ledger, StoredMessage, Trace, TurnRecord, TurnStart};
use instructions::Briefing;
use llm::{Item, Llm, LlmError, Prompt, Reply, ToolCall, ToolDef, Usage};
use mcp_client::{Catalog, McpClients, key_for_call};
use meter::Meter;
use outcome::{Ending, is_failure};
use resume::Resumed;
use sources::Sources;

pub use outcome::{TurnError, TurnFailure, TurnOutcome, TurnStatus};
pub use progress::{Decided, Progress, TurnEvent};
pub use request::TurnRequest;

/// What a turn needs of the instance, and no more: the pool, the model and MCP clients, the
/// limits, the assistant's name, the approval policy and where its metrics go.
#[derive(Clone, Copy)]
pub struct Deps<'a> {
    pub pool: &'a Pool,
    pub llm: &'a Llm,
    pub mcp: &'a McpClients,
    pub limits: &'a Limits,
    /// `ASSISTANT_NAME`, for the instructions.
    pub assistant: &'a str,
    /// `APPROVAL`, `APPROVAL_TTL_MS`: which tool calls wait for the user's approval.
    pub approval: approval::Settings,
    /// `BUDGET_*`, `RATE_*`: each user's token budget and turn rate.
    pub quota: &'a quota::Settings,
    pub metrics: &'a Metrics,
}

/// Runs one turn (see the module's documentation) and records its metrics, in a span of its
/// own (OpenTelemetry's GenAI `invoke_agent`; docs/tracing.md) holding the turn's model and
/// tool spans: the assistant, the model, then the conversation's id, the steps, the tokens
/// and the outcome's code; never the question or the answer.
pub async fn run(
    deps: &Deps<'_>,
    user: &User,
    request: TurnRequest,
    progress: Progress,
) -> Result<TurnOutcome, TurnError> {
    use tracing::Instrument;
    let mut meter = Meter::start();
    let span = tracing::info_span!(
        target: parley_core::telemetry::traces::TARGET,
        "invoke_agent",
        otel.name = %format_args!("invoke_agent {}", deps.assistant),
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = %deps.assistant,
        gen_ai.request.model = %deps.llm.config().model,
        gen_ai.conversation.id = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        parley.turn.steps = tracing::field::Empty,
        parley.turn.outcome = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let outcome = run_measured(deps, user, request, &progress, &mut meter)
        .instrument(span.clone())
        .await;
    if !span.is_disabled() {
        span.record("gen_ai.usage.input_tokens", meter.usage.input_tokens);
        span.record("gen_ai.usage.output_tokens", meter.usage.output_tokens);
        span.record("parley.turn.steps", meter.steps);
        match &outcome {
            Ok(done) => {
                span.record(
                    "gen_ai.conversation.id",
                    tracing::field::display(&done.conversation_id),
                );
                span.record("parley.turn.outcome", done.status.code());
            }
            Err(e) => {
                span.record("parley.turn.outcome", e.code());
                span.record("error.type", e.code());
                span.record("otel.status_code", "ERROR");
            }
        }
    }
    deps.metrics.emit(meter.document(&outcome));
    outcome
}

/// The turn, step by step: list the tools, take the conversation, settle what waited for
/// approval, then ask the model and run its calls until it answers, and store the outcome.
async fn run_measured(
    deps: &Deps<'_>,
    user: &User,
    mut request: TurnRequest,
    progress: &Progress,
    meter: &mut Meter,
) -> Result<TurnOutcome, TurnError> {
    // Asking OpenAI without a key can only fail, after the question is stored: say so first.
    if deps.llm.config().setup_problem().is_some() {
        return Err(TurnError::NoModel);
    }
    let clock = Clock::start(deps.limits, progress.is_streamed());
    let catalog = list_tools(deps, clock.deadline).await;
    let tools = offered_tools(&catalog, request.tools())?;
    // The user's budget and rate, after the checks that need no database and before anything
    // is stored: a refused turn leaves nothing behind.
    let admission = admit(deps, user).await?;
    // Until the model is asked, a turn that ends gives its rate slot back: it was no question.
    let not_asked = || admission.give_back(deps.pool, &user.id);
    let mut turn = match begin(deps, user, &request, &clock).await {
        Ok(turn) => turn,
        Err(e) => {
            not_asked().await;
            return Err(e);
        }
    };
    let conversation_id = turn.conversation;
    let waiting = answer_waiting(deps, user, &catalog, &request, &mut turn, clock.deadline).await;
    let (traces, steps, decided) = match waiting {
        Ok(Resumed::Continue {
            traces,
            steps,
            decided,
        }) => (traces, steps, decided),
        Ok(Resumed::Done(done)) => {
            not_asked().await;
            return Ok(done.outcome(conversation_id));
        }
        Err(e) => {
            not_asked().await;
            return Err(e);
        }
    };
    progress.send(|| TurnEvent::Started {
        conversation_id,
        decided,
    });
    let step = Step {
        deps,
        user,
        catalog: &catalog,
        tools: &tools,
        narrowed: request.tools().is_some().then_some(&*tools),
        instructions: brief(deps, &catalog, &tools, &request),
        progress,
        turn_id: Uuid::new_v4(),
        clock: &clock,
    };
    let mut talk = Talk {
        items: model_input(deps, &turn.history, &mut request),
        traces,
        steps,
        ..Talk::default()
    };
    let ending = converse(&step, &mut talk, meter).await;
    meter.steps = talk.steps;
    meter.usage = talk.usage;
    let charge = Charge {
        turn_id: step.turn_id,
        model: &deps.llm.config().model,
        rate_slot: admission.rate_slot,
    };
    store(turn, talk, ending, charge).await
}

/// When a turn must be done, and how long its claim on the conversation lasts.
struct Clock {
    /// `TURN_DEADLINE_MS`, or `STREAM_TURN_DEADLINE_MS` for a streamed turn.
    budget: Duration,
    deadline: Instant,
    lease: Duration,
}

impl Clock {
    fn start(limits: &Limits, streamed: bool) -> Clock {
        let budget = if streamed {
            limits.stream_turn_deadline
        } else {
            limits.turn_deadline
        };
        Clock {
            budget,
            deadline: Instant::now() + budget,
            // The lease outlasts the deadline by as much for a streamed turn as for any other.
            lease: limits.turn_lease + budget.saturating_sub(limits.turn_deadline),
        }
    }
}

/// The tools of every server. Listing is an MCP request too: a server that hangs must not
/// take the whole turn, so what is not listed by the deadline is missing.
async fn list_tools(deps: &Deps<'_>, deadline: Instant) -> Arc<Catalog> {
    tokio::time::timeout_at(deadline, deps.mcp.catalog())
        .await
        .unwrap_or_else(|_| Arc::new(Catalog::unavailable()))
}

/// Admits the turn under its user's budget and rate (`turn::quota`), or refuses it.
async fn admit(deps: &Deps<'_>, user: &User) -> Result<quota::Admission, TurnError> {
    let limits = deps.quota.limits_for(user);
    quota::admit(deps.pool, &user.id, limits)
        .await
        .map_err(|e| match e {
            quota::AdmitError::Exceeded(exceeded) => TurnError::QuotaExceeded(exceeded),
            quota::AdmitError::Storage(e) => TurnError::Storage(e),
        })
}

/// Takes the conversation (a new one, or the request's, waiting for another turn on it at
/// most `TURN_LOCK_WAIT_MS`), stores the question, and reads back its history.
async fn begin(
    deps: &Deps<'_>,
    user: &User,
    request: &TurnRequest,
    clock: &Clock,
) -> Result<conversation::Turn, TurnError> {
    let context = request.context().map(instructions::UiContext::as_json);
    let resuming = request.approvals().is_some();
    let turn = conversation::begin(
        deps.pool,
        TurnStart {
            owner: &user.id,
            conversation: request.conversation(),
            message: (!resuming).then(|| request.message()),
            context: context.as_ref(),
            history_limit: deps.limits.history,
            // Waiting past the deadline would only end in the gateway's timeout.
            lock_wait: deps
                .limits
                .turn_lock_wait
                .min(clock.deadline.saturating_duration_since(Instant::now())),
            lease: clock.lease,
        },
    )
    .await?;
    Ok(turn)
}

/// Settles what waited for the user's approval before the model is asked: a request answering
/// approvals decides them and runs the approved calls (or ends the turn there,
/// [`Resumed::Done`]); a new message instead declines whatever still waited, and the model is
/// told.
async fn answer_waiting(
    deps: &Deps<'_>,
    user: &User,
    catalog: &Catalog,
    request: &TurnRequest,
    turn: &mut conversation::Turn,
    deadline: Instant,
) -> Result<Resumed, TurnError> {
    let conversation_id = turn.conversation;
    if let Some(answers) = request.approvals() {
        return resume::resume(
            deps,
            user,
            catalog,
            conversation_id,
            &mut turn.history,
            answers,
            deadline,
        )
        .await;
    }
    if request.conversation().is_some() && resume::has_pending(&turn.history, deps.limits.history) {
        let denied = approval::deny_pending(
            deps.pool,
            conversation_id.as_uuid(),
            user.id.as_str(),
            approval::SUPERSEDED,
        )
        .await?;
        resume::settle(&mut turn.history, &denied);
    }
    Ok(Resumed::Continue {
        traces: Vec::new(),
        steps: 0,
        decided: Vec::new(),
    })
}

/// The model's instructions: who it is, the time, how to use the offered tools and what the
/// user's screen shows.
fn brief(deps: &Deps<'_>, catalog: &Catalog, tools: &[ToolDef], request: &TurnRequest) -> String {
    let traits = catalog.traits(tools);
    instructions::build(&Briefing {
        assistant: deps.assistant,
        now: chrono::Utc::now(),
        tools: &traits,
        guidance: &catalog.guidance,
        context: request.context(),
        approval: deps.approval.policy,
        charts: tools.iter().any(|t| t.name == chart::TOOL_NAME),
    })
}

/// The model's input: the stored history replayed, then for a new conversation what a
/// stateless client said came before, then the question (none when answering approvals).
fn model_input(deps: &Deps<'_>, history: &[StoredMessage], request: &mut TurnRequest) -> Vec<Item> {
    let mut items = replay::replay(history, deps.limits.replay_chars);
    if history.is_empty() {
        items.extend(request.take_prior());
    }
    if request.approvals().is_none() {
        items.push(Item::User(request.message().to_owned()));
    }
    items
}

/// What every step of one turn reads: the instance's parts, the caller, the tools on offer, the
/// instructions and the clock.
struct Step<'a> {
    deps: &'a Deps<'a>,
    user: &'a User,
    catalog: &'a Catalog,
    tools: &'a [ToolDef],
    /// The tools the request narrowed the offer to, when it did.
    narrowed: Option<&'a [ToolDef]>,
    instructions: String,
    progress: &'a Progress,
    /// Names this turn in its tool calls' idempotency keys.
    turn_id: Uuid,
    clock: &'a Clock,
}

/// What the loop builds up as it goes: the model's input, and what the turn will store.
#[derive(Default)]
struct Talk {
    items: Vec<Item>,
    traces: Vec<Trace>,
    steps: u32,
    usage: Usage,
    /// Responses the model gave (its `usage` is theirs): 0 means it never answered.
    model_calls: u32,
    sources: Sources,
    /// The charts drawn so far (`show_chart`), in order.
    charts: Vec<Chart>,
    /// What the model said along the way, for a reply cut short.
    said: Vec<String>,
    /// What a streamed client saw of the step that failed: stored with the error.
    seen_before_failure: String,
}

/// Asks the model and runs its tool calls, step by step, until it answers, pauses for the
/// user's approval, runs out of steps or time, or its client goes away.
async fn converse(step: &Step<'_>, talk: &mut Talk, meter: &mut Meter) -> Result<Ending, LlmError> {
    let progress = step.progress;
    loop {
        if progress.is_gone() {
            return Ok(Ending::interrupted(String::new()));
        }
        progress.send(|| TurnEvent::StepStarted {
            step: talk.steps + 1,
        });
        let (reply, mut streamed) = match ask_model(step, talk, meter).await {
            Asked::Reply { reply, streamed } => (reply, streamed),
            Asked::Ended(ending) => return ending,
        };
        talk.usage += reply.usage;
        talk.model_calls += 1;
        if reply.calls.is_empty() {
            progress.send(|| TurnEvent::StepFinished);
            return Ok(Ending::answered(reply.text.unwrap_or_default()));
        }
        if talk.steps == step.deps.limits.max_steps {
            let text = format!(
                "I stopped after {} rounds of tool calls, the most one turn may use, \
before reaching an answer. The results gathered so far are in the traces; try a narrower question.",
                talk.steps
            );
            // Streamed, the note follows whatever the model wrote in this step.
            progress.end_step_with(&mut streamed, &text);
            return Ok(Ending::answered(streamed));
        }
        talk.steps += 1;
        // What the model said in this step: the reply of a turn that pauses after it.
        let step_text = reply.text.clone().unwrap_or_default();
        if let Some(text) = reply.text.filter(|t| !t.trim().is_empty()) {
            talk.said.push(text.clone());
            talk.items.push(Item::Assistant(text));
        }
        let awaiting = run_tools(step, talk, &reply.calls, meter).await;
        progress.send(|| TurnEvent::StepFinished);
        if !awaiting.is_empty() {
            tracing::info!(
                steps = talk.steps,
                waiting = awaiting.len(),
                "the turn waits for the user's approval"
            );
            return Ok(Ending {
                awaiting,
                ..Ending::answered(step_text)
            });
        }
    }
}

/// What asking the model came to: its response, with the text a streamed client saw of it,
/// or the end of the turn.
enum Asked {
    Reply { reply: Reply, streamed: String },
    Ended(Result<Ending, LlmError>),
}

/// Asks the model for its next response (streamed when a client watches) and counts the wait:
/// the deadline reached ends the turn cut short, a client gone ends it interrupted.
async fn ask_model(step: &Step<'_>, talk: &mut Talk, meter: &mut Meter) -> Asked {
    let progress = step.progress;
    let prompt = Prompt {
        instructions: &step.instructions,
        items: &talk.items,
        tools: step.tools,
    };
    let deadline = step.clock.deadline;
    // The text of this response as streamed so far: what an interrupted or cut-short streamed
    // turn keeps.
    let mut streamed = String::new();
    let asked = Instant::now();
    let answer = if progress.is_streamed() {
        let mut on_text = |delta: &str| {
            streamed.push_str(delta);
            progress.text(delta);
        };
        tokio::select! {
            answer = step.deps.llm.respond_streaming(prompt, deadline, &mut on_text) => Some(answer),
            // Dropping the request stops the model's work on it.
            () = progress.gone() => None,
        }
    } else {
        Some(step.deps.llm.respond(prompt, deadline).await)
    };
    meter.model += asked.elapsed();
    let Some(answer) = answer else {
        return Asked::Ended(Ok(Ending::interrupted(streamed)));
    };
    let budget = step.clock.budget;
    match answer {
        Ok(mut reply) => {
            reply.clean_nul();
            Asked::Reply { reply, streamed }
        }
        Err(LlmError::DeadlineReached) if progress.is_streamed() => {
            // The client has seen the text so far: the note continues it.
            let note = cut_short_note(budget, !talk.traces.is_empty());
            progress.end_step_with(&mut streamed, &note);
            Asked::Ended(Ok(Ending::cut_short(streamed)))
        }
        Err(LlmError::DeadlineReached) => Asked::Ended(Ok(Ending::cut_short(cut_short_reply(
            budget,
            &talk.said,
            !talk.traces.is_empty(),
        )))),
        Err(e) => {
            talk.seen_before_failure = nul::clean(streamed);
            Asked::Ended(Err(e))
        }
    }
}

/// Runs one step's calls at once, except those that wait for the user's approval, which it
/// returns; each output is numbered for citing, reported, given to the model and traced. The
/// step's `show_chart` calls are drawn after its other calls are in, so a chart may draw the
/// rows of a call of the same step.
async fn run_tools(
    step: &Step<'_>,
    talk: &mut Talk,
    calls: &[ToolCall],
    meter: &mut Meter,
) -> Vec<Pending> {
    let progress = step.progress;
    for call in calls {
        progress.send(|| TurnEvent::ToolInput {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            args: parse_arguments(&call.arguments)
                .map(serde_json::Value::Object)
                .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone())),
        });
    }
    let cap = step.deps.limits.max_calls_per_step;
    // The calls that wait for the user's approval are not run; the others of the step are,
    // charts last.
    let mut awaiting = Vec::new();
    let mut running = Vec::new();
    let mut charts = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let call = Call {
            call,
            step: talk.steps,
            over_cap: i >= cap,
            key: key_for_call(&step.turn_id, &call.call_id, talk.steps, i),
        };
        if call.call.name == chart::TOOL_NAME {
            charts.push(call);
            continue;
        }
        match waiting(step.deps, step.catalog, step.narrowed, &call) {
            Some(pending) => awaiting.push(pending),
            None => running.push(call),
        }
    }
    let called = Instant::now();
    let results = futures::future::join_all(running.into_iter().map(|call| {
        run_call(
            step.deps,
            step.catalog,
            step.narrowed,
            step.user,
            call,
            step.clock.deadline,
        )
    }))
    .await;
    meter.tools += called.elapsed();
    talk.items.extend(calls.iter().cloned().map(Item::Call));
    for mut trace in results {
        // Numbered before the model sees the rows, so it can cite them.
        if let Some(citation) = step
            .catalog
            .citation(&trace.name)
            .filter(|_| !trace.is_error)
        {
            talk.sources
                .cite_rows(citation, &trace.name, &trace.call_id, &mut trace.output);
        }
        if let Some(name) = step
            .catalog
            .verified(&trace.name)
            .filter(|_| !trace.is_error)
        {
            talk.sources.verified(name, &trace.name, &trace.call_id);
        }
        took(progress, talk, trace);
    }
    let limits = chart_limits(step.deps.limits);
    for call in charts {
        let (trace, chart) = run_chart(&limits, cap, step.narrowed, call, &talk.traces);
        took(progress, talk, trace);
        if let Some(chart) = chart {
            progress.send(|| TurnEvent::Chart {
                id: chart.id.clone(),
                call_id: chart.call_id.clone(),
                spec: chart.spec.clone(),
            });
            talk.charts.push(chart);
        }
    }
    awaiting
}

/// A call's outcome, reported, given to the model and traced.
fn took(progress: &Progress, talk: &mut Talk, trace: Trace) {
    progress.send(|| TurnEvent::ToolOutput {
        call_id: trace.call_id.clone(),
        output: trace.output.clone(),
        is_error: trace.is_error,
    });
    talk.items.push(Item::Output {
        call_id: trace.call_id.clone(),
        output: replay::output_text(&trace.output),
    });
    talk.traces.push(trace);
}

/// `CHART_MAX_ROWS` and `CHART_MAX_SPEC_BYTES`, as `show_chart` takes them.
fn chart_limits(limits: &Limits) -> ChartLimits {
    ChartLimits {
        max_rows: limits.chart_max_rows,
        max_spec_bytes: limits.chart_max_spec_bytes,
    }
}

/// Which run of the loop is charged, for what model: the ledger's keys beyond the turn's own
/// record.
struct Charge<'a> {
    turn_id: Uuid,
    model: &'a str,
    /// The rate window the turn was admitted in (`quota::Admission`).
    rate_slot: Option<chrono::DateTime<chrono::Utc>>,
}

impl<'a> Charge<'a> {
    fn ledger(&self, model_calls: u32, outcome: &'a str) -> Ledger<'a> {
        Ledger {
            turn_id: self.turn_id,
            model: self.model,
            model_calls,
            outcome,
            failed: is_failure(outcome),
            rate_slot: self.rate_slot,
        }
    }
}

/// Stores how the loop ended with all the turn gathered, and gives the conversation back; a
/// model that failed is stored as a failed turn, and its error returned. Either way the turn's
/// row in the usage ledger goes in with it.
async fn store(
    turn: conversation::Turn,
    talk: Talk,
    ending: Result<Ending, LlmError>,
    charge: Charge<'_>,
) -> Result<TurnOutcome, TurnError> {
    let conversation_id = turn.conversation;
    let Talk {
        traces,
        steps,
        usage,
        model_calls,
        sources,
        charts,
        seen_before_failure,
        ..
    } = talk;
    let ending = match ending {
        Ok(ending) => ending,
        Err(e) => {
            // The record is shown to the user later: a stable code and a plain sentence; the
            // details (hosts, upstream bodies) went to the log.
            let failure = TurnFailure::of_llm(&e);
            let error = failure.to_string();
            if let Err(record_error) = turn
                .finish(TurnRecord {
                    reply: &seen_before_failure,
                    traces: &traces,
                    usage,
                    steps,
                    error: Some(&error),
                    cut_short: false,
                    interrupted: false,
                    // Nothing was cited, but the record shows what the tools had found.
                    sources: &sources.for_reply(""),
                    // What the user was shown stays on record.
                    charts: &charts,
                    approvals: &[],
                    ledger: charge.ledger(model_calls, failure.code),
                })
                .await
            {
                tracing::error!(error = %record_error, "could not record the failed turn");
            }
            return Err(TurnError::LlmInConversation {
                conversation: conversation_id,
                error: e,
            });
        }
    };
    let status = ending.status();
    let Ending {
        reply,
        cut_short,
        interrupted,
        awaiting,
    } = ending;
    if cut_short {
        tracing::warn!(
            steps,
            "turn reached its deadline; answering with what it has"
        );
    }
    if interrupted {
        tracing::info!(steps, "the client went away; storing what the turn had");
    }
    // A reply cut short keeps what the model had said, citations included.
    let sources = sources.for_reply(&reply);
    let seq = turn
        .finish(TurnRecord {
            reply: &reply,
            traces: &traces,
            usage,
            steps,
            error: None,
            cut_short,
            interrupted,
            sources: &sources,
            charts: &charts,
            approvals: &awaiting,
            ledger: charge.ledger(model_calls, status.code()),
        })
        .await?;
    Ok(TurnOutcome {
        conversation_id,
        seq: Some(seq),
        status,
        reply,
        traces,
        usage,
        steps,
        cut_short,
        sources,
        charts,
        interrupted,
        pending_approvals: awaiting.into_iter().map(|p| p.public).collect(),
    })
}

/// The honest reply of a turn that ran out of time: it says so, and keeps what the model had
/// already said.
fn cut_short_reply(budget: std::time::Duration, said: &[String], has_traces: bool) -> String {
    let mut reply = format!(
        "I ran out of time before I could finish: one turn may take {} s. ",
        budget.as_secs_f64()
    );
    if has_traces {
        reply.push_str("The tool results gathered so far are in the traces. ");
    }
    if !said.is_empty() {
        reply.push_str("What I had said so far: ");
        reply.push_str(&said.join("\n\n"));
        reply.push_str("\n\n");
    }
    reply.push_str("Ask again, perhaps more narrowly, to continue.");
    reply
}

/// The same for a streamed turn, whose client has already seen what the model said: the note
/// that ends the reply.
fn cut_short_note(budget: std::time::Duration, has_traces: bool) -> String {
    let mut note = format!(
        "(I ran out of time before I could finish: one turn may take {} s. ",
        budget.as_secs_f64()
    );
    if has_traces {
        note.push_str("The tool results gathered so far are above. ");
    }
    note.push_str("Ask again, perhaps more narrowly, to continue.)");
    note
}
