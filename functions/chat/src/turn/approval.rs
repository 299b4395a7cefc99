//! Tool calls that wait for the user's approval: which calls wait ([`Policy`], from `APPROVAL`),
//! what a waiting call is ([`Pending`], stored with the turn that paused), and its one decision
//! ([`decide`], [`deny_pending`]): a conditional update, so of two answers only one decides.
//! It runs no tool and knows no HTTP; `turn` resumes the loop, `error.rs` picks statuses.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use parley_core::config::{ConfigError, Env};
use parley_core::db::DbError;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_postgres::types::{Json, Type};
use uuid::Uuid;

use crate::turn::id::uuid_id;

/// Which tool calls wait for the user's approval (`APPROVAL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Tools annotated `destructiveHint: true` and tools whose `_meta["parley/approval"]` is
    /// `"always"`.
    #[default]
    Destructive,
    /// Those, and every tool not annotated `readOnlyHint: true`.
    Writes,
    /// Nothing waits: for trusted automation only (warned at start-up).
    Off,
}

/// What a tool's listing says that decides whether its calls wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolMarks {
    /// Annotated `readOnlyHint: true`.
    pub read_only: bool,
    /// Annotated `destructiveHint: true` (explicitly: MCP's default for an unannotated write is
    /// also destructive, but only a server that says so makes every call wait).
    pub destructive: bool,
    /// `_meta["parley/approval"] == "always"`.
    pub always: bool,
}

/// Why a call waits for the user's approval: what the card and the question tell the user the
/// call will do. When several apply, the first listed here is the one given (a deletion that
/// also always asks is told as a deletion: the stronger warning).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Why {
    /// The tool is annotated `destructiveHint: true`: it deletes or overwrites data.
    Destructive,
    /// The tool's `_meta["parley/approval"]` is `"always"` (it may send, spend or change
    /// something outside the chat).
    Always,
    /// `APPROVAL=writes`, and the tool is not annotated read-only: it changes data.
    Writes,
}

impl Policy {
    /// Why a call of a tool so marked waits for the user's approval; `None` when it runs.
    pub fn why(self, marks: ToolMarks) -> Option<Why> {
        if self == Policy::Off {
            None
        } else if marks.destructive {
            Some(Why::Destructive)
        } else if marks.always {
            Some(Why::Always)
        } else if self == Policy::Writes && !marks.read_only {
            Some(Why::Writes)
        } else {
            None
        }
    }

    /// Whether a call of a tool so marked waits for the user's approval.
    pub fn waits(self, marks: ToolMarks) -> bool {
        self.why(marks).is_some()
    }
}

/// `APPROVAL` and `APPROVAL_TTL_MS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub policy: Policy,
    /// How long a waiting call may be approved; after it, it is decided as expired.
    pub ttl: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            policy: Policy::Destructive,
            ttl: Settings::DEFAULT_TTL,
        }
    }
}

impl Settings {
    /// 15 minutes: long enough to read a card and answer, short enough that an approval left
    /// in a forgotten tab does not run a deletion the next morning.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(15 * 60);

    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let policy = match env.get("APPROVAL").map(str::to_ascii_lowercase).as_deref() {
            None | Some("destructive") => Policy::Destructive,
            Some("writes") => Policy::Writes,
            Some("off") => Policy::Off,
            Some(_) => {
                return Err(ConfigError::new(
                    "APPROVAL",
                    "must be `destructive`, `writes` or `off`",
                ));
            }
        };
        let ttl = env.millis("APPROVAL_TTL_MS", Self::DEFAULT_TTL, 1_000..=86_400_000)?;
        Ok(Self { policy, ttl })
    }

    /// Logs the warning `APPROVAL=off` deserves; called once at start-up.
    pub fn warn_if_off(&self) {
        if self.policy == Policy::Off {
            tracing::warn!(
                "APPROVAL=off: destructive tool calls run without asking the user; only trusted \
                 automation should run so"
            );
        }
    }
}

uuid_id!(
    /// An approval's id.
    ApprovalId
);

/// The user's answer to one waiting call, as a request carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub id: ApprovalId,
    pub approved: bool,
    /// Why, in the user's words; the model is told it with a denial.
    pub reason: Option<String>,
}

