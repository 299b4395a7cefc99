//! How a turn ends: its outcome ([`TurnOutcome`], with its [`TurnStatus`]), or why it failed
//! ([`TurnError`], and the [`TurnFailure`] stored with it). In turn words only: the edge
//! (`http`) picks statuses and renders bodies.

use crate::turn::approval::{ApprovalError, Pending, PendingApproval};
use crate::turn::conversation::{Chart, ConversationId, StorageError, Trace};
use crate::turn::llm::{LlmError, Usage};
use crate::turn::sources::Source;

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
    /// The user's daily token budget or turn rate is used up (`turn::quota`): refused before
    /// anything was stored.
    #[error("{0}")]
    QuotaExceeded(crate::turn::quota::Exceeded),
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
            TurnError::QuotaExceeded(_) => "quota_exceeded",
        }
    }
}

/// Whether an outcome code (a [`TurnStatus`] or [`TurnError`] code) is a failure, as the
/// metrics' `TurnErrors` and the ledger's `error` count it: an interrupted turn is none (its
/// client left), nor one waiting for approval; a turn cut short by its deadline is one.
pub fn is_failure(code: &str) -> bool {
    !matches!(
        code,
        "answered" | "interrupted" | "awaiting_approval" | "already_decided"
    )
}

/// How a turn ended, short of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl TurnStatus {
    /// The status as the client is told it (`status`) and as the turn's metrics name its
    /// outcome: `answered`, `cut_short`, `interrupted`, `awaiting_approval`, `already_decided`.
    pub fn code(self) -> &'static str {
        match self {
            TurnStatus::Answered => "answered",
            TurnStatus::CutShort => "cut_short",
            TurnStatus::Interrupted => "interrupted",
            TurnStatus::AwaitingApproval => "awaiting_approval",
            TurnStatus::AlreadyDecided => "already_decided",
        }
    }
}

/// What a turn came to, short of a failure: what the edge renders (as JSON, the last event of a
/// stream, or an OpenAI completion) and what the turn stored.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    pub conversation_id: ConversationId,
    /// The answer's message number (`seq`), for feedback on it; `None` when a resume that ran
    /// nothing finds no stored answer.
    pub seq: Option<i32>,
    pub status: TurnStatus,
    pub reply: String,
    pub traces: Vec<Trace>,
    pub usage: Usage,
    pub steps: u32,
    /// The turn reached `TURN_DEADLINE_MS` and `reply` says so: it holds what there was.
    pub cut_short: bool,
    /// The rows of citing tools this turn, one per source: those `reply` cites first.
    pub sources: Vec<Source>,
    /// The charts the turn showed (`show_chart`), in the order they were drawn.
    pub charts: Vec<Chart>,
    /// The client of a streamed turn went away and `reply` holds what there was.
    pub interrupted: bool,
    /// With `status: awaiting_approval`: the calls waiting for the user's answer.
    pub pending_approvals: Vec<PendingApproval>,
}

/// How the loop ended, short of a failure.
pub(super) struct Ending {
    pub reply: String,
    pub cut_short: bool,
    pub interrupted: bool,
    /// The calls of the last step that wait for the user's approval.
    pub awaiting: Vec<Pending>,
}

impl Ending {
    pub(super) fn answered(reply: String) -> Ending {
        Ending {
            reply,
            cut_short: false,
            interrupted: false,
            awaiting: Vec::new(),
        }
    }

    pub(super) fn interrupted(reply: String) -> Ending {
        Ending {
            interrupted: true,
            ..Ending::answered(reply)
        }
    }

    pub(super) fn cut_short(reply: String) -> Ending {
        Ending {
            cut_short: true,
            ..Ending::answered(reply)
        }
    }

    pub(super) fn status(&self) -> TurnStatus {
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
