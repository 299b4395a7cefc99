//! Ad-hoc SQL: `run_sql`, `list_tables`, `describe_table` and `explain_sql`, for the questions
//! no declared tool foresaw. Off unless a tools file has a `[sql]` table (see `spec`).
//!
//! The guarantees come from Postgres: the statements run as a dedicated login role
//! (`SQL_DATABASE_URL`) that `role` checks at start-up can only read the allowed schemas, one
//! statement at a time through the extended protocol, in a read-only transaction that is
//! always rolled back (`run`). Where Postgres' privileges could not be narrowed (a managed
//! server's master is no superuser) and for what a transaction does not undo, `guard` reads
//! the names a statement and its plan use, and refuses the ones that reach past the call.
//! An error for a table or column that does not exist gets the nearest names the role may
//! read (`hints`).

pub mod guard;
pub mod hints;
pub mod lexer;
pub mod role;
pub mod run;
pub mod spec;

use deadpool_postgres::Pool;
use parley_core::telemetry::traces;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::OnceCell;
use tokio_postgres::types::Type;
use tracing::Instrument;

pub use run::SqlError;
pub use spec::{Kind, SqlSpec};

use crate::audit::Marker;
use crate::listing::{Hints, Listing};
use crate::output::{ToolOutput, output_schema};
use guard::Guard;
use run::{Check, Session, Statement};

/// The SQL tools of one deployment: their settings, the SQL role's pool, their descriptions.
pub struct SqlTools {
    spec: SqlSpec,
    pool: Pool,
    listed: Vec<Listing>,
    /// The role check's verdict, once it could run (at start-up, or before the first call when
    /// the database was unreachable then): the guard the calls go through, or why the role is
    /// unsafe. Calls are refused until it says the role is safe.
    verdict: OnceCell<Result<Guard, String>>,
}

impl std::fmt::Debug for SqlTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlTools")
            .field("spec", &self.spec)
            .finish()
    }
}

impl SqlTools {
    pub fn new(spec: SqlSpec, pool: Pool) -> Self {
        let listed = spec.tools.iter().map(|&k| describe(k, &spec)).collect();
        Self {
            spec,
            pool,
            listed,
            verdict: OnceCell::new(),
        }
    }

    pub fn spec(&self) -> &SqlSpec {
        &self.spec
    }

    pub fn listed(&self) -> &[Listing] {
        &self.listed
    }

    /// The tool called `name`, if it is one of the enabled SQL tools.
    pub fn kind(&self, name: &str) -> Option<Kind> {
        Kind::from_name(name).filter(|k| self.spec.tools.contains(k))
    }

    /// Checks the SQL role at start-up. `Ok(false)`: the database could not be reached; the
    /// check runs again before the first call. `Err`: the role can do more than it should.
    pub async fn check_role(&self) -> Result<bool, role::UnsafeRole> {
        match self.run_check().await {
            None => Ok(false),
            Some(Ok(())) => Ok(true),
            Some(Err(unsafe_role)) => Err(unsafe_role),
        }
    }

