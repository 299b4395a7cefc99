//! One chat turn: reload the history, ask the model, run every tool call it makes (several
//! at once when it asks for several), loop up to the step limit, and record the outcome with
//! the sources the tools returned (see [`crate::sources`]), cited ones first.
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
//! A call of a tool whose calls wait for the user's approval ([`crate::approval`]) is not run:
//! the step's other calls are, and the turn stores its message with the waiting calls and ends
//! (`awaiting_approval`). A request answering them takes the conversation's lease again,
//! decides each once, runs the approved ones under their stored keys, and the loop goes on.
//!
//! Every turn leaves one metrics document ([`Meter`]): its duration, the time spent waiting
//! for the model and for tools, its steps and tokens, and its outcome as a stable code.

use std::borrow::Cow;
use std::sync::Arc;

use parley_core::metrics::Document;
use tokio::sync::mpsc;
use tokio::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::AppState;
use crate::approval::{self, Answer, Approval, ApprovalError, Decision, Pending, PendingApproval};
use crate::auth::User;
use crate::conversation::{
    self, ConversationId, StorageError, StoredMessage, Trace, TurnRecord, TurnStart,
};
use crate::instructions::{self, Briefing, UiContext};
use crate::llm::{Item, LlmError, Prompt, ToolCall, ToolDef, Usage};
use crate::mcp_client::{CallFor, Catalog, IdempotencyKey, ToolOutcome, key_for_call};
use crate::request::TurnRequest;
use crate::sources::{Source, Sources};
use crate::{nul, replay};

/// Why a turn failed. It knows no HTTP: `error.rs` picks the status; what is stored with the
/// failed turn is its [`TurnFailure`].
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The request narrowed the tools to a name no server offers.
    #[error("`tools` names `{unknown}`, which is not available; available: {available}")]
    UnknownTool { unknown: String, available: String },
    /// No model can be asked: `LLM_API_KEY` is unset and `LLM_BASE_URL` is OpenAI's, which
    /// refuses every request without one. Found before anything is sent or stored.
    #[error("no language model is configured")]
    NoModel,
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    Llm(#[from] LlmError),
    /// The model failed after the question was stored in `conversation`, with the failure
    /// recorded there: a retry belongs in the same conversation, not a new one.
    #[error("{error}")]
    LlmInConversation {
        conversation: ConversationId,
        error: LlmError,
    },
    /// The task running a streamed turn ended without an outcome (it panicked).
    #[error("the turn's task ended without an outcome")]
    Lost,
    /// `approvals` names an id that is no approval of this conversation (or of this user).
    #[error("no such approval in this conversation")]
    ApprovalNotFound,
    /// An approved call was sent but its answer did not arrive (the turn ran out of time, the
    /// connection broke): it may have run. Nothing of it is stored as its result and the turn
    /// does not go on; the same answer again sends it again under its key, which runs it at
    /// most once and brings back its first result.
    #[error("the outcome of the approved call `{tool}` is not known yet")]
    ApprovedCallUnsettled { tool: String },
}

impl From<ApprovalError> for TurnError {
    fn from(e: ApprovalError) -> Self {
        match e {
            ApprovalError::NotFound => TurnError::ApprovalNotFound,
            ApprovalError::Db(e) => TurnError::Storage(e.into()),
            ApprovalError::Unreadable(why) => TurnError::Storage(StorageError::Failed(why)),
        }
    }
}

/// What a failed turn records for the user to read later: a stable code and a plain
/// sentence. Hosts, upstream bodies and other details go to the log, never here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnFailure {
    pub code: &'static str,
    pub message: String,
}

impl std::fmt::Display for TurnFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl TurnFailure {
    /// A model that failed to answer, as the user is told it (in the response too).
    pub fn of_llm(e: &LlmError) -> TurnFailure {
        let (code, message) = match e {
            LlmError::RateLimited { .. } => (
                "llm_rate_limited",
                "the language model is rate limited; retry shortly".to_owned(),
            ),
            LlmError::Timeout | LlmError::DeadlineReached => ("llm_timeout", e.to_string()),
            // Not transient: retrying will not help until the setting is fixed.
            LlmError::Unauthorized { key_set: false, .. } => (
                "llm_key_missing",
                "the language model refused the request: LLM_API_KEY is not set; this needs \
fixing in the chat function's settings"
                    .to_owned(),
            ),
            LlmError::Unauthorized { .. } => (
                "llm_key_rejected",
                "the language model rejected LLM_API_KEY; this needs fixing in the chat \
function's settings"
                    .to_owned(),
            ),
            LlmError::TooLarge { .. } => ("llm_response_too_large", e.to_string()),
            _ => (
                "llm_unavailable",
                "the language model failed to answer; retry shortly".to_owned(),
            ),
        };
        TurnFailure { code, message }
    }
}

