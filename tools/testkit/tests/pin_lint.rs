//! The pin lint finds what it is for: a statement that pins, sent by a function, is reported
//! with its trigger; the same statement from another program (a test's own set-up, the
//! migrator) is not the lint's business.

use parley_testkit::connect;
use parley_testkit::pin_lint::StatementLog;

#[tokio::test]
async fn a_planted_set_from_a_function_is_found_and_named() {
    let log = StatementLog::start();
    let as_mcp = connect(&format!("{}?application_name=parley-mcp", log.url())).await;
    as_mcp
        .batch_execute("BEGIN READ ONLY; SELECT 1; COMMIT")
        .await
        .unwrap();
    as_mcp.batch_execute("SET work_mem = '1MB'").await.unwrap();
    as_mcp
        .query("SELECT set_config('parley.caller', $1, true)", &[&"{}"])
        .await
        .unwrap();
    let elsewhere = connect(&format!("{}?application_name=psql", log.url())).await;
    elsewhere.batch_execute("RESET ALL").await.unwrap();

    let findings = log.findings(&["parley-mcp"]).await;
    let named: Vec<(&str, Vec<&str>)> = findings
        .iter()
        .map(|f| (f.logged.statement.as_str(), f.triggers.clone()))
        .collect();
    assert_eq!(
        named,
        [
            ("SET work_mem = '1MB'", vec!["SET"]),
            (
                "SELECT set_config('parley.caller', $1, true)",
                vec!["set_config"]
            ),
        ],
        "{findings:#?}"
    );
    // Everything the function sent was seen, the clean batch included.
    let seen = log.statements(&["parley-mcp"]).await;
    assert!(
        seen.iter()
            .any(|l| l.statement == "BEGIN READ ONLY; SELECT 1; COMMIT"),
        "{seen:#?}"
    );
}
