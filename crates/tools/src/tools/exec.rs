//! Runs one checked tool call against Postgres and renders the rows as JSON.
//!
//! A call is one pipelined transaction (no extra round trips): `BEGIN READ ONLY` (or `READ
//! WRITE` for a declared write), `parley.begin_call(...)` with the call's time limit, the
//! tool's settings, the caller's verified claims (`parley.caller`) and the tool's role, the
//! statement, `parley.end_call()` to undo what it could leave on the session, `COMMIT`.
//! Every setting is local to the transaction and made inside a function that migration 0023
//! installs, so no statement RDS Proxy documents as pinning a session (`SET`, `RESET`,
//! `set_config`, advisory locks) is sent (docs/rds-proxy.md). Statements are unnamed (parsed,
//! bound and run in one message each, nothing kept on the connection), so the connection is
//! the same after a call as before it and a transaction-mode pooler (PgBouncer, RDS Proxy) can
//! hand the server connection to anyone once the call commits. A write
//! called with an idempotency key records its rows in the same statement; the same key again
//! fails on `idempotency_pkey`, writes nothing and gets the recorded rows back. Postgres
//! renders every row (`row_to_json`), so numeric, timestamp and uuid values arrive exactly as
//! stored.

use deadpool_postgres::{Object, Pool};
use futures_util::TryStreamExt;
use parley_core::db::retry_once_if_stale;
use parley_core::db::{DbError, Statements};
use parley_core::jwt::VerifiedClaims;
use parley_core::telemetry::traces;
use parley_wire::IdempotencyKey;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tracing::Instrument;

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

impl ExecError {
    /// A span's `error.type`: the kind, never the message (a raised one may quote values).
    pub fn span_kind(&self) -> &'static str {
        match self {
            ExecError::Timeout { .. } => "timeout",
            ExecError::Cancelled { .. } => "cancelled",
            ExecError::Unavailable => "unavailable",
            ExecError::ReadOnly => "read_only",
            ExecError::PermissionDenied => "permission_denied",
            ExecError::Replay => "replay",
            ExecError::Raised(_) => "raised",
            ExecError::Query(_) => "query",
        }
    }
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

/// Opens a call's transaction (migration 0023): time limit, `application_name`, the tool's
/// settings, `parley.caller`, role; each for this transaction only.
pub const BEGIN_CALL: &str = "SELECT parley.begin_call($1, $2, $3, $4, $5)";
const BEGIN_CALL_TYPES: [Type; 5] = [
    Type::INT4,
    Type::TEXT,
    Type::TEXT_ARRAY,
    Type::TEXT,
    Type::TEXT,
];

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

/// Every statement a call of `tool` may send, with its placeholders' types: its own and, for
/// a write, the one that records its idempotency key. What start-up checks.
pub fn statements(tool: &ToolSpec) -> Vec<(&str, Vec<Type>)> {
    let mut statements = vec![(tool.wrapped_sql.as_str(), tool.placeholder_types.clone())];
    if let Some(keyed) = &tool.keyed_sql {
        statements.push((keyed.as_str(), keyed_types(tool)));
    }
    statements
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
    // A read's statement wraps the declared one in a CTE: a SELECT whatever it starts with. A
    // write's may insert, update or delete: left unnamed rather than guessed.
    let operation = (!tool.writes).then_some("SELECT");
    let span = traces::sql_span(&tool.wrapped_sql, operation);
    let outcome = run_statement(
        (pool, statements),
        tool,
        args,
        user,
        key,
        marker,
        (row_limit, max_bytes),
    )
    .instrument(span.clone())
    .await;
    traces::sql_ended(
        &span,
        outcome
            .as_ref()
            .map(|out| out.row_count as u64)
            .map_err(ExecError::span_kind),
    );
    outcome
}

