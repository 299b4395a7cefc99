//! Conversation memory in Postgres (`chat.conversations`, `chat.messages`): ownership, the
//! history window, reads, and (in [`lease`]) writing a turn so that nothing is lost or
//! half-written. Failures are [`StorageError`]s, in storage words; `error.rs` picks statuses.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use deadpool_postgres::{Object, Pool, PoolError, TimeoutType};
use parley_core::db::{DbError, Stale, is_connection_error, retry_once_if_stale};
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::types::{Json, ToSql, Type};
use uuid::Uuid;

use crate::auth::UserId;
use crate::turn::approval::{Approval, ApprovalId};
use crate::turn::id::uuid_id;
use crate::turn::llm::Usage;
use crate::turn::sources::Source;

/// What [`message`] reads, in every query that returns messages.
macro_rules! columns {
    () => {
        "seq, role, content, context, traces, usage, steps, error, cut_short, interrupted, sources, \
         charts, created_at, (SELECT coalesce(jsonb_agg(to_jsonb(a) - 'conversation_id' - 'message_seq' \
         ORDER BY a.step, a.created_at, a.call_id), '[]'::jsonb) FROM chat.approvals a \
         WHERE a.conversation_id = chat.messages.conversation_id \
         AND a.message_seq = chat.messages.seq) AS approvals, (SELECT to_jsonb(f) - 'conversation_id' \
         - 'seq' - 'owner' FROM chat.feedback f WHERE f.conversation_id = chat.messages.conversation_id \
         AND f.seq = chat.messages.seq) AS feedback"
    };
}

pub mod edit;
pub mod feedback;
mod lease;

pub use lease::{Ledger, Turn, TurnRecord, TurnStart, begin};

/// Why the conversation store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// No such conversation, or it belongs to someone else: the two are indistinguishable.
    #[error("conversation not found")]
    NotFound,
    /// Another turn held the conversation for longer than the caller was willing to wait.
    #[error("another turn on this conversation is still running")]
    Busy,
    /// The turn outlived its lease and a later turn took the conversation over, so its reply
    /// was not stored (see [`Turn::finish`]).
    #[error("the turn outlived its lease on the conversation and a later turn took it over")]
    LeaseLost,
    /// Every pooled connection was in use for the whole acquire timeout: this instance is
    /// overloaded, the database is not necessarily unwell.
    #[error("no database connection was free in time (pool exhausted)")]
    PoolExhausted,
    /// The caller already has `limit` reads of their conversations running
    /// (`HISTORY_READS_PER_USER`): one user must not take every pooled connection.
    #[error(
        "{limit} reads of your conversations are already running, the most one user may have \
         at once (HISTORY_READS_PER_USER)"
    )]
    TooManyReads { limit: usize },
    /// The database could not be reached or the connection broke.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The database refused a statement, or a stored row could not be read.
    #[error("storage failed: {0}")]
    Failed(String),
}

impl From<DbError> for StorageError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::Unavailable(why) => StorageError::Unavailable(why),
            other => StorageError::Failed(other.to_string()),
        }
    }
}

impl From<tokio_postgres::Error> for StorageError {
    fn from(e: tokio_postgres::Error) -> Self {
        DbError::from(e).into()
    }
}

impl From<PoolError> for StorageError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::Timeout(TimeoutType::Wait) => StorageError::PoolExhausted,
            other => DbError::from(other).into(),
        }
    }
}

/// How one attempt at a statement (or pipeline) failed.
enum Attempt {
    /// The connection was dead before the server acknowledged anything: safe to run again on a
    /// fresh one.
    Stale(StorageError),
    Failed(StorageError),
}

impl Attempt {
    fn into_error(self) -> StorageError {
        match self {
            Attempt::Stale(e) | Attempt::Failed(e) => e,
        }
    }
}

impl From<StorageError> for Attempt {
    fn from(e: StorageError) -> Self {
        Attempt::Failed(e)
    }
}

impl From<PoolError> for Attempt {
    fn from(e: PoolError) -> Self {
        Attempt::Failed(e.into())
    }
}