    /// `None` when the check could not run.
    async fn run_check(&self) -> Option<Result<(), role::UnsafeRole>> {
        let client = match self.pool.get().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %parley_core::db::DbError::from(e), "SQL role unreachable; checked before the first call");
                return None;
            }
        };
        // In a transaction, rolled back: each statement is prepared, run and closed inside it,
        // so nothing named outlives it on a server connection a pooler hands on.
        let checked = match client.batch_execute("BEGIN READ ONLY").await {
            Ok(()) => role::check(&client, &self.spec.schemas).await,
            Err(e) => Err(e),
        };
        let _ = client.batch_execute("ROLLBACK").await;
        match checked {
            Ok(verdict) => {
                if let Ok(guard) = &verdict {
                    tracing::info!(plans_checked = guard.check_plans, "SQL tools' guard ready");
                }
                let _ = self
                    .verdict
                    .set(verdict.as_ref().cloned().map_err(ToString::to_string));
                Some(verdict.map(drop))
            }
            Err(e) => {
                tracing::warn!(error = %parley_core::db::pg_message(&e), "SQL role check failed to run");
                None
            }
        }
    }

    /// Refuses every call while the role is unchecked or unsafe; else the guard to go through.
    async fn ensure_checked(&self) -> Result<&Guard, SqlError> {
        if self.verdict.get().is_none() && self.run_check().await.is_none() {
            return Err(SqlError::Unavailable);
        }
        match self.verdict.get() {
            Some(Ok(guard)) => Ok(guard),
            Some(Err(problem)) => {
                tracing::error!(%problem, "SQL tools refused: the role is unsafe");
                Err(SqlError::Refused(
                    "the SQL tools are turned off: their database role can do more than read; \
                     the server log says what to change"
                        .into(),
                ))
            }
            None => Err(SqlError::Unavailable),
        }
    }

    /// One call of the tool `kind`; `marker` names it to a DBA.
    pub async fn call(
        &self,
        kind: Kind,
        arguments: Option<&Map<String, Value>>,
        marker: Marker<'_>,
    ) -> Result<ToolOutput, SqlError> {
        let arguments = Value::Object(arguments.cloned().unwrap_or_default());
        // Arguments are checked before anything touches the database.
        let session = Session {
            schemas: &self.spec.schemas,
            timeout: self.spec.timeout,
            marker,
        };
        match kind {
            Kind::RunSql => {
                let args: RunSqlArgs = parse_args(arguments)?;
                let sql = run::accept(&args.sql, self.spec.max_statement_bytes)?;
                let limit = match args.limit {
                    None => self.spec.max_rows,
                    Some(0) => {
                        return Err(SqlError::Refused("`limit` must be at least 1".into()));
                    }
                    Some(n) => n.min(self.spec.max_rows),
                };
                let guard = self.ensure_checked().await?;
                guard.screen(sql)?;
                let span = traces::sql_span(sql, traces::operation_of(sql));
                let outcome = self
                    .run_sql(&session, guard, sql, limit)
                    .instrument(span.clone())
                    .await;
                traces::sql_ended(&span, span_outcome(&outcome));
                self.with_hint(&session, sql, outcome).await
            }
            Kind::ExplainSql => {
                let args: SqlArgs = parse_args(arguments)?;
                let sql = run::accept(&args.sql, self.spec.max_statement_bytes)?;
                // EXPLAIN runs nothing, but its text reaches the server (and a proxy): the
                // same words are refused as for run_sql.
                self.ensure_checked().await?.screen(sql)?;
                let span = traces::sql_span(sql, Some("EXPLAIN"));
                let outcome = self.explain(&session, sql).instrument(span.clone()).await;
                traces::sql_ended(&span, span_outcome(&outcome));
                self.with_hint(&session, sql, outcome).await
            }
            Kind::ListTables => {
                let args: ListTablesArgs = parse_args(arguments)?;
                let schemas = match &args.schema {
                    None => self.spec.schemas.clone(),
                    Some(s) if self.spec.schemas.contains(s) => vec![s.clone()],
                    Some(s) => return Err(SqlError::NotFound(self.no_schema(s))),
                };
                self.ensure_checked().await?;
                self.list_tables(&session, &schemas).await
            }
            Kind::DescribeTable => {
                let args: DescribeArgs = parse_args(arguments)?;
                let (schema, table) = table_name(&args.name)?;
                if let Some(s) = &schema
                    && !self.spec.schemas.contains(s)
                {
                    return Err(SqlError::NotFound(self.no_schema(s)));
                }
                self.ensure_checked().await?;
                self.describe(&session, schema.as_deref(), &table).await
            }
        }
    }

    /// `outcome`, with the nearest names the role can see added to an error about a table or
    /// column `sql` names that does not exist (`hints`). Looked up after the call's own
    /// transaction was rolled back, in one of its own.
    async fn with_hint(
        &self,
        session: &Session<'_>,
        sql: &str,
        outcome: Result<ToolOutput, SqlError>,
    ) -> Result<ToolOutput, SqlError> {
        match outcome {
            Err(SqlError::Postgres(mut failure)) => {
                hints::add(&self.pool, session, sql, &self.spec.hidden, &mut failure).await;
                Err(SqlError::Postgres(failure))
            }
            other => other,
        }
    }

    fn no_schema(&self, schema: &str) -> String {
        format!(
            "schema `{schema}` is not open to the SQL tools; they read {}",
            self.spec.schemas.join(", ")
        )
    }

    async fn run_sql(
        &self,
        session: &Session<'_>,
        guard: &Guard,
        sql: &str,
        limit: u64,
    ) -> Result<ToolOutput, SqlError> {
        // The caller's text becomes a subquery: Postgres renders each row as JSON (exactly as
        // stored), cuts it at the byte cap before sending it, and stops at one row past the
        // limit. The newlines keep a trailing `--` comment from swallowing the rest. So that
        // unbalanced parentheses cannot end the subquery early and add to Parley's query
        // (`SELECT 1) AS q UNION ALL SELECT ...`), the text is first planned on its own with
        // EXPLAIN, in the same transaction, with nothing after it: only a complete statement
        // passes, and then the subquery is exactly that statement (or a syntax error, for one
        // that is not a query). When the guard checks plans, that EXPLAIN is VERBOSE JSON and
        // is judged before the statement is sent.
        let comment = session.marker.comment();
        let explain = if guard.check_plans {
            format!("{comment} EXPLAIN (VERBOSE, FORMAT JSON) ")
        } else {
            format!("{comment} EXPLAIN (COSTS OFF) ")
        };
        let check = Statement {
            text: format!("{explain}{sql}"),
            params: Vec::new(),
            original: sql,
            offset: explain.chars().count(),
        };
        let prefix = format!(
            "{comment} SELECT pg_catalog.substr(pg_catalog.to_json(q)::text, 1, {}) FROM (\n",
            self.spec.max_bytes + 1
        );
        let statement = Statement {
            text: format!("{prefix}{sql}\n) AS q LIMIT {}", limit + 1),
            params: Vec::new(),
            original: sql,
            offset: prefix.chars().count(),
        };
        let judge = |plan: &Value| guard.check_plan(plan);
        let check = if guard.check_plans {
            Check::Judged(&check, &judge)
        } else {
            Check::Pipelined(&check)
        };
        run::rows(
            &self.pool,
            session,
            Some(check),
            &statement,
            limit,
            self.spec.max_bytes,
        )
        .await
    }

    async fn explain(&self, session: &Session<'_>, sql: &str) -> Result<ToolOutput, SqlError> {
        // Never ANALYZE: the plan is computed, the statement is not run. `EXPLAIN (...)
        // ANALYZE ...` is a syntax error, so the caller cannot add it.
        let prefix = format!("{} EXPLAIN (FORMAT TEXT) ", session.marker.comment());
        let statement = Statement {
            text: format!("{prefix}{sql}"),
            params: Vec::new(),
            original: sql,
            offset: prefix.chars().count(),
        };
        let lines = run::texts(&self.pool, session, &statement).await?;
        // A plan prints the constants it folded, which can be as large as a value can be.
        let mut plan = lines.join("\n");
        let cap = usize::try_from(self.spec.max_bytes).unwrap_or(usize::MAX) - 64;
        let truncated = plan.len() > cap;
        if truncated {
            let mut end = cap;
            while !plan.is_char_boundary(end) {
                end -= 1;
            }
            plan.truncate(end);
        }
        let json = json!({ "plan": plan, "truncated": truncated }).to_string();
        Ok(object_output(json))
    }

    async fn list_tables(
        &self,
        session: &Session<'_>,
        schemas: &[String],
    ) -> Result<ToolOutput, SqlError> {
        let statement = Statement {
            text: format!(
                "{} {LIST_TABLES} LIMIT {}",
                session.marker.comment(),
                self.spec.max_rows + 1
            ),
            params: vec![(&schemas as _, Type::TEXT_ARRAY)],
            original: "",
            offset: 0,
        };
        run::rows(
            &self.pool,
            session,
            None,
            &statement,
            self.spec.max_rows,
            self.spec.max_bytes,
        )
        .await
    }

    async fn describe(
        &self,
        session: &Session<'_>,
        schema: Option<&str>,
        table: &str,
    ) -> Result<ToolOutput, SqlError> {
        let schemas = &self.spec.schemas;
        let statement = Statement {
            text: format!("{} {DESCRIBE_TABLE}", session.marker.comment()),
            params: vec![
                (schemas as _, Type::TEXT_ARRAY),
                (&schema as _, Type::TEXT),
                (&table as _, Type::TEXT),
            ],
            original: "",
            offset: 0,
        };
        let found = run::texts(&self.pool, session, &statement).await?;
        let Some(text) = found.into_iter().next() else {
            return Err(SqlError::NotFound(format!(
                "no table or view `{}` you may read in {}; call list_tables for the ones \
                 there are",
                table.chars().take(64).collect::<String>(),
                schema.map_or_else(|| schemas.join(", "), str::to_owned)
            )));
        };
        let mut described: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if self.spec.sample_rows > 0
            && let (Some(s), Some(t)) = (described["schema"].as_str(), described["name"].as_str())
        {
            // Only the columns the role may read (a column grant makes `SELECT *` fail), each
            // sample row cut so that all of them fit in the result's cap.
            let columns: Vec<String> = described["columns"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str().map(quote_identifier))
                .collect();
            if !columns.is_empty() {
                let statement = Statement {
                    text: format!(
                        "{} SELECT pg_catalog.substr(pg_catalog.to_json(s)::text, 1, {}) \
                         FROM (SELECT {} FROM {}.{}) AS s LIMIT {}",
                        session.marker.comment(),
                        self.spec.max_bytes / (2 * u64::from(self.spec.sample_rows)),
                        columns.join(", "),
                        quote_identifier(s),
                        quote_identifier(t),
                        self.spec.sample_rows
                    ),
                    params: Vec::new(),
                    original: "",
                    offset: 0,
                };
                let sample = run::texts(&self.pool, session, &statement).await?;
                described["sample_rows"] = Value::Array(
                    sample
                        .iter()
                        .map(|r| {
                            serde_json::from_str(r).unwrap_or_else(|_| json!({"cut": r.len()}))
                        })
                        .collect(),
                );
            }
        }
        Ok(object_output(described.to_string()))
    }
}