/// [`run_capped`]'s work, in its span.
async fn run_statement(
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
        caller: caller_json(user),
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
/// false)`, a session advisory lock), undone inside the call's transaction by
/// `parley.end_call()`, so nothing of it reaches the server connection a pooler hands on at
/// COMMIT. (`DISCARD ALL` cannot run in a transaction.) Deferred constraints are checked
/// first, while the tool's role and `parley.caller` still hold.
pub const END_CALL: &str = "SELECT parley.end_call()";

/// After a failed call: a session advisory lock taken before the failure survives the
/// rollback (settings do not), so it is released on the connection that took it.
const UNLOCK_AFTER_FAILURE: &str = "SELECT parley.release_session_locks()";

/// The statement that opens a call's transaction: `BEGIN` with the access mode. `marker`
/// (see [`Call`]) goes in a comment, shown while it runs.
pub fn begin_sql(read_write: bool, marker: Option<Marker<'_>>) -> String {
    let begin = if read_write {
        "BEGIN READ WRITE"
    } else {
        "BEGIN READ ONLY"
    };
    match marker {
        Some(marker) => format!("{} {begin}", marker.comment()),
        None => begin.to_owned(),
    }
}

/// The arguments of [`BEGIN_CALL`] for a call of `tool`, without the caller.
#[derive(Debug, Clone, PartialEq)]
pub struct CallSettings {
    pub timeout_ms: i32,
    /// `application_name` for the transaction (pg_stat_activity, the log's `%a`); made before
    /// the tool's own settings, so a tool that sets it keeps its value.
    pub application_name: Option<String>,
    /// Name, value, name, value...
    pub settings: Vec<String>,
    pub role: Option<String>,
}

impl CallSettings {
    pub fn new(tool: &ToolSpec, marker: Option<Marker<'_>>) -> Self {
        let mut settings = Vec::with_capacity(2 * tool.settings.len() + 2);
        // Tools with nullable filters are planned per call (see `ToolSpec::custom_plans`): at
        // 1M rows a generic plan made a search with one optional filter given 345 ms instead
        // of 23 ms, while planning a primary-key lookup every time costs more than the lookup.
        // The others leave the choice to Postgres, which after five calls on a connection uses
        // the cached generic plan when it is not costlier than planning each call.
        if tool.custom_plans {
            settings.extend(["plan_cache_mode".to_owned(), "force_custom_plan".to_owned()]);
        }
        // Set by the login role, as the tools file's author tried them.
        for (name, value) in &tool.settings {
            settings.extend([name.clone(), value.clone()]);
        }
        CallSettings {
            timeout_ms: i32::try_from(tool.timeout.as_millis()).unwrap_or(i32::MAX),
            application_name: marker.map(|m| m.application_name()),
            settings,
            role: tool.role.clone(),
        }
    }

    /// [`BEGIN_CALL`]'s parameters with their types, the caller's claims (JSON text) given.
    pub fn params<'a>(&'a self, caller: &'a Option<String>) -> [(&'a (dyn ToSql + Sync), Type); 5] {
        let [t0, t1, t2, t3, t4] = BEGIN_CALL_TYPES;
        [
            (&self.timeout_ms, t0),
            (&self.application_name, t1),
            (&self.settings, t2),
            (caller, t3),
            (&self.role, t4),
        ]
    }
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
    let mut params = statement_params(tool, args, &call.fetch);
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
    let begin = begin_sql(tool.writes, Some(call.marker));
    let settings = CallSettings::new(tool, Some(call.marker));
    transaction(client, (&begin, &settings), call, rows).await
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
    let begin = begin_sql(false, Some(call.marker));
    let settings = CallSettings::new(tool, Some(call.marker));
    transaction(client, (&begin, &settings), call, read).await
}

