//! The guard in front of a model's statement: what keeps it from writing WAL, taking a
//! transaction id, reaching other callers' sessions or leaving state on the session when
//! Postgres' privileges cannot (migration 0008 needs a superuser, which a managed server's
//! master is not), and what keeps statements RDS Proxy pins on off the wire. It reads names
//! only (`lexer`); whether a statement reads the right data stays Postgres' business.
//!
//! Three layers, each covering what the one before cannot see:
//! - [`Guard::screen`], before anything is sent: one read-only query (first word `SELECT`,
//!   `WITH`, `VALUES` or `TABLE`, no `;`, no `INTO`), naming no [`DENIED`] function or view,
//!   no function of this database whose body the guard cannot read ([`Opaque`]) and no view
//!   that reaches one. Names are compared as the parser sees them: folded, unquoted,
//!   `U&"..."` escapes decoded. This covers the parts of a statement a plan does not print
//!   (`LIMIT`/`OFFSET` expressions, `VALUES` lists, window frame offsets).
//! - [`Guard::check_plan`], when the revokes are missing: the statement's plan (`EXPLAIN
//!   (VERBOSE, FORMAT JSON)` in the call's own transaction, before the statement runs) names
//!   no denied or opaque function. Views, row-level security policies and inlined SQL
//!   functions are expanded in it, so what they call shows.
//! - At start-up ([`Opaque::load`], [`startup_problems`]): which functions and views of the
//!   database the guard cannot vouch for, and the policies, operators and casts in the role's
//!   reach that would run them where no name shows.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;
use tokio_postgres::Client;

use super::lexer::{self, Tok};
use super::run::SqlError;

/// Why a function may not run, as a refusal says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Wal,
    Xid,
    Signal,
    Activity,
    DynamicSql,
    Session,
    Sequence,
    Server,
    Files,
}

impl Reason {
    pub fn says(self) -> &'static str {
        match self {
            Reason::Wal => "it writes WAL that ROLLBACK does not take back",
            Reason::Xid => "it assigns a transaction id, which ROLLBACK records in the WAL",
            Reason::Signal => "it cancels or ends other sessions of the role, i.e. other callers'",
            Reason::Activity => {
                "it shows other sessions' statements, i.e. other callers' questions"
            }
            Reason::DynamicSql => "it runs SQL given as text, which the SQL tools cannot check",
            Reason::Session => {
                "it changes settings or session state, which must not outlive the call"
            }
            Reason::Sequence => "it changes a sequence, which a read-only query cannot do",
            Reason::Server => "its effect on the server outlives the transaction",
            Reason::Files => "it reads or writes the server's files",
        }
    }

    /// What migration 0008's revokes close when a superuser ran them; without them only the
    /// guard's plan check does.
    pub fn closed_by_revokes(self) -> bool {
        matches!(
            self,
            Reason::Wal | Reason::Xid | Reason::Signal | Reason::Activity
        )
    }
}

