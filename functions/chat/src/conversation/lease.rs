//! One turn's writes: [`begin`] claims the conversation with an expiring lease on its row and
//! stores the question, [`Turn::finish`] stores the answer and frees the conversation. Each holds
//! a pooled connection for one pipelined round trip per attempt (plus one to prepare its
//! statements on a connection that has not yet); none is held while the model thinks.
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
use tokio_postgres::types::{Json, ToSql};
use uuid::Uuid;

use parley_core::db::{CheckedOut, retry_once_if_stale};

use super::{Attempt, ConversationId, StorageError, StoredMessage, Trace, window_from};
use crate::auth::UserId;
use crate::llm::Usage;
use crate::sources::Source;

/// How often a turn that found its conversation busy looks again: soon at first (a turn that
/// was finishing frees it within milliseconds), then no more than five times a second.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
const LONGEST_PAUSE: Duration = Duration::from_millis(200);

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
}

pub struct TurnStart<'a> {
    pub owner: &'a UserId,
    pub conversation: Option<ConversationId>,
    pub message: &'a str,
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
/// Each attempt is one pipelined round trip (one more on a connection that has not prepared
/// the statements yet) and one transaction: `BEGIN`, settings, the claim
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
    let title = title(start.message);

    let prepared = futures::try_join!(
        conn.prepare_cached(SETTINGS),
        conn.prepare_cached(if is_new { CREATE } else { CLAIM }),
        conn.prepare_cached(WINDOW),
        conn.prepare_cached(INSERT_QUESTION),
    );
    let (settings, claim, window, insert) = match prepared {
        Ok(statements) => statements,
        // Nothing has been sent but statement descriptions: a dead link here is stale.
        Err(e) => return Err(e.into()),
    };
    let claim_params: [&(dyn ToSql + Sync); 5] = [id, &owner, &lease, &lease_secs, &title];
    let insert_params: [&(dyn ToSql + Sync); 4] = [id, &start.message, &start.context, &lease];
    let settings_params: [&(dyn ToSql + Sync); 1] = [&lock_timeout];
    // A new conversation has no history: the window query is not sent at all.
    let read_window = !is_new && limit > 0;
    // futures' join polls in order, so the statements reach the server in this order.
    let (began, set, claimed, rows, inserted, committed) = futures::join!(
        conn.batch_execute("BEGIN"),
        conn.execute(&settings, &settings_params),
        conn.query_opt(&claim, &claim_params[..if is_new { 5 } else { 4 }]),
        async {
            match read_window {
                true => conn.query(&window, &[id, &limit, &lease]).await.map(Some),
                false => Ok(None),
            }
        },
        conn.query_opt(&insert, &insert_params),
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
        let stored = inserted?.is_some();
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
const SETTINGS: &str = "SELECT set_config('lock_timeout', $1, true),
       set_config('synchronous_commit', 'off', true)";

/// Claims an owned conversation whose lease is free or expired, and counts the question in.
/// One row unless the conversation is missing or someone else's: whether the claim was taken,
/// and whether it replaced an expired one (the outer query sees the row as it was).
const CLAIM: &str = "WITH claimed AS (
       UPDATE chat.conversations
       SET message_count = message_count + 1, updated_at = now(),
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

/// The assistant's side of a turn and the end of its lease, atomic without `BEGIN`/`COMMIT`
/// because it is one statement. Stored only while the turn still holds the lease (`$7`, even if
/// expired: nobody took it over). The lease id stays on the row with no expiry, so a repeat of
/// this statement after a lost answer reads `true` ("already stored") instead of storing twice.
/// `false`: a later turn took the conversation over, and nothing was stored.
const FINISH: &str = "WITH freed AS (
       UPDATE chat.conversations
       SET message_count = message_count + 1, updated_at = now(), turn_lease_until = NULL
       WHERE id = $1 AND turn_lease = $7 AND turn_lease_until IS NOT NULL
       RETURNING message_count),
     stored AS (
       INSERT INTO chat.messages
         (conversation_id, seq, role, content, traces, usage, steps, error, cut_short, sources,
          interrupted)
       SELECT $1, message_count, 'assistant', $2, $3, $4, $5, $6, $8, $9, $10 FROM freed
       RETURNING 1)
     SELECT EXISTS (SELECT 1 FROM stored)
       OR EXISTS (SELECT 1 FROM chat.conversations
                  WHERE id = $1 AND turn_lease = $7 AND turn_lease_until IS NULL)";

/// Gives the lease back without an answer (a turn dropped unfinished).
const RELEASE: &str = "UPDATE chat.conversations SET turn_lease_until = NULL
     WHERE id = $1 AND turn_lease = $2 AND turn_lease_until IS NOT NULL";

impl Turn {
    /// Stores the assistant's side of the turn (reply, traces, sources, usage, or the error) and frees
    /// the conversation in one statement: one round trip (one more to prepare it on a new
    /// connection), one commit. That commit waits for its
    /// WAL flush (as the server is configured), which also makes [`begin`]'s durable.
    ///
    /// A turn whose lease expired and was taken over by a later turn stores nothing and gets
    /// [`StorageError::LeaseLost`]: its question stays on record without an answer (as after a
    /// crash), and the sequence stays gapless. A connection found dead is retried once: the
    /// statement is safe to repeat (see [`FINISH`]).
    pub async fn finish(mut self, record: TurnRecord<'_>) -> Result<(), StorageError> {
        // From here on the lease ends by this statement or expires; Drop has nothing to do.
        self.open = false;
        let (traces, usage) = (Json(record.traces), Json(record.usage));
        let sources = Json(record.sources);
        let steps = record.steps as i32;
        let params: [&(dyn ToSql + Sync); 10] = [
            self.conversation.as_uuid(),
            &record.reply,
            &traces,
            &usage,
            &steps,
            &record.error,
            &self.lease,
            &record.cut_short,
            &sources,
            &record.interrupted,
        ];
        let stored = retry_once_if_stale!(self.pool, |conn| try_finish(&conn, &params).await)
            .map_err(Attempt::into_error)?;
        if stored {
            Ok(())
        } else {
            Err(StorageError::LeaseLost)
        }
    }
}

async fn try_finish(conn: &Object, params: &[&(dyn ToSql + Sync)]) -> Result<bool, Attempt> {
    let finish = conn.prepare_cached(FINISH).await?;
    Ok(conn.query_one(&finish, params).await?.get(0))
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        // A turn dropped unfinished (the client went away, a panic): free the conversation now
        // rather than after the lease. Best effort: if this fails, the lease still expires.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (pool, id, lease) = (self.pool.clone(), self.conversation, self.lease);
        runtime.spawn(async move {
            let release = async {
                let conn = pool.get().await.map_err(StorageError::from)?;
                conn.execute(RELEASE, &[id.as_uuid(), &lease]).await?;
                Ok::<_, StorageError>(())
            };
            if let Err(e) = release.await {
                tracing::warn!(error = %e, conversation = %id, "could not give back an unfinished turn's lease; it expires by itself");
            }
        });
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
    fn titles_are_one_short_line() {
        assert_eq!(title("  How many\npotholes?  "), "How many potholes?");
        assert_eq!(title(&"a".repeat(100)).chars().count(), 81);
    }
}