/// Runs `work` inside the call's transaction, every message pipelined: all go out before the
/// first answer comes back. If a statement fails the transaction is aborted, the clean-up
/// fails with it (a rollback undoes settings anyway) and COMMIT only rolls it back; then, and
/// only then, one more message releases a session advisory lock the failed statement may have
/// taken.
async fn transaction<T>(
    client: &Object,
    (begin, settings): (&str, &CallSettings),
    call: &Call<'_>,
    work: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, tokio_postgres::Error> {
    let params = settings.params(&call.caller);
    let configured = async {
        match call.statements {
            Statements::Unnamed => client.execute_typed(BEGIN_CALL, &params).await.map(drop),
            Statements::Cached => {
                let statement = client
                    .prepare_typed_cached(BEGIN_CALL, &BEGIN_CALL_TYPES)
                    .await?;
                let values: Vec<_> = params.iter().map(|(value, _)| *value).collect();
                client.execute(&statement, &values).await.map(drop)
            }
        }
    };
    pipelined(client, begin, configured, work).await
}

/// [`transaction`]'s messages, whichever way `configured` sends `parley.begin_call`.
async fn pipelined<T>(
    client: &tokio_postgres::Client,
    begin: &str,
    configured: impl Future<Output = Result<(), tokio_postgres::Error>>,
    work: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, tokio_postgres::Error> {
    let (begun, configured, output, ended, committed) = tokio::join!(
        client.batch_execute(begin),
        configured,
        work,
        client.batch_execute(END_CALL),
        client.batch_execute("COMMIT"),
    );
    let outcome = (|| {
        begun?;
        configured?;
        let output = output?;
        ended?;
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

/// The values of `tool`'s statement, in placeholder order: each parameter's, then the rows to
/// fetch (the last placeholder, `placeholder_types` ends with its INT8).
fn statement_params<'a>(
    tool: &ToolSpec,
    args: &'a [SqlValue],
    fetch: &'a i64,
) -> Vec<&'a (dyn ToSql + Sync)> {
    let mut params: Vec<&(dyn ToSql + Sync)> = tool
        .placeholder_params
        .iter()
        .map(|&i| args[i].as_sql())
        .collect();
    params.push(fetch);
    params
}

/// The verified claims as JSON text for `parley.caller`; `None` for the service.
fn caller_json(user: Option<&VerifiedClaims>) -> Option<String> {
    user.map(|u| serde_json::Value::Object(u.claims.clone()).to_string())
}

/// `sql`, a read-only variant of `tool`'s statement (its `wrapped_sql`, or a branch of it
/// wrapped the same way, with the same placeholders), run on `client` in a call's transaction
/// for `user` (`None`: the service) with values the engine bound (`crate::call::bind`, the
/// embeddings filled in): `parley eval` and the bench measure a tool's SQL exactly as calls
/// run it. Always `READ ONLY`; the rows come back whole, at most `row_limit` of them, without
/// the byte cap a call's answer has.
pub async fn read_variant(
    client: &tokio_postgres::Client,
    tool: &ToolSpec,
    sql: &str,
    args: &[SqlValue],
    user: Option<&VerifiedClaims>,
    row_limit: u64,
) -> Result<Vec<String>, tokio_postgres::Error> {
    // One more than is kept, as a call fetches to tell a truncated answer.
    let fetch = i64::try_from(row_limit.saturating_add(1)).unwrap_or(i64::MAX);
    let params: Vec<(&(dyn ToSql + Sync), Type)> = statement_params(tool, args, &fetch)
        .into_iter()
        .zip(tool.placeholder_types.iter().cloned())
        .collect();
    let caller = caller_json(user);
    let settings = CallSettings::new(tool, None);
    let settings = settings.params(&caller);
    let keep = usize::try_from(row_limit).unwrap_or(usize::MAX);
    let rows = async {
        let rows = client.query_typed(sql, &params).await?;
        Ok(rows
            .iter()
            .take(keep)
            .map(|row| row.get::<_, String>(0))
            .collect())
    };
    pipelined(
        client,
        &begin_sql(false, None),
        async { client.execute_typed(BEGIN_CALL, &settings).await.map(drop) },
        rows,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_sets_its_plan_mode_and_settings_by_function_not_by_statement() {
        let raw = toml::from_str(
            "name = \"t\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n\
             role = \"reader\"\nsettings = { \"hnsw.ef_search\" = 100 }\n",
        )
        .unwrap();
        let tools =
            super::super::spec::parse_tools(vec![raw], crate::output::Limits::default()).unwrap();
        assert_eq!(begin_sql(false, None), "BEGIN READ ONLY");
        assert_eq!(
            CallSettings::new(&tools[0], None),
            CallSettings {
                timeout_ms: 5000,
                application_name: None,
                settings: vec!["hnsw.ef_search".into(), "100".into()],
                role: Some("reader".into()),
            }
        );
    }
}
