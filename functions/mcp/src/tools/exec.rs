//! Runs one checked tool call against Postgres and renders the rows as JSON.
//!
//! A call is one pipelined transaction (no extra round trips): `BEGIN READ ONLY` (or `READ
//! WRITE` for a declared write) with a local statement timeout and the tool's role, the
//! caller's verified claims in `parley.caller` (for a user), the statement, the reset of what
//! it could leave on the session, `COMMIT`. Statements are unnamed (parsed, bound and run in
//! one message each, nothing kept on the connection), so the connection is the same after a
//! call as before it and a transaction-mode pooler (PgBouncer, RDS Proxy) can hand the server
//! connection to anyone once the call commits. A write
//! called with an idempotency key records its rows in the same statement; the same key again
//! fails on `idempotency_pkey`, writes nothing and gets the recorded rows back. Postgres
//! renders every row (`row_to_json`), so numeric, timestamp and uuid values arrive exactly as
//! stored.

use deadpool_postgres::{Object, Pool};
use futures_util::TryStreamExt;
use parley_core::db::retry_once_if_stale;
use parley_core::db::{DbError, Statements};
use parley_core::jwt::VerifiedClaims;
use parley_wire::IdempotencyKey;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::params::SqlValue;
use super::spec::ToolSpec;
use crate::audit::Marker;
use crate::output::{Render, ToolOutput, render};

/// Why a call failed after its arguments were accepted. The messages are for the model or
/// person calling the tool: actionable, never internals.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("the query took longer than {ms} ms and was cancelled; narrow the filters{} and try again", hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default())]
    Timeout { ms: u128, hint: Option<String> },
    /// Cancelled before its time was up, by another session (`pg_cancel_backend`) or an
    /// administrator: not for taking too long.
    #[error(
        "the query was cancelled by the database (another session or an administrator) before \
         its {limit_ms} ms limit; it was not too slow, and it may be tried again"
    )]
    Cancelled { limit_ms: u128 },
    #[error("the database is unavailable right now; try again in a few seconds")]
    Unavailable,
    #[error("this tool is read-only and its statement tried to change data; nothing was changed")]
    ReadOnly,
    #[error(
        "the database role of this service may not do what this tool asks; nothing was changed"
    )]
    PermissionDenied,
    #[error(
        "this call's idempotency key was used before, but its first result cannot be read back; \
         nothing was changed"
    )]
    Replay,
    /// The tool's SQL refused the call with `RAISE EXCEPTION` (SQLSTATE P0001): its message
    /// is written for the person asking (e.g. "you are not enrolled in ..."), so it is passed
    /// on, cut to [`RAISED_MESSAGE_CHARS`].
    #[error("{0}")]
    Raised(String),
    #[error("the query failed (SQLSTATE {0}); the tool's declaration may need fixing")]
    Query(String),
}

/// Most characters of a `RAISE EXCEPTION` message passed on to the caller.
pub const RAISED_MESSAGE_CHARS: usize = 500;

impl From<DbError> for ExecError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::Query(e) => match e.code() {
                Some(c) if *c == SqlState::READ_ONLY_SQL_TRANSACTION => ExecError::ReadOnly,
                Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => ExecError::PermissionDenied,
                Some(c) if *c == SqlState::RAISE_EXCEPTION => {
                    let message = e.as_db_error().map_or("", |db| db.message());
                    ExecError::Raised(message.chars().take(RAISED_MESSAGE_CHARS).collect())
                }
                Some(c) => ExecError::Query(c.code().to_owned()),
                None => ExecError::Query("unknown".into()),
            },
            _ => ExecError::Unavailable,
        }
    }
}

/// Sets `parley.caller` for the rest of the transaction (`is_local = true`).
const SET_CALLER: &str = "SELECT set_config('parley.caller', $1, true)";

/// Reads back what a keyed write recorded; RLS on the table adds the caller.
const RECORDED_ROWS: &str = "SELECT rows FROM parley.idempotency \
     WHERE caller = coalesce(parley.caller_sub(), '') AND tool = $1 AND key = $2";

/// The constraint a repeated key violates.
const IDEMPOTENCY_PKEY: &str = "idempotency_pkey";

/// The placeholders [`ToolSpec::keyed_sql`] adds after the tool's own: its name and the key.
const KEY_TYPES: [Type; 2] = [Type::TEXT, Type::TEXT];

