//! Charts end to end (`show_chart`): the model names an earlier call of the turn and the chat
//! draws that call's rows, never numbers the model typed. The chart reaches every interface
//! (the JSON answer's `charts`, a `data-chart` part of the AI SDK stream, a Markdown table in
//! `/v1`), is stored with the turn and comes back with the conversation; a chart the chat
//! cannot draw is a tool error the model reads, and the turn still answers.

use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::clients;
use crate::helpers::{Options, input_of, spawn, spawn_chat, sse_data};

/// The demo tool whose rows the charts draw: feedback counted by sentiment (three groups).
fn stats() -> (&'static str, &'static str) {
    ("feedback_stats", r#"{"group_by":"sentiment"}"#)
}

/// `show_chart` of `call_id`'s rows as bars of `count` by `key`.
fn bars_of(call_id: &str) -> (&'static str, String) {
    (
        "show_chart",
        json!({"call_id": call_id, "mark": "bar", "x": "key", "y": "count",
               "title": "Feedback by sentiment"})
        .to_string(),
    )
}

/// The rows a tool call returned, as its trace holds them.
fn rows_of<'a>(traces: &'a Value, call_id: &str) -> &'a Value {
    let trace = traces
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no trace of {call_id}: {traces}"));
    &trace["output"]["rows"]
}

