//! The metrics an operator watches (docs/metrics.md): one document per turn, per model request
//! and per tool call, in the embedded metric format, with values that match what happened and
//! nothing a user wrote.

use parley_core::metrics::{Recorded, check_emf, dimension_sets, units, value_of};
use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::helpers::{Options, spawn, spawn_chat, sse_data, streamed_text};

/// The only document carrying `metric`, checked against the EMF specification.
fn only(recorded: &Recorded, metric: &str) -> Value {
    let mut docs = recorded.with_metric(metric);
    assert_eq!(docs.len(), 1, "one {metric} document: {docs:?}");
    let doc = docs.remove(0);
    check_emf(&doc).unwrap();
    doc
}

fn sets(names: &[&[&str]]) -> Vec<Vec<String>> {
    names
        .iter()
        .map(|set| set.iter().map(|n| (*n).to_owned()).collect())
        .collect()
}

/// No document recorded holds any of `private`.
fn holds_none_of(recorded: &Recorded, private: &[&str]) {
    for line in recorded.lines() {
        for text in private {
            assert!(
                !line.contains(text),
                "{text:?} is in a metrics line: {line}"
            );
        }
    }
}

#[tokio::test]
async fn a_turn_with_a_tool_call_records_its_steps_tokens_times_and_rows() {
    let chat = spawn_chat(vec![
        Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
        Step::text("Leeds has feedback."),
    ])
    .await;
    let body = chat
        .turn(
            "alice-metrics",
            json!({"message": "How is Leeds doing, asks a secret-question-7f3?"}),
        )
        .await;

    let turn = only(&chat.metrics, "Turns");
    assert_eq!(dimension_sets(&turn), sets(&[&[], &["Outcome"]]));
    assert_eq!(turn["Outcome"], "answered");
    assert_eq!(value_of(&turn, "Turns"), Some(1.0));
    assert_eq!(value_of(&turn, "TurnErrors"), Some(0.0));
    assert_eq!(value_of(&turn, "TurnSteps"), body["steps"].as_f64());
    assert_eq!(value_of(&turn, "TurnSteps"), Some(1.0));
    assert_eq!(
        value_of(&turn, "TokensIn"),
        body["usage"]["input_tokens"].as_f64()
    );
    assert_eq!(
        value_of(&turn, "TokensOut"),
        body["usage"]["output_tokens"].as_f64()
    );
    assert!(value_of(&turn, "TokensIn").unwrap() > 0.0, "{turn}");
    let (duration, model, tools) = (
        value_of(&turn, "TurnDuration").unwrap(),
        value_of(&turn, "ModelTime").unwrap(),
        value_of(&turn, "ToolTime").unwrap(),
    );
    assert!(model > 0.0 && tools > 0.0, "{turn}");
    assert!(model + tools <= duration, "{turn}");
    // The tool's own duration, as the chat measured it, is within the turn's tool time.
    let traced = body["traces"][0]["duration_ms"].as_f64().unwrap();
    assert!(traced <= tools.ceil(), "{traced} > {tools}");
    for (name, unit) in units(&turn) {
        let expected = if ["TurnDuration", "ModelTime", "ToolTime"].contains(&name.as_str()) {
            "Milliseconds"
        } else {
            "Count"
        };
        assert_eq!(unit, expected, "{name}");
    }

    let calls = chat.metrics.with_metric("ModelCalls");
    assert_eq!(
        calls.len(),
        chat.llm.requests().len(),
        "one per model request"
    );
    for call in &calls {
        check_emf(call).unwrap();
        assert_eq!(dimension_sets(call), sets(&[&[], &["Status"]]));
        assert_eq!(call["Status"], "200");
        assert_eq!(value_of(call, "ModelErrors"), Some(0.0));
        assert_eq!(value_of(call, "ModelRetries"), Some(0.0));
        assert!(value_of(call, "ModelLatency").unwrap() > 0.0);
    }

    let mcp = &chat.mcp().metrics;
    let tool = only(mcp, "ToolCalls");
    assert_eq!(dimension_sets(&tool), sets(&[&[], &["Tool"], &["Outcome"]]));
    assert_eq!(tool["Tool"], "lad_by_ref");
    assert_eq!(tool["Outcome"], "ok");
    assert_eq!(value_of(&tool, "ToolErrors"), Some(0.0));
    assert_eq!(
        value_of(&tool, "ToolRows"),
        body["traces"][0]["output"]["row_count"].as_f64()
    );
    assert!(value_of(&tool, "ToolRows").unwrap() >= 1.0, "{body}");
    assert!(value_of(&tool, "ToolDuration").unwrap() <= tools, "{tool}");

    let conversation = body["conversation_id"].as_str().unwrap();
    let private = [
        "secret-question-7f3",
        "Leeds",
        "alice-metrics",
        conversation,
    ];
    holds_none_of(&chat.metrics, &private);
    holds_none_of(mcp, &private);
}

#[tokio::test]
async fn a_streamed_turn_records_the_same_metrics() {
    let chat = spawn_chat(vec![
        Step::call("lad_by_ref", r#"{"ref":"Leeds"}"#),
        Step::text("Leeds, streamed."),
    ])
    .await;
    let response = chat
        .post_streamed("erin", "/api/chat", json!({"message": "Leeds, please"}))
        .await;
    assert_eq!(response.status(), 200);
    let parts = sse_data(&response.text().await.unwrap());
    assert_eq!(streamed_text(&parts), "Leeds, streamed.");

    let turn = only(&chat.metrics, "Turns");
    assert_eq!(turn["Outcome"], "answered");
    assert_eq!(value_of(&turn, "TurnSteps"), Some(1.0));
    assert!(value_of(&turn, "TokensOut").unwrap() > 0.0, "{turn}");
    let calls = chat.metrics.with_metric("ModelCalls");
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|c| c["Status"] == "200"), "{calls:?}");
    assert_eq!(only(&chat.mcp().metrics, "ToolCalls")["Tool"], "lad_by_ref");
}

