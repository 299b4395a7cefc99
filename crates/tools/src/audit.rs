//! The audit trail: one record per tool call (declared tools, ad-hoc SQL, writes) saying who
//! called which tool with what, under which user's approval, and how it went ([`Record`],
//! core's: `parley audit` reads the same type back). `AUDIT` picks where it goes: `postgres`
//! (default, the append-only `parley.audit`), `log` (a JSON log line), or `off`.
//!
//! Writing to Postgres stays off the call's critical path: the call hands its record to a
//! queue and answers; a background task writes whatever has queued up in one INSERT, in a
//! transaction with `synchronous_commit = off`, so no call waits for a round trip or a WAL
//! flush. A full queue or a failed INSERT puts the records in the log instead of losing them.

use deadpool_postgres::Pool;
pub use parley_core::audit::{Approval, MalformedApproval, Outcome, Record};
use parley_core::config::{ConfigError, Env};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_postgres::types::Type;

/// Where records go (`AUDIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    Postgres,
    Log,
    Off,
}

/// The audit settings.
#[derive(Debug, Clone, Copy)]
pub struct AuditConfig {
    /// `AUDIT`: `postgres` (default), `log` or `off`.
    pub destination: Destination,
    /// `AUDIT_QUEUE`: records waiting to be written before new ones go to the log instead.
    pub queue: usize,
}

impl AuditConfig {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let destination = match env.get("AUDIT").map(str::to_ascii_lowercase).as_deref() {
            None | Some("postgres") => Destination::Postgres,
            Some("log") => Destination::Log,
            Some("off") => Destination::Off,
            Some(_) => {
                return Err(ConfigError::new(
                    "AUDIT",
                    "must be postgres (the parley.audit table), log or off",
                ));
            }
        };
        Ok(Self {
            destination,
            queue: env.limit("AUDIT_QUEUE", 10_000, 1..=1_000_000)? as usize,
        })
    }
}

/// Where the function's records go; cheap to clone.
#[derive(Clone)]
pub enum Audit {
    Off,
    Log,
    Postgres(mpsc::Sender<Record>),
}

/// Most records one INSERT writes.
const BATCH: usize = 500;

impl Audit {
    /// Starts the writer task for `Destination::Postgres` (it ends when every `Audit` is gone).
    pub fn start(config: AuditConfig, pool: &Pool) -> Self {
        match config.destination {
            Destination::Off => Audit::Off,
            Destination::Log => Audit::Log,
            Destination::Postgres => {
                let (sender, receiver) = mpsc::channel(config.queue);
                tokio::spawn(write_queued(receiver, pool.clone()));
                Audit::Postgres(sender)
            }
        }
    }

    /// Records one call without waiting for it to be stored. `make` builds the record, and only
    /// runs when the record goes somewhere: with `AUDIT=off` a call pays nothing.
    pub fn record(&self, make: impl FnOnce() -> Record) {
        match self {
            Audit::Off => {}
            Audit::Log => log(&make(), "tool call audited"),
            Audit::Postgres(queue) => {
                if let Err(e) = queue.try_send(storable(make())) {
                    let record = match e {
                        mpsc::error::TrySendError::Full(r)
                        | mpsc::error::TrySendError::Closed(r) => r,
                    };
                    log(
                        &record,
                        "audit queue full; record written to the log instead",
                    );
                }
            }
        }
    }
}

/// Most bytes of a statement or of the arguments one record stores; a longer one (refused
/// anyway: see `[sql] max_statement_bytes`) is cut, saying how long it was.
const MAX_STORED_BYTES: usize = 64 * 1024;

/// `record` as Postgres can store it: text and jsonb cannot hold NUL (shown as U+FFFD), and
/// an oversized statement or argument list is cut. The short fields are cut too: a caller can
/// name an unknown tool as it likes, and one record that cannot be stored would take its
/// batch with it.
fn storable(mut record: Record) -> Record {
    if let Some(statement) = &mut record.statement {
        *statement = cut(&statement.replace('\0', "\u{FFFD}"));
    }
    for (field, chars) in [
        (&mut record.tool, 128),
        (&mut record.caller, 255),
        (&mut record.request_id, 128),
    ] {
        *field = field
            .replace('\0', "\u{FFFD}")
            .chars()
            .take(chars)
            .collect();
    }
    if let Some(error) = &mut record.error {
        *error = error.replace('\0', "\u{FFFD}").chars().take(1000).collect();
    }
    let arguments = record.arguments.to_string();
    if arguments.len() > MAX_STORED_BYTES {
        record.arguments = serde_json::json!({ "cut": true, "bytes": arguments.len() });
    } else if arguments.contains("\\u0000") {
        record.arguments =
            serde_json::from_str(&arguments.replace("\\u0000", "\\ufffd")).unwrap_or(Value::Null);
    }
    record
}

