//! The metrics an operator watches (docs/metrics.md): one document per database connection that
//! could not be made.

use parley_core::metrics::{check_emf, dimension_sets, value_of};
use parley_testkit::{TcpProxy, TestDb};
use serde_json::json;

use crate::helpers::{FEEDBACK_ROWS, Options, spawn_on};

#[tokio::test]
async fn a_database_that_refuses_connections_counts_each_failed_connection_once() {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let (proxy, url) = TcpProxy::in_front_of(&db.readonly_url).await;
    let app = spawn_on(
        db,
        Options {
            database_url: Some(url),
            // One pooled connection and no audit writes: each call below needs exactly one new
            // connection, so each must count exactly once.
            extra_env: vec![
                ("DB_POOL_MAX_SIZE".into(), "1".into()),
                ("AUDIT".into(), "log".into()),
            ],
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts");
    app.rows("lad_by_ref", json!({"ref": "Leeds"})).await;
    assert!(app.metrics.with_metric("DbConnectFailures").is_empty());

    // The pooled connection dies and the port closes: Postgres is gone.
    proxy.sever();
    drop(proxy);
    for _ in 0..2 {
        let message = app.tool_error("lad_by_ref", json!({"ref": "Leeds"})).await;
        assert!(message.contains("database is unavailable"), "{message}");
    }

    let failures = app.metrics.with_metric("DbConnectFailures");
    assert_eq!(failures.len(), 2, "{failures:?}");
    for doc in &failures {
        check_emf(doc).unwrap();
        assert_eq!(dimension_sets(doc), vec![Vec::<String>::new()]);
        assert_eq!(value_of(doc, "DbConnectFailures"), Some(1.0));
    }
}