impl From<tokio_postgres::Error> for Attempt {
    /// A dead connection is stale, for [`retry_once_if_stale!`] to close and, where repeating
    /// is safe, retry.
    fn from(e: tokio_postgres::Error) -> Self {
        if is_connection_error(&e) {
            Attempt::Stale(e.into())
        } else {
            Attempt::Failed(e.into())
        }
    }
}

impl Stale for Attempt {
    fn is_stale(&self) -> bool {
        matches!(self, Attempt::Stale(_))
    }
}

impl std::fmt::Display for Attempt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Attempt::Stale(e) | Attempt::Failed(e) => e.fmt(f),
        }
    }
}

uuid_id!(
    /// A conversation's id.
    ConversationId
);

/// One tool call of a turn, as stored, replayed and returned to the caller.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Trace {
    pub call_id: String,
    /// The model→tools round (1-based) the call belonged to.
    pub step: u32,
    pub name: String,
    /// The arguments as parsed JSON, or the model's raw text when it was not valid JSON.
    pub args: Value,
    /// What the model was given: the server's structured JSON when present, else its text.
    pub output: Value,
    pub is_error: bool,
    pub duration_ms: u64,
    /// The approval the call waited for: its output is replayed where the call was made
    /// (with the approvals of the turn that paused), not again with the turn that resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalId>,
}

impl Trace {
    /// A call that waited for approval, with what became of it: its result, or the sentence a
    /// denial or expiry became. It took no time of the turn that shows it, unless it ran there.
    pub fn of_approval(a: &Approval) -> Trace {
        let (output, is_error) = a.output();
        Trace {
            call_id: a.call_id.clone(),
            step: a.step,
            name: a.tool.clone(),
            args: a.arguments.clone(),
            output,
            is_error,
            duration_ms: 0,
            approval: Some(a.id),
        }
    }
}

/// A chart a turn showed (`show_chart`), as stored, returned and given back with the
/// conversation: the Vega-Lite `spec` drawn from the rows of the call `call_id`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Chart {
    /// The `show_chart` call that drew it.
    pub id: String,
    /// The call of the same turn whose rows it draws.
    pub call_id: String,
    pub spec: Value,
}

/// A stored message, as `GET /api/conversations/{id}/messages` returns it.
#[derive(Debug, Clone, Serialize)]
pub struct StoredMessage {
    pub seq: i32,
    pub role: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<Value>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub traces: Vec<Trace>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The turn reached `TURN_DEADLINE_MS`; the reply holds only what it had by then.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cut_short: bool,
    /// The client of a streamed turn went away first; the reply holds only what it had.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// An assistant message's sources (`[]` when it had none); `None` for a user's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<Source>>,
    /// An assistant message's charts (`[]` when it showed none); `None` for a user's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub charts: Option<Vec<Chart>>,
    pub created_at: DateTime<Utc>,
    /// The calls of an assistant message that waited for the user's approval, and their
    /// decisions: the turn paused after this message.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<Approval>,
    /// The owner's thumbs up or down on an assistant message, when given (`feedback`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<feedback::Feedback>,
}

