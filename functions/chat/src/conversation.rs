//! Conversation memory in Postgres (`chat.conversations`, `chat.messages`): ownership, the
//! history window, and writing a turn so that nothing is lost or half-written.
//!
//! A turn holds a session advisory lock on its conversation from start to finish, so two turns
//! sent at once run one after the other and their sequence numbers never interleave.

use chrono::{DateTime, Utc};
use deadpool_postgres::{Object, Pool};
use parley_core::db::is_connection_error;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{Json, ToSql};
use uuid::Uuid;

use crate::auth::UserId;
use crate::error::ApiError;
use crate::llm::{Item, ToolCall, Usage};

/// What [`message`] reads, in every query that returns messages.
macro_rules! columns {
    () => {
        "seq, role, content, context, traces, usage, steps, error, cut_short, created_at"
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct ConversationId(Uuid);

impl ConversationId {
    pub fn new() -> Self {
        Self(Uuid::new_v4())
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Uuid::parse_str(raw).ok().map(Self)
    }

    pub fn as_uuid(&self) -> &Uuid {
        &self.0
    }
}

impl Default for ConversationId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Display for ConversationId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

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
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConversationSummary {
    pub id: ConversationId,
    pub title: String,
    pub message_count: i32,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// How a finished turn is recorded.
#[derive(Debug, Clone)]
pub struct TurnRecord<'a> {
    pub reply: &'a str,
    pub traces: &'a [Trace],
    pub usage: Usage,
    pub steps: u32,
    /// Set when the turn failed: what went wrong, for the record.
    pub error: Option<&'a str>,
    /// The turn reached its deadline and the reply holds what it had.
    pub cut_short: bool,
}

/// A turn in progress: it owns a connection holding the conversation's lock. Dropping it
/// without [`Turn::finish`] closes that connection, which releases the lock.
pub struct Turn {
    conn: Option<Object>,
    pub conversation: ConversationId,
    lock_key: i64,
    /// The earlier messages to replay, oldest first, not including this turn's message.
    pub history: Vec<StoredMessage>,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("conversation", &self.conversation)
            .finish()
    }
}

pub struct TurnStart<'a> {
    pub owner: &'a UserId,
    pub conversation: Option<ConversationId>,
    pub message: &'a str,
    pub context: Option<&'a Value>,
    pub history_limit: usize,
    pub lock_wait: std::time::Duration,
}

/// Opens a turn: checks ownership (or creates the conversation), waits for any other turn on
/// it, loads the history window, and stores the user's message before any LLM call.
///
/// All of it is one pipelined round trip and one commit: `BEGIN`, session settings, the lock
/// (taken only if the caller owns the conversation), the window, the insert, `COMMIT`. Inside
/// the transaction a lock timeout aborts what follows, so a message is never stored unlocked.
///
/// The commit is visible at once but does not wait for its WAL flush: [`Turn::finish`]'s commit
/// does, and flushing the WAL up to it flushes this one too. So everything a 200 acknowledges
/// is durable, and a turn pays for one flush instead of two. Only a Postgres crash within the
/// WAL writer's delay (`wal_writer_delay`, 200 ms by default) of this commit could undo it, and
/// then the turn it belongs to fails as well, so the client is never told it was kept.
pub async fn begin(pool: &Pool, start: TurnStart<'_>) -> Result<Turn, ApiError> {
    let (conversation, is_new) = match start.conversation {
        Some(id) => (id, false),
        None => (ConversationId::new(), true),
    };
    // Checkout does not test connections (a round trip per turn). One that died while the
    // instance was frozen fails before `BEGIN` got an answer, so nothing ran and a second
    // attempt on a fresh connection is safe.
    match try_begin(pool.get().await?, &start, conversation, is_new).await {
        Err(Attempt::Stale(e)) => {
            tracing::warn!(error = %e, "stale database connection; retrying once");
            try_begin(pool.get().await?, &start, conversation, is_new)
                .await
                .map_err(Attempt::into_error)
        }
        other => other.map_err(Attempt::into_error),
    }
}

/// Why one attempt at [`begin`] failed.
enum Attempt {
    /// The connection was dead before anything ran.
    Stale(ApiError),
    Failed(ApiError),
}

impl Attempt {
    fn into_error(self) -> ApiError {
        match self {
            Attempt::Stale(e) | Attempt::Failed(e) => e,
        }
    }
}

impl From<ApiError> for Attempt {
    fn from(e: ApiError) -> Self {
        Attempt::Failed(e)
    }
}

