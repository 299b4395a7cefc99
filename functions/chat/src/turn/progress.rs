//! What a streamed turn reports as it goes ([`TurnEvent`]) and where it reports it
//! ([`Progress`]): nowhere for a JSON answer, a channel for a stream, whose closing tells the
//! turn that its client went away.

use serde_json::Value;
use tokio::sync::mpsc;

use crate::turn::conversation::ConversationId;

/// What a streamed turn reports as it goes, in order. A turn's events are `Started`, then per
/// model response `StepStarted`, its `TextDelta`s, then for a response with tool calls one
/// `ToolInput` per call and one `ToolOutput` per call (a `show_chart` call's output followed by its
/// `Chart`), and `StepFinished`. The outcome (the
/// [`TurnOutcome`](super::TurnOutcome) or the error) is [`run`](super::run)'s return value, not an event. A turn that pauses
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
    /// A chart the model asked for (`show_chart`), after that call's `ToolOutput`: a Vega-Lite
    /// spec whose data are the rows of the earlier call `call_id` of the same turn.
    Chart {
        /// The `show_chart` call that drew it.
        id: String,
        /// The call whose rows it draws.
        call_id: String,
        spec: Value,
    },
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

    pub(super) fn is_streamed(&self) -> bool {
        self.tx.is_some()
    }

    /// Reports the event `event` builds; a turn nobody watches builds none (tool outputs are
    /// cloned into their events).
    pub(super) fn send(&self, event: impl FnOnce() -> TurnEvent) {
        if let Some(tx) = &self.tx {
            // A client gone is noticed by `is_gone`, at the next point the turn can stop.
            let _ = tx.send(event());
        }
    }

    /// Ends a step with `note` after the text streamed in it, and reports that ending: the
    /// step's whole text is then what the client saw, and what is stored as the reply.
    pub(super) fn end_step_with(&self, streamed: &mut String, note: &str) {
        let start = streamed.len();
        if !streamed.is_empty() {
            streamed.push_str("\n\n");
        }
        streamed.push_str(note);
        self.send(|| TurnEvent::TextDelta(streamed[start..].to_owned()));
        self.send(|| TurnEvent::StepFinished);
    }

    pub(super) fn is_gone(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| tx.is_closed())
    }

    /// Resolves when the client has gone away; never for a turn nobody watches.
    pub(super) async fn gone(&self) {
        match &self.tx {
            Some(tx) => tx.closed().await,
            None => std::future::pending().await,
        }
    }
}
