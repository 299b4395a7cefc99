//! Whether each tool's role may do what its statement asks: every statement is planned
//! (`EXPLAIN`, never run) as the role a call runs it as, so Postgres' own privilege checks
//! decide, and a refusal is worded as the `GRANT` that fixes it. It changes nothing and leaves
//! nothing on the connection (savepoints rolled back, `SET LOCAL ROLE`, no statement kept).

use std::fmt;

use deadpool_postgres::Pool;
use parley_core::db::{is_connection_error, pg_message};
use serde_json::Value;
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::exec::{CallSettings, statements};
use super::params::SqlValue;
use super::spec::ToolSpec;
use super::sql;

/// The table every write records its idempotency keys in (migration 0003); its fix is the
/// group that may, not a grant of its own.
const IDEMPOTENCY: &str = "parley.idempotency";

/// A role as messages name it and as a `GRANT` spells it (`quote_ident`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    pub quoted: String,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

/// One thing a tool's role lacks, worded with the statement that fixes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The login may not `SET ROLE` to the tool's role.
    SetRole {
        login: Role,
        role: Role,
    },
    /// The tool's role does not exist.
    NoRole {
        login: Role,
        role: Role,
        writes: bool,
    },
    Schema {
        role: Role,
        schema: String,
    },
    /// Privileges on a relation, schema-qualified (`public.rooms`).
    Relation {
        role: Role,
        privileges: Vec<&'static str>,
        relation: String,
    },
    /// A write's role is not in `parley_tool_writer`, so it cannot record idempotency keys.
    Idempotency {
        role: Role,
    },
    /// `nextval` of a serial column's default (an identity column needs no grant).
    Sequence {
        role: Role,
        sequence: String,
    },
    /// A read-only tool whose statement changes rows: no grant fixes that.
    ReadOnly {
        relation: String,
    },
    /// Refused for a reason no grant here names (a function, a column): Postgres' message.
    Refused {
        role: Role,
        message: String,
    },
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::SetRole { login, role } => write!(
                f,
                "the login {login} may not switch to the role {role}; run: GRANT {} TO {} \
                 WITH INHERIT FALSE, SET TRUE;",
                role.quoted, login.quoted
            ),
            Missing::NoRole {
                login,
                role,
                writes,
            } => write!(
                f,
                "the role {role} does not exist; run: CREATE ROLE {} NOLOGIN{}; GRANT {} TO {} \
                 WITH INHERIT FALSE, SET TRUE; then grant it what the statement needs",
                role.quoted,
                if *writes {
                    " IN ROLE parley_tool_writer"
                } else {
                    ""
                },
                role.quoted,
                login.quoted
            ),
            Missing::Schema { role, schema } => write!(
                f,
                "role {role} may not use the schema {schema}; run: GRANT USAGE ON SCHEMA \
                 {schema} TO {};",
                role.quoted
            ),
            Missing::Relation {
                role,
                privileges,
                relation,
            } => {
                let what = match privileges.as_slice() {
                    ["SELECT"] => format!("SELECT from {relation}"),
                    ["INSERT"] => format!("INSERT into {relation}"),
                    ["DELETE"] => format!("DELETE from {relation}"),
                    [one] => format!("{one} {relation}"),
                    many => format!("{} on {relation}", many.join(" or ")),
                };
                write!(
                    f,
                    "role {role} may not {what}; run: GRANT {} ON {relation} TO {};",
                    privileges.join(", "),
                    role.quoted
                )
            }
            Missing::Idempotency { role } => write!(
                f,
                "role {role} may not record idempotency keys in {IDEMPOTENCY}; run: GRANT \
                 parley_tool_writer TO {};",
                role.quoted
            ),
            Missing::Sequence { role, sequence } => write!(
                f,
                "role {role} may not take the next value of the sequence {sequence}; run: \
                 GRANT USAGE ON SEQUENCE {sequence} TO {};",
                role.quoted
            ),
            Missing::ReadOnly { relation } => write!(
                f,
                "the statement changes {relation}, but the tool is read-only; declare \
                 writes = true and the role it writes as, or change the statement"
            ),
            Missing::Refused { role, message } => {
                write!(f, "role {role} may not run the statement: {message}")
            }
        }
    }
}