/// How a turn ended, short of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// The model answered.
    Answered,
    /// The turn reached its deadline; the reply holds what it had.
    CutShort,
    /// A streamed turn's client went away.
    Interrupted,
    /// The model called tools that wait for the user's approval (`pending_approvals`): the
    /// turn ended there and resumes when they are answered.
    AwaitingApproval,
    /// Every approval answered was already decided: nothing ran again, and the response is the
    /// stored outcome of the turn that resumed.
    AlreadyDecided,
}

#[derive(Debug, Clone, Serialize)]
pub struct TurnResponse {
    pub conversation_id: ConversationId,
    pub status: TurnStatus,
    pub reply: String,
    pub traces: Vec<Trace>,
    pub usage: Usage,
    pub steps: u32,
    /// The turn reached `TURN_DEADLINE_MS` and `reply` says so: it holds what there was.
    pub cut_short: bool,
    /// The rows of citing tools this turn, one per source: those `reply` cites first.
    pub sources: Vec<Source>,
    /// The client of a streamed turn went away and `reply` holds what there was.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// With `status: awaiting_approval`: the calls waiting for the user's answer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<PendingApproval>,
}

/// What a streamed turn reports as it goes, in order. A turn's events are `Started`, then per
/// model response `StepStarted`, its `TextDelta`s, then for a response with tool calls one
/// `ToolInput` per call and one `ToolOutput` per call, and `StepFinished`. The outcome (the
/// [`TurnResponse`] or the error) is [`run`]'s return value, not an event. A turn that pauses
/// reports its waiting calls' `ToolInput` only; they are the response's `pending_approvals`.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    Started {
        conversation_id: ConversationId,
        /// A resumed turn's answered calls, decided before it asks the model again: the
        /// outcomes a client showing the paused turn is waiting for. Empty for a new turn.
        decided: Vec<Decided>,
    },
    StepStarted {
        step: u32,
    },
    TextDelta(String),
    ToolInput {
        call_id: String,
        name: String,
        /// The arguments as JSON, or as the text the model wrote when that is not JSON.
        args: Value,
    },
    /// The output as the model sees it (citing tools' rows carry their `cite` ids).
    ToolOutput {
        call_id: String,
        output: Value,
        is_error: bool,
    },
    StepFinished,
}

/// A waiting call as its answer settled it: what the approved call returned, or that it did
/// not run (declined, superseded or expired).
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub call_id: String,
    /// `None` when the call did not run.
    pub output: Option<Value>,
    pub is_error: bool,
}

/// Where a turn reports its [`TurnEvent`]s: nowhere for the JSON route, a channel for a
/// streamed one. The channel's receiver being dropped is how the turn learns that its client
/// went away (the response body holding it was dropped).
#[derive(Debug)]
pub struct Progress {
    // Unbounded: text deltas are reported from a synchronous callback, and a turn's events are
    // bounded by `LLM_MAX_RESPONSE_BYTES` and the tools' output caps.
    tx: Option<mpsc::UnboundedSender<TurnEvent>>,
}

impl Progress {
    /// A turn nobody watches: it runs as the JSON route always has.
    pub fn none() -> Progress {
        Progress { tx: None }
    }

