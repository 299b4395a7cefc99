//! The ad-hoc SQL tools under attack. A database holds allowed schemas (`analytics`, `public`),
//! a forbidden one (`secret`), a table of an allowed schema the role was not granted, a
//! row-level-security table and Parley's own tables. Every escape peers have suffered is tried
//! through `run_sql`; each must be refused or harmless, and the database is checked afterwards:
//! nothing written, nothing forbidden read, nothing left on the session, every attempt audited.
//! The suite runs twice: on a database a superuser migrated (migration 0008's revokes in
//! place) and on one a managed server's master migrated (`parley_testkit::managed`: no
//! revokes, the guard checks plans instead).

use std::time::{Duration, Instant};

use parley_testkit::managed::{self, ManagedDb};
use parley_testkit::{SQL_READER_USER, TestDb, connect};
use serde_json::{Value, json};

use crate::helpers::{FEEDBACK_ROWS, Options, TestApp, client_call, env, run_sql, spawn_on};

/// The allowed and forbidden data, made by the database's owner.
const SETUP: &str = "
CREATE SCHEMA analytics;
COMMENT ON SCHEMA analytics IS 'Sales.';
CREATE TABLE analytics.regions (id int PRIMARY KEY, name text NOT NULL UNIQUE);
COMMENT ON TABLE analytics.regions IS 'Sales regions.';
COMMENT ON COLUMN analytics.regions.name IS 'What the region is called.';
CREATE TABLE analytics.sales (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    region_id int NOT NULL REFERENCES analytics.regions,
    sold_on date NOT NULL,
    amount numeric(10, 2) NOT NULL DEFAULT 0
);
CREATE INDEX sales_region_day_idx ON analytics.sales (region_id, sold_on);
INSERT INTO analytics.regions VALUES (1, 'North'), (2, 'South'), (3, 'East');
INSERT INTO analytics.sales (region_id, sold_on, amount)
    SELECT 1 + i % 3, date '2026-01-01' + (i % 300), (i % 97) + 0.5 FROM generate_series(1, 100000) i;
CREATE TABLE analytics.salaries (who text, amount int);
INSERT INTO analytics.salaries VALUES ('ceo', 1000000);
CREATE SCHEMA secret;
CREATE TABLE secret.keys (k text);
INSERT INTO secret.keys VALUES ('hunter2');
CREATE TABLE secret.log (what text);
-- A volatile function that writes, callable by anyone (functions are EXECUTE to PUBLIC).
CREATE FUNCTION public.note(what text) RETURNS int LANGUAGE sql SECURITY DEFINER
    AS $$ INSERT INTO secret.log VALUES (what) RETURNING 1 $$;
-- Runs SQL given at run time, as whoever calls it (as query_to_xml does on servers built
-- with libxml, and ts_stat on every server).
CREATE FUNCTION public.count_rows(q text) RETURNS bigint LANGUAGE plpgsql
    AS $$ DECLARE n bigint; BEGIN EXECUTE 'SELECT count(*) FROM (' || q || ') s' INTO n; RETURN n; END $$;
-- An SQL helper whose body the guard can read: a model may call it.
CREATE FUNCTION public.net(amount numeric) RETURNS numeric LANGUAGE sql IMMUTABLE
    RETURN round(amount / 1.2, 2);
-- The same, calling what the guard refuses: its name is refused as the function's own.
CREATE FUNCTION public.peek_activity() RETURNS bigint LANGUAGE sql
    RETURN (SELECT count(*) FROM pg_stat_activity);
