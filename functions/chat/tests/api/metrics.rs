//! The metrics an operator watches (docs/metrics.md), in the embedded metric format: one
//! document per database connection that could not be made.

use parley_core::metrics::{check_emf, dimension_sets, value_of};
use parley_testkit::llm::Step;
use serde_json::json;

use crate::helpers::{Options, spawn};

fn sets(names: &[&[&str]]) -> Vec<Vec<String>> {
    names
        .iter()
        .map(|set| set.iter().map(|n| (*n).to_owned()).collect())
        .collect()
}

#[tokio::test]
async fn a_database_that_refuses_connections_counts_each_failed_connection_once() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let chat = spawn(Options {
        steps: vec![Step::text("never asked")],
        extra_env: vec![(
            "DATABASE_URL",
            format!("postgres://parley:pw@{closed}/parley"),
        )],
        ..Options::default()
    })
    .await;
    for message in ["one", "two"] {
        let (status, body) = chat.post("carol", json!({"message": message})).await;
        assert_eq!(status, 503, "{body}");
        assert_eq!(body["error"]["code"], "database_unavailable");
    }

    let failures = chat.metrics.with_metric("DbConnectFailures");
    assert_eq!(
        failures.len(),
        2,
        "one per request that found no connection"
    );
    for doc in &failures {
        check_emf(doc).unwrap();
        assert_eq!(dimension_sets(doc), sets(&[&[]]));
        assert_eq!(value_of(doc, "DbConnectFailures"), Some(1.0));
    }
    assert!(chat.llm.requests().is_empty());
}