/// A connection error before the server acknowledged anything of this attempt.
fn stale(e: tokio_postgres::Error) -> Attempt {
    if is_connection_error(&e) {
        Attempt::Stale(e.into())
    } else {
        Attempt::Failed(e.into())
    }
}

async fn try_begin(
    conn: Object,
    start: &TurnStart<'_>,
    conversation: ConversationId,
    is_new: bool,
) -> Result<Turn, Attempt> {
    let lock_key = lock_key(&conversation);
    let id = conversation.as_uuid();
    let owner = start.owner.as_str();
    let lock_timeout = start.lock_wait.as_millis().max(1).to_string();
    let limit = start.history_limit as i64;

    let prepared = if is_new {
        futures::try_join!(
            conn.prepare_cached(SET_SESSION),
            conn.prepare_cached(LOCK),
            conn.prepare_cached(WINDOW),
            conn.prepare_cached(INSERT_FIRST_MESSAGE),
        )
    } else {
        futures::try_join!(
            conn.prepare_cached(SET_SESSION),
            conn.prepare_cached(LOCK_OWNED),
            conn.prepare_cached(WINDOW),
            conn.prepare_cached(INSERT_NEXT_MESSAGE),
        )
    };
    let (settings, lock, window, insert) = match prepared {
        Ok(statements) => statements,
        Err(e) => {
            // Nothing has been sent but statement descriptions: a dead link here is stale.
            discard(conn);
            return Err(stale(e));
        }
    };
    let title = title(start.message);
    let settings_params: [&(dyn ToSql + Sync); 1] = [&lock_timeout];
    let lock_new: [&(dyn ToSql + Sync); 1] = [&lock_key];
    let lock_owned: [&(dyn ToSql + Sync); 3] = [id, &lock_key, &owner];
    let insert_params: [&(dyn ToSql + Sync); 5] =
        [id, &owner, &start.message, &start.context, &title];
    // A new conversation has no history: the window query is not sent at all.
    let read_window = !is_new && limit > 0;
    // futures' join polls in order, so the statements reach the server in this order.
    let (began, set, locked, rows, inserted, committed) = futures::join!(
        conn.batch_execute("BEGIN"),
        conn.execute(&settings, &settings_params),
        conn.query(&lock, if is_new { &lock_new } else { &lock_owned }),
        async {
            match read_window {
                true => conn.query(&window, &[id, &(limit), &owner]).await.map(Some),
                false => Ok(None),
            }
        },
        conn.query_opt(&insert, &insert_params[..if is_new { 5 } else { 4 }]),
        conn.batch_execute("COMMIT"),
    );

    // Which results matter, in the order the server ran them: an error aborts everything after
    // it, and `COMMIT` then rolls back.
    if let Err(e) = began {
        discard(conn);
        return Err(stale(e));
    }
    let outcome = (|| {
        set?;
        let held = !locked.map_err(lock_error)?.is_empty();
        let rows = rows?;
        let stored = inserted?.is_some();
        committed?;
        Ok::<_, ApiError>((held, rows, stored))
    })();
    match outcome {
        Ok((true, rows, true)) => {
            let history = match rows.as_deref().map(window_from).transpose() {
                Ok(history) => history.unwrap_or_default(),
                Err(e) => {
                    discard(conn);
                    return Err(e.into());
                }
            };
            Ok(Turn {
                conn: Some(conn),
                conversation,
                lock_key,
                history,
            })
        }
        // Someone else's conversation is indistinguishable from a missing one. Nothing was
        // locked or written, so the connection goes back to the pool as it is.
        Ok((false, _, _)) => Err(ApiError::ConversationNotFound.into()),
        Ok((true, _, false)) => {
            discard(conn);
            Err(ApiError::Internal("the conversation vanished mid-turn".into()).into())
        }
        Err(e) => {
            // The lock may be held (a session lock outlives the rolled-back transaction):
            // closing the session is the one sure way to free it.
            discard(conn);
            Err(e.into())
        }
    }
}

/// Session settings, sent with every `begin` because the pipeline makes them free. The lock
/// lives as long as the session: if the instance dies mid-turn without closing the socket,
/// server-side keepalives end the session (and free the conversation) within about a minute
/// instead of the OS default of two hours. `lock_timeout` and `synchronous_commit` (see
/// [`begin`]) are for this transaction only.
const SET_SESSION: &str = "SELECT set_config('lock_timeout', $1, true),
       set_config('synchronous_commit', 'off', true),
       set_config('tcp_keepalives_idle', '30', false),
       set_config('tcp_keepalives_interval', '10', false),
       set_config('tcp_keepalives_count', '3', false)";

