//! The pool against a real Postgres: what a failed statement or connection says (SQLSTATE and
//! Postgres' own message, never just "db error"), and `retry_once_if_stale!` over connections a
//! [`TcpProxy`] severs the way a frozen Lambda instance finds them on thaw.

use std::sync::atomic::{AtomicUsize, Ordering};

use parley_core::db::{self, DbConfig, DbError, retry_once_if_stale};
use parley_testkit::{TcpProxy, TestDb};

/// A pool of one connection to `db`, through a proxy the test can sever.
async fn pool_through_proxy(db: &TestDb) -> (db::Pool, TcpProxy) {
    let (proxy, url) = TcpProxy::in_front_of(&db.url).await;
    let mut config = DbConfig::from_url(&url).expect("config");
    config.pool_max_size = 1;
    (db::pool(&config).expect("pool"), proxy)
}

/// Opens the pool's connection and leaves it idle in the pool.
async fn warm(pool: &db::Pool) {
    let conn = pool.get().await.expect("connection");
    conn.simple_query("SELECT 1").await.expect("first query");
}

async fn select_one(conn: &db::Object, attempts: &AtomicUsize) -> Result<i32, DbError> {
    attempts.fetch_add(1, Ordering::SeqCst);
    let row = conn.query_one("SELECT 1", &[]).await?;
    Ok(row.get(0))
}

#[tokio::test]
async fn a_read_on_a_connection_that_died_idle_runs_again_on_a_fresh_one() {
    let db = TestDb::migrated().await;
    let (pool, proxy) = pool_through_proxy(&db).await;
    warm(&pool).await;
    proxy.sever();

    let attempts = AtomicUsize::new(0);
    let one = retry_once_if_stale!(pool, |conn| select_one(&conn, &attempts).await);

    assert_eq!(one.expect("the retry succeeds"), 1);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_eq!(proxy.accepted(), 2, "the dead connection was replaced");
}

#[tokio::test]
async fn work_that_may_not_be_repeated_fails_once_and_leaves_no_dead_connection_behind() {
    let db = TestDb::migrated().await;
    let (pool, proxy) = pool_through_proxy(&db).await;
    warm(&pool).await;
    proxy.sever();

    let attempts = AtomicUsize::new(0);
    let refused = retry_once_if_stale!(
        &pool,
        |conn| select_one(&conn, &attempts).await,
        retry_if = false
    );

    assert!(
        matches!(refused, Err(DbError::Unavailable(_))),
        "{refused:?}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    // The next checkout connects afresh instead of reusing the dead connection.
    let conn = pool.get().await.expect("connection");
    conn.simple_query("SELECT 1")
        .await
        .expect("a fresh connection");
    assert_eq!(proxy.accepted(), 2);
}

#[tokio::test]
async fn a_failed_statement_is_not_repeated_and_says_what_postgres_said() {
    let db = TestDb::migrated().await;
    let pool = db::pool(&DbConfig::from_url(&db.url).expect("config")).expect("pool");
    let attempts = AtomicUsize::new(0);

    let failed: Result<u64, DbError> = retry_once_if_stale!(pool, |conn| {
        attempts.fetch_add(1, Ordering::SeqCst);
        conn.execute("SELECT * FROM no_such_table", &[])
            .await
            .map_err(DbError::from)
    });

    assert_eq!(attempts.load(Ordering::SeqCst), 1);
    let error = failed.expect_err("the statement fails");
    assert_eq!(error.sqlstate().map(|s| s.code()), Some("42P01"));
    assert_eq!(
        error.to_string(),
        "relation \"no_such_table\" does not exist (SQLSTATE 42P01)"
    );
}

#[tokio::test]
async fn a_missing_database_is_named_in_the_pool_error() {
    let db = TestDb::migrated().await;
    let mut url = url::Url::parse(&db.url).expect("database URL");
    url.set_path("/parley_no_such_database");
    let pool = db::pool(&DbConfig::from_url(url.as_str()).expect("config")).expect("pool");

    let error = DbError::from(pool.get().await.expect_err("no such database"));

    let text = error.to_string();
    assert!(matches!(error, DbError::Unavailable(_)), "{error:?}");
    assert!(
        text.contains("database \"parley_no_such_database\" does not exist (SQLSTATE 3D000)"),
        "{text}"
    );
}

/// Compiles only if a future using the macro is `Send`, as axum handlers must be.
#[allow(dead_code)]
fn the_retrying_future_is_send(pool: db::Pool) {
    fn assert_send<T: Send>(_: T) {}
    assert_send(async move {
        let attempts = AtomicUsize::new(0);
        retry_once_if_stale!(pool, |conn| select_one(&conn, &attempts).await)
    });
}