/// A call that waits, as a paused turn reports it to its client (`pending_approvals`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingApproval {
    pub id: ApprovalId,
    /// The tool as the model called it, and the server it belongs to.
    pub tool: String,
    pub server: String,
    pub arguments: Value,
    /// The model's id of the call (the stream's `toolCallId`).
    pub call_id: String,
    pub expires_at: DateTime<Utc>,
    /// Why it waits (what it will change), and what the tool does as its listing says:
    /// what a card shows beside the arguments.
    #[serde(flatten)]
    pub about: About,
}

/// What a waiting call will change and what its tool does, stored with the call so a card
/// shown after a reload says the same as the one shown when the turn paused.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct About {
    /// `None` only for calls stored before this was recorded (migration 0014).
    #[serde(default)]
    pub why: Option<Why>,
    /// The tool's description and title, as its server lists them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// A call that waits, as the turn that paused stores it (with its assistant message).
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub public: PendingApproval,
    /// The model→tools round the call was made in.
    pub step: u32,
    /// The idempotency key the call runs under once approved.
    pub idempotency_key: String,
}

impl Pending {
    /// The row [`crate::turn::conversation`] inserts, as JSON for `jsonb_to_recordset`.
    pub fn row(&self) -> Value {
        let p = &self.public;
        json!({
            "id": p.id, "step": self.step, "call_id": p.call_id, "server": p.server,
            "tool": p.tool, "arguments": p.arguments,
            "idempotency_key": self.idempotency_key, "expires_at": p.expires_at,
            "why": p.about.why, "description": p.about.description, "title": p.about.title,
        })
    }
}

/// Where a waiting call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Pending,
    Approved,
    Denied,
    Expired,
}

/// A call that waited, as stored: what `GET /api/conversations/{id}/messages` shows with the
/// message of the turn that paused, and what replay gives the model as the call's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    pub id: ApprovalId,
    pub step: u32,
    pub call_id: String,
    pub server: String,
    pub tool: String,
    pub arguments: Value,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub decision: Decision,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub reason: Option<String>,
    /// The model's view of the outcome: the tool's result once an approved call ran, or the
    /// sentence a denial or expiry became; `None` until then.
    pub result: Option<Value>,
    pub result_is_error: bool,
    #[serde(flatten)]
    pub about: About,
    /// Not sent to clients: the key the call runs under.
    #[serde(skip_serializing, default)]
    pub idempotency_key: String,
}

impl Approval {
    /// The output the model is given for this call. A call still waiting when its history is
    /// replayed was never run; one approved whose result never arrived (its answer was lost,
    /// and the turn went on with a new message) may have run.
    pub fn output(&self) -> (Value, bool) {
        match (&self.result, self.decision) {
            (Some(result), _) => (result.clone(), self.result_is_error),
            (None, Decision::Approved) => (Value::String(UNSETTLED.into()), true),
            (None, _) => (Value::String("not run: it was never approved".into()), true),
        }
    }

    /// Approved and not yet run (or its answer was lost): the resume runs it, under its key.
    pub fn needs_running(&self) -> bool {
        self.decision == Decision::Approved && self.result.is_none()
    }

    /// What `_meta["parley/approved"]` of the call says: who approved it, and when
    /// ([`parley_wire::Approval`], the shape the server reads); `None` while undecided.
    pub fn approved_meta(&self) -> Option<Value> {
        Some(
            parley_wire::Approval {
                id: self.id.to_string(),
                decided_by: self.decided_by.clone()?,
                decided_at: self.decided_at?,
            }
            .to_json(),
        )
    }
}

/// The model's sentence for a call the user declined.
pub fn declined(reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(why) => format!("not run: the user declined this call, saying: {why}"),
        None => "not run: the user declined this call".to_owned(),
    }
}

/// The model's sentence for a call nobody answered in time.
pub const EXPIRED: &str = "not run: the approval expired before the user answered";

/// The model's sentence for an approved call whose result was never received.
pub const UNSETTLED: &str = "the outcome of this approved call is unknown: it was sent, but its \
answer never arrived. It may or may not have taken effect; check before calling it again.";

/// Why a new message denies what was still waiting.
pub const SUPERSEDED: &str = "the user sent a new message instead of answering";