-- Row-level security holds the table's owner too (FORCE), so each row goes in as its owner
-- (a superuser would not need it; a managed server's master does).
SELECT set_config('parley.caller', '{\"sub\": \"alice\"}', false);
INSERT INTO tasks (owner, title) VALUES ('alice', 'alice''s secret plan');
SELECT set_config('parley.caller', '{\"sub\": \"bob\"}', false);
INSERT INTO tasks (owner, title) VALUES ('bob', 'bob''s');
SELECT set_config('parley.caller', '', false);
ANALYZE;
";

/// What the deployment opens to the SQL tools.
const GRANTS: &str = "
GRANT USAGE ON SCHEMA analytics TO parley_sql_reader;
GRANT SELECT ON analytics.regions, analytics.sales TO parley_sql_reader;
GRANT SELECT ON public.tasks TO parley_sql_reader;
";

const SQL_TOOLS: &str = r#"
[sql]
schemas = ["analytics", "public"]
max_rows = 50
timeout_ms = 1000
sample_rows = 2
notes = "Amounts are in pounds."
"#;

/// The function with only the SQL tools, all sharing ONE connection of the SQL role, so
/// anything a statement left on its session would show in the next call.
async fn spawn_sql(extra: &[(&str, &str)]) -> TestApp {
    spawn_sql_with(SQL_TOOLS, extra).await
}

/// Where an attack suite runs: the app, and the SQL role's name and URL.
pub struct Target {
    pub app: TestApp,
    pub sql_user: &'static str,
    pub sql_url: String,
}

/// [`spawn_sql`] on a database a superuser (`managed == false`) or a managed server's master
/// (`managed == true`, see `parley_testkit::managed`) created, migrated, filled and granted.
pub async fn spawn_target(managed: bool, extra: &[(&str, &str)]) -> Target {
    let (db, sql_user, sql_url) = if managed {
        let managed_db = ManagedDb::with_demo_data(FEEDBACK_ROWS).await;
        managed_db
            .master_client()
            .await
            .batch_execute(SETUP)
            .await
            .expect("the master's set-up");
        let url = managed_db.sql_reader_url(GRANTS).await;
        (managed_db.db, managed::SQL_LOGIN, url)
    } else {
        let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
        db.client()
            .await
            .batch_execute(SETUP)
            .await
            .expect("set-up");
        let url = db.sql_reader_url(GRANTS).await;
        (db, SQL_READER_USER, url)
    };
    let mut extra_env = env(&[("SQL_DATABASE_URL", &sql_url), ("SQL_POOL_MAX_SIZE", "1")]);
    extra_env.extend(env(extra));
    let app = spawn_on(
        db,
        Options {
            tools_toml: Some(SQL_TOOLS.into()),
            extra_env,
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts with the SQL tools");
    Target {
        app,
        sql_user,
        sql_url,
    }
}

/// [`spawn_sql`] with another `[sql]` table.
async fn spawn_sql_with(tools_toml: &str, extra: &[(&str, &str)]) -> TestApp {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    db.client()
        .await
        .batch_execute(SETUP)
        .await
        .expect("set-up");
    let sql_url = db.sql_reader_url(GRANTS).await;
    let mut extra_env = env(&[("SQL_DATABASE_URL", &sql_url), ("SQL_POOL_MAX_SIZE", "1")]);
    extra_env.extend(env(extra));
    spawn_on(
        db,
        Options {
            tools_toml: Some(tools_toml.into()),
            extra_env,
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts with the SQL tools")
}

async fn count(app: &TestApp, sql: &str) -> i64 {
    app.sql_one(sql).await.get(0)
}

/// What the database holds that no attack may change, and the session state no attack may
/// leave behind, read after every attack.
async fn assert_untouched(app: &TestApp, sql_user: &str, attack: &str, tasks: i64) {
    assert_eq!(
        count(app, "SELECT count(*) FROM analytics.regions").await,
        3,
        "{attack}"
    );
    assert_eq!(
        count(app, "SELECT count(*) FROM analytics.sales").await,
        100_000,
        "{attack}"
    );
    assert_eq!(
        count(app, "SELECT count(*) FROM secret.log").await,
        0,
        "{attack}"
    );
    assert_eq!(
        count(app, "SELECT count(*) FROM tasks").await,
        tasks,
        "{attack}"
    );
    assert_eq!(
        count(
            app,
            "SELECT count(*) FROM pg_class WHERE relpersistence = 't'"
        )
        .await,
        0,
        "{attack}: temporary tables"
    );
    assert_eq!(
        count(
            app,
            &format!(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
                 WHERE a.usename = '{sql_user}' AND l.locktype = 'advisory'"
            )
        )
        .await,
        0,
        "{attack}: advisory locks left behind"
    );
    // The same (only) pooled connection, asked about its own session.
    let session = run_sql(
        app,
        "SELECT current_user AS user_now, session_user AS session_user_now, \
                current_setting('parley.caller', true) AS caller, \
                current_setting('search_path') AS search_path, \
                current_setting('statement_timeout') AS statement_timeout, \
                current_setting('default_transaction_read_only') AS default_read_only, \
                current_setting('work_mem') AS work_mem, \
                current_setting('parley.leak', true) AS leak, \
                (SELECT count(*) FROM pg_prepared_statements) AS prepared, \
                (SELECT count(*) FROM pg_listening_channels()) AS listening, \
                (SELECT count(*) FROM pg_cursors WHERE is_holdable) AS cursors",
    )
    .await
    .unwrap_or_else(|e| panic!("{attack}: session check failed: {e}"));
    let row = &session["rows"][0];
    assert_eq!(row["user_now"], sql_user, "{attack}: {row}");
    assert_eq!(row["session_user_now"], sql_user, "{attack}: {row}");
    assert!(
        row["caller"].is_null() || row["caller"] == "",
        "{attack}: parley.caller survived: {row}"
    );
    assert_eq!(row["search_path"], "analytics, public", "{attack}: {row}");
    assert_eq!(row["statement_timeout"], "1s", "{attack}: {row}");
    assert_eq!(row["default_read_only"], "off", "{attack}: {row}");
    assert_eq!(row["work_mem"], "4MB", "{attack}: {row}");
    assert!(
        row["leak"].is_null() || row["leak"] == "",
        "{attack}: {row}"
    );
    assert_eq!(row["prepared"], 0, "{attack}: {row}");
    assert_eq!(row["listening"], 0, "{attack}: {row}");
    assert_eq!(row["cursors"], 0, "{attack}: {row}");
}

/// How an attack must end.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// A tool error, audited as `refused` or `tool_error` (never `ok`).
    Refused,
    Timeout,
    /// It runs, and the check after it shows it changed nothing.
    Harmless,
}

#[tokio::test]
async fn every_known_escape_is_refused_or_harmless_and_audited() {
    every_known_escape(false).await;
}

#[tokio::test]
async fn every_known_escape_is_refused_or_harmless_and_audited_on_a_managed_server() {
    every_known_escape(true).await;
}

async fn every_known_escape(managed: bool) {
    // Bodies up to 4 MiB, so the 1 MB statement reaches the tool.
    let Target {
        app,
        sql_user,
        sql_url,
    } = spawn_target(managed, &[("MCP_MAX_BODY_BYTES", "4194304")]).await;
    let attacks: &[(&str, Expect)] = &[
        // Ending the read-only transaction, then anything.
        (
            "COMMIT; INSERT INTO analytics.regions VALUES (9, 'x')",
            Expect::Refused,
        ),
        ("END; DELETE FROM analytics.sales", Expect::Refused),
        (
            "ROLLBACK; BEGIN READ WRITE; DELETE FROM analytics.sales",
            Expect::Refused,
        ),
        // Unbalanced parentheses that would end Parley's subquery and add to its query: an
        // arm that escapes the byte cap, a NULL where JSON text is expected, a LIMIT moved.
        (
            "SELECT 1) AS q UNION ALL SELECT repeat('x', 400000000) FROM (SELECT 1",
            Expect::Refused,
        ),
        (
            "SELECT 1) AS q UNION ALL SELECT NULL FROM (SELECT 1",
            Expect::Refused,
        ),
        (
            "SELECT 1) AS q UNION ALL (SELECT to_json(s)::text FROM analytics.sales s",
            Expect::Refused,
        ),
        // Several statements in one string.
        ("SELECT 1; DELETE FROM analytics.sales", Expect::Refused),
        ("SELECT 1; SELECT 2", Expect::Refused),
        // Data-modifying CTEs, the prefix checks' blind spot.
        (
            "WITH x AS (INSERT INTO analytics.regions VALUES (9, 'x') RETURNING 1) SELECT * FROM x",
            Expect::Refused,
        ),
        (
            "WITH x AS (UPDATE analytics.sales SET amount = 0 RETURNING 1) SELECT count(*) FROM x",
            Expect::Refused,
        ),
        (
            "WITH x AS (DELETE FROM analytics.sales RETURNING 1) SELECT count(*) FROM x",
            Expect::Refused,
        ),
        // Row locks.
        (
            "SELECT * FROM analytics.regions FOR UPDATE",
            Expect::Refused,
        ),
        (
            "SELECT * FROM analytics.regions FOR SHARE NOWAIT",
            Expect::Refused,
        ),
        // A volatile function that writes (SECURITY DEFINER, owned by a superuser).
        ("SELECT note('pwned')", Expect::Refused),
        ("SELECT nextval('analytics.sales_id_seq')", Expect::Refused),
        // Settings and identity (set_config is refused by name; a session-level setting would
        // pin an RDS Proxy session even though ROLLBACK undoes it).
        (
            "SELECT set_config('default_transaction_read_only', 'off', false), set_config('work_mem', '1GB', false), set_config('search_path', 'secret', false)",
            Expect::Refused,
        ),
        (
            "SELECT set_config('transaction_read_only', 'off', true)",
            Expect::Refused,
        ),
        (
            "SELECT set_config('role', 'parley_readonly', true)",
            Expect::Refused,
        ),
        (
            "SELECT set_config('role', 'postgres', false)",
            Expect::Refused,
        ),
        (
            "SELECT set_config('session_authorization', 'postgres', true)",
            Expect::Refused,
        ),
        ("SET ROLE postgres", Expect::Refused),
        ("RESET ROLE", Expect::Refused),
        ("SET SESSION AUTHORIZATION postgres", Expect::Refused),
        ("SET statement_timeout = 0", Expect::Refused),
        // RESET ROLE's SQL-callable form, then a function that runs SQL as whoever is left.
        (
            "SELECT set_config('role', 'none', true), query_to_xml('SELECT * FROM secret.keys', false, false, '')",
            Expect::Refused,
        ),
        (
            "SELECT set_config('role', 'none', true), count_rows('SELECT * FROM secret.keys')",
            Expect::Refused,
        ),
        (
            "SELECT set_config('role', 'none', true) AS r, (SELECT string_agg(word, ' ') FROM ts_stat('SELECT to_tsvector(k) FROM secret.keys')) AS words",
            Expect::Refused,
        ),
        // The server's files and programs.
        ("SELECT pg_read_file('/etc/passwd')", Expect::Refused),
        (
            "SELECT pg_read_binary_file('postgresql.conf')",
            Expect::Refused,
        ),
        ("SELECT * FROM pg_ls_dir('.')", Expect::Refused),
        ("SELECT lo_import('/etc/passwd')", Expect::Refused),
        (
            "COPY (SELECT 1) TO PROGRAM 'touch /tmp/parley-pwned'",
            Expect::Refused,
        ),
        (
            "SELECT * FROM query_to_xml('COPY (SELECT 1) TO PROGRAM ''touch /tmp/parley-pwned''', false, false, '') x",
            Expect::Refused,
        ),
        // Time and size.
        ("SELECT pg_sleep(600)", Expect::Timeout),
        (
            "SELECT count(*) FROM analytics.sales a CROSS JOIN analytics.sales b",
            Expect::Timeout,
        ),
        // Session state that would outlive a transaction.
        ("CREATE TEMP TABLE t AS SELECT 1", Expect::Refused),
        (
            "SELECT * INTO TEMP t FROM analytics.regions",
            Expect::Refused,
        ),
        (
            "SELECT pg_advisory_lock(42), pg_advisory_lock_shared(43)",
            Expect::Refused,
        ),
        ("SELECT pg_try_advisory_xact_lock(44)", Expect::Refused),
        ("LISTEN parley", Expect::Refused),
        // Allowed, and delivered only at commit: the transaction is always rolled back.
        ("SELECT pg_notify('parley', 'hello')", Expect::Harmless),
        ("NOTIFY parley", Expect::Refused),
        ("PREPARE p AS SELECT 1", Expect::Refused),
        ("EXECUTE p", Expect::Refused),
        ("DEALLOCATE ALL", Expect::Refused),
        ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", Expect::Refused),
        ("DISCARD ALL", Expect::Refused),
        ("RESET ALL", Expect::Refused),
        ("UNLISTEN *", Expect::Refused),
        ("SELECT 1 AS one; LISTEN parley", Expect::Refused),
        (
            "DO $$ BEGIN DELETE FROM analytics.sales; END $$",
            Expect::Refused,
        ),
        ("CALL note('pwned')", Expect::Refused),
        // Catalogs of secrets and other people's data.
        (
            "SELECT rolname, rolpassword FROM pg_authid",
            Expect::Refused,
        ),
        ("SELECT * FROM pg_shadow", Expect::Refused),
        ("SELECT * FROM secret.keys", Expect::Refused),
        ("SELECT * FROM analytics.salaries", Expect::Refused),
        ("SELECT * FROM chat.conversations", Expect::Refused),
        ("SELECT * FROM chat.messages", Expect::Refused),
        ("SELECT * FROM parley.audit", Expect::Refused),
        ("SELECT * FROM parley.idempotency", Expect::Refused),
        ("SELECT * FROM parley.chunks", Expect::Refused),
        // Parley's SECURITY DEFINER helpers answer about every collection: not to this role.
        ("SELECT parley.readable_document(1, NULL)", Expect::Refused),
        (
            "SELECT parley.searchable_collections('handbook', NULL)",
            Expect::Refused,
        ),
        // The call settings (migration 0024) and the declared tools' (0023): PL/pgSQL, so a
        // statement may not call them to lift its own timeout.
        (
            "SELECT parley.begin_sql(600000, 600000, ARRAY['secret'], 'x'), pg_sleep(2)",
            Expect::Refused,
        ),
        (
            "SELECT parley.set_local(ARRAY['statement_timeout', '0']), pg_sleep(2)",
            Expect::Refused,
        ),
        // A function whose body the guard cannot read, and one whose body calls what it refuses.
        ("SELECT count_rows('SELECT 1')", Expect::Refused),
        ("SELECT peek_activity()", Expect::Refused),
    ];
    let tasks = count(&app, "SELECT count(*) FROM tasks").await;
    let mut audited = Vec::new();
    for &(sql, expect) in attacks {
        let started = Instant::now();
        let outcome = run_sql(&app, sql).await;
        match (expect, &outcome) {
            (Expect::Refused, Err(_)) | (Expect::Harmless, Ok(_)) => {}
            (Expect::Timeout, Err(message)) => {
                assert!(
                    message.contains("ran longer than 1000 ms"),
                    "{sql}: {message}"
                );
                assert!(started.elapsed() < Duration::from_secs(30), "{sql}");
            }
            _ => panic!("{sql}: expected {expect:?}, got {outcome:?}"),
        }
        assert!(
            !format!("{outcome:?}").contains("hunter2")
                && !format!("{outcome:?}").contains("1000000"),
            "{sql} read a forbidden value: {outcome:?}"
        );
        assert_untouched(&app, sql_user, sql, tasks).await;
        audited.push((sql, expect));
    }
    assert!(!std::path::Path::new("/tmp/parley-pwned").exists());
    // Several statements are refused before anything is sent (the extended protocol would
    // refuse them too, but a proxy would have seen the text).
    let message = run_sql(&app, "SELECT 1; DELETE FROM analytics.sales")
        .await
        .unwrap_err();
    assert!(message.contains("one query per call"), "{message}");

    // The row-level-security table: the role may read it and sees no user's rows. A statement
    // may not set a caller (set_config is refused), and the role's own sessions, which may,
    // see none either: parley.caller() ignores a caller in a session of the SQL role.
    for sql in [
        "SELECT * FROM tasks",
        "SELECT set_config('parley.caller', '{\"sub\":\"alice\"}', true) AS forged, \
         (SELECT count(*) FROM tasks) AS seen",
    ] {
        let outcome = run_sql(&app, sql).await;
        let text = format!("{outcome:?}");
        assert!(!text.contains("secret plan"), "{sql}: {text}");
        if sql.contains("forged") {
            assert!(outcome.unwrap_err().contains("set_config"), "{sql}: {text}");
            audited.push((sql, Expect::Refused));
        } else {
            assert_eq!(outcome.unwrap()["row_count"], 0, "{sql}: {text}");
            audited.push((sql, Expect::Harmless));
        }
    }
    let own_session = connect(&sql_url).await;
    own_session
        .batch_execute("SELECT set_config('parley.caller', '{\"sub\":\"alice\"}', false)")
        .await
        .unwrap();
    for sql in [
        "SELECT count(*) FROM tasks",
        "SELECT count_rows('SELECT * FROM tasks')",
        "SELECT count(*) FROM ts_stat('SELECT to_tsvector(title) FROM tasks')",
    ] {
        let seen: i64 = own_session.query_one(sql, &[]).await.unwrap().get(0);
        assert_eq!(seen, 0, "{sql}");
    }
    // The forgery itself works (any role may set a custom setting); the owner sees alice's
    // task through the same function, so the zero above is row-level security, not a typo.
    let owner_sees: i64 = app
        .sql_one("SELECT count_rows('SELECT * FROM tasks WHERE owner = ''alice''')")
        .await
        .get(0);
    assert!(owner_sees >= 1);
    let caller = run_sql(
        &app,
        "SELECT current_setting('parley.caller', true) AS caller",
    )
    .await
    .unwrap()["rows"][0]["caller"]
        .clone();
    assert!(caller.is_null() || caller == "", "{caller}");

    // Statements too large, or that cannot be text.
    let huge = format!("SELECT '{}'", "x".repeat(1024 * 1024));
    let message = run_sql(&app, &huge).await.unwrap_err();
    assert!(message.contains("at most 16384"), "{message}");
    let message = run_sql(&app, "SELECT 'a\u{0}b'").await.unwrap_err();
    assert!(message.contains("NUL"), "{message}");

    // Every attempt is in the audit with its outcome (written just after each answer).
    // Each attack, its session check, two row-level-security reads, the caller check, the
    // 1 MB statement, NUL and the two statements: exactly one record each.
    let calls = 2 * attacks.len() + 2 + 1 + 2 + 1;
    let audit = wait_for_audit(&app, calls).await;
    assert_eq!(audit.len(), calls, "one record per call, no more");
    for (sql, expect) in audited {
        let Some(row) = audit.iter().find(|r| r["statement"] == sql) else {
            panic!("{sql:?} is not in the audit: {audit:?}")
        };
        let outcome = row["outcome"].as_str().unwrap();
        match expect {
            Expect::Refused => assert!(
                outcome == "refused" || outcome == "tool_error",
                "{sql}: {row}"
            ),
            Expect::Timeout => assert_eq!(outcome, "timeout", "{sql}: {row}"),
            Expect::Harmless => assert_eq!(outcome, "ok", "{sql}: {row}"),
        }
        assert_eq!(row["caller"], "service");
        assert_eq!(row["tool"], "run_sql");
    }
    // The privilege refusals are classed as such, not as mistakes in the SQL.
    let denied = audit
        .iter()
        .find(|r| r["statement"] == "SELECT * FROM secret.keys")
        .unwrap();
    assert_eq!(denied["outcome"], "refused", "{denied}");
    let nul = audit
        .iter()
        .find(|r| r["statement"] == "SELECT 'a\u{FFFD}b'")
        .expect("the NUL statement is audited, NUL shown as U+FFFD");
    assert_eq!(nul["outcome"], "refused");
    let huge = audit
        .iter()
        .find(|r| {
            r["statement"]
                .as_str()
                .is_some_and(|s| s.ends_with("bytes in all]"))
        })
        .expect("the 1 MB statement is audited, cut");
    assert_eq!(huge["outcome"], "refused");
}

#[tokio::test]
async fn on_a_managed_server_the_guard_refuses_by_name_and_by_plan_and_queries_still_answer() {
    let Target { app, sql_url, .. } = spawn_target(true, &[]).await;
    // Start-up accepted the role although the revokes are missing, and its disk limit is the
    // database's (the parameter group's stand-in), not its own.
    let sql_session = connect(&sql_url).await;
    let row = sql_session
        .query_one(
            "SELECT has_function_privilege('pg_logical_emit_message(boolean,text,text)', 'EXECUTE'), \
                    has_function_privilege('pg_terminate_backend(integer,bigint)', 'EXECUTE'), \
                    (SELECT setting || ' ' || source FROM pg_settings WHERE name = 'temp_file_limit')",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0) && row.get::<_, bool>(1));
    assert_eq!(row.get::<_, String>(2), "262144 database");

    // Each group the guard refuses, however the name is written; the refusal says why.
    for (sql, why) in [
        (
            "SELECT pg_logical_emit_message(false, 'p', 'x')",
            "writes WAL",
        ),
        ("SELECT txid_current()", "transaction id"),
        ("SELECT pg_current_xact_id()", "transaction id"),
        (
            "SELECT pg_terminate_backend(pg_backend_pid())",
            "other callers'",
        ),
        ("SELECT pg_cancel_backend(1)", "other callers'"),
        (
            "SELECT query FROM pg_stat_activity",
            "other callers' questions",
        ),
        (
            "SELECT * FROM pg_stat_get_activity(NULL)",
            "other callers' questions",
        ),
        (
            "SELECT pg_stat_get_backend_activity(1)",
            "other callers' questions",
        ),
        ("SELECT * FROM pg_stat_gssapi", "other callers' questions"),
        (
            "SELECT * FROM pg_stat_replication",
            "other callers' questions",
        ),
        (
            "SELECT query_to_xml('SELECT 1', false, false, '')",
            "SQL given as text",
        ),
        (
            "SELECT table_to_xml('analytics.regions', false, false, '')",
            "SQL given as text",
        ),
        (
            "SELECT * FROM ts_stat('SELECT to_tsvector(name) FROM analytics.regions')",
            "SQL given as text",
        ),
        (
            "SELECT set_config('work_mem', '1GB', true)",
            "session state",
        ),
        ("SELECT pg_advisory_lock(7)", "session state"),
        ("SELECT pg_try_advisory_lock_shared(7)", "session state"),
        ("SELECT \"pg_cancel_backend\"(1)", "other callers'"),
        ("SELECT PG_Terminate_Backend(1)", "other callers'"),
        (
            "SELECT pg_catalog /* c */ . \"pg_terminate_backend\" (1)",
            "other callers'",
        ),
        (
            "SELECT U&\"pg\\005fcancel\\005fbackend\"(1)",
            "other callers'",
        ),
        (
            "SELECT U&\"!0070g_stat_activity\" UESCAPE '!' FROM x",
            "other callers' questions",
        ),
        // Where a plan prints no expression: LIMIT, OFFSET, a VALUES list.
        (
            "SELECT 1 AS one LIMIT pg_cancel_backend(1)::int",
            "other callers'",
        ),
        (
            "SELECT * FROM (VALUES (txid_current())) v",
            "transaction id",
        ),
    ] {
        let message = run_sql(&app, sql).await.unwrap_err();
        assert!(
            message.contains("do not run") && message.contains(why),
            "{sql}: {message}"
        );
    }
    // A function the guard cannot read, and an SQL one whose body it refuses.
    for sql in ["SELECT count_rows('SELECT 1')", "SELECT peek_activity()"] {
        let message = run_sql(&app, sql).await.unwrap_err();
        assert!(message.contains("cannot check"), "{sql}: {message}");
    }

    // What a plan shows: views made after start-up (so start-up did not read them) that reach
    // a refused function, directly, through another view, or through an opaque function.
    app.db
        .client()
        .await
        .batch_execute(
            "CREATE VIEW analytics.sessions AS SELECT pid, query FROM pg_stat_activity;
             CREATE VIEW analytics.sessions_again AS SELECT * FROM analytics.sessions;
             CREATE VIEW analytics.counted AS SELECT count_rows('SELECT 1') AS n;
             CREATE VIEW analytics.region_names AS SELECT upper(name) AS name FROM analytics.regions;
             GRANT SELECT ON analytics.sessions, analytics.sessions_again, analytics.counted,
                 analytics.region_names TO parley_sql_reader;",
        )
        .await
        .unwrap();
    for (sql, what) in [
        (
            "SELECT * FROM analytics.sessions",
            "plan calls `pg_stat_get_activity`",
        ),
        (
            "SELECT count(*) FROM sessions_again",
            "plan calls `pg_stat_get_activity`",
        ),
        ("SELECT n FROM counted", "plan calls `count_rows`"),
    ] {
        let message = run_sql(&app, sql).await.unwrap_err();
        assert!(message.contains(what), "{sql}: {message}");
    }

    // Ordinary questions answer: joins, an SQL helper the guard read, a harmless new view,
    // names that only look like refused ones (a string, a column alias in quotes).
    let out = run_sql(
        &app,
        "SELECT r.name, sum(s.amount) AS total, net(sum(s.amount)) AS net, \
                'pg_cancel_backend(1)' AS text \
         FROM analytics.sales s JOIN regions r ON r.id = s.region_id \
         WHERE s.sold_on < date '2026-01-05' GROUP BY r.name ORDER BY r.name",
    )
    .await
    .unwrap();
    assert_eq!(out["row_count"], 3, "{out}");
    assert_eq!(out["rows"][0]["text"], "pg_cancel_backend(1)");
    let out = run_sql(&app, "SELECT name FROM region_names ORDER BY name")
        .await
        .unwrap();
    assert_eq!(
        out["rows"],
        json!([{"name": "EAST"}, {"name": "NORTH"}, {"name": "SOUTH"}])
    );
    // explain_sql reads the same names, and explains what passes.
    let message = app
        .tool_error("explain_sql", json!({"sql": "SELECT pg_cancel_backend(1)"}))
        .await;
    assert!(message.contains("do not run"), "{message}");
    let plan = app
        .call(
            "explain_sql",
            json!({"sql": "SELECT * FROM analytics.regions"}),
        )
        .await;
    assert_eq!(plan["isError"], false, "{plan}");

    // The refusals are audited as refusals.
    let audit = wait_for_audit(&app, 1).await;
    let refused = audit
        .iter()
        .find(|r| r["statement"] == "SELECT txid_current()")
        .unwrap();
    assert_eq!(refused["outcome"], "refused", "{refused}");
}

#[tokio::test]
async fn neither_path_of_the_sql_tools_sends_what_a_proxy_pins_on() {
    // A private server that logs every statement; a database a superuser migrated (the
    // statement's EXPLAIN pipelined) and one its master migrated (the plan read first).
    let log = parley_testkit::pin_lint::StatementLog::start();
    let revoked = TestDb::with_demo_data_on(&log.url(), FEEDBACK_ROWS).await;
    let revoked_url = revoked.sql_reader_url(GRANTS_PUBLIC).await;
    let guarded = ManagedDb::with_demo_data_on(&log.url(), FEEDBACK_ROWS).await;
    let guarded_url = guarded.sql_reader_url(GRANTS_PUBLIC).await;
    for (db, url) in [(revoked, revoked_url), (guarded.db, guarded_url)] {
        let app = spawn_on(
            db,
            Options {
                tools_toml: Some("[sql]\nschemas = [\"public\"]\n".into()),
                extra_env: env(&[("SQL_DATABASE_URL", &url)]),
                ..Options::default()
            },
        )
        .await
        .expect("the SQL tools start");
        run_sql(&app, "SELECT count(*) AS n FROM feedback")
            .await
            .unwrap();
        // An unknown name: its repair hint is looked up in a transaction of its own.
        let message = run_sql(&app, "SELECT count(*) FROM feedbak")
            .await
            .unwrap_err();
        assert!(
            message.contains("did you mean `public.feedback`"),
            "{message}"
        );
        // Refused before anything is sent, so the proxy never sees them.
        for sql in [
            "SET work_mem = '1GB'",
            "SELECT set_config('work_mem', '1GB', false)",
        ] {
            run_sql(&app, sql).await.unwrap_err();
        }
        app.rows("list_tables", json!({})).await;
        app.call("describe_table", json!({"name": "feedback"}))
            .await;
        app.call("explain_sql", json!({"sql": "SELECT * FROM feedback"}))
            .await;
    }
    // The SQL pool's connections (`parley-mcp`), and a call's transaction once its
    // `application_name` is set (`parley request=`).
    let tools = ["parley-mcp", "parley request="];
    let seen = log.statements(&tools).await;
    for what in [
        "parley.begin_sql",
        "EXPLAIN (COSTS OFF)",
        "EXPLAIN (VERBOSE, FORMAT JSON)",
        "json_build_array(n.nspname, c.relname)",
    ] {
        assert!(
            seen.iter().any(|s| s.statement.contains(what)),
            "the log has no `{what}`: the lint would pass by seeing nothing"
        );
    }
    let findings = log.findings(&tools).await;
    assert!(
        findings.is_empty(),
        "{}",
        findings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The demo's feedback tables, for tests that need no more.
const GRANTS_PUBLIC: &str = "GRANT SELECT ON public.feedback, public.lads TO parley_sql_reader;";

/// Rows of `parley.audit` once at least `n` have been written (the writer runs after each
/// answer, so the last ones may take a moment).
pub async fn wait_for_audit(app: &TestApp, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows: Value = app
            .sql_one("SELECT coalesce(json_agg(a ORDER BY id), '[]')::text FROM parley.audit a")
            .await
            .get::<_, String>(0)
            .parse()
            .unwrap();
        let rows = rows.as_array().cloned().unwrap_or_default();
        if rows.len() >= n || Instant::now() > deadline {
            assert!(rows.len() >= n, "only {} audit rows of {n}", rows.len());
            return rows;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn an_analytic_query_with_ctes_windows_and_joins_answers_exactly() {
    let app = spawn_sql(&[]).await;
    let sql = "WITH monthly AS (
        SELECT r.name, date_trunc('month', s.sold_on)::date AS month, sum(s.amount) AS total
        FROM analytics.sales s JOIN regions r ON r.id = s.region_id
        WHERE s.sold_on < date '2026-04-01'
        GROUP BY 1, 2
    )
    SELECT name, month, total,
           rank() OVER (PARTITION BY month ORDER BY total DESC) AS rank,
           total - lag(total) OVER (PARTITION BY name ORDER BY month) AS change
    FROM monthly ORDER BY month, rank;";
    let out = run_sql(&app, sql).await.unwrap();
    assert_eq!(out["row_count"], 9);
    assert_eq!(out["truncated"], false);
    let expected: Value = app
        .sql_one(&format!(
            "SELECT json_agg(q)::text FROM ({}) q",
            sql.trim_end_matches(';')
                .replace("JOIN regions", "JOIN analytics.regions")
        ))
        .await
        .get::<_, String>(0)
        .parse()
        .unwrap();
    assert_eq!(
        out["rows"], expected,
        "numeric and date values arrive as stored"
    );

    // The analyst's question over the demo data answers too.
    let out = run_sql(
        &app,
        "SELECT l.name, count(*) FILTER (WHERE f.created_at >= date_trunc('quarter', now())) AS this_quarter \
         FROM feedback f JOIN lads l ON l.code = f.lad_code WHERE f.sentiment = 'negative' \
         GROUP BY l.name ORDER BY 2 DESC, 1 LIMIT 5",
    )
    .await
    .unwrap();
    assert!(out["row_count"].as_u64().unwrap() > 0, "{out}");
}

#[tokio::test]
async fn results_are_capped_and_errors_point_into_the_statement() {
    let app = spawn_sql(&[]).await;
    let out = run_sql(
        &app,
        "SELECT a.*, b.id AS other_id FROM analytics.sales a CROSS JOIN analytics.sales b",
    )
    .await
    .unwrap();
    assert_eq!(out["row_count"], 50);
    assert_eq!(out["truncated_reason"], "max_rows");
    let out = app
        .rows(
            "run_sql",
            json!({"sql": "SELECT id FROM analytics.sales ORDER BY id", "limit": 3}),
        )
        .await;
    assert_eq!(out["rows"], json!([{"id": 1}, {"id": 2}, {"id": 3}]));
    assert_eq!(out["truncated"], true);
    let out = run_sql(
        &app,
        "SELECT repeat('x', 300000) AS big FROM analytics.regions",
    )
    .await
    .unwrap();
    assert_eq!(out["row_count"], 0);
    assert_eq!(out["truncated_reason"], "max_bytes");

    let message = run_sql(&app, "SELECT id,\n       nmae FROM analytics.regions")
        .await
        .unwrap_err();
    assert!(
        message.contains("column \"nmae\" does not exist"),
        "{message}"
    );
    assert!(message.contains("line 2, column 8"), "{message}");
    assert!(
        message.contains("HINT"),
        "Postgres' hint is passed on: {message}"
    );
    let message = run_sql(&app, "SELECT * FROM nowhere").await.unwrap_err();
    assert!(
        message.contains("relation \"nowhere\" does not exist"),
        "{message}"
    );
    assert!(message.contains("line 1, column 15"), "{message}");
    // Postgres quotes the value in this message; what reaches the model is cut.
    let message = run_sql(&app, "SELECT repeat('x', 300000)::int")
        .await
        .unwrap_err();
    assert!(
        message.len() < 3000 && message.contains("[cut]"),
        "{}",
        message.len()
    );
    // A trailing comment cannot swallow the wrapper.
    let out = run_sql(&app, "SELECT 1 AS one -- the end").await.unwrap();
    assert_eq!(out["rows"], json!([{"one": 1}]));
    let message = app
        .tool_error("run_sql", json!({"sql": "SELECT 1", "rows": 3}))
        .await;
    assert!(message.contains("unknown field `rows`"), "{message}");
}

#[tokio::test]
async fn an_unknown_table_or_column_gets_the_nearest_names_the_role_may_read() {
    let app = spawn_sql(&[]).await;
    // A table the role may read some columns of: the others exist but are never offered.
    app.db
        .client()
        .await
        .batch_execute(
            "CREATE TABLE analytics.customers (id int, first_name text, last_name text, \
                 card_number text);
             GRANT SELECT (id, first_name, last_name) ON analytics.customers \
                 TO parley_sql_reader;",
        )
        .await
        .unwrap();

    let message = run_sql(&app, "SELECT region_id,\n       amout FROM analytics.sales")
        .await
        .unwrap_err();
    assert!(
        message.contains("column \"amout\" does not exist; did you mean `sales.amount`"),
        "{message}"
    );
    assert!(
        message.contains("line 2, column 8"),
        "Postgres' position is kept: {message}"
    );
    // A column of a table the statement does not name yet, found by its alias' last part.
    let message = run_sql(&app, "SELECT s.frist_name FROM analytics.sales s")
        .await
        .unwrap_err();
    assert!(
        message.contains("did you mean `customers.first_name`"),
        "{message}"
    );
    // explain_sql's errors get the same hints.
    let message = app
        .tool_error(
            "explain_sql",
            json!({"sql": "SELECT amout FROM analytics.sales"}),
        )
        .await;
    assert!(message.contains("did you mean `sales.amount`"), "{message}");

    let message = run_sql(&app, "SELECT * FROM analytics.sale")
        .await
        .unwrap_err();
    assert!(
        message
            .contains("relation \"analytics.sale\" does not exist; did you mean `analytics.sales`"),
        "{message}"
    );
    assert!(message.contains("line 1, column 15"), "{message}");
    let message = run_sql(&app, "SELECT count(*) FROM region")
        .await
        .unwrap_err();
    assert!(
        message.contains("did you mean `analytics.regions`"),
        "{message}"
    );

    // What the role may not read is never named, however close: a column it was not
    // granted, a table of an allowed schema it was not granted, a schema it may not use.
    for (sql, hidden) in [
        (
            "SELECT card_numbr FROM analytics.regions",
            "`customers.card_number`",
        ),
        ("SELECT * FROM analytics.salary", "`analytics.salaries`"),
        ("SELECT * FROM keys", "`secret.keys`"),
    ] {
        let message = run_sql(&app, sql).await.unwrap_err();
        assert!(message.contains("does not exist"), "{sql}: {message}");
        assert!(
            !message.contains(hidden),
            "{sql} names `{hidden}`: {message}"
        );
    }
    // Nothing close, no hint.
    for sql in [
        "SELECT xyzzy FROM analytics.regions",
        "SELECT * FROM nowhere_at_all",
    ] {
        let message = run_sql(&app, sql).await.unwrap_err();
        assert!(
            message.contains("does not exist") && !message.contains("did you mean"),
            "{sql}: {message}"
        );
    }
    // The lookup shares the one pooled connection and leaves nothing on it.
    let out = run_sql(&app, "SELECT count(*) AS n FROM analytics.regions")
        .await
        .unwrap();
    assert_eq!(out["rows"][0]["n"], 3);
}

#[tokio::test]
async fn the_schema_tools_show_what_the_role_may_read_and_nothing_else() {
    let app = spawn_sql(&[]).await;
    let out = app.rows("list_tables", json!({})).await;
    let names: Vec<String> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}.{}",
                r["schema"].as_str().unwrap(),
                r["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "analytics.regions",
            "analytics.sales",
            "public.feedback",
            "public.lads",
            "public.tasks"
        ],
        "granted tables of the allowed schemas, in search_path order"
    );
    let regions = &out["rows"][0];
    assert_eq!(regions["comment"], "Sales regions.");
    assert_eq!(regions["rows_estimate"], 3);
    let only = app
        .rows("list_tables", json!({"schema": "analytics"}))
        .await;
    assert_eq!(only["row_count"], 2);
    let message = app
        .tool_error("list_tables", json!({"schema": "secret"}))
        .await;
    assert!(message.contains("not open to the SQL tools"), "{message}");

    let sales = app.call("describe_table", json!({"name": "sales"})).await;
    assert_eq!(sales["isError"], false, "{sales}");
    let sales = &sales["structuredContent"];
    assert_eq!(sales["schema"], "analytics");
    let columns: Vec<&str> = sales["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["id", "region_id", "sold_on", "amount"]);
    assert_eq!(sales["columns"][3]["type"], "numeric(10,2)");
    assert_eq!(sales["columns"][3]["default"], "0");
    assert_eq!(sales["columns"][2]["nullable"], false);
    assert_eq!(sales["columns"][0]["identity"], "always");
    assert!(
        sales["columns"][0].get("comment").is_none(),
        "no nulls to read past"
    );
    let constraints = sales["constraints"].to_string();
    assert!(constraints.contains("PRIMARY KEY (id)"), "{constraints}");
    assert!(
        constraints.contains("REFERENCES regions(id)"),
        "{constraints}"
    );
    assert!(
        sales["indexes"]
            .to_string()
            .contains("sales_region_day_idx")
    );
    assert_eq!(sales["sample_rows"].as_array().unwrap().len(), 2);
    let regions = app
        .call("describe_table", json!({"name": "analytics.Regions"}))
        .await;
    let regions = &regions["structuredContent"];
    assert_eq!(
        regions["columns"][1]["comment"],
        "What the region is called."
    );
    assert!(
        regions["referenced_by"]
            .to_string()
            .contains("analytics.sales")
    );

    for hidden in [
        "secret.keys",
        "salaries",
        "parley.audit",
        "pg_authid",
        "chat.messages",
    ] {
        let message = app
            .tool_error("describe_table", json!({"name": hidden}))
            .await;
        assert!(
            message.contains("no table or view") || message.contains("not open"),
            "{hidden}: {message}"
        );
    }

    let plan = app
        .call(
            "explain_sql",
            json!({"sql": "SELECT * FROM analytics.sales WHERE region_id = 2 AND sold_on = date '2026-02-01'"}),
        )
        .await;
    let plan = plan["structuredContent"]["plan"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(plan.contains("sales_region_day_idx"), "{plan}");
    // A plan prints the constants it folded; the plan is cut at the result cap.
    let plan = app
        .call(
            "explain_sql",
            json!({"sql": "SELECT * FROM analytics.regions WHERE name = repeat('x', 300000)"}),
        )
        .await;
    assert_eq!(
        plan["structuredContent"]["truncated"],
        true,
        "{}",
        plan.to_string().len()
    );
    assert!(plan["structuredContent"]["plan"].as_str().unwrap().len() <= 262_144);
    // EXPLAIN plans; it never runs the statement, writes included.
    let plan = app
        .call("explain_sql", json!({"sql": "SELECT note('explained')"}))
        .await;
    assert_eq!(plan["isError"], false, "{plan}");
    assert_eq!(count(&app, "SELECT count(*) FROM secret.log").await, 0);
    for sql in [
        "ANALYZE SELECT 1",
        "(ANALYZE) SELECT note('x')",
        "SELECT 1; EXPLAIN ANALYZE SELECT note('x')",
    ] {
        // Refused before anything is sent: not a query, or more than one.
        let message = app.tool_error("explain_sql", json!({ "sql": sql })).await;
        assert!(
            message.contains("statements are not run") || message.contains("one query per call"),
            "{sql}: {message}"
        );
    }
    assert_eq!(count(&app, "SELECT count(*) FROM secret.log").await, 0);
}

#[tokio::test]
async fn the_tools_are_described_with_their_schemas_and_limits() {
    let app = spawn_sql(&[]).await;
    let (_, listed) = app.rpc("tools/list", json!({})).await;
    let tools = listed["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["run_sql", "list_tables", "describe_table", "explain_sql"]
    );
    let run = &tools[0];
    let description = run["description"].as_str().unwrap();
    for needle in [
        "analytics, public",
        "PostgreSQL",
        "50 rows",
        "1000 ms",
        "Amounts are in pounds.",
    ] {
        assert!(description.contains(needle), "{needle}: {description}");
    }
    assert_eq!(run["annotations"]["readOnlyHint"], true);
    assert_eq!(run["inputSchema"]["properties"]["limit"]["maximum"], 50);

    // A real MCP client (rmcp's, through rmcp's own handler rather than the direct path).
    let client = app.client().await;
    let listed = client.list_all_tools().await.unwrap();
    assert!(listed.iter().any(|t| t.name == "run_sql"));
    let result = client_call(
        &client,
        "run_sql",
        json!({"sql": "SELECT name FROM regions ORDER BY id"}),
    )
    .await;
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(
        result.structured_content.unwrap()["rows"],
        json!([{"name": "North"}, {"name": "South"}, {"name": "East"}])
    );
    let result = client_call(&client, "run_sql", json!({"sql": "DELETE FROM regions"})).await;
    assert_eq!(result.is_error, Some(true));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn columns_of_one_name_come_back_as_distinct_keys() {
    let app = spawn_sql(&[]).await;
    // An object with a key twice parses differently in every client (most keep the last), so
    // a later column of a name already taken gets a suffix no other column has.
    let out = run_sql(
        &app,
        "SELECT 1 AS a, 2.50 AS a, 'x' AS a_2, min(id), min(region_id) FROM analytics.sales",
    )
    .await
    .unwrap();
    assert_eq!(
        out["rows"],
        json!([{"a": 1, "a_3": 2.50, "a_2": "x", "min": 1, "min_2": 1}])
    );
    let text = app
        .call("run_sql", json!({"sql": "SELECT 1 AS a, 2.50 AS a"}))
        .await["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.starts_with(r#"{"rows":[{"a":1,"a_2":2.50}]"#),
        "values exactly as Postgres wrote them: {text}"
    );
    let out = run_sql(
        &app,
        "SELECT r.name, s.id AS name FROM analytics.regions r JOIN analytics.sales s ON s.region_id = r.id ORDER BY s.id LIMIT 1",
    )
    .await
    .unwrap();
    assert_eq!(out["rows"], json!([{"name": "South", "name_2": 1}]));
}

#[tokio::test]
async fn a_statement_another_session_cancels_is_reported_as_cancelled_not_as_a_timeout() {
    // A minute's timeout: the cancel comes long before it, however loaded the machine.
    let app = spawn_sql_with(
        &SQL_TOOLS.replace("timeout_ms = 1000", "timeout_ms = 60000"),
        &[],
    )
    .await;
    let call = run_sql(&app, "SELECT pg_sleep(30) AS slept");
    let cancel = async {
        // As a DBA would: the SQL role's active statement, once it is running.
        for _ in 0..400 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let cancelled: i64 = app
                .sql_one(&format!(
                    "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity \
                     WHERE usename = '{SQL_READER_USER}' AND datname = current_database() \
                     AND state = 'active' AND query LIKE '%pg_sleep(30)%'"
                ))
                .await
                .get(0);
            if cancelled > 0 {
                return;
            }
        }
        panic!("the statement never showed in pg_stat_activity");
    };
    let started = Instant::now();
    let (outcome, ()) = tokio::join!(call, cancel);
    let message = outcome.unwrap_err();
    assert!(
        message.contains("cancelled") && message.contains("another session"),
        "{message}"
    );
    assert!(!message.contains("ran longer than"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the cancel ended the call"
    );
    // The connection is clean for the next call.
    let out = run_sql(&app, "SELECT 1 AS one").await.unwrap();
    assert_eq!(out["rows"], json!([{"one": 1}]));
}

/// This process's peak resident memory, in KiB. nextest runs each test in a process of its
/// own, so the peak is this test's.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test]
async fn an_error_quoting_a_huge_value_reaches_the_function_cut() {
    // A minute's timeout, so Postgres builds the whole message however loaded the machine.
    let app = spawn_sql_with(
        &SQL_TOOLS.replace("timeout_ms = 1000", "timeout_ms = 60000"),
        &[],
    )
    .await;
    run_sql(&app, "SELECT 1").await.unwrap();
    let before = peak_kib();
    // Postgres quotes the 64 MB value in its message; tokio-postgres would read all of it,
    // then copy it into the error's text.
    let message = run_sql(&app, "SELECT repeat('x', 64000000)::int")
        .await
        .unwrap_err();
    let grown_mib = (peak_kib() - before) / 1024;
    assert!(
        message.starts_with("ERROR 22P02: invalid input syntax for type integer")
            && message.contains("[cut]")
            && message.len() < 3000,
        "{}",
        &message[..message.len().min(300)]
    );
    assert!(
        grown_mib < 16,
        "the message cost {grown_mib} MiB; each of its fields is cut to 8 KiB as it arrives"
    );
    // The connection carries on.
    let out = run_sql(&app, "SELECT 1 AS one").await.unwrap();
    assert_eq!(out["rows"], json!([{"one": 1}]));
}

#[tokio::test]
async fn a_dba_sees_the_tool_and_request_in_pg_stat_activity() {
    let app = spawn_sql(&[]).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "run_sql", "arguments": {"sql": "SELECT pg_sleep(0.8) AS slept"}}})
    .to_string();
    let headers = app.standard_headers();
    let mut headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    headers.push(("x-request-id", "req-dba-42"));
    let call = app.post_mcp(body, &headers);
    let look = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.sql_one(&format!(
            "SELECT query, application_name FROM pg_stat_activity WHERE usename = '{SQL_READER_USER}' \
             AND datname = current_database() AND state = 'active'"
        ))
        .await
    };
    let (response, seen) = tokio::join!(call, look);
    assert_eq!(response.status(), 200);
    let query: String = seen.get(0);
    let application: String = seen.get(1);
    assert!(
        query.starts_with("/* parley tool=run_sql request=req-dba-42 */"),
        "{query}"
    );
    assert_eq!(application, "parley request=req-dba-42");
}

#[tokio::test]
async fn bodies_that_are_not_utf8_are_refused_before_any_tool() {
    let app = spawn_sql(&[]).await;
    let mut body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_sql","arguments":{"sql":"SELECT '"#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    body.extend_from_slice(br#"'"}}}"#);
    let response = reqwest::Client::new()
        .post(&app.mcp_url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header(
            "authorization",
            format!("Bearer {}", app.token.as_deref().unwrap()),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert!(
        status == 400 || text.contains("\"error\""),
        "{status} {text}"
    );
    assert!(!text.contains("\"result\""), "{text}");
    // A lone surrogate is not text either.
    let (status, body) = app
        .rpc(
            "tools/call",
            serde_json::from_str(r#"{"name":"run_sql","arguments":{"sql":"SELECT 1"}}"#).unwrap(),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let raw = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_sql","arguments":{"sql":"SELECT '\ud800'"}}}"#;
    let headers = app.standard_headers();
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let response = app.post_mcp(raw.to_owned(), &headers).await;
    let text = response.text().await.unwrap();
    assert!(!text.contains("\"result\""), "{text}");
}

/// What the guard's plan check costs a call: `run_sql` of a light statement and of a join,
/// alternately on a database a superuser migrated (revokes in place: the statement's EXPLAIN
/// goes in the same round trip) and on one a managed server's master migrated (the plan
/// check: EXPLAIN (VERBOSE, FORMAT JSON) answered and read first, one round trip more). Prints
/// the medians; run with `--run-ignored only --no-capture`.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn guard_cost() {
    let revoked = spawn_target(false, &[]).await;
    let guarded = spawn_target(true, &[]).await;
    const CALLS: usize = 300;
    for sql in [
        "SELECT 1 AS one",
        "SELECT r.name, count(*) AS n FROM analytics.sales s JOIN regions r ON r.id = s.region_id \
         WHERE s.sold_on = date '2026-02-01' GROUP BY r.name",
    ] {
        let mut times = [Vec::with_capacity(CALLS), Vec::with_capacity(CALLS)];
        // Warm both (connections, plans of the catalog queries).
        for target in [&revoked, &guarded] {
            for _ in 0..20 {
                run_sql(&target.app, sql).await.unwrap();
            }
        }
        for _ in 0..CALLS {
            for (i, target) in [&revoked, &guarded].into_iter().enumerate() {
                let started = Instant::now();
                run_sql(&target.app, sql).await.unwrap();
                times[i].push(started.elapsed());
            }
        }
        let median = |t: &mut Vec<Duration>| {
            t.sort();
            t[t.len() / 2]
        };
        let (r, g) = (median(&mut times[0]), median(&mut times[1]));
        println!(
            "{sql:.40}: revoked {:.3} ms, guarded {:.3} ms, guard +{:.3} ms (median of {CALLS})",
            r.as_secs_f64() * 1e3,
            g.as_secs_f64() * 1e3,
            (g.as_secs_f64() - r.as_secs_f64()) * 1e3
        );
    }
}