/// The placeholder types of [`ToolSpec::keyed_sql`]: the tool's, then its name and the key.
pub fn keyed_types(tool: &ToolSpec) -> Vec<Type> {
    tool.placeholder_types
        .iter()
        .chain(&KEY_TYPES)
        .cloned()
        .collect()
}

/// Who a call runs for and under which key, as the statements need them.
struct Call<'a> {
    /// The user's verified claims as JSON text for `parley.caller`; `None` for the service.
    caller: Option<String>,
    /// Only for a write: a read-only tool has nothing to record.
    key: Option<&'a IdempotencyKey>,
    fetch: i64,
    row_limit: u64,
    max_bytes: u64,
    marker: Marker<'a>,
    statements: Statements,
}

/// Runs `tool` with checked `args` (in the order of `tool.params`) for `user` (`None`: the
/// service), recording a write under `key` when one is given. `marker` names the call to a
/// DBA (see [`Call`]).
pub async fn run(
    (pool, statements): (&Pool, Statements),
    tool: &ToolSpec,
    args: &[SqlValue],
    user: Option<&VerifiedClaims>,
    key: Option<&IdempotencyKey>,
    marker: Marker<'_>,
) -> Result<ToolOutput, ExecError> {
    let caps = (row_limit(tool, args), tool.max_bytes);
    run_capped((pool, statements), tool, args, user, key, marker, caps).await
}

/// The rows a call asked for: its limit argument, within the tool's `max_rows`.
pub fn row_limit(tool: &ToolSpec, args: &[SqlValue]) -> u64 {
    tool.limit_param
        .and_then(|i| args[i].as_i64())
        .map_or(tool.max_rows, |n| (n.max(1) as u64).min(tool.max_rows))
}

/// [`run`] with other caps than the call's own, `(rows, bytes)`: a reranked call fetches
/// deeper than it returns (`crate::rerank`).
pub async fn run_capped(
    (pool, statements): (&Pool, Statements),
    tool: &ToolSpec,
    args: &[SqlValue],
    user: Option<&VerifiedClaims>,
    key: Option<&IdempotencyKey>,
    marker: Marker<'_>,
    (row_limit, max_bytes): (u64, u64),
) -> Result<ToolOutput, ExecError> {
    let started = std::time::Instant::now();
    let call = Call {
        caller: user.map(|u| serde_json::Value::Object(u.claims.clone()).to_string()),
        key: key.filter(|_| tool.keyed_sql.is_some()),
        // One row past the limit tells "exactly N" from "more than N".
        fetch: i64::try_from(row_limit + 1).unwrap_or(i64::MAX),
        row_limit,
        max_bytes,
        marker,
        statements,
    };

    // A connection that died while this instance was frozen fails the first attempt; the
    // statement never ran, so one retry on a fresh connection is safe. A write without a key
    // is not retried: a broken link after COMMIT went out cannot tell "done" from "not done".
    // With a key it can be: if the first attempt committed, the retry replays its rows.
    let mut outcome = retry_once_if_stale!(
        pool,
        |conn| query(&conn, tool, args, &call).await.map_err(DbError::from),
        retry_if = !tool.writes || call.key.is_some(),
    );
    if call.key.is_some() && outcome.as_ref().is_err_and(key_was_used) {
        let replayed = retry_once_if_stale!(pool, |conn| replay(&conn, tool, &call)
            .await
            .map_err(DbError::from));
        outcome = match replayed {
            Ok(Some(output)) => Ok(output),
            Ok(None) => {
                tracing::error!(tool = %tool.name, "idempotency key used before but no record is visible");
                return Err(ExecError::Replay);
            }
            Err(e) => Err(e),
        };
    }
    outcome.map_err(|e| {
        // Our `statement_timeout` and a `pg_cancel_backend` share this SQLSTATE (the message
        // that tells them apart is in the server's language); the timeout cannot fire sooner
        // than the tool's timeout after `started`.
        if e.sqlstate() == Some(&SqlState::QUERY_CANCELED) && started.elapsed() < tool.timeout {
            return ExecError::Cancelled {
                limit_ms: tool.timeout.as_millis(),
            };
        }
        if e.sqlstate() == Some(&SqlState::QUERY_CANCELED) {
            return ExecError::Timeout {
                ms: tool.timeout.as_millis(),
                hint: tool.timeout_hint.clone(),
            };
        }
        match &e {
            DbError::Unavailable(_) => {
                tracing::warn!(tool = %tool.name, error = %e, "no database connection")
            }
            // A refusal the SQL was written to make; its message may quote the arguments.
            _ if e.sqlstate() == Some(&SqlState::RAISE_EXCEPTION) => {
                tracing::info!(tool = %tool.name, "the tool's SQL refused the call")
            }
            _ => tracing::error!(tool = %tool.name, error = %e, "tool statement failed"),
        }
        ExecError::from(e)
    })
}