/// Why an approval could not be decided.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// No such approval in this conversation (another user's is indistinguishable).
    #[error("approval not found")]
    NotFound,
    #[error(transparent)]
    Db(#[from] DbError),
    /// A stored approval could not be read back.
    #[error("a stored approval could not be read: {0}")]
    Unreadable(String),
}

impl From<tokio_postgres::Error> for ApprovalError {
    fn from(e: tokio_postgres::Error) -> Self {
        DbError::from(e).into()
    }
}

impl From<deadpool_postgres::PoolError> for ApprovalError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        DbError::from(e).into()
    }
}

/// The columns an [`Approval`] is read from, as one JSON object per row.
const AS_JSON: &str = "to_jsonb(a) - 'conversation_id' - 'message_seq'";

/// What [`decide`] found: the approvals asked about, decided now or before, and whether they
/// belong to the conversation's latest message (the turn that paused and was not resumed).
#[derive(Debug)]
pub struct Decided {
    pub approvals: Vec<Approval>,
    /// The assistant message the approvals belong to, when it is still the conversation's
    /// last: the turn that paused has not been resumed or superseded yet.
    pub paused_message: Option<i32>,
}

/// Decides each answer, once, in one transaction: all of the answer or none of it. Overdue
/// approvals of the conversation become `expired`; every id must be an approval of the
/// conversation ([`ApprovalError::NotFound`] otherwise, and nothing is stored: not the other
/// answers, not the expiries); then each answered approval that is still `pending` becomes
/// `approved` or `denied` in one conditional update (`WHERE decision = 'pending' AND
/// expires_at > now()`), so of two answers to one approval (two tabs, a retry) exactly one
/// decides it; the other reads that decision. Call it holding the conversation's turn lease,
/// after ownership was checked: `conversation` scopes every statement.
pub async fn decide(
    pool: &Pool,
    conversation: &Uuid,
    answers: &[Answer],
    by: &str,
) -> Result<Decided, ApprovalError> {
    let mut conn = pool.get().await?;
    let tx = conn.transaction().await?;
    expire(&tx, conversation).await?;
    let ids: Vec<Uuid> = answers.iter().map(|a| *a.id.as_uuid()).collect();
    // Locked, so an answer on another instance (after this lease was lost) waits for this one.
    let known = tx
        .query_typed(
            "SELECT count(*)::int4 FROM (
                 SELECT 1 FROM chat.approvals WHERE conversation_id = $1 AND id = ANY($2)
                 FOR UPDATE) a",
            &[(conversation, Type::UUID), (&ids, Type::UUID_ARRAY)],
        )
        .await?;
    if known[0].get::<_, i32>(0) as usize != ids.len() {
        // Dropping `tx` rolls back: the expiries above are not kept either.
        return Err(ApprovalError::NotFound);
    }
    let approved: Vec<bool> = answers.iter().map(|a| a.approved).collect();
    let reasons: Vec<Option<&str>> = answers.iter().map(|a| a.reason.as_deref()).collect();
    let declined: Vec<String> = answers
        .iter()
        .map(|a| declined(a.reason.as_deref()))
        .collect();
    tx.execute_typed(
        "UPDATE chat.approvals a
         SET decision = CASE WHEN x.approved THEN 'approved' ELSE 'denied' END,
             decided_by = $3, decided_at = now(), reason = x.reason,
             result = CASE WHEN x.approved THEN NULL ELSE to_jsonb(x.declined) END,
             result_is_error = NOT x.approved
         FROM unnest($2::uuid[], $4::bool[], $5::text[], $6::text[])
              AS x(id, approved, reason, declined)
         WHERE a.id = x.id AND a.conversation_id = $1
           AND a.decision = 'pending' AND a.expires_at > now()",
        &[
            (conversation, Type::UUID),
            (&ids, Type::UUID_ARRAY),
            (&by, Type::TEXT),
            (&approved, Type::BOOL_ARRAY),
            (&reasons, Type::TEXT_ARRAY),
            (&declined, Type::TEXT_ARRAY),
        ],
    )
    .await?;
    let rows = tx
        .query_typed(
            &format!(
                "SELECT {AS_JSON}, a.message_seq, a.message_seq = c.message_count
                 FROM chat.approvals a JOIN chat.conversations c ON c.id = a.conversation_id
                 WHERE a.conversation_id = $1 AND a.id = ANY($2)"
            ),
            &[(conversation, Type::UUID), (&ids, Type::UUID_ARRAY)],
        )
        .await?;
    tx.commit().await?;
    let mut approvals = Vec::with_capacity(rows.len());
    let mut paused_message = None;
    for row in &rows {
        approvals.push(from_row(row)?);
        if row.get::<_, bool>(2) {
            paused_message = Some(row.get::<_, i32>(1));
        }
    }
    approvals.sort_by_key(|a| ids.iter().position(|id| id == a.id.as_uuid()));
    Ok(Decided {
        approvals,
        paused_message,
    })
}

