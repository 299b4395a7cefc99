//! `parley feedback export`: the feedback people gave on answers, as JSONL that `parley eval`
//! takes as questions once a person has labelled them. One line per feedback: the question
//! (`q`), the empty labels each eval reads (`pages` for the documents eval, `tables` and
//! `values` for the catalog eval, `split`), an `id`, and everything else in one nested
//! `feedback` object both evals accept and ignore: the rating, comment, answer, model, tool
//! calls (run_sql's SQL as `sql`), sources, conversation, message, owner and times
//! (docs/feedback.md). Reads `chat.feedback`, `chat.messages` and `chat.turn_usage`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use parley_core::config::Env;
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{Json, ToSql, Type};

use super::audit::Since;
use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Write the feedback as JSONL, one line per rated answer, oldest first, for a person to
    /// label and `parley eval` (documents) or `parley eval catalog` to score.
    Export(ExportArgs),
}

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Each line: {\"q\", \"pages\": [], \"tables\": [], \"values\": [], \"split\": null, \"id\",
\"feedback\": {rating, comment, answer, error, model, tool_calls: [{name, arguments, is_error,
sql?, error?}], sources: [{id, title, uri, cited}], conversation_id, seq, owner, given_at,
answered_at}}. Fill in `pages` (documents eval) or `tables` (catalog eval), then run
`parley eval FILE.jsonl` or `parley eval catalog --questions FILE.jsonl`, with
--skip-unlabelled to leave out the lines labelled for the other one. docs/feedback.md.")]
pub struct ExportArgs {
    /// Only feedback given or changed since then: a duration back from now (90s, 30m, 2h, 7d),
    /// an RFC 3339 time (2026-11-24T10:00:00Z) or a date (2026-11-24, from midnight UTC).
    #[arg(long, value_name = "WHEN", value_parser = Since::parse)]
    pub since: Option<Since>,
    /// Only feedback given or changed before then (same forms as --since).
    #[arg(long, value_name = "WHEN", value_parser = Since::parse)]
    pub until: Option<Since>,
    /// Only thumbs up or only thumbs down.
    #[arg(long, value_name = "RATING", value_parser = ["up", "down"])]
    pub rating: Option<String>,
    /// Write to this file (replaced whole once every line is written) instead of stdout.
    #[arg(long, value_name = "FILE.jsonl")]
    pub out: Option<PathBuf>,
}

/// Why feedback could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum FeedbackError {
    #[error("this database has no chat.feedback table; run `parley migrate` first")]
    NotMigrated,
    #[error("--until ({until}) is not after --since ({since}): nothing could match")]
    EmptyPeriod {
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    },
    #[error("reading the feedback failed: {0}")]
    Query(#[from] tokio_postgres::Error),
    #[error("a stored answer could not be read: {0}")]
    Unreadable(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl FeedbackError {
    /// A mistake in the arguments or settings (exit code 2), not a failure.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            FeedbackError::EmptyPeriod { .. } | FeedbackError::NotMigrated
        )
    }
}

/// Lines read per round trip: memory stays bounded whatever the export's size.
const PAGE: i64 = 500;

/// The feedback after the keyset `($1, $2, $3)`, in order, with its answer, question and
/// model. The tool calls come without their outputs (rows may be megabytes; a failed call's
/// output is its error, kept). Every value is a parameter; `$4`..`$8` filter.
const READ: &str = "
SELECT f.conversation_id::text AS conversation_id, f.seq, f.owner, f.rating, f.comment, f.created_at, f.updated_at,
       m.content AS answer, m.error, m.created_at AS answered_at, m.sources,
       (SELECT coalesce(jsonb_agg(jsonb_build_object(
                  'name', t -> 'name', 'args', t -> 'args', 'is_error', t -> 'is_error',
                  'output', CASE WHEN (t ->> 'is_error')::boolean THEN t -> 'output' END)
                ORDER BY n), '[]'::jsonb)
          FROM jsonb_array_elements(m.traces) WITH ORDINALITY AS x(t, n)) AS calls,
       q.content AS question, u.model
FROM chat.feedback f
JOIN chat.messages m ON m.conversation_id = f.conversation_id AND m.seq = f.seq
LEFT JOIN LATERAL (
    SELECT content FROM chat.messages q
    WHERE q.conversation_id = f.conversation_id AND q.seq < f.seq AND q.role = 'user'
    ORDER BY q.seq DESC LIMIT 1) q ON true
LEFT JOIN LATERAL (
    SELECT model FROM chat.turn_usage u
    WHERE u.conversation_id = f.conversation_id AND u.seq = f.seq
    ORDER BY u.at DESC LIMIT 1) u ON true
WHERE ($1::timestamptz IS NULL OR (f.updated_at, f.conversation_id, f.seq) > ($1, $2::uuid, $3::int4))
  AND ($4::float8 IS NULL OR f.updated_at >= now() - make_interval(secs => $4))
  AND ($5::timestamptz IS NULL OR f.updated_at >= $5)
  AND ($6::float8 IS NULL OR f.updated_at < now() - make_interval(secs => $6))
  AND ($7::timestamptz IS NULL OR f.updated_at < $7)
  AND ($8::text IS NULL OR f.rating = $8)
