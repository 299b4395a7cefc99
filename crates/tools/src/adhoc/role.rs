//! The start-up check of the role the SQL tools connect as (`SQL_DATABASE_URL`). What a model's
//! SQL can do is what this role can do inside a read-only transaction, so the function refuses
//! to serve the tools until Postgres itself confirms the role can read the allowed schemas and
//! nothing else, or the guard (`guard`) stands in where a managed server's master could not
//! take a right away. Every statement is unnamed (`query_typed`): nothing named is left on a
//! server connection that a proxy hands on.

use tokio_postgres::Client;
use tokio_postgres::types::{ToSql, Type};

use super::guard::{self, Guard, Reason};

/// The group migration 0007 creates; membership is what makes `parley.caller()` ignore a
/// forged caller in the role's sessions.
pub const READER_GROUP: &str = "parley_sql_reader";

/// Functions the role must not be able to run, with why. Each acts past the read-only
/// transaction and its ROLLBACK, or on other sessions: the SQL callers share one login role, so
/// "its own sessions" are every other caller's. Migration 0008 takes the ones PostgreSQL 16
/// gives PUBLIC away from it when a superuser runs it (those whose [`Reason`] is
/// [`Reason::closed_by_revokes`]); without a superuser the guard's plan check stands in for
/// them. The others only superusers have by default, and nothing stands in for a grant of them.
const DENIED_FUNCTIONS: &[(&str, Reason)] = &[
    ("pg_logical_emit_message(boolean,text,text)", Reason::Wal),
    ("pg_logical_emit_message(boolean,text,bytea)", Reason::Wal),
    ("txid_current()", Reason::Xid),
    ("pg_current_xact_id()", Reason::Xid),
    ("pg_cancel_backend(integer)", Reason::Signal),
    ("pg_terminate_backend(integer,bigint)", Reason::Signal),
    ("pg_stat_get_activity(integer)", Reason::Activity),
    ("pg_stat_get_backend_activity(integer)", Reason::Activity),
    ("pg_switch_wal()", Reason::Server),
    ("pg_create_restore_point(text)", Reason::Server),
    ("pg_backup_start(text,boolean)", Reason::Server),
    ("pg_backup_stop(boolean)", Reason::Server),
    ("pg_promote(boolean,integer)", Reason::Server),
    ("pg_stat_reset()", Reason::Server),
    ("pg_stat_reset_shared(text)", Reason::Server),
    ("pg_stat_reset_single_table_counters(oid)", Reason::Server),
    (
        "pg_stat_reset_single_function_counters(oid)",
        Reason::Server,
    ),
    ("pg_stat_reset_slru(text)", Reason::Server),
    ("pg_stat_reset_replication_slot(text)", Reason::Server),
    ("pg_reload_conf()", Reason::Server),
    ("pg_rotate_logfile()", Reason::Server),
    ("pg_log_backend_memory_contexts(integer)", Reason::Server),
    ("pg_read_file(text)", Reason::Files),
    ("pg_read_binary_file(text)", Reason::Files),
    ("pg_ls_dir(text)", Reason::Files),
    ("pg_stat_file(text)", Reason::Files),
    ("lo_import(text)", Reason::Files),
    ("lo_export(oid,text)", Reason::Files),
];

/// The most `temp_file_limit` (in kB, as Postgres reports it) the role may have: 1 GB. Each of
/// its sessions, and each parallel worker of one, may fill this much disk before Postgres stops
/// the statement; docs/sql.md recommends 256MB.
pub const MAX_TEMP_FILE_KB: i64 = 1024 * 1024;

/// What the per-call settings are made with (migration 0024).
const BEGIN_SQL: &str = "parley.begin_sql(integer,integer,text[],text)";

/// The role may do more than read the allowed schemas, or cannot read them: each entry is one
/// thing an admin must change, worded as the fix.
#[derive(Debug, thiserror::Error)]
#[error("the SQL_DATABASE_URL role `{role}` is not safe for ad-hoc SQL: {}", problems.join("; "))]
pub struct UnsafeRole {
    pub role: String,
    pub problems: Vec<String>,
}