    /// A streamed turn, and the receiving end of its events.
    pub fn channel() -> (Progress, mpsc::UnboundedReceiver<TurnEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Progress { tx: Some(tx) }, rx)
    }

    fn is_streamed(&self) -> bool {
        self.tx.is_some()
    }

    /// Reports the event `event` builds; a turn nobody watches builds none (tool outputs are
    /// cloned into their events).
    fn send(&self, event: impl FnOnce() -> TurnEvent) {
        if let Some(tx) = &self.tx {
            // A client gone is noticed by `is_gone`, at the next point the turn can stop.
            let _ = tx.send(event());
        }
    }

    /// Ends a step with `note` after the text streamed in it, and reports that ending: the
    /// step's whole text is then what the client saw, and what is stored as the reply.
    fn end_step_with(&self, streamed: &mut String, note: &str) {
        let start = streamed.len();
        if !streamed.is_empty() {
            streamed.push_str("\n\n");
        }
        streamed.push_str(note);
        self.send(|| TurnEvent::TextDelta(streamed[start..].to_owned()));
        self.send(|| TurnEvent::StepFinished);
    }

    fn is_gone(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.is_closed())
    }

    /// Resolves when the client has gone away; never for a turn nobody watches.
    async fn gone(&self) {
        match &self.tx {
            Some(tx) => tx.closed().await,
            None => std::future::pending().await,
        }
    }
}

/// How the loop ended, short of a failure.
struct Ending {
    reply: String,
    cut_short: bool,
    interrupted: bool,
    /// The calls of the last step that wait for the user's approval.
    awaiting: Vec<Pending>,
}

impl Ending {
    fn answered(reply: String) -> Ending {
        Ending {
            reply,
            cut_short: false,
            interrupted: false,
            awaiting: Vec::new(),
        }
    }

    fn interrupted(reply: String) -> Ending {
        Ending {
            interrupted: true,
            ..Ending::answered(reply)
        }
    }

    fn cut_short(reply: String) -> Ending {
        Ending {
            cut_short: true,
            ..Ending::answered(reply)
        }
    }

    fn status(&self) -> TurnStatus {
        if !self.awaiting.is_empty() {
            TurnStatus::AwaitingApproval
        } else if self.interrupted {
            TurnStatus::Interrupted
        } else if self.cut_short {
            TurnStatus::CutShort
        } else {
            TurnStatus::Answered
        }
    }
}

/// Runs one turn (see the module's documentation) and records its metrics.
pub async fn run(
    state: &AppState,
    user: &User,
    request: TurnRequest,
    progress: Progress,
) -> Result<TurnResponse, TurnError> {
    let mut meter = Meter::start();
    let outcome = run_measured(state, user, request, progress, &mut meter).await;
    state.metrics.emit(meter.document(&outcome));
    outcome
}

/// What one turn's metrics are made of, gathered as it runs.
struct Meter {
    started: Instant,
    /// Waiting for the model, retries included.
    model: std::time::Duration,
    /// Waiting for tools: a step's calls run at once, so each step counts its longest.
    tools: std::time::Duration,
    steps: u32,
    usage: Usage,
}

impl Meter {
    fn start() -> Meter {
        Meter {
            started: Instant::now(),
            model: std::time::Duration::ZERO,
            tools: std::time::Duration::ZERO,
            steps: 0,
            usage: Usage::default(),
        }
    }

    /// `Turns`, `TurnDuration`, `ModelTime`, `ToolTime`, `TurnSteps`, `TokensIn`, `TokensOut`
    /// and `TurnErrors`, by `Outcome`. An interrupted turn is no error: its client left.
    fn document(&self, outcome: &Result<TurnResponse, TurnError>) -> Document {
        let code = match outcome {
            Ok(r) => match r.status {
                TurnStatus::Answered => "answered",
                TurnStatus::CutShort => "cut_short",
                TurnStatus::Interrupted => "interrupted",
                TurnStatus::AwaitingApproval => "awaiting_approval",
                TurnStatus::AlreadyDecided => "already_decided",
            },
            Err(e) => e.code(),
        };
        Document::new()
            .dimension("Outcome", code)
            .count("Turns", 1)
            .millis("TurnDuration", self.started.elapsed())
            .millis("ModelTime", self.model)
            .millis("ToolTime", self.tools)
            .count("TurnSteps", u64::from(self.steps))
            .count("TokensIn", self.usage.input_tokens)
            .count("TokensOut", self.usage.output_tokens)
            .count(
                "TurnErrors",
                u64::from(!matches!(
                    code,
                    "answered" | "interrupted" | "awaiting_approval" | "already_decided"
                )),
            )
    }
}

