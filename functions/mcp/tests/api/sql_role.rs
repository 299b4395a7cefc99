//! What the ad-hoc SQL role could do past its read-only transaction (issue 20): write WAL that
//! ROLLBACK keeps, read other callers' statements, end their sessions. Each is refused through
//! `run_sql`, on a database a superuser migrated (migration 0008's revokes) and on one a
//! managed server's master migrated (no revokes: the guard, issue 33); start-up refuses a role
//! that could, or that lacks docs/sql.md's limits.

use std::time::{Duration, Instant};

use parley_testkit::managed::{self, ManagedDb};
use parley_testkit::{Moto, SQL_READER_USER, TestCluster, TestDb, connect};

use crate::helpers::{Options, TOKEN, TestApp, env, run_sql, spawn_on, spawn_with_secrets};
use crate::sql_attacks::wait_for_audit;

/// A database migrated by a superuser (`managed == false`) or a managed server's master, with
/// the SQL tools' login granted nothing: its name and URL.
async fn database(managed: bool) -> (TestDb, &'static str, String) {
    if managed {
        let db = ManagedDb::migrated().await;
        let url = db.sql_reader_url("").await;
        (db.db, managed::SQL_LOGIN, url)
    } else {
        let db = TestDb::migrated().await;
        let url = db.sql_reader_url("").await;
        (db, SQL_READER_USER, url)
    }
}

const SQL_TOOLS: &str = "[sql]\nschemas = [\"public\"]\ntimeout_ms = 5000\n";

/// Starts the function with the SQL tools over `sql_url`; the start-up error if it fails.
async fn start(db: TestDb, sql_url: &str) -> Result<TestApp, String> {
    spawn_on(
        db,
        Options {
            tools_toml: Some(SQL_TOOLS.into()),
            extra_env: env(&[("SQL_DATABASE_URL", sql_url)]),
            ..Options::default()
        },
    )
    .await
}

#[tokio::test]
async fn a_sql_caller_can_neither_write_wal_nor_take_a_transaction_id() {
    neither_wal_nor_xid(false).await;
}

#[tokio::test]
async fn a_sql_caller_can_neither_write_wal_nor_take_a_transaction_id_on_a_managed_server() {
    neither_wal_nor_xid(true).await;
}

async fn neither_wal_nor_xid(managed: bool) {
    let (db, _, url) = database(managed).await;
    let app = start(db, &url)
        .await
        .expect("the SQL role passes the check");
    let statements = [
        // 200 MB per call when it was allowed; 1 MB is enough to tell.
        "SELECT pg_logical_emit_message(false, 'parley', repeat('x', 1000000))",
        "SELECT pg_logical_emit_message(true, 'parley', '\\x00'::bytea)",
        "SELECT txid_current()",
        "SELECT pg_current_xact_id()",
    ];
    for sql in statements {
        let message = run_sql(&app, sql).await.unwrap_err();
        assert!(
            message.contains("which the SQL tools do not run")
                && (message.contains("WAL") || message.contains("transaction id")),
            "{sql}: {message}"
        );
    }
    let audit = wait_for_audit(&app, statements.len()).await;
    for sql in statements {
        let row = audit.iter().find(|r| r["statement"] == sql).unwrap();
        assert_eq!(row["outcome"], "refused", "{row}");
    }
}

#[tokio::test]
async fn a_sql_caller_sees_no_other_callers_statement_and_cannot_end_its_session() {
    no_other_callers(false).await;
}

#[tokio::test]
async fn a_sql_caller_sees_no_other_callers_statement_and_cannot_end_its_session_on_a_managed_server()
 {
    no_other_callers(true).await;
}