/// Denies every approval of the conversation still waiting (expired ones as expired), for
/// `reason`, and returns them as decided: a new message instead of an answer. Call it holding
/// the turn lease.
pub async fn deny_pending(
    pool: &Pool,
    conversation: &Uuid,
    by: &str,
    reason: &str,
) -> Result<Vec<Approval>, ApprovalError> {
    let mut conn = pool.get().await?;
    let tx = conn.transaction().await?;
    let mut decided = expire(&tx, conversation).await?;
    let text = declined(Some(reason));
    for row in tx
        .query_typed(
            &format!(
                "UPDATE chat.approvals a
                 SET decision = 'denied', decided_by = $2, decided_at = now(), reason = $3,
                     result = to_jsonb($4::text), result_is_error = true
                 WHERE conversation_id = $1 AND decision = 'pending'
                 RETURNING {AS_JSON}"
            ),
            &[
                (conversation, Type::UUID),
                (&by, Type::TEXT),
                (&reason, Type::TEXT),
                (&text, Type::TEXT),
            ],
        )
        .await?
    {
        decided.push(from_row(&row)?);
    }
    tx.commit().await?;
    Ok(decided)
}

/// The approvals of one message (the turn that paused), in the order they were made.
pub async fn of_message(
    pool: &Pool,
    conversation: &Uuid,
    message_seq: i32,
) -> Result<Vec<Approval>, ApprovalError> {
    let conn = pool.get().await?;
    conn.query_typed(
        &format!(
            "SELECT {AS_JSON} FROM chat.approvals a
             WHERE conversation_id = $1 AND message_seq = $2 ORDER BY step, created_at, call_id"
        ),
        &[(conversation, Type::UUID), (&message_seq, Type::INT4)],
    )
    .await?
    .iter()
    .map(from_row)
    .collect()
}

/// Stores what an approved call returned; only the first result counts (a second resume that
/// ran it again under the same key got the same one).
pub async fn record_result(
    pool: &Pool,
    id: &ApprovalId,
    output: &Value,
    is_error: bool,
) -> Result<(), ApprovalError> {
    let conn = pool.get().await?;
    conn.execute_typed(
        "UPDATE chat.approvals SET result = $2, result_is_error = $3
         WHERE id = $1 AND decision = 'approved' AND result IS NULL",
        &[
            (id.as_uuid(), Type::UUID),
            (&Json(output), Type::JSONB),
            (&is_error, Type::BOOL),
        ],
    )
    .await?;
    Ok(())
}

/// Overdue approvals of the conversation become `expired`, told to the model as such.
async fn expire(
    conn: &tokio_postgres::Transaction<'_>,
    conversation: &Uuid,
) -> Result<Vec<Approval>, ApprovalError> {
    conn.query_typed(
        &format!(
            "UPDATE chat.approvals a
             SET decision = 'expired', decided_at = now(), result = to_jsonb($2::text),
                 result_is_error = true
             WHERE conversation_id = $1 AND decision = 'pending' AND expires_at <= now()
             RETURNING {AS_JSON}"
        ),
        &[(conversation, Type::UUID), (&EXPIRED, Type::TEXT)],
    )
    .await?
    .iter()
    .map(from_row)
    .collect()
}

