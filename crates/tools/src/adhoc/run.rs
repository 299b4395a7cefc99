//! One ad-hoc statement on a connection of the SQL role: the transaction around it, the
//! statement as sent, and its errors as the model should read them.
//!
//! A call is one pipelined round trip: `BEGIN READ ONLY`, `parley.begin_sql(...)` (migration
//! 0024: the statement timeout, `search_path` and `application_name`, each local to the
//! transaction), the statement through the extended query protocol (which refuses more than
//! one command), then `ROLLBACK` (never `COMMIT`), which undoes every setting made in the
//! transaction. When the guard checks plans, the check's answer is read first, so a call is
//! two round trips. Nothing is sent that RDS Proxy documents as pinning a session (`SET`,
//! `RESET`, `DISCARD`, `set_config`, SQL-level prepared statements, cursors, session advisory
//! locks): what a statement could still leave on the session (session advisory locks, SQL
//! `PREPARE`, `LISTEN`, holdable cursors) the guard refuses before it is sent
//! (`guard::Guard::screen`). A connection whose `ROLLBACK` failed is closed, not pooled.

use std::borrow::Cow;
use std::collections::HashSet;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use futures_util::TryStreamExt;
use parley_core::db::DbError;
use serde::Deserializer;
use serde::de::{MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use crate::audit::Marker;
use crate::output::{Render, ToolOutput};

/// What a statement failed with, worded for the model that wrote it.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    #[error("{0}")]
    Refused(String),
    #[error(
        "the statement ran longer than {ms} ms and was cancelled; add filters or a LIMIT, join \
         fewer rows, or look at its plan with explain_sql"
    )]
    Timeout { ms: u128 },
    #[error("{}", .0)]
    Postgres(Box<PgFailure>),
    /// Something the call named that the role cannot see (a table, a schema).
    #[error("{0}")]
    NotFound(String),
    /// Cancelled before its time was up: by another session (`pg_cancel_backend`), an
    /// administrator, or the statement itself; not by our timeout.
    #[error(
        "the statement was cancelled after {ms} ms, before its {limit_ms} ms limit, by another \
         session or an administrator (pg_cancel_backend), not for taking too long; nothing was \
         changed, and it may be run again"
    )]
    Cancelled { ms: u128, limit_ms: u128 },
    #[error("the database is unavailable right now; try again in a few seconds")]
    Unavailable,
}

impl SqlError {
    /// Refused by Postgres' rules (privileges, read-only) or ours (size, bytes), as opposed to
    /// a mistake in the statement.
    pub fn is_refusal(&self) -> bool {
        match self {
            SqlError::Refused(_) => true,
            SqlError::Postgres(f) => matches!(
                f.code.as_str(),
                // insufficient_privilege, read_only_sql_transaction, feature_not_supported
                // (e.g. a function that cannot run in a read-only transaction)
                "42501" | "25006" | "0A000"
            ),
            _ => false,
        }
    }
}

/// Postgres' own report on the statement: message, SQLSTATE, where in the statement, and its
/// hint, but never the server's internals (source file, line, routine, or PL/pgSQL context).
#[derive(Debug)]
pub struct PgFailure {
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
    /// 1-based character position in the statement as the caller wrote it.
    pub position: Option<usize>,
    /// `(line, column)` of `position`, both 1-based.
    pub line_column: Option<(usize, usize)>,
}

impl std::fmt::Display for PgFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ERROR {}: {}", self.code, self.message)?;
        if let (Some(position), Some((line, column))) = (self.position, self.line_column) {
            write!(
                f,
                " (at character {position}: line {line}, column {column})"
            )?;
        }
        if let Some(detail) = &self.detail {
            write!(f, "\nDETAIL: {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\nHINT: {hint}")?;
        }
        Ok(())
    }
}

/// How a statement runs: where, for how long, with what marker.
pub struct Session<'a> {
    pub schemas: &'a [String],
    pub timeout: Duration,
    /// Names the call in a comment in front of every statement and in `application_name`.
    pub marker: Marker<'a>,
}

