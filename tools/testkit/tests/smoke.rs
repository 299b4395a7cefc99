//! The fixtures themselves: a TestDb whose read-only URL can read but not write, and a
//! TestCluster that survives stop/restart and cleans up after itself; both go with their test.
//! Needs DATABASE_URL (run via `scripts/test`).

use parley_testkit::{READONLY_USER, TestCluster, TestDb, connect};

#[tokio::test]
async fn demo_db_readonly_url_reads_but_cannot_write() {
    let db = TestDb::with_demo_data(10).await;
    assert!(db.name.starts_with("parley_test_"));

    let admin = db.client().await;
    let applied: i64 = admin
        .query_one("SELECT count(*) FROM schema_migrations", &[])
        .await
        .expect("schema_migrations exists after migrating")
        .get(0);
    assert!(
        applied >= 3,
        "expected at least 3 migrations, got {applied}"
    );

    let ro = db.readonly_client().await;
    let who: String = ro
        .query_one("SELECT current_user::text", &[])
        .await
        .expect("current_user")
        .get(0);
    assert_eq!(who, READONLY_USER);
    ro.query_one("SELECT count(*) FROM lads", &[])
        .await
        .expect("parley_readonly may SELECT from demo tables");

    let insert = ro
        .execute(
            "INSERT INTO lads (code, name, utla_code, utla_name) VALUES ('E99999999', 'x', 'x', 'x')",
            &[],
        )
        .await
        .expect_err("the read-only role must not INSERT");
    assert_eq!(
        insert.code(),
        Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        "{insert:?}"
    );
    let create = ro
        .batch_execute("CREATE TABLE smuggled (x int)")
        .await
        .expect_err("the read-only role must not CREATE TABLE");
    assert_eq!(
        create.code(),
        Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
        "{create:?}"
    );
}

#[tokio::test]
async fn parallel_migrated_dbs_do_not_race_on_roles() {
    let dbs = migrated_in_parallel(4).await;
    let names: std::collections::HashSet<_> = dbs.iter().map(|d| d.name.clone()).collect();
    assert_eq!(names.len(), 4);
}

/// A full run makes about a thousand databases: each must go with its test, or a small CI
/// disk fills and takes the shared server down with it.
#[tokio::test]
async fn a_test_database_is_dropped_when_its_last_clone_goes() {
    let db = TestDb::migrated().await;
    let name = db.name.clone();
    let admin = connect(&std::env::var("DATABASE_URL").expect("DATABASE_URL")).await;
    let exists = || async {
        admin
            .query_one(
                "SELECT count(*) FROM pg_database WHERE datname = $1",
                &[&name],
            )
            .await
            .expect("reading pg_database")
            .get::<_, i64>(0)
            == 1
    };
    // A connection still open to it (as a test's pool would be) does not keep it.
    let open = db.client().await;
    let clone = db.clone();
    drop(db);
    assert!(exists().await, "a clone still holds it");
    drop(clone);
    assert!(!exists().await, "the last clone dropped it");
    assert!(open.query_one("SELECT 1", &[]).await.is_err());
}

async fn migrated_in_parallel(n: usize) -> Vec<TestDb> {
    let tasks: Vec<_> = (0..n).map(|_| tokio::spawn(TestDb::migrated())).collect();
    let mut dbs = Vec::new();
    for task in tasks {
        dbs.push(task.await.expect("TestDb::migrated panicked"));
    }
    dbs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_survives_stop_and_restart() {
    let mut cluster = TestCluster::start();
    let port = cluster.port();
    let client = connect(&cluster.url()).await;
    client
        .batch_execute("CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")
        .await
        .expect("writing to a fresh cluster");

    cluster.stop();
    assert!(
        client.query_one("SELECT 1", &[]).await.is_err(),
        "a stopped server must not answer"
    );

    cluster.restart();
    assert_eq!(cluster.port(), port);
    let client = connect(&cluster.url()).await;
    let x: i32 = client
        .query_one("SELECT x FROM kept", &[])
        .await
        .expect("data survives a restart")
        .get(0);
    assert_eq!(x, 42);

    // A migrated database works on a private cluster too.
    let db = TestDb::migrated_on(&cluster.url()).await;
    db.readonly_client().await;
}
