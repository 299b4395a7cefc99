//! `parley audit`: prints the audit trail of tool calls (`parley.audit`, migrations 0007, 0013) from
//! the database in `DATABASE_URL`, filtered by time, caller, tool and outcome: the most recent
//! matches, oldest first, as a table or as JSON lines. It only reads; the trail is append-only.

mod render;
mod since;

use clap::builder::TypedValueParser;

use parley_core::audit::{Approval, Outcome, Record};
use parley_core::db::pg_message;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row};

pub use render::{Stored, WHAT_CHARS};
pub use since::{Since, SinceError};

use super::{CmdError, Out};
use parley_core::config::Env;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Columns: at (UTC), request id, caller, tool, outcome, rows returned (blank when the call counted
none, `+` when the caps cut the answer short), duration in ms, who approved the call and when
(UTC; blank when it ran under no approval), and what was asked: the statement for run_sql and
explain_sql, else the arguments (sensitive ones stored as their sha256), cut to 80 characters.
--json prints every column, the error message and the approval's id too, one object per line.

Reading the trail needs a role that may SELECT parley.audit: the one that ran `parley migrate`
does; the functions' roles do not.")]
pub struct Args {
    /// Only calls since then: a duration back from now (90s, 30m, 2h, 7d), an RFC 3339 time
    /// (2026-11-24T10:00:00Z) or a date (2026-11-24, from midnight UTC). Default: all.
    #[arg(long, value_name = "WHEN", value_parser = Since::parse)]
    pub since: Option<Since>,
    /// Only calls by this caller: a user's subject (`sub` claim), or `service` for the
    /// service token.
    #[arg(long, value_name = "SUB")]
    pub caller: Option<String>,
    /// Only calls of this tool, by name.
    #[arg(long, value_name = "NAME")]
    pub tool: Option<String>,
    /// Only calls that ended this way: ok, tool_error, timeout or refused.
    #[arg(long, value_name = "OUTCOME", value_parser = clap::builder::PossibleValuesParser::new(
        Outcome::ALL.map(Outcome::as_str)
    ).map(|s| s.parse::<Outcome>().expect("a listed outcome")))]
    pub outcome: Option<Outcome>,
    /// Print the most recent N matching calls (oldest first).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..))]
    pub limit: i64,
    /// One JSON object per line with every column, for `jq`.
    #[arg(long)]
    pub json: bool,
}

/// Which records to read; `None` filters nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub since: Option<Since>,
    pub caller: Option<String>,
    pub tool: Option<String>,
    pub outcome: Option<Outcome>,
    pub limit: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("this database has no parley.audit table; run `parley migrate` first")]
    NotMigrated,
    #[error(
        "the role in DATABASE_URL may not read the audit trail: {}; connect as the role that ran \
         `parley migrate`, or grant this one SELECT on parley.audit",
        pg_message(.0)
    )]
    NotAllowed(#[source] tokio_postgres::Error),
    #[error("reading parley.audit failed: {}", pg_message(.0))]
    Query(#[source] tokio_postgres::Error),
    /// A value the table's CHECK allows but this build does not know: a newer migration's.
    #[error(
        "audit record {id} has the outcome `{outcome}`, which this parley does not know \
         (expected {expected}); use the parley that ran the database's migrations"
    )]
    UnknownOutcome {
        id: i64,
        outcome: String,
        expected: String,
    },
    /// Written by something other than the mcp function, which checks an approval's shape.
    #[error("audit record {id} has an approval this parley cannot read: {why}")]
    BadApproval { id: i64, why: String },
    #[error("writing the audit records failed: {0}")]
    Output(#[source] std::io::Error),
}

const COLUMNS: &str = "id, at, request_id, caller, tool, arguments, statement, rows, truncated, \
    duration_ms, outcome, error, approval, replayed";

/// A WHERE clause's conditions and the parameters they number, each with its type (the
/// statement is sent unnamed, with the types beside the values).
#[derive(Default)]
struct Conditions<'a> {
    conditions: Vec<String>,
    params: Vec<(&'a (dyn ToSql + Sync), Type)>,
}

impl<'a> Conditions<'a> {
    /// Adds `value` of type `ty` as the next parameter and the condition
    /// `condition(its number)`.
    fn and(
        &mut self,
        value: &'a (dyn ToSql + Sync),
        ty: Type,
        condition: impl FnOnce(usize) -> String,
    ) {
        self.params.push((value, ty));
        self.conditions.push(condition(self.params.len()));
    }
}