/// The call's settings as `parley.begin_sql` (migration 0024) takes them.
struct Settings {
    text: String,
    timeout_ms: i32,
    idle_ms: i32,
    schemas: Vec<String>,
    application_name: String,
}

impl Session<'_> {
    fn settings(&self) -> Settings {
        let ms = i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX);
        Settings {
            // The comment names the call to a DBA reading the server's log.
            text: format!(
                "{} SELECT parley.begin_sql($1, $2, $3, $4)",
                self.marker.comment()
            ),
            timeout_ms: ms,
            // A connection lost mid-pipeline, or a call between its two round trips, must not
            // hold a snapshot long.
            idle_ms: ms.saturating_add(1000),
            schemas: self.schemas.to_vec(),
            application_name: self.marker.application_name(),
        }
    }
}

/// `BEGIN READ ONLY` and the call's settings, both sent when this is first polled, in order,
/// so that whatever is polled after it runs inside the transaction.
async fn begin(client: &Object, settings: &Settings) -> Result<(), tokio_postgres::Error> {
    let params: [(&(dyn ToSql + Sync), Type); 4] = [
        (&settings.timeout_ms, Type::INT4),
        (&settings.idle_ms, Type::INT4),
        (&settings.schemas, Type::TEXT_ARRAY),
        (&settings.application_name, Type::TEXT),
    ];
    let (begun, set) = tokio::join!(
        client.batch_execute("BEGIN READ ONLY"),
        client.query_typed(&settings.text, &params),
    );
    begun.and(set.map(drop))
}

/// A statement as sent, and where the caller's text sits in it.
pub struct Statement<'a> {
    pub text: String,
    pub params: Vec<(&'a (dyn ToSql + Sync), Type)>,
    /// What the caller wrote ("" for Parley's own catalog queries).
    pub original: &'a str,
    /// Characters in `text` before `original` starts, so positions in errors point into what
    /// the caller wrote.
    pub offset: usize,
}

/// What must hold before the statement runs, checked in its transaction.
pub enum Check<'a> {
    /// Sent before it in the same pipeline; if it fails, the transaction is aborted, the
    /// statement cannot run, and the error reported is the check's. Its rows are not read.
    Pipelined(&'a Statement<'a>),
    /// Sent and answered first: its one JSON value (a plan) must pass the judge, else the
    /// statement is never sent. A round trip more than [`Check::Pipelined`].
    Judged(&'a Statement<'a>, &'a Judge<'a>),
}

/// Decides on a plan; `Err` is the refusal the model reads.
pub type Judge<'a> = dyn Fn(&Value) -> Result<(), SqlError> + Sync + 'a;