/// Functions and views a model's statement may not name, nor its plan call. Views built on
/// `pg_stat_get_activity` are listed so that the refusal names what the model wrote; the plan
/// check would find the function inside them anyway.
pub const DENIED: &[(&str, Reason)] = &[
    ("pg_logical_emit_message", Reason::Wal),
    ("txid_current", Reason::Xid),
    ("pg_current_xact_id", Reason::Xid),
    ("pg_cancel_backend", Reason::Signal),
    ("pg_terminate_backend", Reason::Signal),
    ("pg_stat_get_activity", Reason::Activity),
    ("pg_stat_get_backend_activity", Reason::Activity),
    ("pg_stat_activity", Reason::Activity),
    ("pg_stat_ssl", Reason::Activity),
    ("pg_stat_gssapi", Reason::Activity),
    ("pg_stat_replication", Reason::Activity),
    // pg_stat_statements' view and function; Aurora's activity and plan functions.
    ("pg_stat_statements", Reason::Activity),
    ("aurora_stat_activity", Reason::Activity),
    ("aurora_stat_plans", Reason::Activity),
    ("aurora_stat_statements", Reason::Activity),
    ("query_to_xml", Reason::DynamicSql),
    ("query_to_xmlschema", Reason::DynamicSql),
    ("query_to_xml_and_xmlschema", Reason::DynamicSql),
    ("cursor_to_xml", Reason::DynamicSql),
    ("cursor_to_xmlschema", Reason::DynamicSql),
    ("table_to_xml", Reason::DynamicSql),
    ("table_to_xmlschema", Reason::DynamicSql),
    ("table_to_xml_and_xmlschema", Reason::DynamicSql),
    ("schema_to_xml", Reason::DynamicSql),
    ("schema_to_xmlschema", Reason::DynamicSql),
    ("schema_to_xml_and_xmlschema", Reason::DynamicSql),
    ("database_to_xml", Reason::DynamicSql),
    ("database_to_xmlschema", Reason::DynamicSql),
    ("database_to_xml_and_xmlschema", Reason::DynamicSql),
    ("ts_stat", Reason::DynamicSql),
    // ts_rewrite(tsquery, text) runs its text; the three-tsquery form does not, but shares
    // the name.
    ("ts_rewrite", Reason::DynamicSql),
    // tablefunc's and xml2's functions that run a query given as text.
    ("crosstab", Reason::DynamicSql),
    ("crosstab2", Reason::DynamicSql),
    ("crosstab3", Reason::DynamicSql),
    ("crosstab4", Reason::DynamicSql),
    ("connectby", Reason::DynamicSql),
    ("xpath_table", Reason::DynamicSql),
    ("set_config", Reason::Session),
    ("setseed", Reason::Session),
    ("nextval", Reason::Sequence),
    ("setval", Reason::Sequence),
    ("pg_switch_wal", Reason::Server),
    ("pg_create_restore_point", Reason::Server),
    ("pg_backup_start", Reason::Server),
    ("pg_backup_stop", Reason::Server),
    ("pg_promote", Reason::Server),
    ("pg_reload_conf", Reason::Server),
    ("pg_rotate_logfile", Reason::Server),
    ("pg_log_backend_memory_contexts", Reason::Server),
    ("pg_read_file", Reason::Files),
    ("pg_read_binary_file", Reason::Files),
    ("pg_ls_dir", Reason::Files),
    ("pg_stat_file", Reason::Files),
    ("lo_import", Reason::Files),
    ("lo_export", Reason::Files),
];

/// Families refused by the start of their name: every advisory lock function (session locks
/// outlive ROLLBACK; RDS Proxy pins on them), the statistics resets, dblink's functions.
const DENIED_PREFIXES: &[(&str, Reason)] = &[
    ("pg_advisory_", Reason::Session),
    ("pg_try_advisory_", Reason::Session),
    ("pg_stat_reset", Reason::Server),
    ("dblink", Reason::DynamicSql),
];

/// Why `name` (as the parser sees it) is refused wherever it appears, if it is.
pub fn denied(name: &str) -> Option<Reason> {
    let name = name.to_ascii_lowercase();
    DENIED
        .iter()
        .find(|(n, _)| *n == name)
        .or_else(|| DENIED_PREFIXES.iter().find(|(p, _)| name.starts_with(p)))
        .map(|(_, reason)| *reason)
}

/// The words a query can start with.
const QUERY_STARTS: [&str; 4] = ["select", "with", "values", "table"];

/// What the guard knows of this database, loaded at start-up: the functions whose bodies it
/// cannot read (PL/pgSQL and other procedural languages; SQL functions whose body names a
/// denied or opaque one; aggregates built on such functions) and the views that reach one.
/// Keys are lower-case names, values what a refusal calls them.
#[derive(Debug, Clone, Default)]
pub struct Opaque {
    functions: BTreeMap<String, String>,
    views: BTreeMap<String, String>,
}

/// The guard of one deployment: [`Opaque`] and whether plans are checked (the revokes of
/// migration 0008 are missing).
#[derive(Debug, Clone, Default)]
pub struct Guard {
    pub opaque: Opaque,
    pub check_plans: bool,
}