/// The newest `filter.limit` records that match, oldest first. Every value is a parameter;
/// only the fixed conditions below are pasted into the statement.
pub async fn recent(client: &Client, filter: &Filter) -> Result<Vec<Stored>, AuditError> {
    let ago_secs = match filter.since {
        Some(Since::Ago(d)) => Some(d.as_secs_f64()),
        _ => None,
    };
    let outcome = filter.outcome.map(Outcome::as_str);
    let mut clause = Conditions::default();
    // By the database's clock, the one the mcp function's `at` values come from.
    if let Some(secs) = &ago_secs {
        clause.and(secs, Type::FLOAT8, |n| {
            format!("at >= now() - make_interval(secs => ${n})")
        });
    }
    if let Some(Since::At(at)) = &filter.since {
        clause.and(at, Type::TIMESTAMPTZ, |n| format!("at >= ${n}"));
    }
    if let Some(caller) = &filter.caller {
        clause.and(caller, Type::TEXT, |n| format!("caller = ${n}"));
    }
    if let Some(tool) = &filter.tool {
        clause.and(tool, Type::TEXT, |n| format!("tool = ${n}"));
    }
    if let Some(outcome) = &outcome {
        clause.and(outcome, Type::TEXT, |n| format!("outcome = ${n}"));
    }
    let Conditions {
        conditions,
        mut params,
    } = clause;
    let where_clause = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    params.push((&filter.limit, Type::INT8));
    // Newest first to take the last N (the `at` indexes serve it), turned round below.
    let sql = format!(
        "SELECT {COLUMNS} FROM parley.audit {where_clause} ORDER BY at DESC, id DESC LIMIT ${}",
        params.len()
    );
    let rows = client
        .query_typed(&sql, &params)
        .await
        .map_err(|e| match e.code() {
            Some(&SqlState::UNDEFINED_TABLE) => AuditError::NotMigrated,
            Some(&SqlState::INSUFFICIENT_PRIVILEGE) => AuditError::NotAllowed(e),
            _ => AuditError::Query(e),
        })?;
    let mut records = rows.iter().map(stored).collect::<Result<Vec<_>, _>>()?;
    records.reverse();
    Ok(records)
}

/// One row read back into the record the mcp function wrote.
fn stored(row: &Row) -> Result<Stored, AuditError> {
    let id = row.get("id");
    let outcome: String = row.get("outcome");
    let outcome = outcome
        .parse::<Outcome>()
        .map_err(|expected| AuditError::UnknownOutcome {
            id,
            outcome,
            expected,
        })?;
    let approval = row
        .get::<_, Option<serde_json::Value>>("approval")
        .map(|value| Approval::from_json(&value))
        .transpose()
        .map_err(|e| AuditError::BadApproval {
            id,
            why: e.to_string(),
        })?;
    Ok(Stored {
        id,
        record: Record {
            at: row.get("at"),
            request_id: row.get("request_id"),
            caller: row.get("caller"),
            tool: row.get("tool"),
            arguments: row.get("arguments"),
            statement: row.get("statement"),
            rows: row.get("rows"),
            truncated: row.get("truncated"),
            duration_ms: row.get("duration_ms"),
            outcome,
            error: row.get("error"),
            approval,
            replayed: row.get("replayed"),
        },
    })
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let filter = Filter {
        since: args.since,
        caller: args.caller,
        tool: args.tool,
        outcome: args.outcome,
        limit: args.limit,
    };
    let client = crate::db::connect(env).await?;
    let records = recent(&client, &filter).await?;
    let text = if args.json {
        records
            .iter()
            .map(|r| format!("{}\n", r.to_json()))
            .collect()
    } else if records.is_empty() {
        "no audit records match\n".to_owned()
    } else {
        render::table(&records)
    };
    print(out, &text)?;
    if !args.json && records.len() as i64 == filter.limit {
        eprintln!(
            "(the {} most recent; older ones may match: raise --limit or narrow the filters)",
            filter.limit
        );
    }
    Ok(())
}

/// Writes the records; a reader that went away (`parley audit | head`) is not a failure.
fn print(out: &mut Out, text: &str) -> Result<(), AuditError> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(AuditError::Output(e)),
        _ => Ok(()),
    }
}