/// What the tools' roles lack, each fix once with every tool that needs it, in tool order.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.0.iter().map(ToString::to_string).collect::<Vec<_>>().join(" "))]
pub struct MissingPrivileges(pub Vec<Problem>);

/// One missing privilege and the tools that need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub tools: Vec<String>,
    pub missing: Missing,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self
            .tools
            .iter()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let kind = if self.tools.len() == 1 {
            "tool"
        } else {
            "tools"
        };
        write!(f, "{kind} {names}: {}", self.missing)
    }
}

/// Checks every tool in `tools` inside the caller's open transaction: `None` when each role
/// may do all its statement asks.
pub async fn check_all(
    client: &Client,
    tools: &[ToolSpec],
) -> Result<Option<MissingPrivileges>, tokio_postgres::Error> {
    let checker = Checker::new(client, tools).await?;
    let mut problems: Vec<Problem> = Vec::new();
    for tool in tools {
        for missing in checker.check(client, tool).await? {
            match problems.iter_mut().find(|p| p.missing == missing) {
                Some(problem) => problem.tools.push(tool.name.clone()),
                None => problems.push(Problem {
                    tools: vec![tool.name.clone()],
                    missing,
                }),
            }
        }
    }
    Ok((!problems.is_empty()).then_some(MissingPrivileges(problems)))
}

/// After a call of `tool` was refused for lack of a privilege (revoked since start-up, or a
/// path the start-up check could not see): the same check, logged with its fix. The caller
/// is told only that the service's role may not (`ExecError::PermissionDenied`): the tables,
/// roles and grants are the operator's business, not something a caller can act on.
pub async fn log_refusal(pool: &Pool, tool: &ToolSpec) {
    let found = async {
        let client = pool
            .get()
            .await
            .map_err(|e| parley_core::db::DbError::from(e).to_string())?;
        client
            .batch_execute("BEGIN READ ONLY")
            .await
            .map_err(|e| pg_message(&e))?;
        let found = check_all(&client, std::slice::from_ref(tool)).await;
        let _ = client.batch_execute("ROLLBACK").await;
        found.map_err(|e| pg_message(&e))
    };
    match found.await {
        Ok(Some(missing)) => {
            for problem in missing.0 {
                tracing::error!(tool = %tool.name, problem = %problem.missing, "a tool call was refused for a missing privilege");
            }
        }
        Ok(None) => tracing::error!(
            tool = %tool.name,
            "a tool call was refused for a missing privilege, and its statement now plans as its role (granted meanwhile?)"
        ),
        Err(error) => {
            tracing::warn!(tool = %tool.name, %error, "could not check the privileges of a refused tool call")
        }
    }
}

/// One statement a tool runs, with its placeholders' types and the role a call runs it as.
#[derive(Clone, Copy)]
struct Statement<'a> {
    tool: &'a ToolSpec,
    role: &'a Role,
    sql: &'a str,
    types: &'a [Type],
}

/// The login and the tools' roles, quoted once.
struct Checker {
    login: Role,
    /// Each role the tools name, and whether it exists.
    roles: Vec<(Role, bool)>,
}

impl Checker {
    async fn new(client: &Client, tools: &[ToolSpec]) -> Result<Self, tokio_postgres::Error> {
        let mut names: Vec<&str> = tools.iter().filter_map(|t| t.role.as_deref()).collect();
        names.sort_unstable();
        names.dedup();
        let login = client
            .query_typed_one(
                "SELECT current_user::text, pg_catalog.quote_ident(current_user)",
                &[],
            )
            .await?;
        let roles = client
            .query_typed(
                "SELECT r, pg_catalog.quote_ident(r), \
                        EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = r) \
                 FROM unnest($1::text[]) AS r",
                &[(&names, Type::TEXT_ARRAY)],
            )
            .await?;
        let role = |row: &tokio_postgres::Row| Role {
            name: row.get(0),
            quoted: row.get(1),
        };
        Ok(Self {
            login: role(&login),
            roles: roles.iter().map(|row| (role(row), row.get(2))).collect(),
        })
    }