/// Runs every check as the role itself (so `has_*_privilege` answers for it, memberships and
/// PUBLIC grants included, and settings are the ones its sessions get: the server's, the
/// database's or the role's). `Ok(Ok(guard))`: the role is safe with this guard; `Ok(Err(..))`:
/// the role is unsafe; `Err`: the check could not run.
pub async fn check(
    client: &Client,
    schemas: &[String],
) -> Result<Result<Guard, UnsafeRole>, tokio_postgres::Error> {
    let row = one(
        client,
        "SELECT current_user::text, session_user = current_user, r.rolsuper, r.rolbypassrls, \
                r.rolcreaterole, r.rolcreatedb, r.rolreplication, r.rolconnlimit, \
                (SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'temp_file_limit'), \
                (SELECT source FROM pg_catalog.pg_settings WHERE name = 'temp_file_limit') \
         FROM pg_catalog.pg_roles r WHERE r.rolname = current_user",
        &[],
    )
    .await?;
    let role: String = row.get(0);
    let mut problems = Vec::new();
    if !row.get::<_, bool>(1) {
        problems.push("connect as the role itself (no SET ROLE in the URL's options)".into());
    }
    for (i, attribute) in [
        (2, "SUPERUSER"),
        (3, "BYPASSRLS"),
        (4, "CREATEROLE"),
        (5, "CREATEDB"),
        (6, "REPLICATION"),
    ] {
        if row.get::<_, bool>(i) {
            problems.push(format!("ALTER ROLE {role} NO{attribute}"));
        }
    }
    // Each Lambda instance opens up to SQL_POOL_MAX_SIZE connections, and instances multiply
    // with traffic: without a limit of its own the role can spend the server's max_connections.
    if row.get::<_, i32>(7) < 0 {
        problems.push(format!(
            "ALTER ROLE {role} CONNECTION LIMIT 10 (or SQL_POOL_MAX_SIZE times the instances \
             you allow): without one, instances of the function can take every connection"
        ));
    }
    // A sort or hash of a cross join spills to disk without bound otherwise (the statement
    // timeout bounds the time, not the bytes). Only a superuser can set it, so a statement
    // cannot lift it. The value is the one the role's sessions get, wherever it comes from: a
    // managed server's master cannot set it on the role, but a parameter group can set it for
    // the server, and a superuser for the database.
    let temp_file_kb: Option<i64> = row.get(8);
    let source: Option<String> = row.get(9);
    let fix = format!(
        "as a superuser ALTER ROLE {role} SET temp_file_limit = '256MB', or on RDS and Aurora \
         set temp_file_limit = 262144 (kB) in the DB cluster parameter group"
    );
    match temp_file_kb {
        None | Some(..0) => problems.push(format!(
            "temp_file_limit is unlimited for {role}: {fix}; without it a statement may fill \
             the server's disk with temporary files"
        )),
        Some(kb) if kb > MAX_TEMP_FILE_KB => problems.push(format!(
            "temp_file_limit is {kb} kB for {role} (from the {}), more than the 1GB the SQL \
             tools accept: {fix}",
            source.as_deref().unwrap_or("server")
        )),
        Some(kb) => tracing::debug!(kb, source, "SQL role's temp_file_limit"),
    }
    let member_of_reader: bool = one(
        client,
        "SELECT pg_catalog.pg_has_role(current_user, $1, 'MEMBER')",
        &[(&READER_GROUP, Type::TEXT)],
    )
    .await?
    .get(0);
    if !member_of_reader {
        problems.push(format!("GRANT {READER_GROUP} TO {role}"));
    }
    // Any other role it belongs to (directly or not, inherited or only SET-able) lends it
    // rights: pg_read_server_files, pg_execute_server_program, another Parley role...
    for (other,) in rows1(
        client,
        "SELECT r.rolname::text FROM pg_catalog.pg_roles r \
         WHERE r.rolname NOT IN (current_user, $1) \
           AND pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER') ORDER BY 1",
        &[(&READER_GROUP, Type::TEXT)],
    )
    .await?
    {
        problems.push(format!(
            "REVOKE {other} FROM {role} (or from {READER_GROUP}): membership lends its rights"
        ));
    }
    // An owner can grant itself anything on what it owns.
    for (owned,) in rows1(
        client,
        "SELECT format('%s %s', kind, name) FROM ( \
             SELECT 'schema' AS kind, nspname::text AS name, nspowner AS owner FROM pg_catalog.pg_namespace \
             UNION ALL SELECT 'relation', c.oid::regclass::text, c.relowner FROM pg_catalog.pg_class c \
             UNION ALL SELECT 'function', p.oid::regprocedure::text, p.proowner FROM pg_catalog.pg_proc p \
             UNION ALL SELECT 'database', datname::text, datdba FROM pg_catalog.pg_database \
         ) o WHERE o.owner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user) \
         ORDER BY 1 LIMIT 5",
        &[],
    )
    .await?
    {
        problems.push(format!("give {owned} another owner: {role} owns it"));
    }
    for schema in schemas {
        let usable: Option<bool> = one(
            client,
            "SELECT pg_catalog.has_schema_privilege(n.oid, 'USAGE') \
             FROM (SELECT $1::text AS name) s \
             LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = s.name",
            &[(schema, Type::TEXT)],
        )
        .await?
        .get(0);
        match usable {
            None => problems.push(format!("schema `{schema}` does not exist")),
            Some(false) => {
                problems.push(format!("GRANT USAGE ON SCHEMA {schema} TO {READER_GROUP}"))
            }
            Some(true) => {}
        }
    }
    // Creating objects is refused by the read-only transaction already; the role should not
    // have the right in the first place (Postgres before 15 gives PUBLIC CREATE on `public`).
    for (schema,) in rows1(
        client,
        "SELECT nspname::text FROM pg_catalog.pg_namespace \
         WHERE pg_catalog.has_schema_privilege(oid, 'CREATE') ORDER BY 1 LIMIT 5",
        &[],
    )
    .await?
    {
        problems.push(format!(
            "REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC (and from {role})"
        ));
    }
    // Reading is confined to the allowed schemas (the system catalogs aside: Postgres lets
    // every role read them, and list_tables needs them); writing to everything.
    for (relation, writes) in rows2(
        client,
        "SELECT c.oid::regclass::text, \
                n.nspname::text = ANY($1) \
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') \
           AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
           AND n.nspname !~ '^pg_(toast|temp)' \
           AND CASE WHEN n.nspname::text = ANY($1) \
                    THEN pg_catalog.has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES') \
                      OR pg_catalog.has_any_column_privilege(c.oid, 'INSERT, UPDATE, REFERENCES') \
                    ELSE pg_catalog.has_any_column_privilege(c.oid, 'SELECT, INSERT, UPDATE, REFERENCES') \
                      OR pg_catalog.has_table_privilege(c.oid, 'DELETE, TRUNCATE, TRIGGER') \
               END \
         ORDER BY 1 LIMIT 10",
        &[(&schemas, Type::TEXT_ARRAY)],
    )
    .await?
    {
        if writes {
            problems.push(format!(
                "REVOKE INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES ON {relation} \
                 FROM {role}, {READER_GROUP} and PUBLIC: the SQL tools only read"
            ));
        } else {
            problems.push(format!(
                "REVOKE ALL ON {relation} FROM {role}, {READER_GROUP} and PUBLIC: it is \
                 outside the allowed schemas"
            ));
        }
    }
    // A SECURITY DEFINER function runs with its owner's rights: outside the allowed schemas it
    // could read what the role may not. Sequences count as relations here too.
    for (function,) in rows1(
        client,
        "SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p \
         JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
         WHERE p.prosecdef AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
           AND NOT n.nspname::text = ANY($1) \
           AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE') \
         ORDER BY 1 LIMIT 5",
        &[(&schemas, Type::TEXT_ARRAY)],
    )
    .await?
    {
        problems.push(format!(
            "REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC (and from {role}): it runs as \
             its owner, outside the allowed schemas"
        ));
    }
    // The per-call settings (migration 0024): without them no call can run.
    let begins: bool = one(
        client,
        "SELECT coalesce(pg_catalog.has_function_privilege(pg_catalog.to_regprocedure($1), \
                'EXECUTE'), false)",
        &[(&BEGIN_SQL, Type::TEXT)],
    )
    .await?
    .get(0);
    if !begins {
        problems.push(format!(
            "run `parley migrate` (migration 0024 makes {BEGIN_SQL} for {READER_GROUP})"
        ));
    }
    // Functions that act outside the transaction or on other sessions (DENIED_FUNCTIONS): some
    // PUBLIC has unless migration 0008 ran as a superuser, the rest an admin may have granted.
    // The first kind the guard's plan check stands in for; the second nothing does.
    let signatures: Vec<&str> = DENIED_FUNCTIONS.iter().map(|(f, _)| *f).collect();
    let mut unrevoked = Vec::new();
    for (function,) in rows1(
        client,
        "SELECT f FROM unnest($1::text[]) WITH ORDINALITY AS d(f, n) \
         WHERE pg_catalog.to_regprocedure('pg_catalog.' || f) IS NOT NULL \
           AND pg_catalog.has_function_privilege(pg_catalog.to_regprocedure('pg_catalog.' || f), 'EXECUTE') \
         ORDER BY n",
        &[(&signatures, Type::TEXT_ARRAY)],
    )
    .await?
    {
        let reason = DENIED_FUNCTIONS
            .iter()
            .find(|(f, _)| *f == function)
            .map(|(_, reason)| *reason)
            .unwrap_or(Reason::Server);
        let fix = format!(
            "REVOKE EXECUTE ON FUNCTION pg_catalog.{function} FROM PUBLIC, {role} and \
             {READER_GROUP}: {}",
            reason.says()
        );
        if reason.closed_by_revokes() {
            unrevoked.push(fix);
        } else {
            problems.push(fix);
        }
    }
    // The view: PUBLIC may SELECT it by default, and it shows the `query` of every session of
    // the querying role. (It calls pg_stat_get_activity, whose EXECUTE is checked for the
    // querying role too, but the view's own privilege is what an admin will look at.)
    let reads_activity: bool = one(
        client,
        "SELECT pg_catalog.has_table_privilege('pg_catalog.pg_stat_activity', 'SELECT')",
        &[],
    )
    .await?
    .get(0);
    if reads_activity {
        unrevoked.push(format!(
            "REVOKE SELECT ON pg_catalog.pg_stat_activity FROM PUBLIC, {role} and \
             {READER_GROUP}: {}",
            Reason::Activity.says()
        ));
    }
    // A function that opens a connection elsewhere runs there outside this transaction;
    // pg_stat_statements shows the role's other sessions' statements (normalised) and resets.
    for (function, connects) in rows2(
        client,
        "SELECT DISTINCT p.oid::regprocedure::text, e.extname <> 'pg_stat_statements' \
         FROM pg_catalog.pg_proc p \
         JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::regclass AND d.objid = p.oid \
         JOIN pg_catalog.pg_extension e ON d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.refobjid = e.oid \
         WHERE e.extname IN ('dblink', 'postgres_fdw', 'pg_stat_statements') \
           AND pg_catalog.has_function_privilege(p.oid, 'EXECUTE') \
         ORDER BY 1 LIMIT 5",
        &[],
    )
    .await?
    {
        let why = if connects {
            "it connects to other servers"
        } else {
            Reason::Activity.says()
        };
        let fix = format!("REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC: {why}");
        if connects {
            problems.push(fix);
        } else {
            unrevoked.push(fix);
        }
    }
    // What the guard knows of the database's own functions and views; with the revokes
    // missing, its plan check stands in for them, and what it cannot see must not be in reach.
    let classified = guard::classify(client).await?;
    let check_plans = !unrevoked.is_empty();
    if check_plans {
        tracing::info!(
            missing = %unrevoked.join("; "),
            "migration 0008's revokes are missing (it needs a superuser); the SQL tools' guard \
             checks each statement's plan instead"
        );
        problems.extend(guard::startup_problems(client, &classified, &role).await?);
    }
    if problems.is_empty() {
        Ok(Ok(Guard {
            opaque: classified.opaque(),
            check_plans,
        }))
    } else {
        Ok(Err(UnsafeRole { role, problems }))
    }
}

type Params<'a> = [(&'a (dyn ToSql + Sync), Type)];

async fn one(
    client: &Client,
    sql: &str,
    params: &Params<'_>,
) -> Result<tokio_postgres::Row, tokio_postgres::Error> {
    let mut rows = client.query_typed(sql, params).await?;
    // Each of these statements returns exactly one row by construction.
    Ok(rows.swap_remove(0))
}

async fn rows1(
    client: &Client,
    sql: &str,
    params: &Params<'_>,
) -> Result<Vec<(String,)>, tokio_postgres::Error> {
    let rows = client.query_typed(sql, params).await?;
    Ok(rows.iter().map(|r| (r.get(0),)).collect())
}

async fn rows2(
    client: &Client,
    sql: &str,
    params: &Params<'_>,
) -> Result<Vec<(String, bool)>, tokio_postgres::Error> {
    let rows = client.query_typed(sql, params).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