impl StoredMessage {
    /// Some of this message's calls still wait for the user's answer.
    pub fn has_waiting_calls(&self) -> bool {
        self.approvals
            .iter()
            .any(|a| a.decision == crate::turn::approval::Decision::Pending)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ConversationSummary {
    pub id: ConversationId,
    pub title: String,
    pub message_count: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The window, oldest first, from rows read newest first: it starts with a user message, so it
/// never opens on an assistant reply whose question was cut off. A failed turn's record is not
/// replayed. Tool calls and their outputs live in the same row, so a window can never separate
/// them.
fn window_from(rows: &[tokio_postgres::Row]) -> Result<Vec<StoredMessage>, StorageError> {
    let mut messages = rows
        .iter()
        .rev()
        .map(message)
        .collect::<Result<Vec<_>, _>>()?;
    let first_user = messages
        .iter()
        .position(|m| m.role == "user")
        .unwrap_or(messages.len());
    messages.drain(..first_user);
    Ok(messages)
}

fn message(row: &tokio_postgres::Row) -> Result<StoredMessage, StorageError> {
    let traces: Json<Vec<Trace>> = row
        .try_get("traces")
        .map_err(|e| StorageError::Failed(format!("stored traces: {e}")))?;
    let usage: Option<Json<Usage>> = row
        .try_get("usage")
        .map_err(|e| StorageError::Failed(format!("stored usage: {e}")))?;
    let role: String = row.get("role");
    let (sources, charts) = if role == "assistant" {
        let sources: Json<Vec<Source>> = row
            .try_get("sources")
            .map_err(|e| StorageError::Failed(format!("stored sources: {e}")))?;
        let charts: Json<Vec<Chart>> = row
            .try_get("charts")
            .map_err(|e| StorageError::Failed(format!("stored charts: {e}")))?;
        (Some(sources.0), Some(charts.0))
    } else {
        (None, None)
    };
    Ok(StoredMessage {
        seq: row.get("seq"),
        role,
        content: row.get("content"),
        context: row.get("context"),
        traces: traces.0,
        usage: usage.map(|u| u.0),
        steps: row.get("steps"),
        error: row.get("error"),
        cut_short: row.get("cut_short"),
        interrupted: row.get("interrupted"),
        sources,
        charts,
        created_at: row.get("created_at"),
        approvals: row
            .try_get::<_, Json<Vec<Approval>>>("approvals")
            .map_err(|e| StorageError::Failed(format!("stored approvals: {e}")))?
            .0,
        feedback: row
            .try_get::<_, Option<Json<feedback::Feedback>>>("feedback")
            .map_err(|e| StorageError::Failed(format!("stored feedback: {e}")))?
            .map(|f| f.0),
    })
}

/// Whether the store answers: one round trip on a pooled connection, for the readiness check.
pub async fn ping(pool: &Pool) -> Result<(), StorageError> {
    pool.get().await?.simple_query("SELECT 1").await?;
    Ok(())
}

/// Reads of stored conversations ([`Reads::list`], [`Reads::messages`]), at most `per_user`
/// of one user's at once; more are refused at once ([`StorageError::TooManyReads`]) rather
/// than queued. Each read holds a pooled connection for its round trips: 60 parallel history
/// reads of one page would otherwise hold all of them (`DB_POOL_MAX_SIZE`, 4 by default) and
/// leave every other user's turn waiting for one until `DB_ACQUIRE_TIMEOUT_MS` (503).
#[derive(Clone)]
pub struct Reads {
    pool: Pool,
    per_user: usize,
    running: Arc<Mutex<HashMap<String, usize>>>,
}

/// One running read; dropping it frees its place.
struct ReadSlot<'a> {
    reads: &'a Reads,
    owner: &'a UserId,
}

impl Reads {
    pub fn new(pool: Pool, per_user: usize) -> Self {
        Self {
            pool,
            per_user,
            running: Arc::default(),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        // A count map holds no invariant a panicking holder could break.
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enter<'a>(&'a self, owner: &'a UserId) -> Result<ReadSlot<'a>, StorageError> {
        let mut running = self.running();
        let count = running.entry(owner.as_str().to_owned()).or_default();
        if *count >= self.per_user {
            return Err(StorageError::TooManyReads {
                limit: self.per_user,
            });
        }
        *count += 1;
        Ok(ReadSlot { reads: self, owner })
    }

    /// One page of the owner's conversations, newest first, and the cursor for the next page.
    pub async fn list(
        &self,
        owner: &UserId,
        limit: u32,
        before: Option<&PageCursor>,
    ) -> Result<(Vec<ConversationSummary>, Option<PageCursor>), StorageError> {
        let _slot = self.enter(owner)?;
        list(&self.pool, owner, limit, before).await
    }

    /// The whole history of one of the owner's conversations.
    pub async fn messages(
        &self,
        owner: &UserId,
        id: &ConversationId,
    ) -> Result<Vec<StoredMessage>, StorageError> {
        let _slot = self.enter(owner)?;
        messages(&self.pool, owner, id).await
    }
}

impl Drop for ReadSlot<'_> {
    fn drop(&mut self) {
        let mut running = self.reads.running();
        if let Some(count) = running.get_mut(self.owner.as_str()) {
            *count -= 1;
            if *count == 0 {
                running.remove(self.owner.as_str());
            }
        }
    }
}

/// One page of the owner's conversations, newest first, and the cursor for the next page;
/// unbounded (requests go through [`Reads::list`]).
pub async fn list(
    pool: &Pool,
    owner: &UserId,
    limit: u32,
    before: Option<&PageCursor>,
) -> Result<(Vec<ConversationSummary>, Option<PageCursor>), StorageError> {
    let (at, id) = match before {
        Some(c) => (Some(c.updated_at), Some(c.id)),
        None => (None, None),
    };
    let page_size = i64::from(limit) + 1;
    let params: [(&(dyn ToSql + Sync), Type); 4] = [
        (&owner.as_str(), Type::TEXT),
        (&at, Type::TIMESTAMPTZ),
        (&id, Type::UUID),
        (&page_size, Type::INT8),
    ];
    let rows = retry_once_if_stale!(pool, |conn| read_page(&conn, &params).await)
        .map_err(Attempt::into_error)?;
    let mut items: Vec<ConversationSummary> = rows
        .iter()
        .map(|r| ConversationSummary {
            id: ConversationId(r.get(0)),
            title: r.get(1),
            message_count: r.get(2),
            created_at: r.get(3),
            updated_at: r.get(4),
        })
        .collect();
    let next = if items.len() > limit as usize {
        items.truncate(limit as usize);
        items.last().map(|c| PageCursor {
            updated_at: c.updated_at,
            id: *c.id.as_uuid(),
        })
    } else {
        None
    };
    Ok((items, next))
}

async fn read_page(
    conn: &Object,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Vec<tokio_postgres::Row>, Attempt> {
    Ok(conn
        .query_typed(
            "SELECT id, title, message_count, created_at, updated_at FROM chat.conversations
                 WHERE owner = $1
                   AND ($2::timestamptz IS NULL OR (updated_at, id) < ($2, $3::uuid))
                 ORDER BY updated_at DESC, id DESC
                 LIMIT $4",
            params,
        )
        .await?)
}

/// The whole history of one of the owner's conversations; unbounded (requests go through
/// [`Reads::messages`]).
pub async fn messages(
    pool: &Pool,
    owner: &UserId,
    id: &ConversationId,
) -> Result<Vec<StoredMessage>, StorageError> {
    let rows = retry_once_if_stale!(pool, |conn| read_messages(&conn, owner, id).await)
        .map_err(Attempt::into_error)?;
    let rows = rows.ok_or(StorageError::NotFound)?;
    rows.iter().map(message).collect()
}

/// `None` unless the owner owns the conversation.
async fn read_messages(
    conn: &Object,
    owner: &UserId,
    id: &ConversationId,
) -> Result<Option<Vec<tokio_postgres::Row>>, Attempt> {
    if conn
        .query_typed_opt(
            "SELECT 1 FROM chat.conversations WHERE id = $1 AND owner = $2",
            &[(id.as_uuid(), Type::UUID), (&owner.as_str(), Type::TEXT)],
        )
        .await?
        .is_none()
    {
        return Ok(None);
    }
    Ok(Some(
        conn.query_typed(
            concat!(
                "SELECT ",
                columns!(),
                " FROM chat.messages WHERE conversation_id = $1 ORDER BY seq"
            ),
            &[(id.as_uuid(), Type::UUID)],
        )
        .await?,
    ))
}

/// Where a page of conversations ends: opaque to clients (`<micros>_<uuid>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    updated_at: DateTime<Utc>,
    id: Uuid,
}

impl PageCursor {
    pub fn parse(raw: &str) -> Option<Self> {
        let (micros, id) = raw.split_once('_')?;
        Some(Self {
            updated_at: DateTime::from_timestamp_micros(micros.parse().ok()?)?,
            id: Uuid::parse_str(id).ok()?,
        })
    }
}

impl std::fmt::Display for PageCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}_{}",
            self.updated_at.timestamp_micros(),
            self.id.simple()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        let c = PageCursor {
            updated_at: DateTime::from_timestamp_micros(1_700_000_000_123_456).unwrap(),
            id: Uuid::new_v4(),
        };
        assert_eq!(PageCursor::parse(&c.to_string()), Some(c));
        assert_eq!(PageCursor::parse("garbage"), None);
    }
}