/// Runs `statement`, whose rows are each one JSON text in the first column, after `check`, and
/// renders them with the caps.
pub async fn rows(
    pool: &Pool,
    session: &Session<'_>,
    check: Option<Check<'_>>,
    statement: &Statement<'_>,
    row_limit: u64,
    max_bytes: u64,
) -> Result<ToolOutput, SqlError> {
    let client = connection(pool).await?;
    let started = std::time::Instant::now();
    let settings = session.settings();
    let fail = |e, s: &Statement<'_>| failure(e, session, s, started);
    let rollback = || client.batch_execute("ROLLBACK");
    let call = async {
        match check {
            None => {
                let (begun, read, rolled_back) = tokio::join!(
                    begin(&client, &settings),
                    read(&client, statement, row_limit, max_bytes),
                    rollback(),
                );
                let outcome = begun.and(read).map_err(|e| fail(e, statement));
                (outcome, rolled_back.is_ok())
            }
            Some(Check::Pipelined(check)) => {
                // All sent before any answer is read; the first error is the one that explains.
                let (begun, checked, read, rolled_back) = tokio::join!(
                    begin(&client, &settings),
                    client.query_typed(&check.text, &check.params),
                    read(&client, statement, row_limit, max_bytes),
                    rollback(),
                );
                let outcome = match (begun, checked) {
                    (Err(e), _) => Err(fail(e, statement)),
                    (Ok(()), Err(e)) => Err(fail(e, check)),
                    (Ok(()), Ok(_)) => read.map_err(|e| fail(e, statement)),
                };
                (outcome, rolled_back.is_ok())
            }
            Some(Check::Judged(check, judge)) => {
                let (begun, planned) = tokio::join!(
                    begin(&client, &settings),
                    client.query_typed(&check.text, &check.params),
                );
                let verdict = match (begun, planned) {
                    (Err(e), _) => Err(fail(e, statement)),
                    (Ok(()), Err(e)) => Err(fail(e, check)),
                    (Ok(()), Ok(rows)) => {
                        let plan: Option<Value> = rows.first().and_then(|r| r.try_get(0).ok());
                        judge(&plan.unwrap_or(Value::Null))
                    }
                };
                if let Err(refused) = verdict {
                    return (Err(refused), rollback().await.is_ok());
                }
                let (read, rolled_back) =
                    tokio::join!(read(&client, statement, row_limit, max_bytes), rollback(),);
                (read.map_err(|e| fail(e, statement)), rolled_back.is_ok())
            }
        }
    };
    let Ok((outcome, clean)) = tokio::time::timeout(session.timeout + DEADLINE_GRACE, call).await
    else {
        return Err(overdue(client, session));
    };
    release(client, clean);
    outcome
}

/// The statement's rows rendered with the caps.
async fn read(
    client: &Object,
    statement: &Statement<'_>,
    row_limit: u64,
    max_bytes: u64,
) -> Result<ToolOutput, tokio_postgres::Error> {
    let stream = client
        .query_typed_raw(&statement.text, statement.params.iter().cloned())
        .await?;
    let mut stream = std::pin::pin!(stream);
    let mut out = Render::new(row_limit, max_bytes);
    // Every row has the same columns, so the first one tells whether two share a name
    // (`SELECT 1 AS a, 2 AS a`, `SELECT min(x), min(y)`): objects with a key twice parse
    // differently in every client (most keep the last value), so those rows are rebuilt with
    // the later columns renamed.
    let mut renamed: Option<Option<Vec<String>>> = None;
    while let Some(row) = stream.try_next().await? {
        // The wrapper makes every value a JSON text; anything else is shown as null rather
        // than trusted.
        let text = row.try_get::<_, Option<&str>>(0).ok().flatten();
        let text = text.unwrap_or("null");
        let names = renamed.get_or_insert_with(|| distinct_names(text));
        let rebuilt = names.as_deref().and_then(|names| rename_keys(text, names));
        if !out.push(rebuilt.as_deref().unwrap_or(text)) {
            break;
        }
    }
    Ok(out.finish())
}

/// One row object's members in order, values as the exact JSON text Postgres wrote.
fn members(row: &str) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    struct Members;
    impl<'de> Visitor<'de> for Members {
        type Value = Vec<(Cow<'de, str>, &'de RawValue)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut members = Vec::new();
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                members.push((key, map.next_value::<&'de RawValue>()?));
            }
            Ok(members)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(row);
    deserializer.deserialize_map(Members).ok()
}

/// The column names of a row whose columns do not all have distinct names, each made
/// distinct: the first keeps its name, a later one becomes `name_2`, `name_3`... (a suffix no
/// other column has). `None` when the names are distinct already.
fn distinct_names(row: &str) -> Option<Vec<String>> {
    let keys: Vec<String> = members(row)?
        .into_iter()
        .map(|(k, _)| k.into_owned())
        .collect();
    let taken: HashSet<&str> = keys.iter().map(String::as_str).collect();
    if taken.len() == keys.len() {
        return None;
    }
    let mut used: HashSet<String> = HashSet::new();
    let names = keys
        .iter()
        .map(|key| {
            if used.insert(key.clone()) {
                return key.clone();
            }
            let name = (2..)
                .map(|n| format!("{key}_{n}"))
                .find(|name| !taken.contains(name.as_str()) && !used.contains(name))
                .unwrap_or_default();
            used.insert(name.clone());
            name
        })
        .collect();
    Some(names)
}

/// `row` with its keys replaced by `names`, values untouched; `None` if it does not have as
/// many members.
fn rename_keys(row: &str, names: &[String]) -> Option<String> {
    let members = members(row)?;
    if members.len() != names.len() {
        return None;
    }
    let mut out = String::with_capacity(row.len() + 8 * names.len());
    out.push('{');
    for (i, ((_, value), name)) in members.iter().zip(names).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(name).ok()?);
        out.push(':');
        out.push_str(value.get());
    }
    out.push('}');
    Some(out)
}

