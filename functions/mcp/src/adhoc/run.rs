//! One ad-hoc statement on a connection of the SQL role: the transaction around it, the
//! statement as sent, and its errors as the model should read them.
//!
//! Every call is one pipelined round trip: `BEGIN READ ONLY` with a local statement timeout and
//! `search_path`, the statement through the extended query protocol (which refuses more than
//! one command), `ROLLBACK` (never `COMMIT`), then `DISCARD ALL`, which drops whatever a
//! statement can leave on the session past its transaction (advisory locks, prepared
//! statements, settings, `LISTEN`s). A connection whose clean-up failed is closed, not pooled.

use std::borrow::Cow;
use std::collections::HashSet;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};
use futures_util::TryStreamExt;
use parley_core::db::DbError;
use serde::Deserializer;
use serde::de::{MapAccess, Visitor};
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

impl Session<'_> {
    fn begin(&self) -> String {
        let path = self
            .schemas
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let ms = self.timeout.as_millis();
        // idle_in_transaction: a connection lost mid-pipeline must not hold a snapshot long.
        format!(
            "{} BEGIN READ ONLY; SET LOCAL statement_timeout = {ms}; \
             SET LOCAL idle_in_transaction_session_timeout = {}; \
             SET LOCAL search_path = {path}; \
             SET LOCAL application_name = '{}'",
            self.marker.comment(),
            ms + 1000,
            self.marker.application_name(),
        )
    }
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

/// Runs `statement`, whose rows are each one JSON text in the first column, and renders them
/// with the caps. `check`, when given, goes first in the same transaction: if it fails, the
/// transaction is aborted, `statement` cannot run, and the error reported is the check's.
pub async fn rows(
    pool: &Pool,
    session: &Session<'_>,
    check: Option<&Statement<'_>>,
    statement: &Statement<'_>,
    row_limit: u64,
    max_bytes: u64,
) -> Result<ToolOutput, SqlError> {
    let client = connection(pool).await?;
    let started = std::time::Instant::now();
    let checked = async {
        match check {
            Some(check) => client
                .query_typed(&check.text, &check.params)
                .await
                .map(drop),
            None => Ok(()),
        }
    };
    let read = async {
        let stream = client
            .query_typed_raw(&statement.text, statement.params.iter().cloned())
            .await?;
        let mut stream = std::pin::pin!(stream);
        let mut out = Render::new(row_limit, max_bytes);
        // Every row has the same columns, so the first one tells whether two share a name
        // (`SELECT 1 AS a, 2 AS a`, `SELECT min(x), min(y)`): objects with a key twice parse
        // differently in every client (most keep the last value), so those rows are rebuilt
        // with the later columns renamed.
        let mut renamed: Option<Option<Vec<String>>> = None;
        while let Some(row) = stream.try_next().await? {
            // The wrapper makes every value a JSON text; anything else is shown as null
            // rather than trusted.
            let text = row.try_get::<_, Option<&str>>(0).ok().flatten();
            let text = text.unwrap_or("null");
            let names = renamed.get_or_insert_with(|| distinct_names(text));
            let rebuilt = names.as_deref().and_then(|names| rename_keys(text, names));
            if !out.push(rebuilt.as_deref().unwrap_or(text)) {
                break;
            }
        }
        Ok::<_, tokio_postgres::Error>(out.finish())
    };
    // Both sent before either answer is read; the check's error is the one that explains.
    let work = async {
        let (checked, read) = tokio::join!(checked, read);
        Ok(checked.map(|()| read))
    };
    let Some((outcome, clean)) = transaction(&client, session, work).await else {
        return Err(overdue(client, session));
    };
    release(client, clean);
    match outcome {
        Err(e) => Err(failure(e, session, statement, started)),
        Ok(Err(e)) => Err(failure(e, session, check.unwrap_or(statement), started)),
        Ok(Ok(read)) => read.map_err(|e| failure(e, session, statement, started)),
    }
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
    let work = async {
        let rows = client
            .query_typed(&statement.text, &statement.params)
            .await?;
        Ok(rows
            .iter()
            .map(|r| r.get::<_, Option<String>>(0).unwrap_or_default())
            .collect())
    };
    let Some((outcome, clean)) = transaction(&client, session, work).await else {
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

/// The pipeline around `work`. Postgres answers in order, so `work`'s statement runs inside
/// the transaction `begin` opened, and the clean-up runs whatever `work` did. The flag is
/// false when the clean-up failed; `None` when no answer came within the statement timeout
/// and [`DEADLINE_GRACE`].
async fn transaction<T>(
    client: &Object,
    session: &Session<'_>,
    work: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Option<(Result<T, tokio_postgres::Error>, bool)> {
    let begin = session.begin();
    let pipeline = async {
        tokio::join!(
            client.batch_execute(&begin),
            work,
            client.batch_execute("ROLLBACK"),
            client.batch_execute("DISCARD ALL"),
        )
    };
    let (begun, output, rolled_back, discarded) =
        tokio::time::timeout(session.timeout + DEADLINE_GRACE, pipeline)
            .await
            .ok()?;
    let clean = rolled_back.is_ok() && discarded.is_ok();
    Some((begun.and(output), clean))
}

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

/// Back to the pool, unless the clean-up failed: then whatever the statement left on the
/// session may still be there, and the connection is closed instead.
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