    /// What `tool` needs and its role lacks, for each statement it may run.
    async fn check(
        &self,
        client: &Client,
        tool: &ToolSpec,
    ) -> Result<Vec<Missing>, tokio_postgres::Error> {
        let role = match &tool.role {
            None => self.login.clone(),
            Some(name) => match self.roles.iter().find(|(r, _)| &r.name == name) {
                Some((role, true)) => role.clone(),
                // Nothing else can be checked without it.
                Some((role, false)) => {
                    return Ok(vec![Missing::NoRole {
                        login: self.login.clone(),
                        role: role.clone(),
                        writes: tool.writes,
                    }]);
                }
                None => Role {
                    name: name.clone(),
                    quoted: name.clone(),
                },
            },
        };
        let mut missing: Vec<Missing> = Vec::new();
        for (sql, types) in statements(tool) {
            let statement = Statement {
                tool,
                role: &role,
                sql,
                types: &types,
            };
            for found in self.statement(client, &statement).await? {
                if !missing.contains(&found) {
                    missing.push(found);
                }
            }
            // Without the role nothing else can be checked.
            if missing.iter().any(|m| matches!(m, Missing::SetRole { .. })) {
                break;
            }
        }
        Ok(missing)
    }

    /// Plans one statement as its role; when Postgres refuses, works out what is missing.
    async fn statement(
        &self,
        client: &Client,
        statement: &Statement<'_>,
    ) -> Result<Vec<Missing>, tokio_postgres::Error> {
        let Statement {
            tool,
            role,
            sql,
            types,
        } = *statement;
        // Bound to NULLs of the declared types, as a call with no arguments would be: planned
        // and its executor started (which checks the privileges of every relation the
        // statement reads or changes, views and policies included), never run. A write's plan
        // is VERBOSE, for the `nextval` calls of its target list.
        let nulls: Vec<_> = types
            .iter()
            .map(|ty| (SqlValue::Null.as_sql(), ty.clone()))
            .collect();
        let explain = format!(
            "EXPLAIN ({}FORMAT JSON) {sql}",
            if tool.writes { "VERBOSE, " } else { "" }
        );
        // Opened as a call of the tool opens (`exec::CallSettings`): its time limit, settings
        // and role, so this check sends nothing a proxy would pin the connection for either.
        let settings = CallSettings::new(tool, None);
        let no_caller = None;
        let params = settings.params(&no_caller);
        // One round trip: all go out before the first answer comes back, in this order. When
        // the role is refused, the EXPLAIN fails with the aborted savepoint and the rollback
        // ends it.
        let (saved, begun, explained, rolled_back) = tokio::join!(
            client.batch_execute("SAVEPOINT parley_privileges"),
            client.execute_typed(super::exec::BEGIN_CALL, &params),
            client.query_typed(&explain, &nulls),
            rollback(client),
        );
        let begun = saved.and(begun.map(drop));
        if let Err(e) = begun {
            rolled_back?;
            return match e.code() {
                Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => Ok(vec![Missing::SetRole {
                    login: self.login.clone(),
                    role: role.clone(),
                }]),
                _ => Err(e),
            };
        }
        rolled_back?;
        let refusal = match explained {
            Ok(rows) => {
                let plan: Option<Value> = rows.first().map(|row| row.get(0));
                let sequences = plan.as_ref().map(nextval_sequences).unwrap_or_default();
                if sequences.is_empty() {
                    return Ok(Vec::new());
                }
                // `nextval` checks its privilege only when it runs.
                return lacking_sequences(client, role, &sequences).await;
            }
            Err(e) => e,
        };
        if is_connection_error(&refusal) {
            return Err(refusal);
        }
        if !names_a_privilege(&refusal, tool.role.is_some()) {
            // Planning with NULLs can fail where a call with values would not (a function
            // that refuses NULL, folded at plan time): not a privilege, so not start-up's to
            // refuse. The first call tells.
            tracing::warn!(tool = %tool.name, error = %pg_message(&refusal), "could not plan the tool's statement to check its role's privileges");
            return Ok(Vec::new());
        }
        let mut missing = lacking_relations(client, statement).await?;
        if missing.is_empty() {
            missing.push(Missing::Refused {
                role: role.clone(),
                message: pg_message(&refusal),
            });
        }
        Ok(missing)
    }
}

