//! Conversation memory in Postgres (`chat.conversations`, `chat.messages`): ownership, the
//! history window, and writing a turn so that nothing is lost or half-written.
//!
//! A turn holds a session advisory lock on its conversation from start to finish, so two turns
//! sent at once run one after the other and their sequence numbers never interleave.

use chrono::{DateTime, Utc};
use deadpool_postgres::{Object, Pool};
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::error::SqlState;
use uuid::Uuid;

use crate::auth::UserId;
use crate::error::ApiError;
use crate::llm::{Item, ToolCall, Usage};

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
pub async fn begin(pool: &Pool, start: TurnStart<'_>) -> Result<Turn, ApiError> {
    let conn = pool.get().await?;
    let conversation = match start.conversation {
        Some(id) => {
            let row = conn
                .query_opt(
                    "SELECT owner FROM chat.conversations WHERE id = $1",
                    &[id.as_uuid()],
                )
                .await?;
            // Someone else's conversation is indistinguishable from a missing one.
            match row {
                Some(r) if r.get::<_, &str>(0) == start.owner.as_str() => id,
                _ => return Err(ApiError::ConversationNotFound),
            }
        }
        None => {
            let id = ConversationId::new();
            conn.execute(
                "INSERT INTO chat.conversations (id, owner, title) VALUES ($1, $2, $3)",
                &[id.as_uuid(), &start.owner.as_str(), &title(start.message)],
            )
            .await?;
            id
        }
    };
    let lock_key = lock_key(&conversation);
    let mut turn = Turn {
        conn: Some(conn),
        conversation,
        lock_key,
        history: Vec::new(),
    };
    turn.lock(start.lock_wait).await?;
    turn.history = load_window(turn.conn(), &conversation, start.history_limit).await?;
    let seq = next_seq(turn.conn(), &conversation).await?;
    turn.conn()
        .execute(
            "INSERT INTO chat.messages (conversation_id, seq, role, content, context)
             VALUES ($1, $2, 'user', $3, $4)",
            &[conversation.as_uuid(), &seq, &start.message, &start.context],
        )
        .await?;
    Ok(turn)
}

impl Turn {
    fn conn(&self) -> &Object {
        self.conn
            .as_ref()
            .expect("a turn holds its connection until finished")
    }