async fn no_other_callers(managed: bool) {
    let (db, sql_user, url) = database(managed).await;
    let app = start(db.clone(), &url)
        .await
        .expect("the SQL role passes the check");
    // Another caller's question, on a session of the same role, running for 3 s.
    let other = connect(&url).await;
    let question = tokio::spawn(async move {
        other
            .query_one(
                "SELECT 'parley-other-caller' AS question, pg_sleep(3)::text AS slept",
                &[],
            )
            .await
    });
    let owner = db.client().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid: i32 = loop {
        let rows = owner
            .query(
                "SELECT pid FROM pg_stat_activity WHERE usename = $1 AND state = 'active' \
                 AND query LIKE '%parley-other-caller%'",
                &[&sql_user],
            )
            .await
            .unwrap();
        if let Some(row) = rows.first() {
            break row.get(0);
        }
        assert!(Instant::now() < deadline, "the other session never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    // The marker is split so that this statement's own text does not match it.
    for sql in [
        "SELECT query FROM pg_stat_activity WHERE query LIKE '%parley-' || 'other-caller%'",
        "SELECT pg_stat_get_backend_activity(b) AS query FROM pg_stat_get_backend_idset() b",
        "SELECT query FROM pg_stat_get_activity(NULL)",
        "SELECT client_addr FROM pg_stat_ssl",
    ] {
        let outcome = run_sql(&app, sql).await;
        assert!(
            !format!("{outcome:?}").contains("parley-other-caller"),
            "{sql} shows the other caller's statement: {outcome:?}"
        );
        let message = outcome.unwrap_err();
        assert!(
            message.contains("other callers' questions"),
            "{sql}: {message}"
        );
    }
    for sql in [
        format!("SELECT pg_cancel_backend({pid})"),
        format!("SELECT pg_terminate_backend({pid})"),
    ] {
        let message = run_sql(&app, &sql).await.unwrap_err();
        assert!(message.contains("other callers'"), "{sql}: {message}");
    }
    // A view made after start-up, over the activity view: the guard reads it in the plan (on a
    // managed server), Postgres refuses the function inside it (where 0008 revoked it).
    db.client()
        .await
        .batch_execute(
            "CREATE VIEW public.sessions AS SELECT pid, query FROM pg_stat_activity;
             CREATE VIEW public.sessions_again AS SELECT * FROM public.sessions;
             GRANT SELECT ON public.sessions, public.sessions_again TO parley_sql_reader;",
        )
        .await
        .unwrap();
    for sql in [
        "SELECT * FROM sessions",
        "SELECT count(*) FROM sessions_again",
    ] {
        let outcome = run_sql(&app, sql).await;
        assert!(
            !format!("{outcome:?}").contains("parley-other-caller"),
            "{sql}: {outcome:?}"
        );
        let message = outcome.unwrap_err();
        if managed {
            assert!(
                message.contains("plan calls `pg_stat_get_activity`"),
                "{sql}: {message}"
            );
        } else {
            assert!(message.contains("permission denied"), "{sql}: {message}");
        }
    }
    let answered = question
        .await
        .unwrap()
        .expect("the other caller's query completes");
    assert_eq!(answered.get::<_, String>(0), "parley-other-caller");
}

#[tokio::test]
async fn start_up_refuses_a_sql_role_granted_the_servers_files_and_lets_the_guard_stand_in_for_0008()
 {
    let db = TestDb::migrated().await;
    // As an admin might, or as a database migrated by a non-superuser stays (PUBLIC keeps
    // them): the guard's plan check stands in for these.
    let missed = "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text),
                      pg_terminate_backend(integer, bigint) TO parley_sql_reader;
                  GRANT EXECUTE ON FUNCTION txid_current() TO PUBLIC;
                  GRANT SELECT ON pg_stat_activity TO parley_sql_reader;";
    // Nothing stands in for this one.
    let url = db
        .sql_reader_url(&format!(
            "{missed} GRANT EXECUTE ON FUNCTION pg_read_file(text) TO parley_sql_reader;"
        ))
        .await;
    let e = start(db.clone(), &url).await.map(drop).unwrap_err();
    assert!(
        e.contains("REVOKE EXECUTE ON FUNCTION pg_catalog.pg_read_file(text)")
            && e.contains("server's files"),
        "{e}"
    );
    for covered in [
        "pg_logical_emit_message",
        "pg_terminate_backend",
        "txid_current",
    ] {
        assert!(!e.contains(covered), "{covered} is the guard's: {e}");
    }
    db.client()
        .await
        .batch_execute("REVOKE EXECUTE ON FUNCTION pg_read_file(text) FROM parley_sql_reader")
        .await
        .unwrap();
    let app = start(db, &url)
        .await
        .expect("with the revokes missing, the guard stands in");
    for sql in [
        "SELECT pg_logical_emit_message(false, 'parley', 'x')",
        "SELECT txid_current()",
        "SELECT count(*) FROM pg_stat_activity",
    ] {
        let message = run_sql(&app, sql).await.unwrap_err();
        assert!(message.contains("do not run"), "{sql}: {message}");
    }
}

/// A LOGIN member of `parley_sql_reader` made like [`SQL_READER_USER`] but without the limits
/// docs/sql.md asks for. Roles are cluster-wide: created once, put back as it was each time.
const UNLIMITED_USER: &str = "parley_sql_test_unlimited";

#[tokio::test]
async fn start_up_refuses_a_sql_role_without_connection_or_temp_file_limits() {
    let db = TestDb::migrated().await;
    let admin = connect(&std::env::var("DATABASE_URL").unwrap()).await;
    admin
        .batch_execute(&format!(
            "DO $$
            BEGIN
                IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{UNLIMITED_USER}') THEN
                    CREATE ROLE {UNLIMITED_USER} LOGIN PASSWORD '{UNLIMITED_USER}' IN ROLE parley_sql_reader;
                END IF;
            EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
            END $$;
            ALTER ROLE {UNLIMITED_USER} CONNECTION LIMIT -1;
            ALTER ROLE {UNLIMITED_USER} RESET temp_file_limit;"
        ))
        .await
        .unwrap();
    let (_, server) = db.url.split_once('@').unwrap();
    let url = format!("postgres://{UNLIMITED_USER}:{UNLIMITED_USER}@{server}");
    let e = start(db.clone(), &url).await.map(drop).unwrap_err();
    assert!(
        e.contains(&format!("ALTER ROLE {UNLIMITED_USER} CONNECTION LIMIT 10")),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "ALTER ROLE {UNLIMITED_USER} SET temp_file_limit = '256MB'"
        )) && e.contains("temp_file_limit = 262144 (kB) in the DB cluster parameter group"),
        "{e}"
    );
    // A limit above the documented bound is no limit either, wherever it is set.
    admin
        .batch_execute(&format!(
            "ALTER ROLE {UNLIMITED_USER} CONNECTION LIMIT 100;
             ALTER DATABASE {} SET temp_file_limit = '2GB';",
            db.name
        ))
        .await
        .unwrap();
    let e = start(db.clone(), &url).await.map(drop).unwrap_err();
    assert!(
        e.contains("temp_file_limit is 2097152 kB") && e.contains("more than the 1GB"),
        "{e}"
    );
    // Within it, from the database (as from a parameter group), the role passes.
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} SET temp_file_limit = '512MB'",
            db.name
        ))
        .await
        .unwrap();
    start(db, &url)
        .await
        .map(drop)
        .expect("a database-wide temp_file_limit counts");
    admin
        .batch_execute(&format!("ALTER ROLE {UNLIMITED_USER} CONNECTION LIMIT -1"))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_sql_logins_rds_secret_named_in_secret_ids_becomes_sql_database_url() {
    // As the template wires it on Aurora: the master migrated, the SQL login's secret in
    // Secrets Manager, named in SECRET_IDS for SQL_DATABASE_URL; nothing copied by hand.
    let (db, sql_user, _) = database(true).await;
    let server = url::Url::parse(&db.url).unwrap();
    let moto = Moto::start();
    let secret = moto
        .create_secret(
            "parley/sql",
            &serde_json::json!({"engine": "postgres", "host": server.host_str().unwrap(),
                                "port": server.port().unwrap_or(5432), "username": sql_user,
                                "password": sql_user, "dbname": db.name}),
        )
        .await;
    let tools = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tools.path(), SQL_TOOLS).unwrap();
    let mut settings = moto.env();
    settings.extend(env(&[
        ("SECRET_IDS", &format!("SQL_DATABASE_URL={secret}")),
        ("SECRETS_MIN_REFRESH_MS", "0"),
        ("DATABASE_URL", &db.readonly_url),
        ("DB_SSLMODE", "disable"),
        ("MCP_AUTH_TOKEN", TOKEN),
        ("TOOLS_FILE", &tools.path().display().to_string()),
    ]));
    let app = spawn_with_secrets(db, settings, Some(TOKEN.to_owned()))
        .await
        .expect("the function starts with the SQL login from its secret");
    let out = run_sql(&app, "SELECT current_user AS who").await.unwrap();
    assert_eq!(out["rows"][0]["who"], sql_user);
}