impl TurnError {
    /// The stable code of this failure: the one `error.rs` answers the client with.
    pub fn code(&self) -> &'static str {
        match self {
            TurnError::UnknownTool { .. } => "unknown_tool",
            TurnError::NoModel => "llm_key_missing",
            TurnError::Llm(e) | TurnError::LlmInConversation { error: e, .. } => {
                TurnFailure::of_llm(e).code
            }
            TurnError::Storage(e) => match e {
                StorageError::NotFound => "conversation_not_found",
                StorageError::Busy => "conversation_busy",
                StorageError::LeaseLost => "turn_lease_lost",
                StorageError::PoolExhausted => "database_pool_exhausted",
                StorageError::TooManyReads { .. } => "too_many_reads",
                StorageError::Unavailable(_) => "database_unavailable",
                StorageError::Failed(_) => "internal",
            },
            TurnError::Lost => "internal",
            TurnError::ApprovalNotFound => "approval_not_found",
            TurnError::ApprovedCallUnsettled { .. } => "approval_outcome_unknown",
        }
    }
}

async fn run_measured(
    state: &AppState,
    user: &User,
    mut request: TurnRequest,
    progress: Progress,
    meter: &mut Meter,
) -> Result<TurnResponse, TurnError> {
    // Asking OpenAI without a key can only fail, after the question is stored: say so first.
    if state.llm.config().setup_problem().is_some() {
        return Err(TurnError::NoModel);
    }
    let limits = &state.limits;
    let budget = if progress.is_streamed() {
        limits.stream_turn_deadline
    } else {
        limits.turn_deadline
    };
    let deadline = Instant::now() + budget;
    // The lease outlasts the deadline by as much for a streamed turn as for any other.
    let lease = limits.turn_lease + budget.saturating_sub(limits.turn_deadline);
    // Names this turn in its tool calls' idempotency keys.
    let turn_id = uuid::Uuid::new_v4();
    // Listing is an MCP request too: a server that hangs must not take the whole turn.
    let catalog = tokio::time::timeout_at(deadline, state.mcp.catalog())
        .await
        .unwrap_or_else(|_| Arc::new(Catalog::unavailable()));
    let tools = offered_tools(&catalog, request.tools())?;
    let narrowed = request.tools().is_some().then_some(&*tools);
    let context_json = request.context().map(UiContext::as_json);
    let resuming = request.approvals().is_some();
    let mut turn = conversation::begin(
        &state.pool,
        TurnStart {
            owner: &user.id,
            conversation: request.conversation(),
            message: (!resuming).then(|| request.message()),
            context: context_json.as_ref(),
            history_limit: state.limits.history,
            // Waiting past the deadline would only end in the gateway's timeout.
            lock_wait: state
                .limits
                .turn_lock_wait
                .min(deadline.saturating_duration_since(Instant::now())),
            lease,
        },
    )
    .await?;
    let conversation_id = turn.conversation;
    // The calls a resumed turn decided, and the step the paused turn had reached.
    let (mut traces, mut steps, mut decided) = (Vec::new(), 0u32, Vec::new());
    if let Some(answers) = request.approvals() {
        let resumed = resume(
            state,
            user,
            &catalog,
            conversation_id,
            &mut turn.history,
            answers,
            deadline,
        )
        .await?;
        match resumed {
            Resumed::Continue {
                traces: ran,
                steps: reached,
                decided: settled,
            } => (traces, steps, decided) = (ran, reached, settled),
            Resumed::Done(done) => return Ok(done.response(conversation_id)),
        }
    } else if request.conversation().is_some() && has_pending(&turn.history, limits.history) {
        // A new message instead of an answer: what waited is declined, and the model is told.
        let denied = approval::deny_pending(
            &state.pool,
            conversation_id.as_uuid(),
            user.id.as_str(),
            approval::SUPERSEDED,
        )
        .await?;
        settle(&mut turn.history, &denied);
    }
    progress.send(|| TurnEvent::Started {
        conversation_id,
        decided,
    });

    let mut items = replay::replay(&turn.history, state.limits.replay_chars);
    if turn.history.is_empty() {
        items.extend(request.take_prior());
    }
    if !resuming {
        items.push(Item::User(request.message().to_owned()));
    }
    let traits = catalog.traits(&tools);
    let instructions = instructions::build(&Briefing {
        assistant: state.assistant.as_str(),
        now: chrono::Utc::now(),
        tools: &traits,
        guidance: &catalog.guidance,
        context: request.context(),
        approval: state.approval.policy,
    });

    let mut usage = Usage::default();
    let mut sources = Sources::default();
    // What the model said along the way, for a reply cut short.
    let mut said: Vec<String> = Vec::new();
    // What a streamed client saw of the step that failed: stored with the error.
    let mut seen_before_failure = String::new();
    let outcome = loop {
        if progress.is_gone() {
            break Ok(Ending::interrupted(String::new()));
        }
        let prompt = Prompt {
            instructions: &instructions,
            items: &items,
            tools: &tools,
        };
        progress.send(|| TurnEvent::StepStarted { step: steps + 1 });
        // The text of this response as streamed so far: what an interrupted or cut-short
        // streamed turn keeps.
        let mut streamed = String::new();
        let asked = Instant::now();
        let answer = if progress.is_streamed() {
            let mut on_text = |delta: &str| {
                streamed.push_str(delta);
                progress.send(|| TurnEvent::TextDelta(delta.to_owned()));
            };
            tokio::select! {
                answer = state.llm.respond_streaming(prompt, deadline, &mut on_text) => Some(answer),
                // Dropping the request stops the model's work on it.
                () = progress.gone() => None,
            }
        } else {
            Some(state.llm.respond(prompt, deadline).await)
        };
        meter.model += asked.elapsed();
        let Some(answer) = answer else {
            break Ok(Ending::interrupted(streamed));
        };
        let mut reply = match answer {
            Ok(r) => r,
            Err(LlmError::DeadlineReached) if progress.is_streamed() => {
                // The client has seen the text so far: the note continues it.
                progress.end_step_with(&mut streamed, &cut_short_note(budget, !traces.is_empty()));
                break Ok(Ending::cut_short(streamed));
            }
            Err(LlmError::DeadlineReached) => {
                break Ok(Ending::cut_short(cut_short_reply(
                    budget,
                    &said,
                    !traces.is_empty(),
                )));
            }
            Err(e) => {
                seen_before_failure = nul::clean(streamed);
                break Err(e);
            }
        };
        nul::clean_reply(&mut reply);
        usage += reply.usage;
        if reply.calls.is_empty() {
            progress.send(|| TurnEvent::StepFinished);
            break Ok(Ending::answered(reply.text.unwrap_or_default()));
        }
        if steps == state.limits.max_steps {
            let text = format!(
                "I stopped after {steps} rounds of tool calls, the most one turn may use, \
before reaching an answer. The results gathered so far are in the traces; try a narrower question."
            );
            // Streamed, the note follows whatever the model wrote in this step.
            progress.end_step_with(&mut streamed, &text);
            break Ok(Ending::answered(streamed));
        }
        steps += 1;
        // What the model said in this step: the reply of a turn that pauses after it.
        let step_text = reply.text.clone().unwrap_or_default();
        if let Some(text) = reply.text.filter(|t| !t.trim().is_empty()) {
            said.push(text.clone());
            items.push(Item::Assistant(text));
        }
        for call in &reply.calls {
            progress.send(|| TurnEvent::ToolInput {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                args: parse_arguments(&call.arguments)
                    .map(Value::Object)
                    .unwrap_or_else(|_| Value::String(call.arguments.clone())),
            });
        }
        let cap = state.limits.max_calls_per_step;
        // The calls that wait for the user's approval are not run; the others of the step are.
        let mut awaiting = Vec::new();
        let mut running = Vec::new();
        for (i, call) in reply.calls.iter().enumerate() {
            let key = key_for_call(&turn_id, &call.call_id, steps, i);
            let call = Call {
                call,
                step: steps,
                over_cap: i >= cap,
                key,
            };
            match waiting(state, &catalog, narrowed, &call) {
                Some(pending) => awaiting.push(pending),
                None => running.push(call),
            }
        }
        let called = Instant::now();
        let results = futures::future::join_all(
            running
                .into_iter()
                .map(|call| run_call(state, &catalog, narrowed, user, call, deadline)),
        )
        .await;
        meter.tools += called.elapsed();
        items.extend(reply.calls.iter().cloned().map(Item::Call));
        for mut trace in results {
            // Numbered before the model sees the rows, so it can cite them.
            if let Some(citation) = catalog.citation(&trace.name).filter(|_| !trace.is_error) {
                sources.cite_rows(citation, &trace.name, &trace.call_id, &mut trace.output);
            }
            progress.send(|| TurnEvent::ToolOutput {
                call_id: trace.call_id.clone(),
                output: trace.output.clone(),
                is_error: trace.is_error,
            });
            items.push(Item::Output {
                call_id: trace.call_id.clone(),
                output: replay::output_text(&trace.output),
            });
            traces.push(trace);
        }
        progress.send(|| TurnEvent::StepFinished);
        if !awaiting.is_empty() {
            tracing::info!(
                steps,
                waiting = awaiting.len(),
                "the turn waits for the user's approval"
            );
            break Ok(Ending {
                awaiting,
                ..Ending::answered(step_text)
            });
        }
    };

    meter.steps = steps;
    meter.usage = usage;
    match outcome {
        Ok(ending) => {
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
            turn.finish(TurnRecord {
                reply: &reply,
                traces: &traces,
                usage,
                steps,
                error: None,
                cut_short,
                interrupted,
                sources: &sources,
                approvals: &awaiting,
            })
            .await?;
            Ok(TurnResponse {
                conversation_id,
                status,
                reply,
                traces,
                usage,
                steps,
                cut_short,
                sources,
                interrupted,
                pending_approvals: awaiting.into_iter().map(|p| p.public).collect(),
            })
        }
        Err(e) => {
            // The record is shown to the user later: a stable code and a plain sentence; the
            // details (hosts, upstream bodies) went to the log.
            let error = TurnFailure::of_llm(&e).to_string();
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
                    approvals: &[],
                })
                .await
            {
                tracing::error!(error = %record_error, "could not record the failed turn");
            }
            Err(TurnError::LlmInConversation {
                conversation: conversation_id,
                error: e,
            })
        }
    }
}