ORDER BY f.updated_at, f.conversation_id, f.seq
LIMIT $9";

/// One exported line. Keys come out sorted (serde_json without `preserve_order`).
#[derive(Debug, Serialize)]
struct Line {
    /// The question: the user's message before the answer.
    q: String,
    /// The documents eval's label: the pages or documents that answer `q`.
    pages: Vec<String>,
    /// The catalog eval's labels: the tables that answer `q`, the values it mentions.
    tables: Vec<String>,
    values: Vec<Value>,
    /// Both evals' `dev` / `held-out`, for a person to choose.
    split: Option<String>,
    /// `<conversation_id>/<seq>`: the catalog eval names a question by it.
    id: String,
    feedback: Context,
}

/// What the person saw and said: both evals accept this key and ignore it.
#[derive(Debug, Serialize)]
struct Context {
    rating: String,
    comment: Option<String>,
    answer: String,
    /// The turn's failure (`code: message`), when it failed.
    error: Option<String>,
    /// The model the turn asked (`chat.turn_usage`); null for turns before the ledger.
    model: Option<String>,
    tool_calls: Vec<ToolCall>,
    sources: Vec<SourceRef>,
    conversation_id: String,
    seq: i32,
    owner: String,
    /// When the feedback was last given or changed (RFC 3339, UTC, to the microsecond).
    given_at: String,
    /// When the answer was stored.
    answered_at: String,
}

#[derive(Debug, Serialize)]
struct ToolCall {
    name: String,
    arguments: Value,
    is_error: bool,
    /// The statement of a call whose arguments hold one (`run_sql`, `explain_sql`).
    #[serde(skip_serializing_if = "Option::is_none")]
    sql: Option<String>,
    /// What a failed call answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Value>,
}

#[derive(Debug, Serialize)]
struct SourceRef {
    id: Value,
    title: Value,
    uri: Value,
    cited: bool,
}

/// The filters, ready to bind: the database's clock measures durations back from now.
struct Filter {
    since_ago: Option<f64>,
    since_at: Option<DateTime<Utc>>,
    until_ago: Option<f64>,
    until_at: Option<DateTime<Utc>>,
    rating: Option<String>,
}

