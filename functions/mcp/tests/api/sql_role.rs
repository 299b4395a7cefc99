//! What the ad-hoc SQL role could do past its read-only transaction (issue 20): write WAL that
//! ROLLBACK keeps, read other callers' statements, end their sessions. Each is refused through
//! `run_sql`, and start-up refuses a role that could, or that lacks docs/sql.md's limits.

use std::time::{Duration, Instant};

use parley_testkit::{SQL_READER_USER, TestDb, connect};

use crate::helpers::{Options, TestApp, env, run_sql, spawn_on};
use crate::sql_attacks::wait_for_audit;

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
    let db = TestDb::migrated().await;
    let url = db.sql_reader_url("").await;
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
            message.contains("permission denied for function"),
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
    let db = TestDb::migrated().await;
    let url = db.sql_reader_url("").await;
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
                &[&SQL_READER_USER],
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
    ] {
        let outcome = run_sql(&app, sql).await;
        assert!(
            !format!("{outcome:?}").contains("parley-other-caller"),
            "{sql} shows the other caller's statement: {outcome:?}"
        );
        let message = outcome.unwrap_err();
        assert!(message.contains("permission denied"), "{sql}: {message}");
    }
    for sql in [
        format!("SELECT pg_cancel_backend({pid})"),
        format!("SELECT pg_terminate_backend({pid})"),
    ] {
        let message = run_sql(&app, &sql).await.unwrap_err();
        assert!(
            message.contains("permission denied for function"),
            "{sql}: {message}"
        );
    }
    let answered = question
        .await
        .unwrap()
        .expect("the other caller's query completes");
    assert_eq!(answered.get::<_, String>(0), "parley-other-caller");
}

#[tokio::test]
async fn start_up_refuses_a_sql_role_that_can_write_wal_signal_or_watch_sessions() {
    let db = TestDb::migrated().await;
    // As an admin might, or as a database migrated by a non-superuser stays (PUBLIC keeps them).
    let url = db
        .sql_reader_url(
            "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text),
                 pg_terminate_backend(integer, bigint) TO parley_sql_reader;
             GRANT EXECUTE ON FUNCTION txid_current() TO PUBLIC;
             GRANT SELECT ON pg_stat_activity TO parley_sql_reader;",
        )
        .await;
    let e = start(db, &url).await.map(drop).unwrap_err();
    for fix in [
        "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean,text,text) FROM PUBLIC",
        "REVOKE EXECUTE ON FUNCTION pg_catalog.pg_terminate_backend(integer,bigint)",
        "REVOKE EXECUTE ON FUNCTION pg_catalog.txid_current()",
        "REVOKE SELECT ON pg_catalog.pg_stat_activity",
    ] {
        assert!(e.contains(fix), "{fix} missing from: {e}");
    }
    assert!(e.contains("ROLLBACK does not take back"), "{e}");
    assert!(!e.contains("pg_cancel_backend"), "{e}");
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
    let e = start(db, &url).await.map(drop).unwrap_err();
    assert!(
        e.contains(&format!("ALTER ROLE {UNLIMITED_USER} CONNECTION LIMIT 10")),
        "{e}"
    );
    assert!(
        e.contains(&format!(
            "ALTER ROLE {UNLIMITED_USER} SET temp_file_limit = '256MB'"
        )),
        "{e}"
    );
}