const LOCK: &str = "SELECT pg_advisory_lock($1)";

/// No row, and no lock, unless the caller owns the conversation.
const LOCK_OWNED: &str = "SELECT pg_advisory_lock($2) FROM chat.conversations
     WHERE id = $1 AND owner = $3";

/// The last `$2` replayable messages, newest first (see [`window_from`]), only for the owner.
const WINDOW: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM chat.messages
     WHERE conversation_id = $1 AND error IS NULL
       AND EXISTS (SELECT 1 FROM chat.conversations WHERE id = $1 AND owner = $3)
     ORDER BY seq DESC LIMIT $2"
);

const INSERT_FIRST_MESSAGE: &str = "WITH c AS (
       INSERT INTO chat.conversations (id, owner, title, message_count)
       VALUES ($1, $2, $5, 1)
       RETURNING message_count)
     INSERT INTO chat.messages (conversation_id, seq, role, content, context)
     SELECT $1, message_count, 'user', $3, $4 FROM c
     RETURNING seq";

const INSERT_NEXT_MESSAGE: &str = "WITH c AS (
       UPDATE chat.conversations SET message_count = message_count + 1, updated_at = now()
       WHERE id = $1 AND owner = $2
       RETURNING message_count)
     INSERT INTO chat.messages (conversation_id, seq, role, content, context)
     SELECT $1, message_count, 'user', $3, $4 FROM c
     RETURNING seq";

/// The assistant's side of a turn, atomic without `BEGIN`/`COMMIT` because it is one statement.
const INSERT_REPLY: &str = "WITH c AS (
       UPDATE chat.conversations SET message_count = message_count + 1, updated_at = now()
       WHERE id = $1
       RETURNING message_count)
     INSERT INTO chat.messages (conversation_id, seq, role, content, traces, usage, steps, error,
                                cut_short)
     SELECT $1, message_count, 'assistant', $2, $3, $4, $5, $6, $7 FROM c";

const UNLOCK: &str = "SELECT pg_advisory_unlock($1)";

fn lock_error(e: tokio_postgres::Error) -> ApiError {
    if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
        ApiError::ConversationBusy
    } else {
        e.into()
    }
}

/// Closes the connection instead of returning it to the pool.
fn discard(conn: Object) {
    drop(Object::take(conn));
}

impl Turn {
    /// Stores the assistant's side of the turn (reply, traces, usage, or the error) in one
    /// statement and releases the conversation, pipelined: one round trip, one commit. That
    /// commit waits for its WAL flush (as the server is configured), which also makes
    /// [`begin`]'s durable.
    pub async fn finish(mut self, record: TurnRecord<'_>) -> Result<(), ApiError> {
        let conn = self.conn.take().expect("finish runs once");
        let prepared = futures::try_join!(
            conn.prepare_cached(INSERT_REPLY),
            conn.prepare_cached(UNLOCK)
        );
        let (insert, unlock) = match prepared {
            Ok(statements) => statements,
            Err(e) => {
                discard(conn);
                return Err(e.into());
            }
        };
        let (traces, usage) = (Json(record.traces), Json(record.usage));
        let steps = record.steps as i32;
        let reply: [&(dyn ToSql + Sync); 7] = [
            self.conversation.as_uuid(),
            &record.reply,
            &traces,
            &usage,
            &steps,
            &record.error,
            &record.cut_short,
        ];
        let key: [&(dyn ToSql + Sync); 1] = [&self.lock_key];
        let (stored, unlocked) =
            futures::join!(conn.execute(&insert, &reply), conn.query_one(&unlock, &key),);
        // The unlock runs whatever happened to the insert (the turn is over either way). Unless
        // it says the lock is free, this session must close rather than go back to the pool.
        if !matches!(unlocked.map(|r| r.get::<_, bool>(0)), Ok(true)) {
            discard(conn);
        }
        match stored? {
            1 => Ok(()),
            _ => Err(ApiError::Internal(
                "the conversation vanished mid-turn".into(),
            )),
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            discard(conn);
        }
    }
}

