//! One turn's writes: [`begin`] claims the conversation with an expiring lease on its row and
//! stores the question, [`Turn::finish`] stores the answer and frees the conversation. Each holds
//! a pooled connection for one pipelined round trip per attempt, with unnamed statements that
//! leave nothing on it (a transaction-mode pooler can hand it on); none is held while the
//! model thinks.
//!
//! Why a lease and not a lock: a session advisory lock pins a connection for the whole turn
//! (the pool runs dry at a few concurrent turns, and RDS Proxy cannot multiplex such a session),
//! and a lock's holder that froze keeps it until its session dies. A lease on the row needs no
//! session, and one whose holder stopped expires by itself after `TURN_LEASE_MS`.
//!
//! The sequence stays gapless because every message takes `message_count + 1` from the row in
//! the statement that updates it: concurrent writers queue on the row lock for that statement.

use std::time::{Duration, Instant};

use deadpool_postgres::{Object, Pool};
use serde_json::Value;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{Json, ToSql, Type};
use uuid::Uuid;

use parley_core::db::{CheckedOut, retry_once_if_stale};

use super::{Attempt, Chart, ConversationId, StorageError, StoredMessage, Trace, window_from};
use crate::auth::UserId;
use crate::turn::approval::Pending;
use crate::turn::llm::Usage;
use crate::turn::sources::Source;

/// How often a turn that found its conversation busy looks again: soon at first (a turn that
/// was finishing frees it within milliseconds), then no more than five times a second.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(200);

/// How often a [`Turn::finish`] that could not reach the database tries again, in the
/// background: a Postgres restart takes 1-3 s and an RDS failover 30-60 s, so soon at first,
/// then every 2 s, until the lease would have expired anyway.
const FIRST_STORE_RETRY: Duration = Duration::from_millis(100);
const LONGEST_STORE_RETRY: Duration = Duration::from_secs(2);

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
    /// The client of a streamed turn went away; the reply holds what the turn had.
    pub interrupted: bool,
    /// What the turn's tools returned that the reply may cite, cited ones first.
    pub sources: &'a [Source],
    /// The charts the turn showed (`show_chart`), in the order they were drawn.
    pub charts: &'a [Chart],
    /// The calls that wait for the user's approval: the turn paused after this message.
    pub approvals: &'a [Pending],
    /// What the turn cost, for the usage ledger (`chat.turn_usage`).
    pub ledger: Ledger<'a>,
}

/// A turn's row in the usage ledger beyond what [`TurnRecord`] already holds (its tokens are
/// the record's `usage`, its tool calls and errors its `traces`).
#[derive(Debug, Clone, Copy)]
pub struct Ledger<'a> {
    /// This run of the loop (a turn resumed after an approval is another).
    pub turn_id: Uuid,
    /// The model the LLM endpoint was asked for (`LLM_MODEL`).
    pub model: &'a str,
    /// Responses the model gave this run: 0 means it never answered.
    pub model_calls: u32,
    /// The outcome's stable code (`answered`, `cut_short`, `llm_unavailable`, ...).
    pub outcome: &'a str,
    /// Whether the outcome counts as a failure (as the metrics' `TurnErrors` count it).
    pub failed: bool,
    /// The rate window the turn was admitted in (`turn::quota`), whose slot a turn the model
    /// never answered gives back; `None` when it took none.
    pub rate_slot: Option<chrono::DateTime<chrono::Utc>>,
}

pub struct TurnStart<'a> {
    pub owner: &'a UserId,
    pub conversation: Option<ConversationId>,
    /// The user's message; `None` resumes a paused turn (its approvals answered) without one.
    pub message: Option<&'a str>,
    pub context: Option<&'a Value>,
    pub history_limit: usize,
    /// `TURN_LOCK_WAIT_MS`: how long to wait for another turn on the conversation to finish.
    pub lock_wait: Duration,
    /// `TURN_LEASE_MS`: how long the claim lasts if this turn never finishes.
    pub lease: Duration,
}