/// Whether the conversation may have calls still waiting for approval: its latest message has
/// some, or no history was read to tell.
fn has_pending(history: &[StoredMessage], history_limit: usize) -> bool {
    history_limit == 0 || history.last().is_some_and(StoredMessage::has_waiting_calls)
}

/// Puts decided approvals in place of their waiting selves in the history about to be
/// replayed.
fn settle(history: &mut [StoredMessage], decided: &[Approval]) {
    for message in history.iter_mut() {
        for stored in message.approvals.iter_mut() {
            if let Some(now) = decided.iter().find(|d| d.id == stored.id) {
                *stored = now.clone();
            }
        }
    }
}

/// What answering a paused turn's approvals came to.
enum Resumed {
    /// Every call of the paused step is decided (approved ones ran): the loop goes on, with
    /// these calls as the first traces of the resumed turn, from the step it had reached.
    /// `decided` says how each call was settled, for the stream.
    Continue {
        traces: Vec<Trace>,
        steps: u32,
        decided: Vec<Decided>,
    },
    /// Nothing more runs now: the answer is this.
    Done(Box<Settled>),
}

/// A resume that ends without asking the model: some calls still wait, or the answers were
/// all decided before (a second tab, a retry), and the stored outcome is the answer.
struct Settled {
    status: TurnStatus,
    message: Option<StoredMessage>,
    pending: Vec<PendingApproval>,
}