/// A refusal worth naming a fix for: a privilege, or (as a declared role, when the login could
/// prepare the statement) a name the role cannot see, which a schema's USAGE hides.
fn names_a_privilege(e: &tokio_postgres::Error, as_declared_role: bool) -> bool {
    let Some(code) = e.code() else {
        return false;
    };
    *code == SqlState::INSUFFICIENT_PRIVILEGE
        || as_declared_role
            && [
                SqlState::UNDEFINED_TABLE,
                SqlState::UNDEFINED_FUNCTION,
                SqlState::UNDEFINED_OBJECT,
                SqlState::INVALID_SCHEMA_NAME,
            ]
            .contains(code)
}

async fn rollback(client: &Client) -> Result<(), tokio_postgres::Error> {
    client
        .batch_execute(
            "ROLLBACK TO SAVEPOINT parley_privileges; RELEASE SAVEPOINT parley_privileges",
        )
        .await
}

/// The sequences a plan takes values from: `nextval('<name>'::regclass)` in any of its
/// expressions (a serial column's default shows up in an INSERT's target list so).
fn nextval_sequences(plan: &Value) -> Vec<String> {
    const CALL: &str = "nextval('";
    let mut found = Vec::new();
    let mut texts = vec![plan];
    while let Some(value) = texts.pop() {
        match value {
            Value::String(text) => {
                let mut rest = text.as_str();
                while let Some(at) = rest.find(CALL) {
                    rest = &rest[at + CALL.len()..];
                    if let Some((name, after)) = quoted_literal(rest)
                        && after.starts_with("::regclass")
                        && !found.contains(&name)
                    {
                        found.push(name);
                    }
                }
            }
            Value::Array(items) => texts.extend(items),
            Value::Object(fields) => texts.extend(fields.values()),
            _ => {}
        }
    }
    found
}

/// The body of a single-quoted literal whose opening quote is already consumed (`''` is one
/// quote), and the text after its closing quote.
fn quoted_literal(text: &str) -> Option<(String, &str)> {
    let mut body = String::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '\'' {
            body.push(c);
        } else if chars.peek().is_some_and(|(_, next)| *next == '\'') {
            chars.next();
            body.push('\'');
        } else {
            return Some((body, &text[i + 1..]));
        }
    }
    None
}

/// Of `names` (as a plan prints them), the sequences `role` may not take values from.
/// Identity columns' sequences are left out: Postgres does not check them.
async fn lacking_sequences(
    client: &Client,
    role: &Role,
    names: &[String],
) -> Result<Vec<Missing>, tokio_postgres::Error> {
    let rows = client
        .query_typed(
            "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) \
             FROM unnest($1::text[]) AS s(name) \
             JOIN pg_catalog.pg_class c ON c.oid = pg_catalog.to_regclass(s.name) \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind = 'S' \
               AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend d \
                   WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass \
                     AND d.objid = c.oid AND d.deptype = 'i') \
               AND NOT CASE WHEN c.relkind = 'S' \
                   THEN pg_catalog.has_sequence_privilege($2, c.oid, 'USAGE, UPDATE') END \
             ORDER BY 1",
            &[(&names, Type::TEXT_ARRAY), (&role.name, Type::TEXT)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Missing::Sequence {
            role: role.clone(),
            sequence: row.get(0),
        })
        .collect())
}

