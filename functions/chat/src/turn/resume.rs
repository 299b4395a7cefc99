//! A paused turn resumed: its waiting calls decided by the user's answers (each once), the
//! approved ones run under their stored idempotency keys, and the outcomes put into the history
//! where the calls were made, before the model is asked again.

use tokio::time::Instant;

use super::Deps;
use super::outcome::{TurnError, TurnOutcome, TurnStatus};
use super::progress::Decided;
use crate::auth::User;
use crate::nul;
use crate::turn::approval::{self, Answer, Approval, Decision, PendingApproval};
use crate::turn::conversation::{ConversationId, StoredMessage, Trace};
use crate::turn::llm::Usage;
use crate::turn::mcp_client::{CallFor, Catalog, IdempotencyKey, ToolOutcome};

/// Whether the conversation may have calls still waiting for approval: its latest message has
/// some, or no history was read to tell.
pub(super) fn has_pending(history: &[StoredMessage], history_limit: usize) -> bool {
    history_limit == 0 || history.last().is_some_and(StoredMessage::has_waiting_calls)
}

/// Puts decided approvals in place of their waiting selves in the history about to be
/// replayed.
pub(super) fn settle(history: &mut [StoredMessage], decided: &[Approval]) {
    for message in history.iter_mut() {
        for stored in message.approvals.iter_mut() {
            if let Some(now) = decided.iter().find(|d| d.id == stored.id) {
                *stored = now.clone();
            }
        }
    }
}

/// What answering a paused turn's approvals came to.
pub(super) enum Resumed {
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
pub(super) struct Settled {
    status: TurnStatus,
    message: Option<StoredMessage>,
    pending: Vec<PendingApproval>,
}

impl Settled {
    /// The outcome a resume that ran nothing answers with.
    pub(super) fn outcome(self, conversation_id: ConversationId) -> TurnOutcome {
        let message = self.message;
        TurnOutcome {
            conversation_id,
            seq: message.as_ref().map(|m| m.seq),
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
            charts: message
                .as_ref()
                .and_then(|m| m.charts.clone())
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
pub(super) async fn resume(
    deps: &Deps<'_>,
    user: &User,
    catalog: &Catalog,
    conversation: ConversationId,
    history: &mut [StoredMessage],
    answers: &[Answer],
    deadline: Instant,
) -> Result<Resumed, TurnError> {
    let pool = deps.pool;
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
            .map(|a| run_approved(deps, user, catalog, a, deadline)),
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
    deps: &Deps<'_>,
    user: &User,
    catalog: &Catalog,
    approval: &Approval,
    deadline: Instant,
) -> (approval::ApprovalId, ToolOutcome) {
    let outcome = match (
        IdempotencyKey::new(approval.idempotency_key.clone()),
        approval.arguments.as_object(),
        approval.approved_meta(),
    ) {
        (Ok(key), Some(arguments), Some(approved)) => {
            let by = CallFor {
                user,
                key: &key,
                approved: Some(&approved),
            };
            deps.mcp
                .call(catalog, &approval.tool, arguments.clone(), by, deadline)
                .await
        }
        // Stored by this code from a checked call: not reachable unless the row was edited.
        _ => ToolOutcome::error("not run: the stored call could not be read"),
    };
    tracing::info!(tool = %approval.tool, is_error = outcome.is_error, "approved tool call");
    (approval.id, outcome)
}
