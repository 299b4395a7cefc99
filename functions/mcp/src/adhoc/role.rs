//! The start-up check of the role the SQL tools connect as (`SQL_DATABASE_URL`). What a model's
//! SQL can do is what this role can do inside a read-only transaction, so the function refuses
//! to serve the tools until Postgres itself confirms the role can read the allowed schemas and
//! nothing else.

use tokio_postgres::Client;

/// The group migration 0007 creates; membership is what makes `parley.caller()` ignore a
/// forged caller in the role's sessions.
pub const READER_GROUP: &str = "parley_sql_reader";

/// Functions the role must not be able to run, with why, as the refusal says it. Each acts
/// past the read-only transaction and its ROLLBACK, or on other sessions: the SQL callers share
/// one login role, so "its own sessions" are every other caller's. Migration 0008 takes the
/// ones PostgreSQL 16 gives PUBLIC away from it and explains what it leaves (nextval, advisory
/// locks, pg_notify...); the others only superusers have by default.
const DENIED_FUNCTIONS: &[(&str, &str)] = &[
    ("pg_logical_emit_message(boolean,text,text)", WAL),
    ("pg_logical_emit_message(boolean,text,bytea)", WAL),
    ("txid_current()", XID),
    ("pg_current_xact_id()", XID),
    ("pg_cancel_backend(integer)", SIGNAL),
    ("pg_terminate_backend(integer,bigint)", SIGNAL),
    ("pg_stat_get_activity(integer)", ACTIVITY),
    ("pg_stat_get_backend_activity(integer)", ACTIVITY),
    ("pg_switch_wal()", SERVER),
    ("pg_create_restore_point(text)", SERVER),
    ("pg_backup_start(text,boolean)", SERVER),
    ("pg_backup_stop(boolean)", SERVER),
    ("pg_promote(boolean,integer)", SERVER),
    ("pg_stat_reset()", SERVER),
    ("pg_stat_reset_shared(text)", SERVER),
    ("pg_stat_reset_single_table_counters(oid)", SERVER),
    ("pg_stat_reset_single_function_counters(oid)", SERVER),
    ("pg_stat_reset_slru(text)", SERVER),
    ("pg_stat_reset_replication_slot(text)", SERVER),
    ("pg_reload_conf()", SERVER),
    ("pg_rotate_logfile()", SERVER),
    ("pg_log_backend_memory_contexts(integer)", SERVER),
    ("pg_read_file(text)", FILES),
    ("pg_read_binary_file(text)", FILES),
    ("pg_ls_dir(text)", FILES),
    ("pg_stat_file(text)", FILES),
    ("lo_import(text)", FILES),
    ("lo_export(oid,text)", FILES),
];
const WAL: &str = "it writes WAL that ROLLBACK does not take back";
const XID: &str = "it assigns a transaction id, which ROLLBACK records in the WAL";
const SIGNAL: &str = "it cancels or ends other sessions of the role, i.e. other callers'";
const ACTIVITY: &str = "it shows other sessions' statements, i.e. other callers' questions";
const SERVER: &str = "its effect on the server outlives the transaction";
const FILES: &str = "it reads or writes the server's files";

/// The role may do more than read the allowed schemas, or cannot read them: each entry is one
/// thing an admin must change, worded as the fix.
#[derive(Debug, thiserror::Error)]
#[error("the SQL_DATABASE_URL role `{role}` is not safe for ad-hoc SQL: {}", problems.join("; "))]
pub struct UnsafeRole {
    pub role: String,
    pub problems: Vec<String>,
}

/// Runs every check as the role itself (so `has_*_privilege` answers for it, memberships and
/// PUBLIC grants included). `Ok(Err(..))`: the role is unsafe; `Err`: the check could not run.
pub async fn check(
    client: &Client,
    schemas: &[String],
) -> Result<Result<(), UnsafeRole>, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT current_user::text, session_user = current_user, r.rolsuper, r.rolbypassrls, \
                    r.rolcreaterole, r.rolcreatedb, r.rolreplication, r.rolconnlimit, \
                    (SELECT setting::bigint FROM pg_catalog.pg_settings WHERE name = 'temp_file_limit') \
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
    // cannot lift it.
    if row.get::<_, Option<i64>>(8).is_none_or(|kb| kb < 0) {
        problems.push(format!(
            "ALTER ROLE {role} SET temp_file_limit = '256MB': without it a statement may fill \
             the server's disk with temporary files"
        ));
    }
    let member_of_reader: bool = client
        .query_one(
            "SELECT pg_catalog.pg_has_role(current_user, $1, 'MEMBER')",
            &[&READER_GROUP],
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
        &[&READER_GROUP],
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
        let usable: Option<bool> = client
            .query_one(
                "SELECT pg_catalog.has_schema_privilege(n.oid, 'USAGE') \
                 FROM (SELECT $1::text AS name) s \
                 LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = s.name",
                &[schema],
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
        &[&schemas],
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
        &[&schemas],
    )
    .await?
    {
        problems.push(format!(
            "REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC (and from {role}): it runs as \
             its owner, outside the allowed schemas"
        ));
    }
    // Functions that act outside the transaction or on other sessions (DENIED_FUNCTIONS): some
    // PUBLIC has unless migration 0008 ran as a superuser, the rest an admin may have granted.
    let signatures: Vec<&str> = DENIED_FUNCTIONS.iter().map(|(f, _)| *f).collect();
    for (function,) in rows1(
        client,
        "SELECT f FROM unnest($1::text[]) WITH ORDINALITY AS d(f, n) \
         WHERE pg_catalog.to_regprocedure('pg_catalog.' || f) IS NOT NULL \
           AND pg_catalog.has_function_privilege(pg_catalog.to_regprocedure('pg_catalog.' || f), 'EXECUTE') \
         ORDER BY n",
        &[&signatures],
    )
    .await?
    {
        let why = DENIED_FUNCTIONS
            .iter()
            .find(|(f, _)| *f == function)
            .map_or("", |(_, why)| why);
        problems.push(format!(
            "REVOKE EXECUTE ON FUNCTION pg_catalog.{function} FROM PUBLIC, {role} and \
             {READER_GROUP}: {why}"
        ));
    }
    // The view: PUBLIC may SELECT it by default, and it shows the `query` of every session of
    // the querying role. (It calls pg_stat_get_activity, whose EXECUTE is checked for the
    // querying role too, but the view's own privilege is what an admin will look at.)
    let reads_activity: bool = client
        .query_one(
            "SELECT pg_catalog.has_table_privilege('pg_catalog.pg_stat_activity', 'SELECT')",
            &[],
        )
        .await?
        .get(0);
    if reads_activity {
        problems.push(format!(
            "REVOKE SELECT ON pg_catalog.pg_stat_activity FROM PUBLIC, {role} and \
             {READER_GROUP}: {ACTIVITY}"
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
            ACTIVITY
        };
        problems.push(format!(
            "REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC: {why}"
        ));
    }
    if problems.is_empty() {
        Ok(Ok(()))
    } else {
        Ok(Err(UnsafeRole { role, problems }))
    }
}

async fn rows1(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<(String,)>, tokio_postgres::Error> {
    let rows = client.query(sql, params).await?;
    Ok(rows.iter().map(|r| (r.get(0),)).collect())
}

async fn rows2(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<Vec<(String, bool)>, tokio_postgres::Error> {
    let rows = client.query(sql, params).await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}