/// The relations a statement touches are the ones preparing it locks, until the savepoint
/// is rolled back: read ones `AccessShareLock`, `FOR UPDATE` ones `RowShareLock`, changed
/// ones `RowExclusiveLock` (which change is the statement text's: [`sql::write_targets`]).
/// Tables read through a view are left out: Postgres checks those as the view's owner.
const LOCKED: &str = "\
WITH locked AS (
    SELECT l.relation AS oid, bool_or(l.mode = 'RowExclusiveLock') AS changed,
           bool_or(l.mode = 'RowShareLock') AS locks_rows
    FROM pg_catalog.pg_locks l
    WHERE l.pid = pg_catalog.pg_backend_pid() AND l.locktype = 'relation'
      AND l.database = (SELECT oid FROM pg_catalog.pg_database
                        WHERE datname = pg_catalog.current_database())
    GROUP BY l.relation
), targets AS (
    SELECT pg_catalog.to_regclass(t.name) AS oid, t.verb
    FROM unnest($2::text[], $3::text[]) AS t(verb, name)
)
SELECT pg_catalog.format('%I.%I', n.nspname, c.relname),
       pg_catalog.quote_ident(n.nspname),
       pg_catalog.has_schema_privilege($1, n.oid, 'USAGE'),
       locked.changed, locked.locks_rows,
       ARRAY(SELECT DISTINCT t.verb FROM targets t WHERE t.oid = c.oid ORDER BY 1),
       pg_catalog.has_any_column_privilege($1, c.oid, 'SELECT'),
       pg_catalog.has_any_column_privilege($1, c.oid, 'INSERT'),
       pg_catalog.has_any_column_privilege($1, c.oid, 'UPDATE'),
       pg_catalog.has_table_privilege($1, c.oid, 'DELETE')
FROM locked
JOIN pg_catalog.pg_class c ON c.oid = locked.oid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND NOT EXISTS (
      SELECT FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_rewrite w ON w.oid = d.objid
      JOIN pg_catalog.pg_class v ON v.oid = w.ev_class
      WHERE d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
        AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
        AND d.refobjid = c.oid AND v.oid <> c.oid
        AND v.oid IN (SELECT oid FROM locked)
        AND NOT EXISTS (SELECT FROM unnest(v.reloptions) o
                        WHERE o ~* '^security_invoker=(true|on|yes|1)$'))
ORDER BY 1";

/// What the role lacks on the relations the statement touches, found as the login (which
/// could prepare it, and in whose session `has_*_privilege` answers for the role by name).
async fn lacking_relations(
    client: &Client,
    statement: &Statement<'_>,
) -> Result<Vec<Missing>, tokio_postgres::Error> {
    let (tool, role) = (statement.tool, statement.role);
    let targets = sql::write_targets(statement.sql);
    let verbs: Vec<&str> = targets.iter().map(|t| t.verb).collect();
    let names: Vec<&str> = targets.iter().map(|t| t.relation.as_str()).collect();
    client.batch_execute("SAVEPOINT parley_privileges").await?;
    let found = async {
        // Closed when dropped, before the rollback; its locks last until the rollback.
        let _prepared = client.prepare_typed(statement.sql, statement.types).await?;
        client
            .query_typed(
                LOCKED,
                &[
                    (&role.name, Type::TEXT),
                    (&verbs, Type::TEXT_ARRAY),
                    (&names, Type::TEXT_ARRAY),
                ],
            )
            .await
    }
    .await;
    rollback(client).await?;
    let rows = match found {
        Ok(rows) => rows,
        Err(e) if is_connection_error(&e) => return Err(e),
        // Refused while parsing: a schema the login may not use either (or a type).
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => {
            return lacking_schemas(client, role, statement.sql).await;
        }
        // Postgres' own message says why.
        Err(_) => return Ok(Vec::new()),
    };
    let mut missing = Vec::new();
    for row in rows {
        let relation: String = row.get(0);
        if !row.get::<_, bool>(2) {
            missing.push(Missing::Schema {
                role: role.clone(),
                schema: row.get(1),
            });
        }
        let (changed, locks_rows): (bool, bool) = (row.get(3), row.get(4));
        if !tool.writes && (changed || locks_rows) {
            missing.push(Missing::ReadOnly { relation });
            continue;
        }
        let verbs: Vec<String> = row.get(5);
        let may = |privilege: &str| match privilege {
            "SELECT" => row.get::<_, bool>(6),
            "INSERT" => row.get(7),
            "UPDATE" => row.get(8),
            _ => row.get(9),
        };
        // Every relation is read (a write's RETURNING and WHERE read its target), one locked
        // FOR UPDATE needs UPDATE, a changed one what its text does to it.
        let privileges: Vec<&'static str> = ["SELECT", "INSERT", "UPDATE", "DELETE"]
            .into_iter()
            .filter(|p| {
                *p == "SELECT"
                    || (*p == "UPDATE" && locks_rows)
                    || (changed && verbs.iter().any(|v| v == p))
            })
            .filter(|p| !may(p))
            .collect();
        if privileges.is_empty() {
            continue;
        }
        missing.push(if relation == IDEMPOTENCY {
            Missing::Idempotency { role: role.clone() }
        } else {
            Missing::Relation {
                role: role.clone(),
                privileges,
                relation,
            }
        });
    }
    Ok(missing)
}

