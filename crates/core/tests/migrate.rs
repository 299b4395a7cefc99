//! Runs the real migrations against Postgres: each test creates its own throwaway database
//! `parley_test_<random>` via the superuser URL in `DATABASE_URL` and drops it afterwards.
//! Without `DATABASE_URL` the tests say so and pass, so a plain `cargo test` needs no server.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parley_core::migrate::{self, MigrateError};
use tokio_postgres::{Client, Config, NoTls};

struct TestDb {
    admin: Client,
    config: Config,
    name: String,
}

impl TestDb {
    /// `None` when no server is configured for integration tests.
    async fn create() -> Option<TestDb> {
        let Ok(url) = std::env::var("DATABASE_URL") else {
            eprintln!("DATABASE_URL is not set; skipping the Postgres integration test");
            return None;
        };
        let admin_config = Config::from_str(&url).expect("DATABASE_URL is a valid Postgres URL");
        let admin = connect(&admin_config).await;
        let name = unique_name();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create test database");
        let mut config = admin_config;
        config.dbname(&name);
        Some(TestDb {
            admin,
            config,
            name,
        })
    }

    async fn client(&self) -> Client {
        connect(&self.config).await
    }

    async fn drop(self) {
        self.admin
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await
            .expect("drop test database");
    }
}

async fn connect(config: &Config) -> Client {
    let (client, connection) = config.connect(NoTls).await.expect("connect to Postgres");
    tokio::spawn(connection);
    client
}

fn unique_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mix = nanos
        ^ u64::from(std::process::id()).rotate_left(32)
        ^ COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("parley_test_{mix:016x}")
}

fn all_names() -> Vec<String> {
    migrate::embedded()
        .expect("embedded migrations")
        .into_iter()
        .map(|(name, _)| name.to_owned())
        .collect()
}

async fn recorded(client: &Client) -> Vec<String> {
    client
        .query("SELECT name FROM schema_migrations ORDER BY name", &[])
        .await
        .expect("read schema_migrations")
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[tokio::test]
async fn a_fresh_database_gets_every_migration_once_and_a_rerun_does_nothing() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut client = db.client().await;

    let first = migrate::run(&mut client).await.expect("first run");
    assert_eq!(first, all_names());
    let second = migrate::run(&mut client).await.expect("second run");
    assert!(second.is_empty(), "rerun applied {second:?}");
    assert_eq!(recorded(&client).await, all_names());

    drop(client);
    db.drop().await;
}

#[tokio::test]
async fn two_concurrent_runs_apply_each_migration_exactly_once() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut a = db.client().await;
    let mut b = db.client().await;

    let (ra, rb) = tokio::join!(migrate::run(&mut a), migrate::run(&mut b));
    let mut applied = ra.expect("run a");
    applied.extend(rb.expect("run b"));
    applied.sort();
    assert_eq!(applied, all_names());
    assert_eq!(recorded(&a).await, all_names());

    drop((a, b));
    db.drop().await;
}

#[tokio::test]
async fn an_edited_migration_is_refused_before_anything_runs() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut client = db.client().await;
    migrate::run(&mut client).await.expect("first run");
    client
        .execute(
            "UPDATE schema_migrations SET checksum = 'edited' WHERE name = '0001_roles.sql'",
            &[],
        )
        .await
        .expect("tamper");

    match migrate::run(&mut client).await {
        Err(MigrateError::ChecksumMismatch { name, recorded, .. }) => {
            assert_eq!(name, "0001_roles.sql");
            assert_eq!(recorded, "edited");
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }

    drop(client);
    db.drop().await;
}

