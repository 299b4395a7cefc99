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
            "UPDATE schema_migrations SET checksum = 'edited' WHERE name = '0001_demo_schema.sql'",
            &[],
        )
        .await
        .expect("tamper");

    match migrate::run(&mut client).await {
        Err(MigrateError::ChecksumMismatch { name, recorded, .. }) => {
            assert_eq!(name, "0001_demo_schema.sql");
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
        .batch_execute("CREATE TABLE lads (squatter int)")
        .await
        .expect("create conflicting table");

    let err = migrate::run(&mut client).await.expect_err("0001 must fail");
    let text = err.to_string();
    assert!(matches!(err, MigrateError::Failed { ref name, .. } if name == "0001_demo_schema.sql"));
    assert!(
        text.contains("0001_demo_schema.sql") && text.contains("already exists"),
        "{text}"
    );
    assert!(recorded(&client).await.is_empty());
    let functions: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_proc WHERE proname = 'lad_name_key'",
            &[],
        )
        .await
        .expect("count functions")
        .get(0);
    assert_eq!(functions, 0, "the failed migration must roll back entirely");

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

#[tokio::test]
async fn the_readonly_role_can_read_but_not_write() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut client = db.client().await;
    migrate::run(&mut client).await.expect("migrate");
    client
        .batch_execute(
            "INSERT INTO lads (code, name, utla_code, utla_name)
             VALUES ('E06000023', 'Bristol, City of', 'E06000023', 'Bristol, City of');
             SET ROLE parley_readonly;",
        )
        .await
        .expect("seed a row and become the readonly role");

    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM lads WHERE common_key = lad_common_key('Bristol')",
            &[],
        )
        .await
        .expect("readonly can select and call the key functions")
        .get(0);
    assert_eq!(count, 1);

    for write in [
        "INSERT INTO lads (code, name, utla_code, utla_name) VALUES ('X', 'x', 'X', 'x')",
        "UPDATE lads SET name = 'Bristol'",
        "DELETE FROM feedback",
        "TRUNCATE feedback",
        "CREATE TABLE sneaky (id int)",
        "INSERT INTO demo_data_meta (key, value) VALUES ('k', 'v')",
        "SELECT nextval('feedback_id_seq')",
    ] {
        let err = client.batch_execute(write).await.expect_err(write);
        let code = err.as_db_error().map(|e| e.code().code().to_owned());
        assert_eq!(code.as_deref(), Some("42501"), "{write}: {err:?}");
    }

    drop(client);
    db.drop().await;
}

#[tokio::test]
async fn district_names_normalise_to_matching_keys() {
    let Some(db) = TestDb::create().await else {
        return;
    };
    let mut client = db.client().await;
    migrate::run(&mut client).await.expect("migrate");

    let cases = [
        ("lad_name_key", "  Brighton  &  Hove. ", "brighton and hove"),
        ("lad_name_key", "Bristol, City of", "bristol city of"),
        ("lad_name_key", "St. Albans", "st albans"),
        ("lad_common_key", "Bristol, City of", "bristol"),
        (
            "lad_common_key",
            "Kingston upon Hull, City of",
            "kingston upon hull",
        ),
        (
            "lad_common_key",
            "Herefordshire, County of",
            "herefordshire",
        ),
        ("lad_common_key", "City of London", "city of london"),
        (
            "lad_common_key",
            "Bournemouth, Christchurch and Poole",
            "bournemouth christchurch and poole",
        ),
    ];
    for (function, input, expected) in cases {
        let got: String = client
            .query_one(&format!("SELECT {function}($1)"), &[&input])
            .await
            .expect("call key function")
            .get(0);
        assert_eq!(got, expected, "{function}({input:?})");
    }

    let row = client
        .query_one(
            "INSERT INTO lads (code, name, utla_code, utla_name)
             VALUES ('W06000015', 'Cardiff', 'W06000015', 'Cardiff')
             RETURNING country, name_key, common_key",
            &[],
        )
        .await
        .expect("insert a district");
    assert_eq!(row.get::<_, &str>(0), "Wales");
    assert_eq!(row.get::<_, &str>(1), "cardiff");
    assert_eq!(row.get::<_, &str>(2), "cardiff");

    drop(client);
    db.drop().await;
}