/// The schemas `sql` names that `role` may not use. Only for a statement the login cannot
/// prepare either, so no lock shows what it touches: the names before a dot that are schemas.
async fn lacking_schemas(
    client: &Client,
    role: &Role,
    sql: &str,
) -> Result<Vec<Missing>, tokio_postgres::Error> {
    let qualifiers = sql::qualifiers(sql);
    let rows = client
        .query_typed(
            "SELECT DISTINCT pg_catalog.quote_ident(n.nspname) \
             FROM unnest($2::text[]) AS q(name) \
             JOIN pg_catalog.pg_namespace n ON n.oid = pg_catalog.to_regnamespace(q.name) \
             WHERE NOT pg_catalog.has_schema_privilege($1, n.oid, 'USAGE') ORDER BY 1",
            &[(&role.name, Type::TEXT), (&qualifiers, Type::TEXT_ARRAY)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Missing::Schema {
            role: role.clone(),
            schema: row.get(0),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str) -> Role {
        Role {
            name: name.into(),
            quoted: name.into(),
        }
    }

    #[test]
    fn a_missing_privilege_names_the_tool_the_relation_and_the_grant() {
        let problem = Problem {
            tools: vec!["list_rooms".into()],
            missing: Missing::Relation {
                role: role("parley_mcp"),
                privileges: vec!["SELECT"],
                relation: "public.rooms".into(),
            },
        };
        assert_eq!(
            problem.to_string(),
            "tool `list_rooms`: role parley_mcp may not SELECT from public.rooms; run: GRANT \
             SELECT ON public.rooms TO parley_mcp;"
        );
        let several = Problem {
            tools: vec!["book".into(), "rebook".into()],
            missing: Missing::Relation {
                role: role("w"),
                privileges: vec!["SELECT", "INSERT"],
                relation: "public.bookings".into(),
            },
        };
        assert_eq!(
            several.to_string(),
            "tools `book`, `rebook`: role w may not SELECT or INSERT on public.bookings; run: \
             GRANT SELECT, INSERT ON public.bookings TO w;"
        );
    }

    #[test]
    fn sequences_are_read_from_every_expression_of_a_plan() {
        let plan = serde_json::json!([{"Plan": {"Plans": [{
            "Output": ["nextval('rooms_id_seq'::regclass)", "'x'::text"],
            "Filter": "(a.id = nextval('\"Odd''s\".seq'::regclass))"
        }]}}]);
        let mut found = nextval_sequences(&plan);
        found.sort();
        assert_eq!(found, vec!["\"Odd's\".seq", "rooms_id_seq"]);
        assert!(nextval_sequences(&serde_json::json!({"Output": ["nextval($1)"]})).is_empty());
    }
}