fn cut(text: &str) -> String {
    if text.len() <= MAX_STORED_BYTES {
        return text.to_owned();
    }
    let mut end = MAX_STORED_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes in all]", &text[..end], text.len())
}

/// The record as one structured log line (target `parley::audit`).
fn log(record: &Record, message: &str) {
    tracing::info!(
        target: "parley::audit",
        at = %record.at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        request_id = %record.request_id,
        caller = %record.caller,
        tool = %record.tool,
        arguments = %record.arguments,
        statement = record.statement.as_deref(),
        rows = record.rows,
        truncated = record.truncated,
        duration_ms = record.duration_ms,
        outcome = record.outcome.as_str(),
        error = record.error.as_deref(),
        approval = record.approval.as_ref().map(|a| a.to_json().to_string()),
        replayed = record.replayed,
        "{message}"
    );
}

const INSERT: &str = "INSERT INTO parley.audit \
    (at, request_id, caller, tool, arguments, statement, rows, truncated, duration_ms, outcome, error, \
     approval, replayed) \
    SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::jsonb[], \
                         $6::text[], $7::int4[], $8::bool[], $9::float8[], $10::text[], $11::text[], \
                         $12::jsonb[], $13::bool[])";

/// The writer task: whatever has queued since the last INSERT goes in the next one. A batch
/// that fails is written again one record at a time, so one bad record costs only itself.
async fn write_queued(mut queue: mpsc::Receiver<Record>, pool: Pool) {
    let mut batch = Vec::with_capacity(BATCH);
    while queue.recv_many(&mut batch, BATCH).await > 0 {
        if let Err(e) = write(&pool, &batch).await {
            tracing::warn!(error = %e, records = batch.len(), "audit batch not stored; writing its records one by one");
            for record in &batch {
                if let Err(e) = write(&pool, std::slice::from_ref(record)).await {
                    tracing::error!(error = %e, "audit record not stored; written to the log instead");
                    log(record, "tool call audited (not stored)");
                }
            }
        }
        batch.clear();
    }
}

/// The audit's transaction: read-write, and not waiting for its WAL flush, set through the
/// function migration 0023 installs, as nothing sent per request may `SET`
/// (docs/rds-proxy.md).
const BEGIN_RELAXED: &str = "BEGIN READ WRITE; SELECT parley.set_local('{synchronous_commit,off}')";

async fn write(pool: &Pool, batch: &[Record]) -> Result<(), parley_core::db::DbError> {
    let client = pool.get().await?;
    let at: Vec<_> = batch.iter().map(|r| r.at).collect();
    let request_id: Vec<_> = batch.iter().map(|r| r.request_id.as_str()).collect();
    let caller: Vec<_> = batch.iter().map(|r| r.caller.as_str()).collect();
    let tool: Vec<_> = batch.iter().map(|r| r.tool.as_str()).collect();
    let arguments: Vec<_> = batch.iter().map(|r| &r.arguments).collect();
    let statements: Vec<_> = batch.iter().map(|r| r.statement.as_deref()).collect();
    let rows: Vec<_> = batch.iter().map(|r| r.rows).collect();
    let truncated: Vec<_> = batch.iter().map(|r| r.truncated).collect();
    let duration: Vec<_> = batch.iter().map(|r| r.duration_ms).collect();
    let outcome: Vec<_> = batch.iter().map(|r| r.outcome.as_str()).collect();
    let error: Vec<_> = batch.iter().map(|r| r.error.as_deref()).collect();
    let approval: Vec<_> = batch
        .iter()
        .map(|r| r.approval.as_ref().map(Approval::to_json))
        .collect();
    let replayed: Vec<_> = batch.iter().map(|r| r.replayed).collect();
    // One round trip. The mcp login may default to read-only transactions; the audit's are
    // the only writes it makes as itself. Not waiting for the flush is what keeps a read's
    // audit from costing it a WAL fsync; a crash can lose the last few hundred ms of records.
    // Unnamed, as every statement of this function: nothing stays on the connection.
    let params: [(&(dyn tokio_postgres::types::ToSql + Sync), Type); 13] = [
        (&at, Type::TIMESTAMPTZ_ARRAY),
        (&request_id, Type::TEXT_ARRAY),
        (&caller, Type::TEXT_ARRAY),
        (&tool, Type::TEXT_ARRAY),
        (&arguments, Type::JSONB_ARRAY),
        (&statements, Type::TEXT_ARRAY),
        (&rows, Type::INT4_ARRAY),
        (&truncated, Type::BOOL_ARRAY),
        (&duration, Type::FLOAT8_ARRAY),
        (&outcome, Type::TEXT_ARRAY),
        (&error, Type::TEXT_ARRAY),
        (&approval, Type::JSONB_ARRAY),
        (&replayed, Type::BOOL_ARRAY),
    ];
    let (begun, inserted, committed) = tokio::join!(
        client.batch_execute(BEGIN_RELAXED),
        client.execute_typed(INSERT, &params),
        client.batch_execute("COMMIT"),
    );
    begun?;
    inserted?;
    committed?;
    Ok(())
}