/// Runs `statement` and returns its rows' first columns as text: for EXPLAIN and the catalog
/// queries, whose results are small and fixed in shape.
pub async fn texts(
    pool: &Pool,
    session: &Session<'_>,
    statement: &Statement<'_>,
) -> Result<Vec<String>, SqlError> {
    let client = connection(pool).await?;
    let started = std::time::Instant::now();
    let settings = session.settings();
    let call = async {
        let (begun, rows, rolled_back) = tokio::join!(
            begin(&client, &settings),
            client.query_typed(&statement.text, &statement.params),
            client.batch_execute("ROLLBACK"),
        );
        let outcome = begun.and(rows).map(|rows| {
            rows.iter()
                .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
                .collect()
        });
        (outcome, rolled_back.is_ok())
    };
    let Ok((outcome, clean)) = tokio::time::timeout(session.timeout + DEADLINE_GRACE, call).await
    else {
        return Err(overdue(client, session));
    };
    release(client, clean);
    outcome.map_err(|e| failure(e, session, statement, started))
}

async fn connection(pool: &Pool) -> Result<Object, SqlError> {
    pool.get().await.map_err(|e| {
        tracing::warn!(error = %DbError::from(e), "no connection for the SQL tools");
        SqlError::Unavailable
    })
}

/// How long past its `statement_timeout` a call waits for the server's answer. The timeout
/// stops a statement at its next interrupt check, but Postgres builds an error message without
/// one: an error quoting a 450 MB value took 12 s after the value was built. A call past
/// this closes its connection instead (the backend stops when it next writes to it).
pub const DEADLINE_GRACE: Duration = Duration::from_secs(2);

/// A call that outlived its deadline: its connection, mid-answer, is closed, not pooled.
fn overdue(client: Object, session: &Session<'_>) -> SqlError {
    tracing::warn!(
        "an SQL tool call got no answer within its timeout and {} s; connection closed",
        DEADLINE_GRACE.as_secs()
    );
    drop(Object::take(client));
    SqlError::Timeout {
        ms: session.timeout.as_millis(),
    }
}

/// Back to the pool, unless the `ROLLBACK` failed: then the transaction, and whatever the
/// statement set in it, may still be open, and the connection is closed instead.
fn release(client: Object, clean: bool) {
    if !clean {
        drop(Object::take(client));
    }
}