/// Most bytes one message from the SQL role's server may take: what the largest row can take
/// on the wire (rows are cut at `max_bytes` characters, up to 4 bytes each) and 64 KiB more.
/// Postgres quotes values in some errors, and a value can reach 1 GB: an error over this
/// arrives with each field cut to 8 KiB instead of whole (see `parley_core::db::DbConfig`).
pub fn max_message_bytes(spec: &SqlSpec) -> usize {
    usize::try_from(4 * spec.max_bytes + 64 * 1024).unwrap_or(usize::MAX)
}

/// The statement a call of `run_sql` or `explain_sql` sent (their `sql` argument), as the
/// audit stores it; `None` for the other tools or a call without one.
pub fn statement_of(arguments: Option<&Map<String, Value>>) -> Option<&str> {
    arguments?.get("sql")?.as_str()
}

/// A result that is one object, not rows.
fn object_output(json: String) -> ToolOutput {
    ToolOutput {
        json,
        row_count: 1,
        truncated: None,
        replayed: false,
    }
}

/// `"a"` for a name Postgres keeps as written.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `table`, `schema.table`, either part possibly double-quoted; unquoted parts fold to lower
/// case, as Postgres folds them.
fn table_name(name: &str) -> Result<(Option<String>, String), SqlError> {
    let bad = || {
        SqlError::Refused(format!(
            "`{}` is not a table name; write table or schema.table",
            name.chars().take(64).collect::<String>()
        ))
    };
    if name.len() > 200 {
        return Err(bad());
    }
    let mut parts = Vec::new();
    let mut chars = name.trim().chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    Some('"') => break,
                    Some(c) => part.push(c),
                    None => return Err(bad()),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' || c == '"' {
                    break;
                }
                part.push(c.to_ascii_lowercase());
                chars.next();
            }
            part = part.trim().to_owned();
        }
        if part.is_empty() {
            return Err(bad());
        }
        parts.push(part);
        match chars.next() {
            None => break,
            Some('.') => {}
            Some(_) => return Err(bad()),
        }
    }
    match <[String; 2]>::try_from(parts) {
        Ok([schema, table]) => Ok((Some(schema), table)),
        Err(parts) => match <[String; 1]>::try_from(parts) {
            Ok([table]) => Ok((None, table)),
            Err(_) => Err(bad()),
        },
    }
}