/// `arguments` with each parameter `sensitive` says yes to replaced by `{"sha256": "<hex>"}` of
/// its JSON text, so equal values can still be matched without being stored.
pub fn redact(
    arguments: Option<&serde_json::Map<String, Value>>,
    sensitive: impl Fn(&str) -> bool,
) -> Value {
    let mut arguments = arguments.cloned().unwrap_or_default();
    for (name, value) in arguments.iter_mut() {
        if sensitive(name) {
            let digest = Sha256::digest(value.to_string().as_bytes());
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            *value = serde_json::json!({ "sha256": hex });
        }
    }
    Value::Object(arguments)
}

/// `AUDIT=postgres` over a database that cannot take the records: caught at start-up rather
/// than in the log of every call.
#[derive(Debug, thiserror::Error)]
#[error(
    "AUDIT=postgres, but {0}; run `parley migrate` (migration 0007 creates parley.audit and \
     grants INSERT to parley_readonly, 0013 adds its approval column), or set AUDIT=log"
)]
pub struct AuditUnwritable(String);

/// Checks that the function's role may add records. `Ok` too when the database cannot be
/// reached now: the records then go to the log until it can.
pub async fn check(config: AuditConfig, pool: &Pool) -> Result<(), AuditUnwritable> {
    if config.destination != Destination::Postgres {
        return Ok(());
    }
    let Ok(client) = pool.get().await else {
        return Ok(());
    };
    let row = client
        .query_typed_one(
            "SELECT to_regclass('parley.audit') IS NOT NULL \
                    AND has_table_privilege('parley.audit', 'INSERT'), \
                    EXISTS (SELECT FROM pg_catalog.pg_attribute \
                            WHERE attrelid = to_regclass('parley.audit') \
                              AND attname = 'approval' AND NOT attisdropped)",
            &[],
        )
        .await;
    match row {
        Ok(row) if !row.get::<_, bool>(0) => Err(AuditUnwritable(
            "the database has no parley.audit table this role may insert into".into(),
        )),
        // Every INSERT names the column, so every record would go to the log instead.
        Ok(row) if !row.get::<_, bool>(1) => Err(AuditUnwritable(
            "parley.audit has no approval column".into(),
        )),
        _ => Ok(()),
    }
}

/// How a call names itself to a DBA: a comment on its statements (pg_stat_activity's `query`,
/// pg_stat_statements) and `application_name` while its transaction runs. Both parts are
/// limited to `[A-Za-z0-9._:-]` (tool names by the tools file's rules, the request id by
/// [`request_id`]), so they cannot close a comment or a string.
#[derive(Debug, Clone, Copy)]
pub struct Marker<'a> {
    pub tool: &'a str,
    pub request_id: &'a str,
}

impl Marker<'_> {
    /// `/* parley tool=<tool> request=<id> */`
    pub fn comment(&self) -> String {
        format!(
            "/* parley tool={} request={} */",
            self.tool, self.request_id
        )
    }

    /// `parley request=<id>`: Postgres keeps 63 bytes of `application_name`, and the tool is
    /// in the statement's comment already.
    pub fn application_name(&self) -> String {
        format!("parley request={}", self.request_id)
    }
}