/// The write's key was recorded before (by a committed or concurrent first attempt, which
/// the INSERT waited for): the whole statement, the write included, was rolled back.
fn key_was_used(e: &DbError) -> bool {
    match e {
        DbError::Query(e) => e.as_db_error().is_some_and(|db| {
            *db.code() == SqlState::UNIQUE_VIOLATION && db.constraint() == Some(IDEMPOTENCY_PKEY)
        }),
        _ => false,
    }
}

/// What a tool's statement can change on its session and take past COMMIT (`set_config(..,
/// false)`, a session advisory lock), undone inside the call's transaction, so nothing of it
/// reaches the server connection a pooler hands on at COMMIT. (`DISCARD ALL` cannot run in a
/// transaction.) Deferred constraints are checked first, while the tool's settings and
/// `parley.caller` are still set: `RESET ALL` undoes them, and they would otherwise be checked
/// at COMMIT without them.
pub const RESET_SESSION: &str =
    "SET CONSTRAINTS ALL IMMEDIATE; RESET ALL; SELECT pg_advisory_unlock_all()";

/// After a failed call: a session advisory lock taken before the failure survives the
/// rollback (settings do not), so it is released on the connection that took it.
const UNLOCK_AFTER_FAILURE: &str = "SELECT pg_advisory_unlock_all()";

/// The statements that open a call's transaction (the bench's floor sends the same).
pub fn begin_sql(tool: &ToolSpec) -> String {
    begin_with(tool, tool.writes, None)
}

/// `marker` (see [`Call`]) goes in a comment, shown while the batch runs, and in
/// `application_name` for the rest of the transaction (pg_stat_activity, the log's `%a`);
/// before the tool's own settings, so a tool that sets `application_name` keeps its value.
fn begin_with(tool: &ToolSpec, read_write: bool, marker: Option<Marker<'_>>) -> String {
    // Tools with nullable filters are planned per call (see `ToolSpec::custom_plans`): at 1M
    // rows a generic plan made a search with one optional filter given 345 ms instead of
    // 23 ms, while planning a primary-key lookup every time costs more than the lookup. The others leave the choice
    // to Postgres, which after five calls on a connection uses the cached generic plan when it
    // is not costlier than planning each call.
    let mut begin = format!(
        "BEGIN {}; SET LOCAL statement_timeout = {}",
        if read_write {
            "READ WRITE"
        } else {
            "READ ONLY"
        },
        tool.timeout.as_millis(),
    );
    if let Some(marker) = marker {
        begin = format!(
            "{} {begin}; SET LOCAL application_name = '{}'",
            marker.comment(),
            marker.application_name()
        );
    }
    if tool.custom_plans {
        begin.push_str("; SET LOCAL plan_cache_mode = force_custom_plan");
    }
    // Before the role: set by the login role, as the tools file's author tried them.
    for set in &tool.settings {
        begin.push_str("; ");
        begin.push_str(set);
    }
    // A lower-case identifier (checked at load), so quoting names exactly that role.
    if let Some(role) = &tool.role {
        begin.push_str("; SET LOCAL ROLE \"");
        begin.push_str(role);
        begin.push('"');
    }
    begin
}

