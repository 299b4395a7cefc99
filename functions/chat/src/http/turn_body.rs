//! The JSON body of a finished turn, as `POST /api/chat` answers it: the turn's outcome in the
//! wire's field names and order. The turn itself returns a [`TurnOutcome`] and knows no body.

use serde::Serialize;

use crate::turn::TurnOutcome;
use crate::turn::approval::PendingApproval;
use crate::turn::conversation::{Chart, ConversationId, Trace};
use crate::turn::llm::Usage;
use crate::turn::sources::Source;

#[derive(Debug, Serialize)]
pub struct TurnBody {
    pub conversation_id: ConversationId,
    /// The answer's message number, for `PUT .../messages/{seq}/feedback`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<i32>,
    /// [`crate::turn::TurnStatus::code`]: `answered`, `cut_short`, `interrupted`,
    /// `awaiting_approval` or `already_decided`.
    pub status: &'static str,
    pub reply: String,
    pub traces: Vec<Trace>,
    pub usage: Usage,
    pub steps: u32,
    /// The turn reached `TURN_DEADLINE_MS` and `reply` says so: it holds what there was.
    pub cut_short: bool,
    /// The rows of citing tools this turn, one per source: those `reply` cites first.
    pub sources: Vec<Source>,
    /// The charts the turn showed (`show_chart`): `[{id, call_id, spec}]`, maybe empty.
    pub charts: Vec<Chart>,
    /// The client of a streamed turn went away and `reply` holds what there was.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// With `status: awaiting_approval`: the calls waiting for the user's answer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_approvals: Vec<PendingApproval>,
}

impl From<TurnOutcome> for TurnBody {
    fn from(outcome: TurnOutcome) -> Self {
        TurnBody {
            conversation_id: outcome.conversation_id,
            seq: outcome.seq,
            status: outcome.status.code(),
            reply: outcome.reply,
            traces: outcome.traces,
            usage: outcome.usage,
            steps: outcome.steps,
            cut_short: outcome.cut_short,
            sources: outcome.sources,
            charts: outcome.charts,
            interrupted: outcome.interrupted,
            pending_approvals: outcome.pending_approvals,
        }
    }
}