fn parse_args<T: for<'de> Deserialize<'de>>(arguments: Value) -> Result<T, SqlError> {
    serde_json::from_value(arguments)
        .map_err(|e| SqlError::Refused(format!("invalid arguments: {e}")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunSqlArgs {
    sql: String,
    limit: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SqlArgs {
    sql: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListTablesArgs {
    schema: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescribeArgs {
    name: String,
}

/// Tables and views of the schemas `$1` that the role may read, one JSON text per row.
const LIST_TABLES: &str = "SELECT json_build_object(\
    'schema', n.nspname, 'name', c.relname, \
    'kind', CASE c.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' \
                           WHEN 'f' THEN 'foreign table' ELSE 'table' END, \
    'rows_estimate', CASE WHEN c.relkind IN ('r', 'p', 'm') AND c.reltuples >= 0 \
                          THEN c.reltuples::bigint END, \
    'comment', pg_catalog.obj_description(c.oid, 'pg_class'))::text \
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition \
  AND pg_catalog.has_any_column_privilege(c.oid, 'SELECT') \
ORDER BY pg_catalog.array_position($1, n.nspname::text), c.relname";

/// One table or view (`$3`, in schema `$2` or the first of `$1` that has it) as one JSON text:
/// columns the role may read, constraints, foreign keys both ways, indexes.
const DESCRIBE_TABLE: &str = "WITH t AS (\
    SELECT c.oid, n.nspname, c.relname, c.relkind, c.reltuples \
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
    WHERE n.nspname = ANY($1) AND ($2::text IS NULL OR n.nspname = $2) AND c.relname = $3 \
      AND c.relkind IN ('r', 'p', 'v', 'm', 'f') \
      AND pg_catalog.has_any_column_privilege(c.oid, 'SELECT') \
    ORDER BY pg_catalog.array_position($1, n.nspname::text) LIMIT 1) \
SELECT json_build_object(\
    'schema', t.nspname, 'name', t.relname, \
    'kind', CASE t.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' \
                           WHEN 'f' THEN 'foreign table' ELSE 'table' END, \
    'comment', pg_catalog.obj_description(t.oid, 'pg_class'), \
    'rows_estimate', CASE WHEN t.relkind IN ('r', 'p', 'm') AND t.reltuples >= 0 \
                          THEN t.reltuples::bigint END, \
    'columns', (SELECT json_agg(json_strip_nulls(json_build_object(\
            'name', a.attname, \
            'type', pg_catalog.format_type(a.atttypid, a.atttypmod), \
            'nullable', NOT a.attnotnull, \
            'default', CASE WHEN a.attgenerated = '' THEN pg_catalog.pg_get_expr(d.adbin, d.adrelid) END, \
            'generated', CASE WHEN a.attgenerated <> '' THEN pg_catalog.pg_get_expr(d.adbin, d.adrelid) END, \
            'identity', CASE a.attidentity WHEN 'a' THEN 'always' WHEN 'd' THEN 'by default' END, \
            'comment', pg_catalog.col_description(a.attrelid, a.attnum))) ORDER BY a.attnum) \
        FROM pg_catalog.pg_attribute a \
        LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
        WHERE a.attrelid = t.oid AND a.attnum > 0 AND NOT a.attisdropped \
          AND pg_catalog.has_column_privilege(t.oid, a.attnum, 'SELECT')), \
    'constraints', (SELECT json_agg(json_build_object(\
            'name', k.conname, \
            'type', CASE k.contype WHEN 'p' THEN 'primary key' WHEN 'u' THEN 'unique' \
                                   WHEN 'f' THEN 'foreign key' WHEN 'c' THEN 'check' \
                                   ELSE 'exclusion' END, \
            'definition', pg_catalog.pg_get_constraintdef(k.oid, true)) \
            ORDER BY k.contype = 'p' DESC, k.conname) \
        FROM pg_catalog.pg_constraint k \
        WHERE k.conrelid = t.oid AND k.contype IN ('p', 'u', 'f', 'c', 'x')), \
    'referenced_by', (SELECT json_agg(json_build_object(\
            'table', (SELECT pg_catalog.format('%I.%I', rn.nspname, rc.relname) \
                      FROM pg_catalog.pg_class rc \
                      JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace \
                      WHERE rc.oid = k.conrelid), \
            'definition', pg_catalog.pg_get_constraintdef(k.oid, true)) ORDER BY k.conname) \
        FROM pg_catalog.pg_constraint k \
        WHERE k.confrelid = t.oid AND k.contype = 'f' \
          AND pg_catalog.has_any_column_privilege(k.conrelid, 'SELECT')), \
    'indexes', (SELECT json_agg(pg_catalog.pg_get_indexdef(i.indexrelid) ORDER BY i.indexrelid) \
        FROM pg_catalog.pg_index i WHERE i.indrelid = t.oid))::text \
FROM t";

/// How a SQL tool is published in `tools/list`.
fn describe(kind: Kind, spec: &SqlSpec) -> Listing {
    let schemas = spec.schemas.join(", ");
    let (description, input, output) = match kind {
        Kind::RunSql => {
            let mut description = format!(
                "Runs one read-only PostgreSQL query over the schemas {schemas} and returns its \
                 rows as JSON objects (`rows`, `row_count`, `truncated`). Write one SELECT \
                 (WITH ... SELECT, VALUES and TABLE work too) in PostgreSQL's dialect: \
                 date_trunc, FILTER (WHERE ...), window functions, ILIKE, ::casts. No \
                 semicolon-separated statements, no writes, no SET. Unqualified names resolve \
                 in {schemas}. At most {} rows come back (ask for fewer with `limit`); give \
                 aggregates rather than raw rows where you can. A statement runs at most {} ms. \
                 Look first: list_tables and describe_table give the exact table and column \
                 names. An error comes back with Postgres' message and its line and column in \
                 your statement, and for a table or column that does not exist the nearest \
                 names you may use; correct it and try again.",
                spec.max_rows,
                spec.timeout.as_millis()
            );
            if let Some(notes) = &spec.notes {
                description.push_str("\n\n");
                description.push_str(notes);
            }
            (
                description,
                json!({
                    "type": "object",
                    "properties": {
                        "sql": {"type": "string", "description": "One PostgreSQL query.", "minLength": 1, "maxLength": spec.max_statement_bytes},
                        "limit": {"type": "integer", "minimum": 1, "maximum": spec.max_rows, "description": format!("Most rows to return (default and maximum {}).", spec.max_rows)}
                    },
                    "required": ["sql"],
                    "additionalProperties": false
                }),
                Value::Object(output_schema()),
            )
        }
        Kind::ListTables => (
            format!(
                "Lists the tables and views you may query with run_sql in {schemas}: schema, \
                 name, kind, an estimate of the row count and the comment saying what each \
                 holds."
            ),
            json!({
                "type": "object",
                "properties": {
                    "schema": {"type": "string", "enum": spec.schemas, "description": "Only this schema."}
                },
                "additionalProperties": false
            }),
            Value::Object(output_schema()),
        ),
        Kind::DescribeTable => (
            format!(
                "Describes one table or view of {schemas}: its columns (type, nullability, \
                 default, comment), keys, foreign keys both ways, indexes{}. Use it before \
                 run_sql to get names and joins right.",
                if spec.sample_rows > 0 {
                    format!(" and {} sample rows", spec.sample_rows)
                } else {
                    String::new()
                }
            ),
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "table or schema.table", "minLength": 1, "maxLength": 200}
                },
                "required": ["name"],
                "additionalProperties": false
            }),
            json!({"type": "object", "properties": {
                "schema": {"type": "string"}, "name": {"type": "string"}, "kind": {"type": "string"},
                "columns": {"type": "array", "items": {"type": "object"}}
            }, "required": ["schema", "name", "kind", "columns"]}),
        ),
        Kind::ExplainSql => (
            format!(
                "Shows the plan PostgreSQL would use for a query over {schemas} (EXPLAIN, \
                 without running it): check that a heavy query uses indexes before run_sql. \
                 The same rules as run_sql apply to the statement."
            ),
            json!({
                "type": "object",
                "properties": {
                    "sql": {"type": "string", "description": "One PostgreSQL query.", "minLength": 1, "maxLength": spec.max_statement_bytes}
                },
                "required": ["sql"],
                "additionalProperties": false
            }),
            json!({"type": "object", "properties": {"plan": {"type": "string"}}, "required": ["plan"]}),
        ),
    };
    Listing {
        name: kind.name().to_owned(),
        title: None,
        description,
        input_schema: object(input),
        output_schema: object(output),
        hints: Hints {
            read_only: true,
            destructive: false,
            idempotent: true,
        },
        meta: Map::new(),
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// A statement's end as its span records it: its rows, or its failure's kind (never
/// Postgres' message, which may quote the statement).
fn span_outcome(outcome: &Result<ToolOutput, SqlError>) -> Result<u64, &'static str> {
    match outcome {
        Ok(out) => Ok(out.row_count as u64),
        Err(SqlError::Refused(_)) => Err("refused"),
        Err(SqlError::Timeout { .. }) => Err("timeout"),
        Err(SqlError::Postgres(_)) => Err("query"),
        Err(SqlError::NotFound(_)) => Err("not_found"),
        Err(SqlError::Cancelled { .. }) => Err("cancelled"),
        Err(SqlError::Unavailable) => Err("unavailable"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_fold_like_postgres() {
        assert_eq!(table_name("Feedback").unwrap(), (None, "feedback".into()));
        assert_eq!(
            table_name("public.lads").unwrap(),
            (Some("public".into()), "lads".into())
        );
        assert_eq!(
            table_name("\"My.Schema\".\"T\"").unwrap(),
            (Some("My.Schema".into()), "T".into())
        );
        for bad in ["", ".", "a.", "\"\"", "a\"b", "a.b.c"] {
            assert!(table_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn identifiers_are_quoted_with_doubled_quotes() {
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
    }
}