async fn query(
    client: &Object,
    tool: &ToolSpec,
    args: &[SqlValue],
    call: &Call<'_>,
) -> Result<ToolOutput, tokio_postgres::Error> {
    let (sql, key_types): (&str, &[Type]) = match (call.key, &tool.keyed_sql) {
        (Some(_), Some(keyed_sql)) => (keyed_sql, &KEY_TYPES),
        _ => (&tool.wrapped_sql, &[]),
    };
    let types = tool.placeholder_types.iter().chain(key_types).cloned();
    let mut params: Vec<&(dyn ToSql + Sync)> = tool
        .placeholder_params
        .iter()
        .map(|&i| args[i].as_sql())
        .collect();
    params.push(&call.fetch);
    let tool_name = tool.name.as_str();
    let key = call.key.map(IdempotencyKey::as_str);
    if let Some(key) = &key {
        params.push(&tool_name);
        params.push(key);
    }
    // Rows are rendered as they stream in and the rest are let go once a cap is reached, so a
    // tool with large rows holds about `max_bytes`, not `max_rows + 1` rows.
    let rows = async {
        let stream = match call.statements {
            Statements::Unnamed => {
                client
                    .query_typed_raw(sql, params.into_iter().zip(types))
                    .await?
            }
            Statements::Cached => {
                let types: Vec<Type> = types.collect();
                let statement = client.prepare_typed_cached(sql, &types).await?;
                client.query_raw(&statement, params).await?
            }
        };
        let mut stream = std::pin::pin!(stream);
        let mut out = Render::new(call.row_limit, call.max_bytes);
        while let Some(row) = stream.try_next().await? {
            if !out.push(row.get::<_, &str>(0)) {
                break;
            }
        }
        Ok::<_, tokio_postgres::Error>(out.finish())
    };
    let begin = begin_with(tool, tool.writes, Some(call.marker));
    transaction(client, &begin, call, rows).await
}

/// The rows a keyed write recorded, rendered with the same caps as the first time; `None`
/// when no record is visible.
async fn replay(
    client: &Object,
    tool: &ToolSpec,
    call: &Call<'_>,
) -> Result<Option<ToolOutput>, tokio_postgres::Error> {
    let key = call.key.map_or("", IdempotencyKey::as_str);
    let tool_name = tool.name.as_str();
    let read = async {
        let row = client
            .query_typed_opt(
                RECORDED_ROWS,
                &[(&tool_name, Type::TEXT), (&key, Type::TEXT)],
            )
            .await?;
        Ok(row.map(|row| {
            let recorded: Vec<String> = row.get(0);
            let mut output = render(
                recorded.iter().map(String::as_str),
                call.row_limit,
                call.max_bytes,
            );
            output.replayed = true;
            output
        }))
    };
    let begin = begin_with(tool, false, Some(call.marker));
    transaction(client, &begin, call, read).await
}

/// Runs `work` inside the call's transaction, every message pipelined: all go out before the
/// first answer comes back. If a statement fails the transaction is aborted, the reset fails
/// with it (a rollback undoes settings anyway) and COMMIT only rolls it back; then, and only
/// then, one more message releases a session advisory lock the failed statement may have
/// taken.
async fn transaction<T>(
    client: &Object,
    begin: &str,
    call: &Call<'_>,
    work: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, tokio_postgres::Error> {
    let caller = async {
        match (&call.caller, call.statements) {
            (Some(claims), Statements::Unnamed) => client
                .execute_typed(SET_CALLER, &[(claims, Type::TEXT)])
                .await
                .map(drop),
            (Some(claims), Statements::Cached) => {
                let statement = client
                    .prepare_typed_cached(SET_CALLER, &[Type::TEXT])
                    .await?;
                client.execute(&statement, &[claims]).await.map(drop)
            }
            (None, _) => Ok(()),
        }
    };
    let (begun, identified, output, reset, committed) = tokio::join!(
        client.batch_execute(begin),
        caller,
        work,
        client.batch_execute(RESET_SESSION),
        client.batch_execute("COMMIT"),
    );
    let outcome = (|| {
        begun?;
        identified?;
        let output = output?;
        reset?;
        committed?;
        Ok(output)
    })();
    if outcome.is_err() {
        // The call's own error is the one to report; a connection too broken for this is
        // dropped by the pool's recycle check.
        let _ = client.batch_execute(UNLOCK_AFTER_FAILURE).await;
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_go_in_the_begin_batch_before_the_role() {
        let raw = toml::from_str(
            "name = \"t\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n\
             role = \"reader\"\nsettings = { \"hnsw.ef_search\" = 100 }\n",
        )
        .unwrap();
        let tools =
            super::super::spec::parse_tools(vec![raw], crate::output::Limits::default()).unwrap();
        assert_eq!(
            begin_sql(&tools[0]),
            "BEGIN READ ONLY; SET LOCAL statement_timeout = 5000; \
             SET LOCAL hnsw.ef_search = '100'; SET LOCAL ROLE \"reader\""
        );
    }
}