impl Filter {
    fn new(args: &ExportArgs) -> Result<Filter, FeedbackError> {
        let ago = |s: Option<Since>| match s {
            Some(Since::Ago(d)) => Some(d.as_secs_f64()),
            _ => None,
        };
        let at = |s: Option<Since>| match s {
            Some(Since::At(t)) => Some(t),
            _ => None,
        };
        let filter = Filter {
            since_ago: ago(args.since),
            since_at: at(args.since),
            until_ago: ago(args.until),
            until_at: at(args.until),
            rating: args.rating.clone(),
        };
        // Two instants, or two durations, can be compared here; a mix depends on the
        // database's clock and is left to the query.
        let empty = match (args.since, args.until) {
            (Some(Since::At(s)), Some(Since::At(u))) => (u <= s).then_some((s, u)),
            (Some(Since::Ago(s)), Some(Since::Ago(u))) => {
                let now = Utc::now();
                let (s, u) = (now - s, now - u);
                (u <= s).then_some((s, u))
            }
            _ => None,
        };
        match empty {
            Some((since, until)) => Err(FeedbackError::EmptyPeriod { since, until }),
            None => Ok(filter),
        }
    }
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let Action::Export(args) = args.action;
    let filter = Filter::new(&args)?;
    crate::db::config_from_env(env)?;
    let db = crate::db::connect(env).await?;
    match &args.out {
        None => {
            let n = export(&db, &filter, out).await?;
            eprintln!("{n} feedback line{} written", plural(n));
        }
        Some(path) => {
            let n = export_to_file(&db, &filter, path).await?;
            writeln!(
                out,
                "{n} feedback line{} written to {}",
                plural(n),
                path.display()
            )?;
        }
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Writes beside `path` and renames over it at the end: a failed export leaves no half file.
async fn export_to_file(db: &Client, filter: &Filter, path: &Path) -> Result<usize, CmdError> {
    let failed = |source| FeedbackError::Write {
        path: path.to_owned(),
        source,
    };
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let file = std::fs::File::create(&partial).map_err(failed)?;
    let mut writer = std::io::BufWriter::new(file);
    let written = export(db, filter, &mut writer).await;
    let n = match written {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    writer.flush().map_err(failed)?;
    drop(writer);
    std::fs::rename(&partial, path).map_err(failed)?;
    Ok(n)
}

/// Every matching feedback as a line on `out`, a page at a time; how many.
async fn export(db: &Client, filter: &Filter, out: &mut Out) -> Result<usize, CmdError> {
    let mut after: Option<(DateTime<Utc>, String, i32)> = None;
    let mut written = 0;
    loop {
        let at = after.as_ref().map(|a| a.0);
        let id = after.as_ref().map(|a| a.1.clone());
        let seq = after.as_ref().map(|a| a.2);
        let params: [(&(dyn ToSql + Sync), Type); 9] = [
            (&at, Type::TIMESTAMPTZ),
            (&id, Type::TEXT),
            (&seq, Type::INT4),
            (&filter.since_ago, Type::FLOAT8),
            (&filter.since_at, Type::TIMESTAMPTZ),
            (&filter.until_ago, Type::FLOAT8),
            (&filter.until_at, Type::TIMESTAMPTZ),
            (&filter.rating, Type::TEXT),
            (&PAGE, Type::INT8),
        ];
        let rows = db.query_typed(READ, &params).await.map_err(|e| {
            if e.code() == Some(&SqlState::UNDEFINED_TABLE) {
                FeedbackError::NotMigrated
            } else {
                FeedbackError::Query(e)
            }
        })?;
        for row in &rows {
            let exported = line(row)?;
            serde_json::to_writer(&mut *out, &exported)
                .map_err(|e| CmdError::Output(std::io::Error::other(e)))?;
            out.write_all(b"\n")?;
            written += 1;
            after = Some((
                row.get("updated_at"),
                exported.feedback.conversation_id.clone(),
                exported.feedback.seq,
            ));
        }
        if (rows.len() as i64) < PAGE {
            return Ok(written);
        }
    }
}

/// One row as its line.
fn line(row: &tokio_postgres::Row) -> Result<Line, FeedbackError> {
    let unreadable =
        |what: &str, e: tokio_postgres::Error| FeedbackError::Unreadable(format!("{what}: {e}"));
    let conversation_id: String = row.get("conversation_id");
    let seq: i32 = row.get("seq");
    let calls: Json<Vec<Value>> = row
        .try_get("calls")
        .map_err(|e| unreadable("tool calls", e))?;
    let sources: Json<Vec<Value>> = row
        .try_get("sources")
        .map_err(|e| unreadable("sources", e))?;
    Ok(Line {
        // A question cut off the record (never, while the sequence is gapless): empty, which
        // the evals refuse as unwritten.
        q: row.get::<_, Option<String>>("question").unwrap_or_default(),
        pages: Vec::new(),
        tables: Vec::new(),
        values: Vec::new(),
        split: None,
        id: format!("{conversation_id}/{seq}"),
        feedback: Context {
            rating: row.get("rating"),
            comment: row.get("comment"),
            answer: row.get("answer"),
            error: row.get("error"),
            model: row.get("model"),
            tool_calls: calls.0.into_iter().map(tool_call).collect(),
            sources: sources.0.into_iter().map(source).collect(),
            conversation_id,
            seq,
            owner: row.get("owner"),
            given_at: rfc3339(row.get("updated_at")),
            answered_at: rfc3339(row.get("answered_at")),
        },
    })
}

/// A time as the lines write it: `2026-11-29T21:07:02.123456Z`.
fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A stored trace (`{name, args, is_error, output}` as [`READ`] shapes it) as exported.
fn tool_call(mut call: Value) -> ToolCall {
    let arguments = call["args"].take();
    let sql = arguments
        .get("sql")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let is_error = call["is_error"].as_bool().unwrap_or(false);
    ToolCall {
        name: call["name"].as_str().unwrap_or_default().to_owned(),
        arguments,
        is_error,
        sql,
        error: is_error.then(|| call["output"].take()),
    }
}

/// A stored source (`{id, title, uri, snippet, score, tool, call_id, cited}`) as exported.
fn source(mut s: Value) -> SourceRef {
    SourceRef {
        id: s["id"].take(),
        title: s["title"].take(),
        uri: s["uri"].take(),
        cited: s["cited"].as_bool().unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sql_call_carries_its_statement_and_a_failed_one_its_error() {
        let call = tool_call(json!({"name": "run_sql", "args": {"sql": "SELECT 1"},
                                    "is_error": false, "output": null}));
        assert_eq!(call.sql.as_deref(), Some("SELECT 1"));
        assert_eq!(call.error, None);
        let failed = tool_call(json!({"name": "list_lads", "args": "{not json",
                                      "is_error": true, "output": "bad arguments"}));
        assert_eq!(failed.sql, None);
        assert_eq!(failed.error, Some(json!("bad arguments")));
        assert_eq!(failed.arguments, json!("{not json"));
    }

    #[test]
    fn a_period_that_ends_before_it_starts_is_refused() {
        let at = |s: &str| Some(Since::parse(s).unwrap());
        let args = |since, until| ExportArgs {
            since,
            until,
            rating: None,
            out: None,
        };
        assert!(Filter::new(&args(at("2026-11-24"), at("2026-11-23"))).is_err());
        assert!(Filter::new(&args(at("1d"), at("2d"))).is_err());
        assert!(Filter::new(&args(at("2d"), at("1d"))).is_ok());
        assert!(Filter::new(&args(at("7d"), at("2026-11-23"))).is_ok());
        let err = Filter::new(&args(at("2026-11-24"), at("2026-11-24")))
            .err()
            .unwrap();
        assert!(
            err.is_usage() && err.to_string().contains("--until"),
            "{err}"
        );
    }
}