/// Whether a JSON value holds a NUL anywhere (keys included): Postgres cannot store one in
/// `jsonb`, so callers refuse or clean such values before they get here.
pub(crate) fn has_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(has_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// Conversations are locked by a 64-bit key derived from their id; a rare collision only makes
/// two unrelated turns wait for each other.
fn lock_key(id: &ConversationId) -> i64 {
    let (hi, lo) = id.as_uuid().as_u64_pair();
    (hi ^ lo) as i64
}

/// The window, oldest first, from [`WINDOW`]'s rows (newest first): it starts with a user
/// message, so it never opens on an assistant reply whose question was cut off. A failed turn's
/// record is not replayed. Tool calls and their outputs live in the same row, so a window can
/// never separate them.
fn window_from(rows: &[tokio_postgres::Row]) -> Result<Vec<StoredMessage>, ApiError> {
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

fn message(row: &tokio_postgres::Row) -> Result<StoredMessage, ApiError> {
    let traces: Json<Vec<Trace>> = row
        .try_get("traces")
        .map_err(|e| ApiError::Internal(format!("stored traces: {e}")))?;
    let usage: Option<Json<Usage>> = row
        .try_get("usage")
        .map_err(|e| ApiError::Internal(format!("stored usage: {e}")))?;
    Ok(StoredMessage {
        seq: row.get("seq"),
        role: row.get("role"),
        content: row.get("content"),
        context: row.get("context"),
        traces: traces.0,
        usage: usage.map(|u| u.0),
        steps: row.get("steps"),
        error: row.get("error"),
        cut_short: row.get("cut_short"),
        created_at: row.get("created_at"),
    })
}

/// Turns stored messages into model input. Tool outputs of earlier turns are cut to
/// `replay_chars` characters: the model has already used them, and a fresh call is cheap.
pub fn replay(history: &[StoredMessage], replay_chars: usize) -> Vec<Item> {
    let mut items = Vec::new();
    for m in history {
        if m.role == "user" {
            items.push(Item::User(m.content.clone()));
            continue;
        }
        let mut step = 0;
        let mut outputs = Vec::new();
        for t in &m.traces {
            if t.step != step {
                items.append(&mut outputs);
                step = t.step;
            }
            items.push(Item::Call(ToolCall {
                call_id: t.call_id.clone(),
                name: t.name.clone(),
                arguments: match &t.args {
                    Value::String(raw) => raw.clone(),
                    other => other.to_string(),
                },
            }));
            outputs.push(Item::Output {
                call_id: t.call_id.clone(),
                output: truncate(&output_text(&t.output), replay_chars),
            });
        }
        items.append(&mut outputs);
        if !m.content.is_empty() {
            items.push(Item::Assistant(m.content.clone()));
        }
    }
    items
}

/// The text a tool output is given to the model as.
pub fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let rest = text[cut..].chars().count();
            format!(
                "{}… [truncated from an earlier turn: {rest} more characters; call the tool again if you need them]",
                &text[..cut]
            )
        }
    }
}

/// A conversation's title: the start of its first message, on one line.
fn title(message: &str) -> String {
    let line: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(80) {
        None => line,
        Some((cut, _)) => format!("{}…", &line[..cut]),
    }
}

/// One page of the owner's conversations, newest first, and the cursor for the next page.
pub async fn list(
    pool: &Pool,
    owner: &UserId,
    limit: u32,
    before: Option<&PageCursor>,
) -> Result<(Vec<ConversationSummary>, Option<PageCursor>), ApiError> {
    let (at, id) = match before {
        Some(c) => (Some(c.updated_at), Some(c.id)),
        None => (None, None),
    };
    let page_size = i64::from(limit) + 1;
    let params: [&(dyn ToSql + Sync); 4] = [&owner.as_str(), &at, &id, &page_size];
    let mut retried = false;
    let rows = loop {
        let conn = pool.get().await?;
        match read_page(&conn, &params).await {
            Err(e) if !retried && is_connection_error(&e) => retried = retry_stale(conn, &e),
            other => break other?,
        }
    };
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
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    let page = conn
        .prepare_cached(
            "SELECT id, title, message_count, created_at, updated_at FROM chat.conversations
             WHERE owner = $1
               AND ($2::timestamptz IS NULL OR (updated_at, id) < ($2, $3::uuid))
             ORDER BY updated_at DESC, id DESC
             LIMIT $4",
        )
        .await?;
    conn.query(&page, params).await
}