/// A turn in progress: it holds the conversation's lease, not a connection. Dropping it without
/// [`Turn::finish`] gives the lease back (in the background), so the next turn need not wait for
/// it to expire.
pub struct Turn {
    pool: Pool,
    lease: Uuid,
    /// Whose turn it is: the ledger's `owner`.
    owner: UserId,
    /// `TURN_LEASE_MS` (stretched for a streamed turn): how long a failed finish keeps trying.
    lease_for: Duration,
    /// Whether Drop still has to give the lease back.
    open: bool,
    pub conversation: ConversationId,
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

/// Opens a turn: checks ownership (or creates the conversation), waits for any other turn on
/// it, loads the history window, and stores the user's message before any LLM call.
///
/// Each attempt is one pipelined round trip and one transaction: `BEGIN`, settings, the claim
/// (taken only if the caller owns the conversation and no unexpired lease holds it), the window,
/// the insert, `COMMIT`. Window and insert are conditional on the claim inside the SQL, so a
/// refused claim stores nothing; the turn then waits a little, on no connection, and tries
/// again until `lock_wait` has passed (409).
///
/// The commit is visible at once but does not wait for its WAL flush: [`Turn::finish`]'s commit
/// does, and flushing the WAL up to it flushes this one too. So everything a 200 acknowledges
/// is durable, and a turn pays for one flush instead of two. Only a Postgres crash within the
/// WAL writer's delay (`wal_writer_delay`, 200 ms by default) of this commit could undo it, and
/// then the turn it belongs to fails as well, so the client is never told it was kept.
pub async fn begin(pool: &Pool, start: TurnStart<'_>) -> Result<Turn, StorageError> {
    let (conversation, is_new) = match start.conversation {
        Some(id) => (id, false),
        None => (ConversationId::new(), true),
    };
    let lease = Uuid::new_v4();
    let give_up = Instant::now() + start.lock_wait;
    let mut pause = FIRST_PAUSE;
    loop {
        let left = give_up.saturating_duration_since(Instant::now());
        let claimed = retry_once_if_stale!(pool, |conn| {
            try_begin(&mut conn, &start, conversation, is_new, lease, left).await
        });
        if let Some(history) = claimed.map_err(Attempt::into_error)? {
            return Ok(Turn {
                pool: pool.clone(),
                lease,
                owner: start.owner.clone(),
                lease_for: start.lease,
                open: true,
                conversation,
                history,
            });
        }
        let left = give_up.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(StorageError::Busy);
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// One attempt: the history window when the claim succeeded, `None` while another turn holds
/// the conversation.
async fn try_begin(
    conn: &mut CheckedOut,
    start: &TurnStart<'_>,
    conversation: ConversationId,
    is_new: bool,
    lease: Uuid,
    wait: Duration,
) -> Result<Option<Vec<StoredMessage>>, Attempt> {
    let id = conversation.as_uuid();
    let owner = start.owner.as_str();
    // Row locks are held only by other turns' begin and finish statements (milliseconds); the
    // wait for them is bounded by what is left of the caller's. `0` would mean "forever".
    let lock_timeout = wait.as_millis().max(1).to_string();
    let lease_secs = start.lease.as_secs_f64();
    let limit = start.history_limit as i64;
    let title = title(start.message.unwrap_or_default());
    let claim_sql = if is_new { CREATE } else { CLAIM };
    // A resume stores no question, so counts none in.
    let questions = i32::from(start.message.is_some());

    // Unnamed statements, parsed, bound and run in one message each: nothing stays on the
    // connection after COMMIT, so a transaction-mode pooler can hand it on.
    // CREATE's fifth parameter is the new conversation's title, CLAIM's the questions counted.
    let fifth: (&(dyn ToSql + Sync), Type) = if is_new {
        (&title, Type::TEXT)
    } else {
        (&questions, Type::INT4)
    };
    let claim_params: [(&(dyn ToSql + Sync), Type); 5] = [
        (id, Type::UUID),
        (&owner, Type::TEXT),
        (&lease, Type::UUID),
        (&lease_secs, Type::FLOAT8),
        fifth,
    ];
    let insert_params: [(&(dyn ToSql + Sync), Type); 4] = [
        (id, Type::UUID),
        (&start.message, Type::TEXT),
        (&start.context, Type::JSONB),
        (&lease, Type::UUID),
    ];
    let settings_params: [(&(dyn ToSql + Sync), Type); 1] = [(&lock_timeout, Type::TEXT)];
    // A new conversation has no history: the window query is not sent at all.
    let read_window = !is_new && limit > 0;
    // futures' join polls in order, so the statements reach the server in this order.
    let (began, set, claimed, rows, inserted, committed) = futures::join!(
        conn.batch_execute("BEGIN"),
        conn.execute_typed(SETTINGS, &settings_params),
        conn.query_typed_opt(claim_sql, &claim_params),
        async {
            match read_window {
                true => conn
                    .query_typed(
                        WINDOW,
                        &[(id, Type::UUID), (&limit, Type::INT8), (&lease, Type::UUID)],
                    )
                    .await
                    .map(Some),
                false => Ok(None),
            }
        },
        async {
            match start.message {
                Some(_) => conn
                    .query_typed_opt(INSERT_QUESTION, &insert_params)
                    .await
                    .map(|row| row.is_some()),
                // A resume stores no question: the claim alone starts it.
                None => Ok(true),
            }
        },
        conn.batch_execute("COMMIT"),
    );

    // Which results matter, in the order the server ran them: an error aborts everything after
    // it, and `COMMIT` then rolls back.
    if let Err(e) = began {
        return Err(e.into());
    }
    let outcome = (|| {
        set?;
        let claim = match claimed {
            Ok(row) => row,
            // Another begin or finish held the row for all the time left: busy.
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => return Ok(None),
            Err(e) => return Err(e),
        };
        let rows = rows?;
        let stored = inserted?;
        committed?;
        Ok(Some((claim, rows, stored)))
    })();
    let (claim, rows, stored) = match outcome {
        Ok(Some(results)) => results,
        Ok(None) => return Ok(None),
        Err(e) => {
            // The transaction rolled back, but the connection's state is unknown mid-pipeline.
            conn.discard();
            return Err(Attempt::Failed(e.into()));
        }
    };
    // Someone else's conversation is indistinguishable from a missing one.
    let Some(claim) = claim else {
        return Err(StorageError::NotFound.into());
    };
    let (held, took_over): (bool, bool) = (claim.get(0), claim.get(1));
    if !held {
        return Ok(None);
    }
    if !stored {
        conn.discard();
        return Err(StorageError::Failed("the claimed conversation took no message".into()).into());
    }
    if took_over {
        tracing::warn!(
            conversation = %conversation,
            "took over a conversation whose turn outlived its lease (TURN_LEASE_MS): that \
             turn's instance stopped or ran past the turn deadline"
        );
    }
    match rows.as_deref().map(window_from).transpose() {
        Ok(history) => Ok(Some(history.unwrap_or_default())),
        Err(e) => Err(e.into()),
    }
}

/// Per transaction: `lock_timeout`, and `synchronous_commit` off (see [`begin`]).
/// Made by the function migration 0023 installs: nothing sent per request may `SET` or call
/// `set_config` (docs/rds-proxy.md).
const SETTINGS: &str =
    "SELECT parley.set_local(ARRAY['lock_timeout', $1::text, 'synchronous_commit', 'off'])";

/// Claims an owned conversation whose lease is free or expired, and counts `$5` questions in
/// (1, or 0 for a turn that resumes after its approvals were answered). One row unless the
/// conversation is missing or someone else's: whether the claim was taken, and whether it
/// replaced an expired one (the outer query sees the row as it was).
const CLAIM: &str = "WITH claimed AS (
       UPDATE chat.conversations
       SET message_count = message_count + $5::int4, updated_at = now(),
           turn_lease = $3, turn_lease_until = now() + $4::float8 * interval '1 second'
       WHERE id = $1 AND owner = $2
         AND (turn_lease_until IS NULL OR turn_lease_until <= now())
       RETURNING 1)
     SELECT EXISTS (SELECT 1 FROM claimed), turn_lease_until IS NOT NULL
     FROM chat.conversations WHERE id = $1 AND owner = $2";

/// [`CLAIM`] for a conversation that does not exist yet.
const CREATE: &str = "INSERT INTO chat.conversations
       (id, owner, title, message_count, turn_lease, turn_lease_until)
     VALUES ($1, $2, $5, 1, $3, now() + $4::float8 * interval '1 second')
     RETURNING true, false";

/// The last `$2` replayable messages, newest first (see [`window_from`]), only for the turn
/// holding the lease `$3`. Read before the question is inserted, so it is not among them.
const WINDOW: &str = concat!(
    "SELECT ",
    columns!(),
    " FROM chat.messages
     WHERE conversation_id = $1 AND error IS NULL
       AND EXISTS (SELECT 1 FROM chat.conversations WHERE id = $1 AND turn_lease = $3)
     ORDER BY seq DESC LIMIT $2"
);

/// The question, numbered by the claim, only for the turn holding the lease `$4`.
const INSERT_QUESTION: &str =
    "INSERT INTO chat.messages (conversation_id, seq, role, content, context)
     SELECT $1, message_count, 'user', $2, $3 FROM chat.conversations
     WHERE id = $1 AND turn_lease = $4
     RETURNING seq";

/// The assistant's side of a turn, its row in the usage ledger, its charge to its owner's
/// budget and the end of its lease, atomic without `BEGIN`/`COMMIT` because it is one
/// statement. Stored only while the turn still holds the lease (`$7`, even if
/// expired: nobody took it over). The lease id stays on the row with no expiry, so a repeat of
/// this statement after a lost answer reads the answer's seq ("already stored") instead of
/// storing twice. NULL: a later turn took the conversation over, and nothing was stored.
const FINISH: &str = "WITH freed AS (
       UPDATE chat.conversations
       SET message_count = message_count + 1, updated_at = now(), turn_lease_until = NULL
       WHERE id = $1 AND turn_lease = $7 AND turn_lease_until IS NOT NULL
       RETURNING message_count),
     stored AS (
       INSERT INTO chat.messages
         (conversation_id, seq, role, content, traces, usage, steps, error, cut_short, sources,
          interrupted, charts)
       SELECT $1, message_count, 'assistant', $2, $3, $4, $5, $6, $8, $9, $10, $12 FROM freed
       RETURNING 1),
     -- The calls that wait for approval, on the message just stored (checked against it at
     -- the end of the statement).
     waiting AS (
       INSERT INTO chat.approvals
         (id, conversation_id, message_seq, step, call_id, server, tool, arguments,
          idempotency_key, expires_at, why, description, title)
       SELECT a.id, $1, freed.message_count, a.step, a.call_id, a.server, a.tool, a.arguments,
              a.idempotency_key, a.expires_at, a.why, a.description, a.title
       FROM freed, jsonb_to_recordset($11::jsonb) AS a(id uuid, step integer, call_id text,
            server text, tool text, arguments jsonb, idempotency_key text,
            expires_at timestamptz, why text, description text, title text)
       RETURNING 1),
     -- What the turn cost, in the ledger, with the message (once: a repeat never gets here,
     -- as `freed` is empty then, and the turn id is the key besides).
     ledger AS (
       INSERT INTO chat.turn_usage
         (turn_id, owner, conversation_id, seq, model, model_calls, input_tokens,
          output_tokens, tool_calls, tool_errors, outcome, error)
       SELECT $13, $14, $1, freed.message_count, $15, $16, $17, $18, $19, $20, $21, $22
       FROM freed
       ON CONFLICT (turn_id) DO NOTHING
       RETURNING 1),
     -- The turn's tokens charged to its owner's day (turn::quota), with its ledger row so
     -- exactly once; a turn the model never answered charges nothing and gives back its slot
     -- in the rate window it was admitted in ($23), if that window still runs.
     charged AS (
       INSERT INTO chat.quota_counters AS q
         (owner, day, tokens, window_start, window_turns, admitted)
       SELECT $14, (now() AT TIME ZONE 'UTC')::date, $17 + $18,
              now() - interval '1 minute', 0, true
       FROM ledger
       ON CONFLICT (owner) DO UPDATE SET
         tokens = CASE WHEN q.day = EXCLUDED.day THEN q.tokens ELSE 0 END + EXCLUDED.tokens,
         day = EXCLUDED.day,
         window_turns = q.window_turns
           - CASE WHEN $16 = 0 AND q.window_start = $23 AND q.window_turns > 0
                  THEN 1 ELSE 0 END
       RETURNING 1)
     -- The answer's seq once stored (by this statement or its earlier run), else NULL.
     SELECT coalesce((SELECT message_count FROM freed),
                     (SELECT message_count FROM chat.conversations
                      WHERE id = $1 AND turn_lease = $7 AND turn_lease_until IS NULL))";

/// Gives the lease back without an answer (a turn dropped unfinished).
const RELEASE: &str = "UPDATE chat.conversations SET turn_lease_until = NULL
     WHERE id = $1 AND turn_lease = $2 AND turn_lease_until IS NOT NULL";

impl Turn {
    /// Stores the assistant's side of the turn (reply, traces, sources, charts, usage, or the
    /// error) and frees the conversation in one statement: one round trip, one commit. That
    /// commit waits for its WAL flush (as the server is configured), which also makes
    /// [`begin`]'s durable.
    ///
    /// A turn whose lease expired and was taken over by a later turn stores nothing and gets
    /// [`StorageError::LeaseLost`]: its question stays on record without an answer (as after a
    /// crash), and the sequence stays gapless. A connection found dead is retried once: the
    /// statement is safe to repeat (see [`FINISH`]).
    ///
    /// When the database cannot be reached (Postgres restarting, a failover), the caller gets
    /// the error, and the same statement keeps being tried in the background until it answers
    /// or the lease would have expired: the reply the user saw is stored late rather than lost,
    /// and the conversation is free again as soon as the database is back, not when the lease
    /// expires (`TURN_LEASE_MS`, 30 s by default; 305 s for a streamed turn, whose lease is
    /// stretched by its longer deadline). Under Lambda the retries run while the instance is
    /// thawed. A statement the database refuses is not repeated; the lease is given back.
    /// The answer's `seq` once stored.
    pub async fn finish(mut self, record: TurnRecord<'_>) -> Result<i32, StorageError> {
        // From here on the lease ends by this statement, by the background retries, or by
        // expiry; Drop has nothing to do.
        self.open = false;
        let finish = match Finish::new(&self, record) {
            Ok(finish) => finish,
            Err(e) => {
                release_in_background(self.pool.clone(), self.conversation, self.lease);
                return Err(e);
            }
        };
        match finish.run(&self.pool).await {
            Ok(Some(seq)) => Ok(seq),
            Ok(None) => Err(StorageError::LeaseLost),
            Err(e @ (StorageError::Unavailable(_) | StorageError::PoolExhausted)) => {
                tracing::warn!(error = %e, conversation = %self.conversation, "could not store the turn; trying again in the background");
                let (pool, until) = (self.pool.clone(), Instant::now() + self.lease_for);
                tokio::spawn(finish.retry_until(pool, until));
                Err(e)
            }
            Err(e) => {
                release_in_background(self.pool.clone(), self.conversation, self.lease);
                Err(e)
            }
        }
    }
}

/// [`FINISH`]'s parameters, owned, so the statement can outlive the request that made it.
struct Finish {
    conversation: ConversationId,
    lease: Uuid,
    reply: String,
    traces: Value,
    usage: Value,
    steps: i32,
    error: Option<String>,
    cut_short: bool,
    sources: Value,
    interrupted: bool,
    approvals: Value,
    charts: Value,
    turn_id: Uuid,
    owner: String,
    model: String,
    model_calls: i32,
    input_tokens: i64,
    output_tokens: i64,
    tool_calls: i32,
    tool_errors: i32,
    outcome: String,
    failed: bool,
    rate_slot: Option<chrono::DateTime<chrono::Utc>>,
}

impl Finish {
    fn new(turn: &Turn, record: TurnRecord<'_>) -> Result<Finish, StorageError> {
        let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        let json = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| StorageError::Failed(format!("the turn could not be encoded: {e}")))
        };
        Ok(Finish {
            conversation: turn.conversation,
            lease: turn.lease,
            reply: record.reply.to_owned(),
            traces: json(serde_json::to_value(record.traces))?,
            usage: json(serde_json::to_value(record.usage))?,
            steps: record.steps as i32,
            error: record.error.map(str::to_owned),
            cut_short: record.cut_short,
            sources: json(serde_json::to_value(record.sources))?,
            interrupted: record.interrupted,
            approvals: Value::Array(record.approvals.iter().map(Pending::row).collect()),
            charts: json(serde_json::to_value(record.charts))?,
            turn_id: record.ledger.turn_id,
            owner: turn.owner.as_str().to_owned(),
            model: ledger_model(record.ledger.model),
            model_calls: count(record.ledger.model_calls as usize),
            input_tokens: tokens(record.usage.input_tokens),
            output_tokens: tokens(record.usage.output_tokens),
            tool_calls: count(record.traces.len()),
            tool_errors: count(record.traces.iter().filter(|t| t.is_error).count()),
            outcome: record.ledger.outcome.to_owned(),
            failed: record.ledger.failed,
            rate_slot: record.ledger.rate_slot,
        })
    }

    /// One try, with one retry on a connection found dead: the answer's seq once stored.
    async fn run(&self, pool: &Pool) -> Result<Option<i32>, StorageError> {
        let (traces, usage, sources) = (Json(&self.traces), Json(&self.usage), Json(&self.sources));
        let (approvals, charts) = (Json(&self.approvals), Json(&self.charts));
        let params: [(&(dyn ToSql + Sync), Type); 23] = [
            (self.conversation.as_uuid(), Type::UUID),
            (&self.reply, Type::TEXT),
            (&traces, Type::JSONB),
            (&usage, Type::JSONB),
            (&self.steps, Type::INT4),
            (&self.error, Type::TEXT),
            (&self.lease, Type::UUID),
            (&self.cut_short, Type::BOOL),
            (&sources, Type::JSONB),
            (&self.interrupted, Type::BOOL),
            (&approvals, Type::JSONB),
            (&charts, Type::JSONB),
            (&self.turn_id, Type::UUID),
            (&self.owner, Type::TEXT),
            (&self.model, Type::TEXT),
            (&self.model_calls, Type::INT4),
            (&self.input_tokens, Type::INT8),
            (&self.output_tokens, Type::INT8),
            (&self.tool_calls, Type::INT4),
            (&self.tool_errors, Type::INT4),
            (&self.outcome, Type::TEXT),
            (&self.failed, Type::BOOL),
            (&self.rate_slot, Type::TIMESTAMPTZ),
        ];
        retry_once_if_stale!(pool, |conn| try_finish(&conn, &params).await)
            .map_err(Attempt::into_error)
    }

    /// Tries again while the database cannot be reached, until `until`.
    async fn retry_until(self, pool: Pool, until: Instant) {
        let mut pause = FIRST_STORE_RETRY;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::error!(conversation = %self.conversation, "could not store the turn before its lease expired; its reply is lost");
                return;
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(LONGEST_STORE_RETRY);
            match self.run(&pool).await {
                Ok(Some(_)) => {
                    tracing::info!(conversation = %self.conversation, "stored the turn once the database answered");
                    return;
                }
                Ok(None) => return,
                Err(StorageError::Unavailable(_) | StorageError::PoolExhausted) => {}
                Err(e) => {
                    tracing::error!(error = %e, conversation = %self.conversation, "could not store the turn; giving its lease back");
                    release(&pool, self.conversation, self.lease).await;
                    return;
                }
            }
        }
    }
}