#[tokio::test]
async fn a_model_request_retried_then_failed_records_its_retries_and_status() {
    let chat = spawn(Options {
        steps: vec![
            Step::rate_limited(0),
            Step::text("After one retry."),
            Step::error(500, "boom 1"),
            Step::error(500, "boom 2"),
            Step::error(500, "boom 3"),
        ],
        extra_env: vec![("LLM_MAX_RETRIES", "2".to_owned())],
        ..Options::default()
    })
    .await;
    chat.turn("bob-metrics", json!({"message": "question-a1"}))
        .await;
    let (status, failed) = chat
        .post("bob-metrics", json!({"message": "question-b2"}))
        .await;
    assert_eq!(status, 502, "{failed}");
    assert_eq!(chat.llm.requests().len(), 5);

    let calls = chat.metrics.with_metric("ModelCalls");
    assert_eq!(
        calls.len(),
        2,
        "one per request, after its retries: {calls:?}"
    );
    let (recovered, gave_up) = (&calls[0], &calls[1]);
    assert_eq!(recovered["Status"], "200");
    assert_eq!(value_of(recovered, "ModelRetries"), Some(1.0));
    assert_eq!(value_of(recovered, "ModelErrors"), Some(0.0));
    assert_eq!(gave_up["Status"], "500");
    assert_eq!(value_of(gave_up, "ModelRetries"), Some(2.0));
    assert_eq!(value_of(gave_up, "ModelErrors"), Some(1.0));
    assert_eq!(value_of(gave_up, "ModelCalls"), Some(1.0));

    let turns = chat.metrics.with_metric("Turns");
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0]["Outcome"], "answered");
    assert_eq!(value_of(&turns[0], "TurnErrors"), Some(0.0));
    // The outcome is the code the client was answered with.
    assert_eq!(turns[1]["Outcome"], failed["error"]["code"]);
    assert_eq!(turns[1]["Outcome"], "llm_unavailable");
    assert_eq!(value_of(&turns[1], "TurnErrors"), Some(1.0));
    assert_eq!(value_of(&turns[1], "TurnSteps"), Some(0.0));
    for doc in chat.metrics.documents() {
        check_emf(&doc).unwrap();
    }
    holds_none_of(
        &chat.metrics,
        &["boom", "bob-metrics", "question-a1", "question-b2"],
    );
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
    let turns = chat.metrics.with_metric("Turns");
    assert_eq!(turns.len(), 2);
    assert!(
        turns
            .iter()
            .all(|t| t["Outcome"] == "database_unavailable" && t["TurnErrors"] == 1),
        "{turns:?}"
    );
    assert!(chat.llm.requests().is_empty());
}

#[tokio::test]
async fn with_metrics_off_nothing_is_recorded() {
    let chat = spawn(Options {
        steps: vec![Step::text("Quiet.")],
        extra_env: vec![("METRICS", "off".to_owned())],
        ..Options::default()
    })
    .await;
    chat.turn("dave", json!({"message": "hello"})).await;
    assert!(
        chat.metrics.lines().is_empty(),
        "{:?}",
        chat.metrics.lines()
    );
}

/// The `chat` binary with `METRICS=emf`, as Lambda runs it: its stdout carries one EMF document
/// per line and nothing else (logs go to stderr).
#[tokio::test]
async fn the_binary_writes_valid_emf_lines_to_stdout() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_chat"))
        .env_clear()
        .env("DATABASE_URL", format!("postgres://u:pw@{closed}/none"))
        .env("MCP_URL", format!("http://{closed}/mcp"))
        .env("LLM_BASE_URL", format!("http://{closed}/v1"))
        .env("CHAT_AUTH", "none")
        .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("METRICS", "emf")
        .env("METRICS_NAMESPACE", "Parley/metrics-test")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("chat runs");
    let http = reqwest::Client::new();
    let started = std::time::Instant::now();
    let answer = loop {
        let sent = http
            .post(format!("http://127.0.0.1:{port}/api/chat"))
            .header("content-type", "application/json")
            .body(r#"{"message": "private-words-5d"}"#)
            .send()
            .await;
        match sent {
            Ok(response) => break response,
            Err(_) if started.elapsed() < std::time::Duration::from_secs(20) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => {
                child.kill().expect("stopping the chat");
                panic!("the chat never answered: {e}");
            }
        }
    };
    assert_eq!(answer.status(), 503);
    // Each document is written and flushed as it is made: what the turn wrote is there now.
    child.kill().expect("stopping the chat");
    let out = child.wait_with_output().expect("chat's output");
    let stdout = String::from_utf8(out.stdout).expect("UTF-8");
    let documents: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let names: Vec<String> = documents
        .iter()
        .flat_map(parley_core::metrics::metric_names)
        .collect();
    assert!(names.contains(&"Turns".to_owned()), "{stdout}");
    assert!(names.contains(&"DbConnectFailures".to_owned()), "{stdout}");
    for doc in &documents {
        check_emf(doc).unwrap();
        assert_eq!(
            doc["_aws"]["CloudWatchMetrics"][0]["Namespace"],
            "Parley/metrics-test"
        );
    }
    assert!(!stdout.contains("private-words-5d"), "{stdout}");
}