/// The whole history of one of the owner's conversations.
pub async fn messages(
    pool: &Pool,
    owner: &UserId,
    id: &ConversationId,
) -> Result<Vec<StoredMessage>, ApiError> {
    let mut retried = false;
    let rows = loop {
        let conn = pool.get().await?;
        match read_messages(&conn, owner, id).await {
            Err(e) if !retried && is_connection_error(&e) => retried = retry_stale(conn, &e),
            other => break other?,
        }
    };
    let rows = rows.ok_or(ApiError::ConversationNotFound)?;
    rows.iter().map(message).collect()
}

/// `None` unless the owner owns the conversation.
async fn read_messages(
    conn: &Object,
    owner: &UserId,
    id: &ConversationId,
) -> Result<Option<Vec<tokio_postgres::Row>>, tokio_postgres::Error> {
    let (owned, all) = futures::try_join!(
        conn.prepare_cached("SELECT 1 FROM chat.conversations WHERE id = $1 AND owner = $2"),
        conn.prepare_cached(concat!(
            "SELECT ",
            columns!(),
            " FROM chat.messages WHERE conversation_id = $1 ORDER BY seq"
        )),
    )?;
    if conn
        .query_opt(&owned, &[id.as_uuid(), &owner.as_str()])
        .await?
        .is_none()
    {
        return Ok(None);
    }
    conn.query(&all, &[id.as_uuid()]).await.map(Some)
}

/// Checkout does not test connections, so a read that finds its connection dead (it died while
/// the instance was frozen) closes it and runs once more on a fresh one: reads are safe to
/// repeat. Returns `true`, "retried", for the caller's loop.
fn retry_stale(conn: Object, e: &tokio_postgres::Error) -> bool {
    tracing::warn!(error = %e, "stale database connection; retrying once");
    discard(conn);
    true
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
    use serde_json::json;

    fn trace(call_id: &str, step: u32, output: Value) -> Trace {
        Trace {
            call_id: call_id.into(),
            step,
            name: "lad_by_ref".into(),
            args: json!({"ref": "Leeds"}),
            output,
            is_error: false,
            duration_ms: 3,
        }
    }

    fn msg(role: &str, content: &str, traces: Vec<Trace>) -> StoredMessage {
        StoredMessage {
            seq: 0,
            role: role.into(),
            content: content.into(),
            context: None,
            traces,
            usage: None,
            steps: None,
            error: None,
            cut_short: false,
            created_at: Utc::now(),
        }
    }

    #[test]
    fn replay_keeps_each_call_before_its_output_step_by_step() {
        let history = [
            msg("user", "How is Leeds?", vec![]),
            msg(
                "assistant",
                "Leeds is fine.",
                vec![
                    trace("a", 1, json!({"rows": []})),
                    trace("b", 1, json!("x")),
                    trace("c", 2, json!("y")),
                ],
            ),
        ];
        let items = replay(&history, 1000);
        let kinds: Vec<String> = items
            .iter()
            .map(|i| match i {
                Item::User(_) => "user".into(),
                Item::Assistant(_) => "assistant".into(),
                Item::Call(c) => format!("call {}", c.call_id),
                Item::Output { call_id, .. } => format!("output {call_id}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "user",
                "call a",
                "call b",
                "output a",
                "output b",
                "call c",
                "output c",
                "assistant"
            ]
        );
    }

    #[test]
    fn earlier_tool_outputs_are_cut_to_the_replay_limit() {
        let long = "x".repeat(500);
        let history = [
            msg("user", "q", vec![]),
            msg("assistant", "a", vec![trace("a", 1, Value::String(long))]),
        ];
        let items = replay(&history, 100);
        let Item::Output { output, .. } = &items[2] else {
            panic!("{items:?}")
        };
        assert!(output.starts_with(&"x".repeat(100)));
        assert!(output.contains("400 more characters"));
    }

    #[test]
    fn invalid_json_arguments_are_replayed_verbatim() {
        let mut t = trace("a", 1, json!("err"));
        t.args = Value::String("{not json".into());
        let items = replay(
            &[msg("user", "q", vec![]), msg("assistant", "", vec![t])],
            100,
        );
        let Item::Call(call) = &items[1] else {
            panic!()
        };
        assert_eq!(call.arguments, "{not json");
        assert_eq!(items.len(), 3, "an empty reply is not replayed");
    }

    #[test]
    fn titles_are_one_short_line() {
        assert_eq!(title("  How many\npotholes?  "), "How many potholes?");
        assert_eq!(title(&"a".repeat(100)).chars().count(), 81);
    }

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