async fn try_finish(
    conn: &Object,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Option<i32>, Attempt> {
    Ok(conn.query_typed_one(FINISH, params).await?.get(0))
}

/// Gives the lease back without an answer. Best effort: if this fails, the lease still expires.
async fn release(pool: &Pool, id: ConversationId, lease: Uuid) {
    let release = async {
        let conn = pool.get().await.map_err(StorageError::from)?;
        conn.execute_typed(RELEASE, &[(id.as_uuid(), Type::UUID), (&lease, Type::UUID)])
            .await?;
        Ok::<_, StorageError>(())
    };
    if let Err(e) = release.await {
        tracing::warn!(error = %e, conversation = %id, "could not give back an unfinished turn's lease; it expires by itself");
    }
}

/// [`release`] without waiting for it, when there is a runtime to run it.
fn release_in_background(pool: Pool, id: ConversationId, lease: Uuid) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move { release(&pool, id, lease).await });
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.open {
            // A turn dropped unfinished (the client went away, a panic): free the conversation
            // now rather than after the lease.
            release_in_background(self.pool.clone(), self.conversation, self.lease);
        }
    }
}

/// The model's name as the ledger takes it (1-200 characters): `LLM_MODEL` is not bounded, and
/// a name the ledger refused would refuse the whole turn's store.
fn ledger_model(model: &str) -> String {
    match model.trim() {
        "" => "(unnamed)".to_owned(),
        name => name.chars().take(200).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_takes_any_model_name() {
        assert_eq!(ledger_model("gpt-4.1-mini"), "gpt-4.1-mini");
        assert_eq!(ledger_model(" "), "(unnamed)");
        assert_eq!(ledger_model(&"é".repeat(300)).chars().count(), 200);
    }

    #[test]
    fn titles_are_one_short_line() {
        assert_eq!(title("  How many\npotholes?  "), "How many potholes?");
        assert_eq!(title(&"a".repeat(100)).chars().count(), 81);
    }
}
