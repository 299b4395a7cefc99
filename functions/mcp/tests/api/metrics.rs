//! The metrics an operator watches (docs/metrics.md): one document per `tools/call`, by the
//! declared tool and the audit's outcome, and one per database connection that could not be
//! made; never an argument or a name a caller made up.

use parley_core::metrics::{Recorded, check_emf, dimension_sets, units, value_of};
use parley_testkit::{TcpProxy, TestDb};
use serde_json::{Value, json};

use crate::helpers::{FEEDBACK_ROWS, Options, spawn_app, spawn_on};
use crate::sql_attacks::wait_for_audit;

fn tool_calls(recorded: &Recorded) -> Vec<Value> {
    let docs = recorded.with_metric("ToolCalls");
    for doc in &docs {
        check_emf(doc).unwrap();
        assert_eq!(
            dimension_sets(doc),
            vec![
                Vec::<String>::new(),
                vec!["Tool".to_owned()],
                vec!["Outcome".to_owned()]
            ]
        );
        for (name, unit) in units(doc) {
            let expected = if name == "ToolDuration" {
                "Milliseconds"
            } else {
                "Count"
            };
            assert_eq!(unit, expected, "{name}");
        }
    }
    docs
}

#[tokio::test]
async fn each_tools_call_records_its_tool_outcome_rows_and_duration() {
    let app = spawn_app().await;
    let rows = app.rows("lad_by_ref", json!({"ref": "Leeds"})).await;
    let refused = app
        .tool_error(
            "lad_by_ref",
            json!({"ref": "Leeds", "secret_argument_9c": 1}),
        )
        .await;
    assert!(refused.contains("unknown parameter"), "{refused}");
    let (status, unknown) = app
        .rpc(
            "tools/call",
            json!({"name": "made_up_tool_4e1", "arguments": {"q": "private text"}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    let calls = tool_calls(&app.metrics);
    assert_eq!(calls.len(), 3, "{calls:?}");
    let (ok, bad_args, made_up) = (&calls[0], &calls[1], &calls[2]);
    assert_eq!(ok["Tool"], "lad_by_ref");
    assert_eq!(ok["Outcome"], "ok");
    assert_eq!(value_of(ok, "ToolCalls"), Some(1.0));
    assert_eq!(value_of(ok, "ToolErrors"), Some(0.0));
    assert_eq!(value_of(ok, "ToolRows"), rows["row_count"].as_f64());
    assert!(value_of(ok, "ToolRows").unwrap() >= 1.0, "{rows}");
    assert!(value_of(ok, "ToolDuration").unwrap() > 0.0);

    assert_eq!(bad_args["Tool"], "lad_by_ref");
    assert_eq!(bad_args["Outcome"], "refused");
    assert_eq!(value_of(bad_args, "ToolErrors"), Some(1.0));
    assert_eq!(value_of(bad_args, "ToolRows"), Some(0.0));

    // A name no tools file declares is the caller's text: it is not a dimension.
    assert_eq!(made_up["Tool"], "(unknown)");
    assert_eq!(made_up["Outcome"], "refused");

    // The outcomes are the audit's, call for call.
    let audit = wait_for_audit(&app, 3).await;
    let outcomes: Vec<&str> = audit
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    let recorded: Vec<&str> = calls
        .iter()
        .map(|c| c["Outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, recorded);

    for line in app.metrics.lines() {
        for private in [
            "Leeds",
            "secret_argument_9c",
            "made_up_tool_4e1",
            "private text",
        ] {
            assert!(!line.contains(private), "{private:?} in {line}");
        }
    }
}

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
    let calls = tool_calls(&app.metrics);
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[1]["Outcome"], "tool_error");
    assert_eq!(value_of(&calls[2], "ToolErrors"), Some(1.0));
}