fn from_row(row: &tokio_postgres::Row) -> Result<Approval, ApprovalError> {
    let Json(value): Json<Value> = row.try_get(0)?;
    serde_json::from_value(value).map_err(|e| ApprovalError::Unreadable(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(read_only: bool, destructive: bool, always: bool) -> ToolMarks {
        ToolMarks {
            read_only,
            destructive,
            always,
        }
    }

    #[test]
    fn by_default_only_destructive_and_always_tools_wait() {
        let policy = Policy::default();
        assert!(policy.waits(marks(false, true, false)));
        assert!(policy.waits(marks(false, false, true)));
        // `approval = "always"` wins even over a read-only annotation (sending an e-mail).
        assert!(policy.waits(marks(true, false, true)));
        assert!(!policy.waits(marks(false, false, false)));
        assert!(!policy.waits(marks(true, false, false)));
    }

    #[test]
    fn writes_makes_every_call_not_read_only_wait_and_off_none() {
        assert!(Policy::Writes.waits(marks(false, false, false)));
        assert!(!Policy::Writes.waits(marks(true, false, false)));
        for m in [marks(false, true, false), marks(true, false, true)] {
            assert!(!Policy::Off.waits(m));
        }
    }

    #[test]
    fn a_waiting_call_says_why_naming_the_strongest_reason() {
        use Why::*;
        let policy = Policy::default();
        assert_eq!(policy.why(marks(false, true, false)), Some(Destructive));
        assert_eq!(policy.why(marks(false, true, true)), Some(Destructive));
        assert_eq!(policy.why(marks(true, false, true)), Some(Always));
        assert_eq!(policy.why(marks(false, false, false)), None);
        assert_eq!(Policy::Writes.why(marks(false, false, false)), Some(Writes));
        assert_eq!(Policy::Writes.why(marks(false, false, true)), Some(Always));
        assert_eq!(
            Policy::Writes.why(marks(false, true, false)),
            Some(Destructive)
        );
        assert_eq!(Policy::Writes.why(marks(true, false, false)), None);
        assert_eq!(Policy::Off.why(marks(false, true, true)), None);
    }

    #[test]
    fn a_stored_approval_without_why_reads_and_one_with_it_says_so() {
        let stored = |extra: Value| {
            let mut row = json!({
                "id": ApprovalId::new(), "step": 1, "call_id": "c1", "server": "parley",
                "tool": "delete_task", "arguments": {"id": 1},
                "created_at": "2026-11-27T08:00:00Z", "expires_at": "2026-11-27T08:15:00Z",
                "decision": "pending", "decided_by": null, "decided_at": null, "reason": null,
                "result": null, "result_is_error": false, "idempotency_key": "k",
            });
            row.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            serde_json::from_value::<Approval>(row).unwrap()
        };
        assert_eq!(stored(json!({})).about, About::default());
        let now = stored(
            json!({"why": "destructive", "description": "Deletes a task.",
                                "title": null}),
        );
        assert_eq!(now.about.why, Some(Why::Destructive));
        let sent = serde_json::to_value(&now).unwrap();
        assert_eq!(sent["why"], "destructive");
        assert_eq!(sent["description"], "Deletes a task.");
        assert!(sent.get("title").is_none() && sent.get("idempotency_key").is_none());
    }

    #[test]
    fn the_setting_names_its_values_and_its_range() {
        let env = |pairs: &[(&str, &str)]| Env::from_pairs(pairs.iter().copied());
        assert_eq!(Settings::from_env(&env(&[])).unwrap(), Settings::default());
        let s = Settings::from_env(&env(&[("APPROVAL", "Writes"), ("APPROVAL_TTL_MS", "5000")]))
            .unwrap();
        assert_eq!(s.policy, Policy::Writes);
        assert_eq!(s.ttl, Duration::from_secs(5));
        let e = Settings::from_env(&env(&[("APPROVAL", "sometimes")])).unwrap_err();
        assert!(e.to_string().contains("APPROVAL"), "{e}");
        let e = Settings::from_env(&env(&[("APPROVAL_TTL_MS", "10")])).unwrap_err();
        assert!(e.to_string().contains("APPROVAL_TTL_MS"), "{e}");
    }

    #[test]
    fn a_denial_tells_the_model_the_users_reason() {
        assert_eq!(declined(None), "not run: the user declined this call");
        assert_eq!(
            declined(Some(" keep it ")),
            "not run: the user declined this call, saying: keep it"
        );
    }
}