impl Guard {
    /// Before anything is sent: see the module docs. `Err` is the refusal the model reads.
    pub fn screen(&self, sql: &str) -> Result<(), SqlError> {
        let tokens = lexer::tokens(sql).map_err(|e| {
            SqlError::Refused(format!(
                "the statement could not be read ({e}); send one complete query"
            ))
        })?;
        let first = tokens.iter().find(|t| **t != Tok::Open);
        match first {
            Some(Tok::Ident {
                name,
                quoted: false,
            }) if QUERY_STARTS.contains(&name.as_str()) => {}
            other => {
                let word = match other {
                    Some(Tok::Ident { name, .. }) => name.chars().take(32).collect::<String>(),
                    _ => sql.chars().take(8).collect(),
                };
                return Err(SqlError::Refused(format!(
                    "the SQL tools run one read-only query (SELECT, WITH ... SELECT, VALUES or \
                     TABLE); `{}` statements are not run",
                    word.to_uppercase()
                )));
            }
        }
        if tokens.contains(&Tok::Semicolon) {
            return Err(SqlError::Refused(
                "the statement has a `;` inside: send one query per call, without `;`".into(),
            ));
        }
        for (i, tok) in tokens.iter().enumerate() {
            let Tok::Ident { name, quoted } = tok else {
                continue;
            };
            if !quoted && name == "into" {
                return Err(SqlError::Refused(
                    "`INTO` writes (SELECT ... INTO makes a table, INSERT INTO adds rows), and \
                     the SQL tools only read: drop the INTO clause"
                        .into(),
                ));
            }
            if let Some(reason) = denied(name) {
                return Err(SqlError::Refused(format!(
                    "the statement names `{name}`, which the SQL tools do not run: {}. Write \
                     the query without it",
                    reason.says()
                )));
            }
            let lower = name.to_ascii_lowercase();
            if called(&tokens, i)
                && let Some(what) = self.opaque.functions.get(&lower)
            {
                return Err(SqlError::Refused(format!(
                    "the statement calls `{name}`, a function of this database ({what}) whose \
                     body the SQL tools cannot check; write the query with built-in functions \
                     instead"
                )));
            }
            if let Some(what) = self.opaque.views.get(&lower) {
                return Err(SqlError::Refused(format!(
                    "the statement reads `{name}` ({what}), a view that calls what the SQL \
                     tools do not run; query the tables it reads instead"
                )));
            }
        }
        Ok(())
    }