#[tokio::test]
async fn a_rotated_sql_login_is_read_again_from_its_secret_and_run_sql_keeps_working() {
    // A server that checks passwords (the shared one trusts everyone), the SQL login's RDS
    // secret named for SQL_DATABASE_URL, and a rotation as Secrets Manager leaves it.
    let cluster = TestCluster::start_with_passwords();
    let db = TestDb::migrated_on(&cluster.url()).await;
    db.sql_reader_url("").await;
    let moto = Moto::start();
    let (port, name) = (cluster.port(), db.name.clone());
    let login = |password: &str| {
        serde_json::json!({"engine": "postgres", "host": "127.0.0.1", "port": port,
                           "username": SQL_READER_USER, "password": password,
                           "dbname": name})
    };
    let secret = moto
        .create_secret("parley/sql", &login(SQL_READER_USER))
        .await;
    let tools = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(tools.path(), SQL_TOOLS).unwrap();
    let mut settings = moto.env();
    settings.extend(env(&[
        ("SECRET_IDS", &format!("SQL_DATABASE_URL={secret}")),
        ("SECRETS_MIN_REFRESH_MS", "0"),
        ("DATABASE_URL", &db.readonly_url),
        ("DB_SSLMODE", "disable"),
        ("MCP_AUTH_TOKEN", TOKEN),
        ("TOOLS_FILE", &tools.path().display().to_string()),
    ]));
    let admin = db.client().await;
    let app = spawn_with_secrets(db, settings, Some(TOKEN.to_owned()))
        .await
        .expect("the function starts with the SQL login from its secret");
    let out = run_sql(&app, "SELECT 1 AS one").await.unwrap();
    assert_eq!(out["rows"][0]["one"], 1);

    admin
        .batch_execute(&format!(
            "ALTER ROLE {SQL_READER_USER} PASSWORD 'rotated-sql-password'"
        ))
        .await
        .unwrap();
    moto.put_secret(&secret, &login("rotated-sql-password"))
        .await;
    let terminated: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE usename = $1) AS t",
            &[&SQL_READER_USER],
        )
        .await
        .unwrap()
        .get(0);
    assert!(terminated >= 1, "the SQL tools held a connection");
    // The SQL tools do not repeat a call whose pooled connection turns out dead (the pool may
    // hand it out before it has seen the server close it): that call answers "unavailable"
    // and drops it. The next one opens a connection, is refused the old password, reads the
    // secret again and gets in. Without the secret read again, every later call is refused.
    let mut answers = Vec::new();
    for _ in 0..3 {
        let out = run_sql(&app, "SELECT 2 AS two").await;
        let done = out.as_ref().is_ok_and(|o| o["rows"][0]["two"] == 2);
        answers.push(out);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        answers.last().is_some_and(|a| a.is_ok()) && answers.len() <= 2,
        "run_sql after the rotation: {answers:?}"
    );
}
