//! The tasks demo domain through the chat: a user's task assistant, end to end over the real
//! mcp function and Postgres. Each user's tool calls carry that user, so a task one user adds
//! is theirs alone (bound from the caller and enforced by row-level security), and the model
//! is told which tools change data.

use chrono::{Datelike, Duration, Utc, Weekday};
use parley_testkit::TestDb;
use parley_testkit::llm::Step;
use serde_json::{Value, json};

use crate::helpers::{FEEDBACK_ROWS, TestChat, spawn_chat_with_tools};

/// A chat whose mcp function serves both demo domains (as the read-only login, the way
/// `scripts/dev` and a deployment run it), and a model that plays `steps`.
async fn task_chat(steps: Vec<Step>) -> (TestChat, TestDb) {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let tools = parley_testkit::domains::all_tools();
    (spawn_chat_with_tools(&db, &tools, steps).await, db)
}

/// Next Friday from today, as a model would work it out from the date in its instructions.
fn next_friday() -> String {
    let today = Utc::now().date_naive();
    let ahead =
        (Weekday::Fri.num_days_from_monday() + 7 - today.weekday().num_days_from_monday()) % 7;
    let ahead = if ahead == 0 { 7 } else { ahead };
    (today + Duration::days(i64::from(ahead)))
        .format("%Y-%m-%d")
        .to_string()
}

fn titles(trace: &Value) -> Vec<String> {
    trace["output"]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("rows in {trace}"))
        .iter()
        .map(|r| r["title"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn a_task_added_through_the_chat_is_the_users_own_and_shows_in_the_traces() {
    let friday = next_friday();
    let (chat, db) = task_chat(vec![
        Step::call(
            "create_task",
            format!(r#"{{"title":"Renew my passport","due_on":"{friday}","tags":["admin"]}}"#),
        ),
        Step::text(format!("Added \"Renew my passport\", due {friday}.")),
        Step::call("list_tasks", "{}"),
        Step::text("You have one task."),
        Step::call("list_tasks", "{}"),
        Step::text("You have no tasks."),
    ])
    .await;

    let added = chat
        .turn(
            "alice",
            json!({"message": "Add a task to renew my passport next Friday"}),
        )
        .await;
    let trace = &added["traces"][0];
    assert_eq!(trace["name"], "create_task", "{added}");
    assert_eq!(trace["is_error"], false, "{added}");
    let task = &trace["output"]["rows"][0];
    assert_eq!(task["title"], "Renew my passport", "{added}");
    assert_eq!(task["due_on"], friday.as_str(), "{added}");
    assert_eq!(task["status"], "open", "{added}");
    assert_eq!(task["tags"], json!(["admin"]), "{added}");
    assert!(
        added["reply"].as_str().unwrap().contains(&friday),
        "{added}"
    );

    let mine = chat
        .turn("alice", json!({"message": "What are my tasks?"}))
        .await;
    assert_eq!(titles(&mine["traces"][0]), ["Renew my passport"], "{mine}");
    let theirs = chat
        .turn("bob", json!({"message": "What are my tasks?"}))
        .await;
    assert_eq!(
        titles(&theirs["traces"][0]),
        Vec::<String>::new(),
        "bob sees none of alice's tasks: {theirs}"
    );

    let owners: Vec<String> = db
        .client()
        .await
        .query(
            "SELECT owner FROM tasks WHERE title = 'Renew my passport'",
            &[],
        )
        .await
        .expect("tasks")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(owners, ["alice"]);

    // The model was told what it may change, and that deleting waits for the user's approval.
    let instructions = chat.llm.requests()[0]["instructions"]
        .as_str()
        .expect("instructions")
        .to_owned();
    for tool in ["create_task", "update_task", "complete_task", "delete_task"] {
        assert!(
            instructions.contains(&format!("`{tool}`")),
            "{instructions}"
        );
    }
    assert!(
        !instructions.contains("The tools are read-only"),
        "{instructions}"
    );
    assert!(
        instructions.contains(
            "waits for the user's approval, which they give outside your \
messages once you make the call: `update_task`, `delete_task`."
        ),
        "{instructions}"
    );
}

#[tokio::test]
async fn a_model_cannot_pick_the_owner_of_a_task() {
    let (chat, db) = task_chat(vec![
        Step::call("create_task", r#"{"title":"Planted","owner":"bob"}"#),
        Step::text("I could not do that."),
    ])
    .await;

    let body = chat
        .turn("alice", json!({"message": "Add a task for bob"}))
        .await;
    let trace = &body["traces"][0];
    assert_eq!(trace["is_error"], true, "{body}");
    assert!(
        trace["output"].as_str().unwrap().contains("owner"),
        "the error names the parameter: {body}"
    );
    let planted: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM tasks WHERE title = 'Planted'", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(planted, 0);
}