impl Settled {
    fn response(self, conversation_id: ConversationId) -> TurnResponse {
        let message = self.message;
        TurnResponse {
            conversation_id,
            status: self.status,
            reply: message
                .as_ref()
                .map(|m| m.content.clone())
                .unwrap_or_default(),
            traces: message
                .as_ref()
                .map(|m| m.traces.clone())
                .unwrap_or_default(),
            usage: Usage::default(),
            steps: message
                .as_ref()
                .and_then(|m| m.steps)
                .map_or(0, |s| s.max(0) as u32),
            cut_short: message.as_ref().is_some_and(|m| m.cut_short),
            sources: message
                .as_ref()
                .and_then(|m| m.sources.clone())
                .unwrap_or_default(),
            interrupted: message.as_ref().is_some_and(|m| m.interrupted),
            pending_approvals: self.pending,
        }
    }
}

/// The calls still waiting among `approvals`, as a client is told them.
fn still_pending(approvals: &[Approval]) -> Vec<PendingApproval> {
    approvals
        .iter()
        .filter(|a| a.decision == Decision::Pending)
        .map(|a| PendingApproval {
            id: a.id,
            tool: a.tool.clone(),
            server: a.server.clone(),
            arguments: a.arguments.clone(),
            call_id: a.call_id.clone(),
            expires_at: a.expires_at,
            about: a.about.clone(),
        })
        .collect()
}