/// A request's id (the edge reads it from `x-request-id`, set by the serving layer) as it may
/// appear in SQL comments and `application_name`: what a client sent is cut to 64 characters
/// of `[A-Za-z0-9._:-]`, so it cannot close a comment or a string; `none` when nothing is left.
pub fn request_id(sent: Option<&str>) -> String {
    let id = sent.unwrap_or("");
    let clean: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
        .take(64)
        .collect();
    if clean.is_empty() {
        "none".into()
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;

    #[test]
    fn sensitive_arguments_are_stored_as_their_hash() {
        let args = serde_json::json!({"email": "a@example.com", "n": 2});
        let redacted = redact(args.as_object(), |name| name == "email");
        assert_eq!(redacted["n"], 2);
        let hash = redacted["email"]["sha256"].as_str().unwrap();
        assert_eq!(hash.len(), 64);
        assert!(!redacted.to_string().contains("a@example.com"));
        // Equal values hash alike, so a DBA can still match them.
        assert_eq!(redact(args.as_object(), |name| name == "email"), redacted);
    }

    #[test]
    fn records_are_made_storable() {
        let record = Record {
            at: Utc::now(),
            request_id: "r".into(),
            caller: "service".into(),
            tool: "run_sql".into(),
            arguments: serde_json::json!({"sql": "SELECT 'a\u{0}b'"}),
            statement: Some(format!("SELECT '\u{0}{}'", "é".repeat(MAX_STORED_BYTES))),
            rows: None,
            truncated: false,
            duration_ms: 0.0,
            outcome: Outcome::Refused,
            error: None,
            approval: None,
            replayed: false,
        };
        let stored = storable(record);
        assert!(!stored.arguments.to_string().contains("\\u0000"));
        assert_eq!(stored.arguments["sql"], "SELECT 'a\u{FFFD}b'");
        let statement = stored.statement.unwrap();
        assert!(statement.len() < MAX_STORED_BYTES + 100);
        assert!(
            statement.ends_with("bytes in all]"),
            "{}",
            &statement[statement.len() - 40..]
        );
        assert!(!statement.contains('\0'));
    }

    #[test]
    fn a_hostile_tool_name_or_subject_is_stored_cut_and_without_nul() {
        let record = Record {
            at: Utc::now(),
            request_id: "r".into(),
            caller: format!("a\u{0}{}", "b".repeat(5000)),
            tool: format!("t\u{0}{}", "x".repeat(5000)),
            arguments: Value::Null,
            statement: None,
            rows: None,
            truncated: false,
            duration_ms: 0.0,
            outcome: Outcome::Refused,
            error: Some("e\u{0}".repeat(2000)),
            approval: None,
            replayed: false,
        };
        let stored = storable(record);
        assert_eq!(stored.tool.chars().count(), 128);
        assert_eq!(stored.caller.chars().count(), 255);
        assert!(!stored.tool.contains('\0') && !stored.caller.contains('\0'));
        let error = stored.error.unwrap();
        assert!(error.chars().count() <= 1000 && !error.contains('\0'));
    }

    #[test]
    fn request_ids_cannot_close_a_comment_or_a_string() {
        let parts = |id: &str| Some(id.to_owned());
        assert_eq!(request_id(parts("abc-123").as_deref()), "abc-123");
        assert_eq!(
            request_id(parts("x */ DROP TABLE t; --'").as_deref()),
            "xDROPTABLEt--"
        );
        assert_eq!(request_id(parts("*/").as_deref()), "none");
        assert_eq!(request_id(parts(&"a".repeat(100)).as_deref()).len(), 64);
        assert_eq!(request_id(None), "none");
    }

    #[test]
    fn the_destination_is_named_or_refused() {
        let env = |v: &str| Env::from_pairs([("AUDIT", v)]);
        assert_eq!(
            AuditConfig::from_env(&env("LOG")).unwrap().destination,
            Destination::Log
        );
        assert_eq!(AuditConfig::from_env(&env("x")).unwrap_err().var, "AUDIT");
        assert_eq!(
            AuditConfig::from_env(&Env::default()).unwrap().destination,
            Destination::Postgres
        );
    }
}