    async fn lock(&mut self, wait: std::time::Duration) -> Result<(), ApiError> {
        let conn = self.conn();
        // The lock lives as long as this session. If the instance dies mid-turn without closing
        // the socket, server-side keepalives end the session (and free the conversation) within
        // about a minute instead of the OS default of two hours.
        conn.batch_execute(&format!(
            "SET lock_timeout = {}; SET tcp_keepalives_idle = 30; \
             SET tcp_keepalives_interval = 10; SET tcp_keepalives_count = 3",
            wait.as_millis().max(1)
        ))
        .await?;
        let locked = conn
            .execute("SELECT pg_advisory_lock($1)", &[&self.lock_key])
            .await;
        conn.batch_execute("RESET lock_timeout").await?;
        match locked {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                Err(ApiError::ConversationBusy)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Stores the assistant's side of the turn (reply, traces, usage, or the error) in one
    /// transaction, then releases the conversation.
    pub async fn finish(mut self, record: TurnRecord<'_>) -> Result<(), ApiError> {
        let mut conn = self.conn.take().expect("finish runs once");
        let result = async {
            let tx = conn.transaction().await?;
            let seq = next_seq(&tx, &self.conversation).await?;
            let traces = serde_json::to_value(record.traces)
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            let usage = serde_json::to_value(record.usage)
                .map_err(|e| ApiError::Internal(e.to_string()))?;
            tx.execute(
                "INSERT INTO chat.messages
                   (conversation_id, seq, role, content, traces, usage, steps, error)
                 VALUES ($1, $2, 'assistant', $3, $4, $5, $6, $7)",
                &[
                    self.conversation.as_uuid(),
                    &seq,
                    &record.reply,
                    &traces,
                    &usage,
                    &(record.steps as i32),
                    &record.error,
                ],
            )
            .await?;
            tx.commit().await?;
            Ok::<(), ApiError>(())
        }
        .await;
        // Once committed, the turn is stored whatever happens to the lock: a failed unlock only
        // means this session must close (which frees the lock) rather than go back to the pool.
        let unlocked = match &result {
            Ok(()) => conn
                .execute("SELECT pg_advisory_unlock($1)", &[&self.lock_key])
                .await
                .is_ok(),
            Err(_) => false,
        };
        if !unlocked {
            drop(Object::take(conn));
        }
        result
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(Object::take(conn));
        }
    }
}

/// Conversations are locked by a 64-bit key derived from their id; a rare collision only makes
/// two unrelated turns wait for each other.
fn lock_key(id: &ConversationId) -> i64 {
    let (hi, lo) = id.as_uuid().as_u64_pair();
    (hi ^ lo) as i64
}

async fn next_seq(
    client: &impl deadpool_postgres::GenericClient,
    id: &ConversationId,
) -> Result<i32, ApiError> {
    let row = client
        .query_one(
            "UPDATE chat.conversations SET message_count = message_count + 1, updated_at = now()
             WHERE id = $1 RETURNING message_count",
            &[id.as_uuid()],
        )
        .await?;
    Ok(row.get(0))
}

/// The last `limit` replayable messages, oldest first, starting with a user message: a failed
/// turn's record is not replayed, and a window never opens on an assistant reply whose
/// question was cut off. Tool calls and their outputs live in the same row, so a window can
/// never separate them.
async fn load_window(
    conn: &Object,
    id: &ConversationId,
    limit: usize,
) -> Result<Vec<StoredMessage>, ApiError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let rows = conn
        .query(
            &format!(
                "SELECT {COLUMNS} FROM (
                   SELECT * FROM chat.messages
                   WHERE conversation_id = $1 AND error IS NULL
                   ORDER BY seq DESC LIMIT $2) m
                 ORDER BY seq"
            ),
            &[id.as_uuid(), &(limit as i64)],
        )
        .await?;
    let mut messages = rows.iter().map(message).collect::<Result<Vec<_>, _>>()?;
    let first_user = messages
        .iter()
        .position(|m| m.role == "user")
        .unwrap_or(messages.len());
    messages.drain(..first_user);
    Ok(messages)
}

const COLUMNS: &str = "seq, role, content, context, traces, usage, steps, error, created_at";

fn message(row: &tokio_postgres::Row) -> Result<StoredMessage, ApiError> {
    let traces: Value = row.get("traces");
    let usage: Option<Value> = row.get("usage");
    Ok(StoredMessage {
        seq: row.get("seq"),
        role: row.get("role"),
        content: row.get("content"),
        context: row.get("context"),
        traces: serde_json::from_value(traces)
            .map_err(|e| ApiError::Internal(format!("stored traces: {e}")))?,
        usage: usage
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| ApiError::Internal(format!("stored usage: {e}")))?,
        steps: row.get("steps"),
        error: row.get("error"),
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
    let conn = pool.get().await?;
    let (at, id) = match before {
        Some(c) => (Some(c.updated_at), Some(c.id)),
        None => (None, None),
    };
    let rows = conn
        .query(
            "SELECT id, title, message_count, created_at, updated_at FROM chat.conversations
             WHERE owner = $1
               AND ($2::timestamptz IS NULL OR (updated_at, id) < ($2, $3::uuid))
             ORDER BY updated_at DESC, id DESC
             LIMIT $4",
            &[&owner.as_str(), &at, &id, &(i64::from(limit) + 1)],
        )
        .await?;
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

/// The whole history of one of the owner's conversations.
pub async fn messages(
    pool: &Pool,
    owner: &UserId,
    id: &ConversationId,
) -> Result<Vec<StoredMessage>, ApiError> {
    let conn = pool.get().await?;
    let owned = conn
        .query_opt(
            "SELECT 1 FROM chat.conversations WHERE id = $1 AND owner = $2",
            &[id.as_uuid(), &owner.as_str()],
        )
        .await?;
    if owned.is_none() {
        return Err(ApiError::ConversationNotFound);
    }
    let rows = conn
        .query(
            &format!("SELECT {COLUMNS} FROM chat.messages WHERE conversation_id = $1 ORDER BY seq"),
            &[id.as_uuid()],
        )
        .await?;
    rows.iter().map(message).collect()
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