#[tokio::test]
async fn a_failing_migration_is_named_rolled_back_and_releases_the_lock() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut client = db.client().await;
    client
        .batch_execute("CREATE SCHEMA chat; CREATE TABLE chat.squatter (x int)")
        .await
        .expect("create a conflicting schema");

    let err = migrate::run(&mut client).await.expect_err("0002 must fail");
    let text = err.to_string();
    assert!(matches!(err, MigrateError::Failed { ref name, .. } if name == "0002_chat.sql"));
    assert!(
        text.contains("0002_chat.sql") && text.contains("already exists"),
        "{text}"
    );
    assert_eq!(recorded(&client).await, ["0001_roles.sql"]);
    let tables: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'chat'",
            &[],
        )
        .await
        .expect("count tables")
        .get(0);
    assert_eq!(tables, 1, "the failed migration must roll back entirely");

    // Another session must be able to take the lock straight away.
    let other = db.client().await;
    let got: bool = other
        .query_one("SELECT pg_try_advisory_lock(0x7061726c65796d67)", &[])
        .await
        .expect("try lock")
        .get(0);
    assert!(got, "the advisory lock leaked");

    drop((client, other));
    db.drop().await;
}

/// Parley's own schema is invisible to the tools' read-only role: it may not read
/// conversations, record idempotency keys or create anything.
#[tokio::test]
async fn the_readonly_role_can_neither_read_conversations_nor_write() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut client = db.client().await;
    migrate::run(&mut client).await.expect("migrate");
    client
        .batch_execute("SET ROLE parley_readonly")
        .await
        .expect("become the readonly role");

    let none: Option<String> = client
        .query_one("SELECT parley.caller_sub()", &[])
        .await
        .expect("anyone may call the caller helpers")
        .get(0);
    assert_eq!(none, None, "no caller outside a tool transaction");

    for statement in [
        "SELECT count(*) FROM chat.conversations",
        "SELECT count(*) FROM chat.messages",
        "INSERT INTO parley.idempotency (caller, tool, key, rows) VALUES ('', 't', 'k', '{}')",
        "CREATE TABLE sneaky (id int)",
        "CREATE TABLE parley.sneaky (id int)",
    ] {
        let err = client.batch_execute(statement).await.expect_err(statement);
        let code = err.as_db_error().map(|e| e.code().code().to_owned());
        assert_eq!(code.as_deref(), Some("42501"), "{statement}: {err:?}");
    }

    drop(client);
    db.drop().await;
}

/// A write role may record and read back its caller's idempotency keys, and sees no one else's.
#[tokio::test]
async fn idempotency_records_are_per_caller() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut client = db.client().await;
    migrate::run(&mut client).await.expect("migrate");
    let role = format!("{}_writer", db.name);
    client
        .batch_execute(&format!(
            "CREATE ROLE {role} NOLOGIN IN ROLE parley_tool_writer;
             SET ROLE {role};
             BEGIN;
             SELECT set_config('parley.caller', '{{\"sub\": \"alice\"}}', true);
             INSERT INTO parley.idempotency (caller, tool, key, rows)
                  VALUES ('alice', 'create_task', 'k1', '{{\"{{}}\"}}');
             COMMIT;"
        ))
        .await
        .expect("alice records her key");

    let forged = client
        .batch_execute(
            "BEGIN;
             SELECT set_config('parley.caller', '{\"sub\": \"alice\"}', true);
             INSERT INTO parley.idempotency (caller, tool, key, rows)
                  VALUES ('bob', 'create_task', 'k2', '{}');",
        )
        .await
        .expect_err("a row for another caller violates the policy");
    assert_eq!(
        forged
            .as_db_error()
            .map(|e| e.code().code().to_owned())
            .as_deref(),
        Some("42501"),
        "{forged:?}"
    );
    client.batch_execute("ROLLBACK").await.expect("rollback");

    let seen = |sub: &'static str| {
        let client = &client;
        async move {
            let tx_sql = format!(
                "BEGIN; SELECT set_config('parley.caller', '{{\"sub\": \"{sub}\"}}', true)"
            );
            client
                .batch_execute(&tx_sql)
                .await
                .expect("begin as caller");
            let n: i64 = client
                .query_one("SELECT count(*) FROM parley.idempotency", &[])
                .await
                .expect("count keys")
                .get(0);
            client.batch_execute("COMMIT").await.expect("commit");
            n
        }
    };
    assert_eq!(seen("alice").await, 1);
    assert_eq!(seen("bob").await, 0);

    client
        .batch_execute(&format!(
            "RESET ROLE; DROP OWNED BY {role}; DROP ROLE {role}"
        ))
        .await
        .expect("drop the test role");
    drop(client);
    db.drop().await;
}