/// Answers a paused turn's approvals, holding the conversation's lease: decides each (once,
/// see [`approval::decide`]), runs the approved calls that have not run under their stored
/// idempotency keys (a call whose answer was lost replays its first result), and puts the
/// outcomes into `history` where the calls were made.
async fn resume(
    state: &AppState,
    user: &User,
    catalog: &Catalog,
    conversation: ConversationId,
    history: &mut [StoredMessage],
    answers: &[Answer],
    deadline: Instant,
) -> Result<Resumed, TurnError> {
    let pool = &state.pool;
    let id = conversation.as_uuid();
    let decided = approval::decide(pool, id, answers, user.id.as_str()).await?;
    let Some(paused) = decided.paused_message else {
        // The turn these belong to was resumed (or superseded by a new message) before: its
        // stored outcome is the answer, and nothing runs again.
        let latest = history
            .iter()
            .rev()
            .find(|m| m.role == "assistant")
            .cloned();
        let pending = latest
            .as_ref()
            .map(|m| still_pending(&m.approvals))
            .unwrap_or_default();
        // Whatever waits now (a later question the client may not have seen) is listed, but
        // this answer is not its answer: the status says nothing ran.
        return Ok(Resumed::Done(Box::new(Settled {
            status: TurnStatus::AlreadyDecided,
            message: latest,
            pending,
        })));
    };
    let mut all = approval::of_message(pool, id, paused).await?;
    let pending = still_pending(&all);
    if !pending.is_empty() {
        // The turn resumes once every call of its step is answered.
        settle(history, &all);
        return Ok(Resumed::Done(Box::new(Settled {
            status: TurnStatus::AwaitingApproval,
            message: None,
            pending,
        })));
    }
    let called = Instant::now();
    let ran = futures::future::join_all(
        all.iter()
            .filter(|a| a.needs_running())
            .map(|a| run_approved(state, user, catalog, a, deadline)),
    )
    .await;
    let mut unsettled = None;
    for (approval_id, outcome) in ran {
        let Some(a) = all.iter_mut().find(|a| a.id == approval_id) else {
            continue;
        };
        if outcome.unsettled {
            // Not a result: the call may have run. Storing this sentence would make it the
            // call's permanent outcome although the write may well have succeeded.
            tracing::warn!(tool = %a.tool, "approved call's outcome unknown; not recorded, the turn does not go on");
            unsettled.get_or_insert_with(|| a.tool.clone());
            continue;
        }
        approval::record_result(pool, &approval_id, &outcome.output, outcome.is_error).await?;
        a.result = Some(outcome.output);
        a.result_is_error = outcome.is_error;
    }
    if let Some(tool) = unsettled {
        return Err(TurnError::ApprovedCallUnsettled { tool });
    }
    let duration_ms = called.elapsed().as_millis() as u64;
    settle(history, &all);
    let steps = history
        .iter()
        .find(|m| m.seq == paused)
        .and_then(|m| m.steps)
        .map(|s| s.max(0) as u32)
        .or_else(|| all.iter().map(|a| a.step).max())
        .unwrap_or(0);
    let traces = all
        .iter()
        .map(|a| {
            let trace = Trace::of_approval(a);
            Trace {
                output: nul::clean_json(trace.output),
                duration_ms: if a.decision == Decision::Approved {
                    duration_ms
                } else {
                    0
                },
                ..trace
            }
        })
        .collect();
    let decided = all
        .iter()
        .map(|a| {
            let (output, is_error) = a.output();
            let ran = a.decision == Decision::Approved;
            Decided {
                call_id: a.call_id.clone(),
                output: ran.then(|| nul::clean_json(output)),
                is_error,
            }
        })
        .collect();
    Ok(Resumed::Continue {
        traces,
        steps,
        decided,
    })
}

/// Runs one approved call under its stored idempotency key, with the approval in its `_meta`
/// for the server's audit record.
async fn run_approved(
    state: &AppState,
    user: &User,
    catalog: &Catalog,
    approval: &Approval,
    deadline: Instant,
) -> (approval::ApprovalId, ToolOutcome) {
    let outcome = match (
        IdempotencyKey::new(approval.idempotency_key.clone()),
        approval.arguments.as_object(),
    ) {
        (Ok(key), Some(arguments)) => {
            let approved = approval.approved_meta();
            let by = CallFor {
                user,
                key: &key,
                approved: Some(&approved),
            };
            state
                .mcp
                .call(catalog, &approval.tool, arguments.clone(), by, deadline)
                .await
        }
        // Stored by this code from a checked call: not reachable unless the row was edited.
        _ => ToolOutcome::error("not run: the stored call could not be read"),
    };
    tracing::info!(tool = %approval.tool, is_error = outcome.is_error, "approved tool call");
    (approval.id, outcome)
}