/// `started`: just before the call's first message went out, so the time since bounds the
/// statement's own.
fn failure(
    e: tokio_postgres::Error,
    session: &Session<'_>,
    statement: &Statement<'_>,
    started: std::time::Instant,
) -> SqlError {
    let (original, offset) = (statement.original, statement.offset);
    if parley_core::db::is_connection_error(&e) {
        tracing::warn!(error = %parley_core::db::pg_message(&e), "SQL tools lost their connection");
        return SqlError::Unavailable;
    }
    let Some(db) = e.as_db_error() else {
        return SqlError::Refused(format!("the statement could not be sent: {e}"));
    };
    if *db.code() == SqlState::QUERY_CANCELED {
        // Our `statement_timeout` and a `pg_cancel_backend` share this SQLSTATE, and the
        // message that tells them apart is in the server's language. The timeout cannot fire
        // before the statement has run that long, and the statement started after `started`:
        // sooner than that, someone else cancelled it.
        let elapsed = started.elapsed();
        if elapsed < session.timeout {
            return SqlError::Cancelled {
                ms: elapsed.as_millis(),
                limit_ms: session.timeout.as_millis(),
            };
        }
        return SqlError::Timeout {
            ms: session.timeout.as_millis(),
        };
    }
    let position = match db.position() {
        Some(tokio_postgres::error::ErrorPosition::Original(p)) => (*p as usize)
            .checked_sub(offset)
            .filter(|p| *p >= 1 && *p <= original.chars().count()),
        _ => None,
    };
    SqlError::Postgres(Box::new(PgFailure {
        code: db.code().code().to_owned(),
        message: cut(db.message()),
        detail: db.detail().map(cut),
        hint: db.hint().map(cut),
        position,
        line_column: position.map(|p| line_column(original, p)),
    }))
}

/// Most characters of a message, detail or hint passed on: Postgres quotes values in some
/// messages, and a value can be hundreds of megabytes.
const MESSAGE_CHARS: usize = 2000;

fn cut(text: &str) -> String {
    match text.char_indices().nth(MESSAGE_CHARS) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}… [cut]", &text[..end]),
    }
}

/// Line and column (1-based) of the 1-based character `position` in `text`.
fn line_column(text: &str, position: usize) -> (usize, usize) {
    let before: Vec<char> = text.chars().take(position - 1).collect();
    let line = before.iter().filter(|&&c| c == '\n').count() + 1;
    let column = before.iter().rev().take_while(|&&c| c != '\n').count() + 1;
    (line, column)
}

/// The caller's statement as it may be sent: trimmed of whitespace and one trailing `;`
/// (models add it), within the size limit, without NUL (which Postgres cannot take in text).
pub fn accept(sql: &str, max_bytes: u64) -> Result<&str, SqlError> {
    if sql.len() as u64 > max_bytes {
        return Err(SqlError::Refused(format!(
            "the statement is {} bytes; at most {max_bytes} are accepted",
            sql.len()
        )));
    }
    if sql.contains('\0') {
        return Err(SqlError::Refused(
            "the statement contains a NUL character, which SQL text cannot hold".into(),
        ));
    }
    let trimmed = sql.trim();
    let trimmed = trimmed.strip_suffix(';').unwrap_or(trimmed).trim_end();
    if trimmed.is_empty() {
        return Err(SqlError::Refused("the statement is empty".into()));
    }
    Ok(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_become_lines_and_columns() {
        assert_eq!(line_column("SELECT x", 8), (1, 8));
        assert_eq!(line_column("SELECT\n  x", 10), (2, 3));
    }

    #[test]
    fn later_columns_of_a_name_already_taken_are_renamed_values_untouched() {
        let row = r#"{"a":1.10,"a":"x","a_2":null,"\u0061":[1]}"#;
        let names = distinct_names(row).unwrap();
        assert_eq!(names, ["a", "a_3", "a_2", "a_4"]);
        assert_eq!(
            rename_keys(row, &names).unwrap(),
            r#"{"a":1.10,"a_3":"x","a_2":null,"a_4":[1]}"#
        );
        assert_eq!(distinct_names(r#"{"a":1,"b":{"b":1,"b":2}}"#), None);
        assert_eq!(distinct_names("null"), None);
    }

    #[test]
    fn one_trailing_semicolon_and_whitespace_go() {
        assert_eq!(accept("  SELECT 1 ;\n", 100).unwrap(), "SELECT 1");
        assert_eq!(accept("SELECT 1;;", 100).unwrap(), "SELECT 1;");
    }

    #[test]
    fn empty_large_and_nul_statements_are_refused() {
        assert!(accept(" ; ", 100).is_err());
        assert!(accept(&"x".repeat(101), 100).is_err());
        assert!(accept("SELECT '\0'", 100).is_err());
    }
}