/// What the model was given back for `call_id` in `request`, parsed when it is JSON.
fn output_sent(request: &Value, call_id: &str) -> Value {
    let input = input_of(request);
    let output = input
        .iter()
        .find(|i| i["type"] == "function_call_output" && i["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no output for {call_id} in {input:?}"));
    let text = output["output"].as_str().unwrap();
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

fn offered(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_chart_draws_exactly_the_rows_of_the_call_it_names_and_comes_back_with_the_conversation()
{
    let (stats_name, stats_args) = stats();
    let (chart_name, chart_args) = bars_of("call_1");
    let chat = spawn_chat(vec![
        Step::call(stats_name, stats_args),
        Step::call(chart_name, chart_args),
        Step::text("Most feedback is negative; the chart shows each sentiment."),
    ])
    .await;
    let body = chat
        .turn(
            "alice",
            json!({"message": "Chart the feedback by sentiment"}),
        )
        .await;
    assert_eq!(body["status"], "answered", "{body}");

    let charts = body["charts"].as_array().unwrap();
    assert_eq!(charts.len(), 1, "{body}");
    let chart = &charts[0];
    assert_eq!(chart["id"], "call_2");
    assert_eq!(chart["call_id"], "call_1");
    let rows = rows_of(&body["traces"], "call_1");
    assert_eq!(rows.as_array().unwrap().len(), 3, "{rows}");
    assert_eq!(chart["spec"]["data"]["values"], *rows);
    assert!(chart["spec"].get("$schema").is_some(), "{chart}");

    // The chart's call is a trace like any other, and the model read what it drew.
    let trace = &body["traces"][1];
    assert_eq!(trace["name"], "show_chart");
    assert_eq!(trace["is_error"], false);
    let requests = chat.llm.requests();
    let told = output_sent(&requests[2], "call_2");
    assert_eq!(told["shown"], true, "{told}");
    assert_eq!(told["call_id"], "call_1");
    assert_eq!(told["rows"], 3);
    // Offered beside the servers' tools and explained; drawn by the chat, never sent to mcp.
    assert!(offered(&requests[0]).contains(&"show_chart".to_owned()));
    assert!(offered(&requests[0]).contains(&"feedback_stats".to_owned()));
    let instructions = requests[0]["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("call `show_chart` with the `call_id`"),
        "{instructions}"
    );
    let called: Vec<String> = chat
        .mcp()
        .posts("tools/call")
        .into_iter()
        .map(|p| p.tool)
        .collect();
    assert_eq!(called, ["feedback_stats"]);

    // Read back, the conversation has the same chart on the assistant's message.
    let conversation = body["conversation_id"].as_str().unwrap();
    let messages = chat.messages("alice", conversation).await;
    assert!(messages[0].get("charts").is_none(), "a question has none");
    assert_eq!(messages[1]["charts"], body["charts"]);
}

#[tokio::test]
async fn a_streamed_chart_is_a_data_part_right_after_its_calls_output_and_is_stored() {
    // The chart names a call of its own step: it is drawn once that call is in.
    let (chart_name, chart_args) = bars_of("call_1");
    let chat = spawn_chat(vec![
        Step::calls([stats(), (chart_name, chart_args.as_str())]),
        Step::text("Here it is."),
    ])
    .await;
    let response = chat
        .post_streamed(
            "alice",
            "/api/chat",
            json!({"message": "Chart the feedback by sentiment"}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let parts = sse_data(&response.text().await.unwrap());
    let at = |kind: &str, id: &str| {
        parts
            .iter()
            .position(|p| p["type"] == kind && p["toolCallId"] == id)
            .unwrap_or_else(|| panic!("no {kind} of {id} in {parts:?}"))
    };
    let rows = &parts[at("tool-output-available", "call_1")]["output"]["rows"];
    let chart_output = at("tool-output-available", "call_2");
    assert!(chart_output > at("tool-output-available", "call_1"));
    let chart = &parts[chart_output + 1];
    assert_eq!(chart["type"], "data-chart", "{parts:?}");
    assert_eq!(chart["id"], "call_2");
    assert_eq!(chart["data"]["call_id"], "call_1");
    assert_eq!(chart["data"]["spec"]["data"]["values"], *rows);
    assert_eq!(
        parts.iter().filter(|p| p["type"] == "data-chart").count(),
        1
    );

    let conversation = parts[0]["messageMetadata"]["conversationId"]
        .as_str()
        .unwrap();
    let stored = &chat.messages("alice", conversation).await[1];
    assert_eq!(
        stored["charts"],
        json!([{"id": "call_2", "call_id": "call_1", "spec": chart["data"]["spec"]}])
    );
}

#[tokio::test]
async fn a_chart_of_a_call_the_turn_never_made_is_a_tool_error_and_the_turn_still_answers() {
    let chat = spawn_chat(vec![
        Step::calls([
            stats(),
            (
                "show_chart",
                r#"{"call_id":"call_9","mark":"bar","x":"key","y":"count"}"#,
            ),
        ]),
        Step::text("I could not draw that chart; most feedback is negative."),
    ])
    .await;
    let body = chat
        .turn(
            "alice",
            json!({"message": "Chart the feedback by sentiment"}),
        )
        .await;
    assert_eq!(body["status"], "answered");
    assert_eq!(
        body["reply"],
        "I could not draw that chart; most feedback is negative."
    );
    assert_eq!(body["charts"], json!([]));
    let trace = &body["traces"][1];
    assert_eq!(trace["name"], "show_chart");
    assert_eq!(trace["is_error"], true);
    // The model reads why, naming the call it asked for.
    let told = output_sent(&chat.llm.requests()[1], "call_2");
    assert!(
        told.as_str().is_some_and(|t| t.contains("call_9")),
        "{told}"
    );
    let conversation = body["conversation_id"].as_str().unwrap();
    assert_eq!(
        chat.messages("alice", conversation).await[1]["charts"],
        json!([])
    );
}

/// The model's mistakes are refused in words it can correct its call from; the corrected call
/// draws. (The checks are `turn::chart::draw`'s.)
#[tokio::test]
async fn charts_of_a_column_the_rows_lack_or_of_a_mark_outside_the_list_are_refused() {
    let (chart_name, chart_args) = bars_of("call_1");
    let chat = spawn_chat(vec![
        Step::call("feedback_stats", r#"{"group_by":"sentiment"}"#),
        Step::calls([
            (
                "show_chart",
                r#"{"call_id":"call_1","mark":"bar","x":"district_name","y":"count"}"#,
            ),
            (
                "show_chart",
                r#"{"call_id":"call_1","mark":"image","x":"key","y":"count"}"#,
            ),
        ]),
        Step::call(chart_name, chart_args),
        Step::text("Here is the chart."),
    ])
    .await;
    let body = chat
        .turn(
            "alice",
            json!({"message": "Chart the feedback by sentiment"}),
        )
        .await;
    assert_eq!(body["status"], "answered", "{body}");
    let requests = chat.llm.requests();
    let column = output_sent(&requests[2], "call_2");
    assert!(
        column.as_str().is_some_and(|t| t.contains("district_name")),
        "{column}"
    );
    let mark = output_sent(&requests[2], "call_3");
    assert!(
        mark.as_str()
            .is_some_and(|t| t.contains("mark") || t.contains("image")),
        "{mark}"
    );
    let errors: Vec<bool> = body["traces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["is_error"] == true)
        .collect();
    assert_eq!(errors, [false, true, true, false]);
    let charts = body["charts"].as_array().unwrap();
    assert_eq!(charts.len(), 1, "{body}");
    assert_eq!(charts[0]["id"], "call_4");
}

#[tokio::test]
async fn a_request_that_narrows_the_tools_gets_show_chart_only_by_name() {
    let chat = spawn_chat(vec![Step::text("ok"), Step::text("ok")]).await;
    chat.turn(
        "alice",
        json!({"message": "hi", "tools": ["feedback_stats"]}),
    )
    .await;
    chat.turn(
        "alice",
        json!({"message": "hi", "tools": ["feedback_stats", "show_chart"]}),
    )
    .await;
    let requests = chat.llm.requests();
    assert_eq!(offered(&requests[0]), ["feedback_stats"]);
    assert_eq!(offered(&requests[1]), ["feedback_stats", "show_chart"]);
    assert!(
        !requests[0]["instructions"]
            .as_str()
            .unwrap()
            .contains("show_chart"),
        "not offered, not explained"
    );
}

#[tokio::test]
async fn a_turn_that_fails_after_drawing_keeps_its_chart_on_record() {
    let (chart_name, chart_args) = bars_of("call_1");
    let chat = spawn_chat(vec![
        Step::calls([stats(), (chart_name, chart_args.as_str())]),
        Step::error(400, "scripted failure"),
    ])
    .await;
    let (status, body) = chat
        .post(
            "alice",
            json!({"message": "Chart the feedback by sentiment"}),
        )
        .await;
    assert_eq!(status, 502, "{body}");
    let (_, list) = chat.get(Some("alice"), "/api/conversations").await;
    let conversation = list["conversations"][0]["id"].as_str().unwrap().to_owned();
    let stored = &chat.messages("alice", &conversation).await[1];
    assert!(stored["error"].is_string(), "{stored}");
    let charts = stored["charts"].as_array().unwrap();
    assert_eq!(charts.len(), 1, "{stored}");
    assert_eq!(
        charts[0]["spec"]["data"]["values"],
        *rows_of(&stored["traces"], "call_1")
    );
}

/// A chat whose model answers each of `turns` questions by counting feedback by sentiment,
/// charting it and saying so; `/v1` tables show at most two rows.
async fn charting_chat(turns: usize) -> crate::helpers::TestChat {
    let mut steps = Vec::new();
    for turn in 0..turns {
        let (chart_name, chart_args) = bars_of(&format!("call_{}", 2 * turn + 1));
        steps.push(Step::call("feedback_stats", r#"{"group_by":"sentiment"}"#));
        steps.push(Step::call(chart_name, chart_args));
        steps.push(Step::text("Feedback by sentiment:"));
    }
    spawn(Options {
        steps,
        extra_env: vec![("V1_TABLE_ROWS", "2".into())],
        ..Options::default()
    })
    .await
}

/// What a `/v1` answer with the chart says after its reply: the rows as a table (two of three,
/// `V1_TABLE_ROWS`), then the line saying the chart is in the page.
fn assert_table(content: &str) {
    let (reply, rest) = content
        .split_once("Feedback by sentiment:")
        .unwrap_or_else(|| panic!("no reply in {content:?}"));
    assert!(!reply.contains("| key |"), "the table follows the reply");
    let header = "\n\n| key | count | average_rating | label | share |\n\
                  | --- | --- | --- | --- | --- |\n| ";
    assert!(rest.starts_with(header), "{rest:?}");
    let rows: Vec<&str> = rest
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| key") && !l.starts_with("| ---"))
        .collect();
    assert_eq!(rows.len(), 2, "{rest}");
    for row in &rows {
        let key = row.split(" | ").next().unwrap().trim_start_matches("| ");
        assert!(["negative", "neutral", "positive"].contains(&key), "{row}");
    }
    // The line names the kind of chart (and its title, when the spec has one).
    let (table, line) = rest.rsplit_once("\n\n").unwrap();
    assert!(table.ends_with("|\n\n… 1 more row"), "{rest:?}");
    assert!(
        line.starts_with("A bar chart")
            && line.ends_with(" of these rows is available in the page."),
        "{line:?}"
    );
}

#[tokio::test]
async fn v1_answers_carry_each_chart_as_a_markdown_table_of_its_rows_streamed_or_not() {
    let chat = charting_chat(2).await;
    let question = json!({"model": "parley", "tool_blocks": false, "messages": [
        {"role": "user", "content": "Chart the feedback by sentiment"},
    ]});
    let (status, _, body) = chat
        .post_json("alice", "/v1/chat/completions", &[], question.clone())
        .await;
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert_table(content);
    assert!(content.starts_with("Feedback by sentiment:"), "{content}");

    let mut streamed = question;
    streamed["stream"] = json!(true);
    let response = chat
        .post_streamed("alice", "/v1/chat/completions", streamed)
        .await;
    let chunks = sse_data(&response.text().await.unwrap());
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_table(&content);
    assert_eq!(content, body["choices"][0]["message"]["content"]);
}

/// The AI SDK's own reader (tests/interop/ui_stream.mjs, `readUIMessageStream`) keeps the chart
/// as a data part of the message `useChat` shows.
#[tokio::test]
async fn the_ai_sdks_reader_keeps_the_chart_as_a_data_part_of_the_message() {
    let (chart_name, chart_args) = bars_of("call_1");
    let chat = spawn_chat(vec![
        Step::call("feedback_stats", r#"{"group_by":"sentiment"}"#),
        Step::call(chart_name, chart_args),
        Step::text("Here it is."),
    ])
    .await;
    let out = clients::node(
        "ui_stream.mjs",
        &[
            &format!("{}/api/chat", chat.base),
            &crate::helpers::token("alice"),
            &json!({"message": "Chart the feedback by sentiment"}).to_string(),
        ],
    )
    .await;
    let parts = out["message"]["parts"].as_array().unwrap();
    let tool = parts
        .iter()
        .find(|p| p["toolCallId"] == "call_1")
        .unwrap_or_else(|| panic!("{parts:?}"));
    let charts: Vec<&Value> = parts.iter().filter(|p| p["type"] == "data-chart").collect();
    assert_eq!(charts.len(), 1, "{parts:?}");
    assert_eq!(charts[0]["id"], "call_2");
    assert_eq!(charts[0]["data"]["call_id"], "call_1");
    assert_eq!(
        charts[0]["data"]["spec"]["data"]["values"],
        tool["output"]["rows"]
    );
    let conversation = out["message"]["metadata"]["conversationId"]
        .as_str()
        .unwrap();
    let stored = &chat.messages("alice", conversation).await[1];
    assert_eq!(stored["charts"][0]["id"], "call_2");
    assert_eq!(
        stored["charts"][0]["spec"]["data"]["values"],
        *rows_of(&stored["traces"], "call_1")
    );
}

/// The official `openai` Python client (tests/interop/openai_client.py) reads the table,
/// streamed and not.
#[tokio::test]
async fn the_official_openai_client_reads_the_charts_table() {
    let chat = charting_chat(2).await;
    let out = clients::python(
        "openai_client.py",
        &[&chat.base, &crate::helpers::token("alice"), "charts"],
    )
    .await;
    for content in [&out["plain"], &out["streamed"]] {
        let content = content.as_str().unwrap();
        // The tool blocks (`V1_TOOL_BLOCKS`) come first, then the reply and its table.
        assert!(content.contains("name=\"show_chart\""), "{content}");
        let reply = content.find("Feedback by sentiment:").unwrap();
        assert_table(&content[reply..]);
    }
}