    /// The statement's plan, as `EXPLAIN (VERBOSE, FORMAT JSON)` printed it: every text in it
    /// is read for names, so a denied function reached through a view or a policy is refused
    /// before the statement runs.
    pub fn check_plan(&self, plan: &Value) -> Result<(), SqlError> {
        if !plan.is_array() {
            return Err(SqlError::Refused(
                "the statement's plan could not be read; it was not run".into(),
            ));
        }
        let mut texts = Vec::new();
        strings(plan, &mut texts);
        for text in texts {
            let Ok(tokens) = lexer::tokens(text) else {
                return Err(SqlError::Refused(
                    "the statement's plan could not be read; it was not run".into(),
                ));
            };
            for (i, tok) in tokens.iter().enumerate() {
                let Tok::Ident { name, .. } = tok else {
                    continue;
                };
                if let Some(reason) = denied(name) {
                    return Err(SqlError::Refused(format!(
                        "the statement's plan calls `{name}` (through a view or a row-level \
                         security policy of what it reads), which the SQL tools do not run: {}. \
                         Read other tables or views",
                        reason.says()
                    )));
                }
                // Deparsed calls are `name(...)`; a column of the same name is not one.
                if tokens.get(i + 1) == Some(&Tok::Open)
                    && let Some(what) = self.opaque.functions.get(&name.to_ascii_lowercase())
                {
                    return Err(SqlError::Refused(format!(
                        "the statement's plan calls `{name}` ({what}, through a view or a \
                         row-level security policy of what it reads), whose body the SQL tools \
                         cannot check. Read other tables or views"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Whether the name at `i` is called: followed by `(`, or written `x.name`, which Postgres
/// also reads as `name(x)` when `x` is a row.
fn called(tokens: &[Tok], i: usize) -> bool {
    tokens.get(i + 1) == Some(&Tok::Open) || (i > 0 && tokens[i - 1] == Tok::Dot)
}

/// Every string value in `value`, keys left out.
fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// Objects created by initdb have OIDs below this (Postgres' `FirstNormalObjectId`): the
/// built-in functions and views, known to the list above.
const FIRST_NORMAL_OID: i64 = 16384;

struct Function {
    schema: String,
    name: String,
    language: String,
    executable: bool,
    /// An SQL function's body; `None` for other languages.
    body: Option<String>,
    /// An aggregate's support functions (transition, final, combine...).
    support: Vec<i64>,
}

struct View {
    schema: String,
    name: String,
    readable: bool,
    definition: String,
}

/// Names a text may not use, at a point of the classification.
struct Unsafe<'a> {
    functions: &'a HashSet<String>,
    views: &'a HashSet<String>,
}

impl Unsafe<'_> {
    /// The first name in `text` that makes it unsafe: a denied one anywhere, an opaque
    /// function called, an unsafe view anywhere. `Some("")` when the text cannot be read.
    fn first_in(&self, text: &str) -> Option<String> {
        let Ok(tokens) = lexer::tokens(text) else {
            return Some(String::new());
        };
        tokens.iter().enumerate().find_map(|(i, tok)| {
            let Tok::Ident { name, .. } = tok else {
                return None;
            };
            let lower = name.to_ascii_lowercase();
            let bad = denied(&lower).is_some()
                || (called(&tokens, i) && self.functions.contains(&lower))
                || self.views.contains(&lower);
            bad.then_some(lower)
        })
    }
}

/// The database's own functions and views, classified (see [`Opaque`]).
pub struct Classified {
    functions: HashMap<i64, Function>,
    opaque_functions: HashSet<i64>,
    views: Vec<View>,
    unsafe_views: HashSet<usize>,
}

impl Classified {
    pub fn opaque(&self) -> Opaque {
        let functions = self
            .opaque_functions
            .iter()
            .filter_map(|oid| self.functions.get(oid))
            .filter(|f| f.executable)
            .map(|f| {
                (
                    f.name.to_ascii_lowercase(),
                    format!("{}.{}, {}", f.schema, f.name, f.language),
                )
            })
            .collect();
        let views = self
            .unsafe_views
            .iter()
            .map(|&i| &self.views[i])
            .filter(|v| v.readable)
            .map(|v| {
                (
                    v.name.to_ascii_lowercase(),
                    format!("{}.{}", v.schema, v.name),
                )
            })
            .collect();
        Opaque { functions, views }
    }

    /// Lower-case names of every opaque function, executable or not.
    fn opaque_names(&self) -> HashSet<String> {
        self.opaque_functions
            .iter()
            .filter_map(|oid| self.functions.get(oid))
            .map(|f| f.name.to_ascii_lowercase())
            .collect()
    }

    fn unsafe_view_names(&self) -> HashSet<String> {
        self.unsafe_views
            .iter()
            .map(|&i| self.views[i].name.to_ascii_lowercase())
            .collect()
    }

    /// How the function `oid` is named in a problem, if it is opaque and the role may run it.
    fn opaque_executable(&self, oid: i64) -> Option<String> {
        let f = self.functions.get(&oid)?;
        (self.opaque_functions.contains(&oid) && f.executable)
            .then(|| format!("{}.{} ({})", f.schema, f.name, f.language))
    }
}

/// Loads and classifies the database's own functions and views, as the role sees the
/// catalogs. Pessimistic: everything starts unsafe but C and internal functions, and an SQL
/// function, aggregate or view becomes safe only once all it names is; what depends on
/// itself stays unsafe.
pub async fn classify(client: &Client) -> Result<Classified, tokio_postgres::Error> {
    let rows = client
        .query_typed(
            "SELECT p.oid::bigint, n.nspname::text, p.proname::text, l.lanname::text, \
                    pg_catalog.has_function_privilege(p.oid, 'EXECUTE'), \
                    CASE WHEN l.lanname = 'sql' \
                         THEN coalesce(pg_catalog.pg_get_function_sqlbody(p.oid), p.prosrc) END, \
                    CASE WHEN p.prokind = 'a' THEN ARRAY[a.aggtransfn::oid::bigint, \
                         a.aggfinalfn::oid::bigint, a.aggcombinefn::oid::bigint, \
                         a.aggserialfn::oid::bigint, a.aggdeserialfn::oid::bigint, \
                         a.aggmtransfn::oid::bigint, a.aggminvtransfn::oid::bigint, \
                         a.aggmfinalfn::oid::bigint] END \
             FROM pg_catalog.pg_proc p \
             JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
             JOIN pg_catalog.pg_language l ON l.oid = p.prolang \
             LEFT JOIN pg_catalog.pg_aggregate a ON a.aggfnoid = p.oid \
             WHERE p.oid >= 16384",
            &[],
        )
        .await?;
    let mut functions = HashMap::new();
    let mut opaque_functions = HashSet::new();
    for row in rows {
        let oid: i64 = row.get(0);
        let language: String = row.get(3);
        let support: Option<Vec<i64>> = row.get(6);
        let f = Function {
            schema: row.get(1),
            name: row.get(2),
            executable: row.get(4),
            body: row.get(5),
            support: support
                .unwrap_or_default()
                .into_iter()
                .filter(|&s| s != 0)
                .collect(),
            language,
        };
        let trusted_code = matches!(f.language.as_str(), "c" | "internal") && f.support.is_empty();
        if !trusted_code {
            opaque_functions.insert(oid);
        }
        functions.insert(oid, f);
    }
    let rows = client
        .query_typed(
            "SELECT n.nspname::text, c.relname::text, \
                    pg_catalog.has_table_privilege(c.oid, 'SELECT'), \
                    pg_catalog.pg_get_viewdef(c.oid) \
             FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind = 'v' AND c.oid >= 16384",
            &[],
        )
        .await?;
    let views: Vec<View> = rows
        .iter()
        .map(|row| View {
            schema: row.get(0),
            name: row.get(1),
            readable: row.get(2),
            definition: row.get::<_, Option<String>>(3).unwrap_or_default(),
        })
        .collect();
    let mut classified = Classified {
        unsafe_views: (0..views.len()).collect(),
        functions,
        opaque_functions,
        views,
    };
    loop {
        let function_names = classified.opaque_names();
        let view_names = classified.unsafe_view_names();
        let names = Unsafe {
            functions: &function_names,
            views: &view_names,
        };
        let mut cleared_functions = Vec::new();
        for &oid in &classified.opaque_functions {
            let f = &classified.functions[&oid];
            let clear = if !f.support.is_empty() {
                f.support
                    .iter()
                    .all(|s| *s < FIRST_NORMAL_OID || !classified.opaque_functions.contains(s))
            } else if let Some(body) = &f.body {
                names.first_in(body).is_none()
            } else {
                false
            };
            if clear {
                cleared_functions.push(oid);
            }
        }
        let cleared_views: Vec<usize> = classified
            .unsafe_views
            .iter()
            .copied()
            .filter(|&i| names.first_in(&classified.views[i].definition).is_none())
            .collect();
        if cleared_functions.is_empty() && cleared_views.is_empty() {
            break;
        }
        for oid in cleared_functions {
            classified.opaque_functions.remove(&oid);
        }
        for i in cleared_views {
            classified.unsafe_views.remove(&i);
        }
    }
    Ok(classified)
}

/// What would run code the guard cannot see without a name of it in the statement or its
/// plan: row-level security policies of tables the role reads (their expressions show in a
/// plan, but not inside a `LIMIT` or `VALUES`), operators and casts backed by opaque
/// functions. Only needed when the guard stands in for migration 0008's revokes.
pub async fn startup_problems(
    client: &Client,
    classified: &Classified,
    role: &str,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let mut problems = Vec::new();
    let function_names = classified.opaque_names();
    let view_names = classified.unsafe_view_names();
    let names = Unsafe {
        functions: &function_names,
        views: &view_names,
    };
    let rows = client
        .query_typed(
            "SELECT format('%I on %s', p.polname, c.oid::regclass), \
                    concat_ws(' ', pg_catalog.pg_get_expr(p.polqual, p.polrelid), \
                              pg_catalog.pg_get_expr(p.polwithcheck, p.polrelid)) \
             FROM pg_catalog.pg_policy p JOIN pg_catalog.pg_class c ON c.oid = p.polrelid \
             WHERE pg_catalog.has_table_privilege(c.oid, 'SELECT') ORDER BY 1",
            &[],
        )
        .await?;
    for row in rows {
        let policy: String = row.get(0);
        let expression: String = row.get(1);
        if let Some(name) = names.first_in(&expression) {
            problems.push(format!(
                "policy {policy} calls `{name}`, which the SQL tools' guard cannot check: \
                 change the policy, REVOKE SELECT on its table FROM {role}, or have a \
                 superuser run migration 0008's statements"
            ));
        }
    }
    let rows = client
        .query_typed(
            "SELECT format('operator %s', o.oid::regoperator), o.oprcode::oid::bigint \
             FROM pg_catalog.pg_operator o WHERE o.oid >= 16384 \
             UNION ALL \
             SELECT format('cast %s', pg_catalog.format('(%s AS %s)', \
                        k.castsource::regtype, k.casttarget::regtype)), k.castfunc::bigint \
             FROM pg_catalog.pg_cast k WHERE k.oid >= 16384 AND k.castfunc <> 0 \
             ORDER BY 1",
            &[],
        )
        .await?;
    for row in rows {
        let what: String = row.get(0);
        if let Some(function) = classified.opaque_executable(row.get(1)) {
            problems.push(format!(
                "{what} runs {function}, whose body the SQL tools' guard cannot check: REVOKE \
                 EXECUTE ON FUNCTION {} FROM PUBLIC, {role}, or have a superuser run migration \
                 0008's statements",
                function.split(" (").next().unwrap_or(&function)
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard() -> Guard {
        let mut opaque = Opaque::default();
        opaque
            .functions
            .insert("count_rows".into(), "public.count_rows, plpgsql".into());
        opaque
            .views
            .insert("activity".into(), "analytics.activity".into());
        Guard {
            opaque,
            check_plans: true,
        }
    }

    fn refused(sql: &str) -> String {
        match guard().screen(sql) {
            Err(SqlError::Refused(message)) => message,
            other => panic!("{sql}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn queries_pass() {
        for sql in [
            "SELECT 1",
            "(SELECT 1) UNION (SELECT 2)",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "VALUES (1)",
            "TABLE regions",
            "select count_rows FROM t", // a column, not a call
            "SELECT 'pg_cancel_backend(1); SET x' AS text -- set_config(\n",
        ] {
            guard().screen(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }

    #[test]
    fn statements_that_are_not_queries_or_keep_session_state_are_refused_before_sending() {
        for sql in [
            "SET statement_timeout = 0",
            "RESET ALL",
            "DISCARD ALL",
            "PREPARE p AS SELECT 1",
            "EXECUTE p",
            "DEALLOCATE p",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "LISTEN x",
            "UNLISTEN *",
            "COMMIT",
            "/* hi */ BEGIN",
            "CREATE TEMP TABLE t AS SELECT 1",
        ] {
            assert!(refused(sql).contains("statements are not run"), "{sql}");
        }
        assert!(refused("/* hi */ BEGIN").contains("`BEGIN` statements"));
        assert!(refused("SELECT 1; SET x = 1").contains("`;`"));
        assert!(refused("SELECT * INTO TEMP t FROM regions").contains("INTO"));
    }

    #[test]
    fn denied_names_are_refused_however_they_are_spelled() {
        for sql in [
            "SELECT pg_terminate_backend(1)",
            "SELECT PG_CANCEL_BACKEND(1)",
            "SELECT pg_catalog . \"pg_stat_get_activity\" (NULL)",
            r#"SELECT U&"pg\005fstat\005factivity" FROM x"#,
            "SELECT u&\"set!005fconfig\" UESCAPE '!' ('work_mem', '1GB', false)",
            "SELECT * FROM t LIMIT txid_current()",
            "SELECT * FROM (VALUES (pg_logical_emit_message(false, 'x', 'y'))) v",
            "SELECT pg_advisory_lock(1)",
            "SELECT pg_try_advisory_xact_lock(1)",
            "SELECT query_to_xml('SELECT 1', false, false, '')",
            "SELECT a.pg_cancel_backend FROM t a",
        ] {
            let message = refused(sql);
            assert!(message.contains("do not run"), "{sql}: {message}");
        }
    }

    #[test]
    fn opaque_functions_called_and_unsafe_views_read_are_refused() {
        assert!(refused("SELECT count_rows('SELECT 1')").contains("cannot check"));
        assert!(refused("SELECT t.count_rows FROM t").contains("cannot check"));
        assert!(refused("SELECT * FROM analytics.activity").contains("a view"));
    }

    #[test]
    fn plans_are_read_for_denied_and_opaque_calls_but_not_columns() {
        let plan = |output: &str| serde_json::json!([{"Plan": {"Node Type": "Function Scan", "Output": [output]}}]);
        let g = guard();
        assert!(
            g.check_plan(&plan("pg_stat_get_activity(NULL::integer)"))
                .is_err()
        );
        assert!(g.check_plan(&plan("public.count_rows('x'::text)")).is_err());
        g.check_plan(&plan("t.count_rows")).unwrap();
        g.check_plan(&plan("sum(s.amount), 'pg_cancel_backend'::text"))
            .unwrap();
        assert!(g.check_plan(&Value::Null).is_err());
    }

    #[test]
    fn names_are_denied_exactly_or_by_family() {
        assert_eq!(denied("pg_advisory_unlock_all"), Some(Reason::Session));
        assert_eq!(denied("dblink_connect"), Some(Reason::DynamicSql));
        assert_eq!(denied("pg_stat_reset_shared"), Some(Reason::Server));
        assert_eq!(denied("pg_stat_get_backend_pid"), None);
        assert_eq!(denied("current_setting"), None);
    }
}