/// The call as it waits for the user's approval, when it does: the policy says its tool waits,
/// and it would run (its arguments are an object that fits the tool's schema, it is within the
/// step's cap and offered). A call that would be refused is not asked about: it runs as far as
/// its refusal, which the model reads and can correct, and is never sent.
fn waiting(
    state: &AppState,
    catalog: &Catalog,
    narrowed: Option<&[ToolDef]>,
    Call {
        call,
        step,
        over_cap,
        key,
    }: &Call<'_>,
) -> Option<Pending> {
    if *over_cap || narrowed.is_some_and(|offered| !offered.iter().any(|t| t.name == call.name)) {
        return None;
    }
    let about = catalog.about(&call.name, state.approval.policy)?;
    let arguments = parse_arguments(&call.arguments).ok()?;
    catalog.check_arguments(&call.name, &arguments).ok()?;
    let ttl = chrono::Duration::from_std(state.approval.ttl).unwrap_or(chrono::Duration::MAX);
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

/// The catalog's tools, or only the ones the request names (each must exist).
fn offered_tools<'a>(
    catalog: &'a Catalog,
    wanted: Option<&[String]>,
) -> Result<Cow<'a, [ToolDef]>, TurnError> {
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
        return Err(TurnError::UnknownTool {
            unknown: unknown.clone(),
            available: known.join(", "),
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

/// One tool call the model made, where it stands in the turn.
struct Call<'a> {
    call: &'a ToolCall,
    step: u32,
    /// Past `MAX_TOOL_CALLS_PER_STEP`: not run.
    over_cap: bool,
    key: IdempotencyKey,
}

/// Runs one call for `user`. Arguments that are not a JSON object become a tool error the
/// model sees, as does a call past `MAX_TOOL_CALLS_PER_STEP`, which is not run.
async fn run_call(
    state: &AppState,
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
    let (args, outcome) = match parse_arguments(&call.arguments) {
        Ok(map) if over_cap => (
            Value::Object(map),
            ToolOutcome::error(format!(
                "not run: one response may make at most {} tool calls; make the ones you \
still need in your next response",
                state.limits.max_calls_per_step
            )),
        ),
        // A request that narrowed the tools is obeyed even if the model calls another one.
        Ok(map) if narrowed.is_some_and(|offered| !offered.iter().any(|t| t.name == call.name)) => {
            (
                Value::Object(map),
                ToolOutcome::error(format!(
                    "the tool `{}` is not available in this conversation turn",
                    call.name
                )),
            )
        }
        Ok(map) => {
            let args = Value::Object(map.clone());
            (
                args,
                state
                    .mcp
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
        approval: None,
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
    fn a_failed_turns_metric_outcome_is_the_code_its_client_is_sent() {
        let failures = [
            TurnError::UnknownTool {
                unknown: "x".into(),
                available: String::new(),
            },
            TurnError::NoModel,
            TurnError::Llm(LlmError::RateLimited { retry_after: None }),
            TurnError::Llm(LlmError::Timeout),
            TurnError::Llm(LlmError::TooLarge { limit: 1 }),
            TurnError::LlmInConversation {
                conversation: ConversationId::new(),
                error: LlmError::Transport("reset".into()),
            },
            TurnError::Storage(StorageError::NotFound),
            TurnError::Storage(StorageError::Busy),
            TurnError::Storage(StorageError::LeaseLost),
            TurnError::Storage(StorageError::PoolExhausted),
            TurnError::Storage(StorageError::TooManyReads { limit: 2 }),
            TurnError::Storage(StorageError::Unavailable("down".into())),
            TurnError::Storage(StorageError::Failed("bug".into())),
            TurnError::Lost,
        ];
        for failure in failures {
            let code = failure.code();
            let told = crate::error::ApiError::Turn(failure).public_summary();
            assert!(told.starts_with(&format!("{code}: ")), "{code} vs {told}");
        }
    }

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
