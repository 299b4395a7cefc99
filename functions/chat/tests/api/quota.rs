//! What a turn costs and who may start one: the usage ledger (`chat.turn_usage`) each stored
//! turn leaves, and the per-user budgets and rate limits charged from it (`turn::quota`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, Days, Utc};
use parley_testkit::llm::{Plan, ScriptedLlm, Step, Usage};
use parley_testkit::{TestDb, connect};
use serde_json::{Value, json};

use crate::clients;
use crate::helpers::{
    FEEDBACK_ROWS, JWT_SECRET, Options, TestChat, now, spawn, spawn_chat_with_settings, token,
    token_with,
};

/// Tokens the scripted model reports per response (in + out): one answer is one response.
const PER_TURN: i64 = 120;

/// A model that answers every request with `text` after `delay`, reporting 100 tokens in and
/// 20 out.
async fn model(delay: Duration) -> ScriptedLlm {
    let llm = ScriptedLlm::serve(
        Plan::Forever(Step::delayed(delay, Step::text("Here is the answer."))),
        0,
    )
    .await
    .expect("the scripted model starts");
    llm.set_usage(Usage {
        input: 100,
        output: 20,
    });
    llm
}

/// Two chat instances over one database, each with its own model and mcp function, both
/// with `settings`: what a deployment with two warm Lambda instances looks like.
async fn two_instances(settings: &[(&str, &str)], delay: Duration) -> (TestChat, TestChat) {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let one = spawn_chat_with_settings(&db, &[], settings, model(delay).await).await;
    let two = spawn_chat_with_settings(&db, &[], settings, model(delay).await).await;
    (one, two)
}

/// One `POST /api/chat` as `user` (a token for `claims` when given): status, headers, body.
async fn ask(chat: &TestChat, bearer: &str) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/api/chat", chat.base))
        .bearer_auth(bearer)
        .json(&json!({"message": "How is the feedback?"}))
        .send()
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, headers, body)
}

/// What the database holds for `owner`: tokens charged today, the ledger's sum, its rows.
async fn charged(chat: &TestChat, owner: &str) -> (i64, i64, i64) {
    let db = connect(chat.db_url.as_deref().unwrap()).await;
    let counted: i64 = db
        .query_opt(
            "SELECT tokens FROM chat.quota_counters
             WHERE owner = $1 AND day = (now() AT TIME ZONE 'UTC')::date",
            &[&owner],
        )
        .await
        .unwrap()
        .map_or(0, |r| r.get(0));
    let row = db
        .query_one(
            "SELECT coalesce(sum(input_tokens + output_tokens), 0)::int8, count(*)
             FROM chat.turn_usage WHERE owner = $1",
            &[&owner],
        )
        .await
        .unwrap();
    (counted, row.get(0), row.get(1))
}

/// A refusal as every client must be able to read it: 429 `quota_exceeded` naming `limit`,
/// `Retry-After` equal to the body's `retry_after`, and `resets_at` that far ahead.
fn assert_refused(status: u16, headers: &reqwest::header::HeaderMap, body: &Value, limit: &str) {
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    assert_eq!(body["limit"], limit, "{body}");
    let retry_after = body["retry_after"].as_u64().expect("retry_after");
    assert!(retry_after >= 1, "{body}");
    assert_eq!(
        headers["retry-after"].to_str().unwrap(),
        retry_after.to_string()
    );
    let resets_at: DateTime<Utc> = body["resets_at"].as_str().unwrap().parse().unwrap();
    let ahead = (resets_at - Utc::now()).num_seconds();
    assert!(
        (ahead - retry_after as i64).abs() <= 2,
        "resets_at {resets_at} is {ahead} s ahead, retry_after {retry_after}"
    );
    match limit {
        "daily_tokens" => {
            let midnight = Utc::now()
                .date_naive()
                .checked_add_days(Days::new(1))
                .unwrap()
                .and_hms_opt(0, 0, 0)
                .unwrap()
                .and_utc();
            assert_eq!(
                resets_at, midnight,
                "a budget resets at the next UTC midnight"
            );
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("resets at 00:00 UTC"),
                "{body}"
            );
            assert_eq!(headers["x-should-retry"], "false");
        }
        _ => {
            assert!(retry_after <= 60, "{body}");
            assert!(
                body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("try again in"),
                "{body}"
            );
        }
    }
}

/// The issue's test: 50 turns of one user through two instances, started 8 ms apart against
/// a budget of 1000 tokens with 120-token turns that take 150 ms, so turns finish (and are
/// charged) while later ones are admitted. The day's charge passes the budget by at most the
/// turns in flight when it was reached: fewer than the most the client ever had in flight.
#[tokio::test]
async fn fifty_concurrent_turns_on_two_instances_overrun_the_budget_by_at_most_those_running() {
    const BUDGET: i64 = 1000;
    let (one, two) = two_instances(
        &[("BUDGET_DAILY_TOKENS", "1000")],
        Duration::from_millis(150),
    )
    .await;
    let (one, two) = (Arc::new(one), Arc::new(two));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most_in_flight = Arc::new(AtomicUsize::new(0));
    let mut turns = Vec::new();
    for i in 0..50 {
        let chat = if i % 2 == 0 { one.clone() } else { two.clone() };
        let (in_flight, most) = (in_flight.clone(), most_in_flight.clone());
        turns.push(tokio::spawn(async move {
            let now_in_flight = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now_in_flight, Ordering::SeqCst);
            let answer = ask(&chat, &token("alice")).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            answer
        }));
        tokio::time::sleep(Duration::from_millis(8)).await;
    }
    let mut answered = 0i64;
    let mut refused = 0;
    for turn in turns {
        let (status, headers, body) = turn.await.unwrap();
        match status {
            200 => {
                answered += 1;
                assert_eq!(body["usage"]["total_tokens"], PER_TURN, "{body}");
            }
            _ => {
                assert_refused(status, &headers, &body, "daily_tokens");
                refused += 1;
            }
        }
    }
    let most = most_in_flight.load(Ordering::SeqCst) as i64;
    let (counted, ledger, rows) = charged(&one, "alice").await;
    assert!(refused > 0, "the budget refused nothing");
    assert_eq!(rows, answered, "a refused turn leaves no ledger row");
    assert_eq!(counted, ledger, "what is charged is what the ledger says");
    assert_eq!(ledger, answered * PER_TURN);
    assert!(
        counted >= BUDGET,
        "refused before the budget was used: {counted}"
    );
    assert!(
        counted < BUDGET + most * PER_TURN,
        "{counted} tokens charged: more than the budget and the {most} turns in flight"
    );
    eprintln!("answered {answered}, refused {refused}, most in flight {most}, charged {counted}");
    // Once it is spent, a turn on either instance is refused and stores nothing.
    for chat in [&one, &two] {
        let (status, headers, body) = ask(chat, &token("alice")).await;
        assert_refused(status, &headers, &body, "daily_tokens");
    }
    assert_eq!(charged(&one, "alice").await.2, answered);
    // Another user's budget is their own.
    let (status, _, body) = ask(&two, &token("bob")).await;
    assert_eq!(status, 200, "{body}");
}

/// The rate is exact across instances: 50 turns sent at once, half to each, and exactly the
/// 10 the rate allows are answered.
#[tokio::test]
async fn a_rate_of_ten_admits_exactly_ten_of_fifty_concurrent_turns_on_two_instances() {
    let (one, two) = two_instances(
        &[("RATE_TURNS_PER_MINUTE", "10")],
        Duration::from_millis(50),
    )
    .await;
    let bearer = token("alice");
    let answers = futures::future::join_all(
        (0..50).map(|i| ask(if i % 2 == 0 { &one } else { &two }, &bearer)),
    )
    .await;
    let mut answered = 0;
    for (status, headers, body) in &answers {
        match status {
            200 => answered += 1,
            _ => assert_refused(*status, headers, body, "turns_per_minute"),
        }
    }
    assert_eq!(answered, 10);
    assert_eq!(
        charged(&one, "alice").await.2,
        10,
        "ten turns on the ledger"
    );
}

/// A token whose `groups` claim is `groups`.
fn member_of(sub: &str, groups: &[&str]) -> String {
    token_with(
        json!({"sub": sub, "groups": groups, "exp": now() + 3600}),
        JWT_SECRET,
    )
}

/// Group overrides: a member gets the group's limits (the most generous of their groups);
/// anyone else the default.
#[tokio::test]
async fn a_group_override_gives_its_members_their_own_limits() {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let chat = spawn_chat_with_settings(
        &db,
        &[],
        &[
            ("RATE_TURNS_PER_MINUTE", "1"),
            (
                "QUOTA_GROUP_OVERRIDES",
                r#"{"analysts": {"turns_per_minute": 3}, "trial": {"turns_per_minute": 2},
                    "ops": {"turns_per_minute": null}}"#,
            ),
        ],
        model(Duration::ZERO).await,
    )
    .await;
    // How many turns in a row each is answered before the first refusal.
    async fn answered_in_a_row(chat: &TestChat, bearer: &str, tries: usize) -> usize {
        for n in 0..tries {
            let (status, headers, body) = ask(chat, bearer).await;
            if status != 200 {
                assert_refused(status, &headers, &body, "turns_per_minute");
                return n;
            }
        }
        tries
    }
    assert_eq!(answered_in_a_row(&chat, &token("alice"), 5).await, 1);
    assert_eq!(
        answered_in_a_row(&chat, &member_of("bob", &["analysts"]), 5).await,
        3
    );
    assert_eq!(
        answered_in_a_row(&chat, &member_of("carol", &["trial", "analysts"]), 5).await,
        3,
        "the most generous of two groups"
    );
    assert_eq!(
        answered_in_a_row(&chat, &member_of("dan", &["trial", "ops"]), 6).await,
        6,
        "unlimited beats any number"
    );
}

/// A turn the model never answered costs nothing: its tokens are 0 and its rate slot comes
/// back, as does the slot of a turn refused for a conversation that is not there.
#[tokio::test]
async fn a_turn_the_model_never_answered_charges_nothing_and_gives_its_slot_back() {
    let chat = spawn(Options {
        steps: vec![
            Step::error(500, "the scripted model is down"),
            Step::text("Back again."),
        ],
        extra_env: vec![
            ("LLM_MAX_RETRIES", "0".into()),
            ("RATE_TURNS_PER_MINUTE", "1".into()),
            ("BUDGET_DAILY_TOKENS", "1000".into()),
        ],
        ..Options::default()
    })
    .await;
    let (status, body) = chat
        .post(
            "alice",
            json!({"message": "hi", "conversation_id": "00000000-0000-4000-8000-000000000000"}),
        )
        .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = chat.post("alice", json!({"message": "hi"})).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(
        charged(&chat, "alice").await,
        (0, 0, 1),
        "on record, charged nothing"
    );
    // The rate of 1 still has its one turn for the minute.
    let (status, body) = chat.post("alice", json!({"message": "hi again"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(charged(&chat, "alice").await, (120, 120, 2));
    let bearer = token("alice");
    let (status, headers, body) = ask(&chat, &bearer).await;
    assert_refused(status, &headers, &body, "turns_per_minute");
}

/// A chat whose budget (100 tokens) one 120-token answer spends.
async fn spent_budget() -> TestChat {
    let chat = spawn(Options {
        steps: vec![Step::text("That was the last one.")],
        extra_env: vec![("BUDGET_DAILY_TOKENS", "100".into())],
        ..Options::default()
    })
    .await;
    chat.turn("alice", json!({"message": "hi"})).await;
    chat
}

/// `/v1` in OpenAI's error shape, read by the official `openai` Python client: it raises a
/// RateLimitError with code `quota_exceeded` after one request, not after its own retries.
#[tokio::test]
async fn v1_refuses_a_spent_budget_in_openai_s_shape_and_the_openai_client_does_not_retry() {
    let chat = spent_budget().await;
    let out = clients::python("openai_quota.py", &[&chat.base, &token("alice")]).await;
    assert_eq!(out["raised"], "RateLimitError", "{out}");
    assert_eq!(out["status"], 429);
    assert_eq!(out["code"], "quota_exceeded");
    assert_eq!(out["type"], "insufficient_quota");
    assert_eq!(out["should_retry"], "false");
    assert_eq!(out["requests"], 1, "the client did not retry: {out}");
    let error = &out["body"]["error"];
    assert_eq!(error["param"], Value::Null);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("You have used today's token budget (100 tokens)"),
        "{out}"
    );
    assert_eq!(
        out["retry_after"].as_str().unwrap(),
        out["body"]["retry_after"].to_string()
    );
    assert!(
        out["body"]["resets_at"]
            .as_str()
            .unwrap()
            .ends_with("T00:00:00Z")
    );
}

/// The streamed route refused, as the AI SDK's own chat client reads it: an error with the
/// status 429 and the body's code, limit and reset time, and no assistant message.
#[tokio::test]
async fn a_streamed_turn_over_budget_is_a_429_the_ai_sdk_raises_with_its_body() {
    let chat = spent_budget().await;
    let out = clients::node(
        "ui_quota.mjs",
        &[
            &format!("{}/api/chat", chat.base),
            &token("alice"),
            "One more",
        ],
    )
    .await;
    assert_eq!(out["status"], "error", "{out}");
    let error = &out["error"];
    assert_eq!(error["statusCode"], 429, "{out}");
    assert_eq!(error["body"]["error"]["code"], "quota_exceeded", "{out}");
    assert_eq!(error["body"]["limit"], "daily_tokens");
    assert!(
        error["body"]["resets_at"]
            .as_str()
            .unwrap()
            .ends_with("T00:00:00Z")
    );
    assert!(error["body"]["retry_after"].as_u64().unwrap() >= 1);
    // The question stays the user's to send again; no answer was started.
    let roles: Vec<&Value> = out["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["role"])
        .collect();
    assert_eq!(roles, [&json!("user")], "{out}");
    // Refused before it began: nothing stored.
    assert_eq!(charged(&chat, "alice").await.2, 1);
}

/// A turn with a tool call that works, one that fails, and an answer, then a turn whose model
/// fails: each leaves exactly one ledger row, with what the model reported and what ran.
#[tokio::test]
async fn every_stored_turn_leaves_one_ledger_row_failed_ones_included() {
    let chat = spawn(Options {
        steps: vec![
            Step::calls([
                ("lad_by_ref", r#"{"ref":"Leeds"}"#),
                ("get_feedback", r#"{"id":"seven"}"#),
            ]),
            Step::text("Leeds is in West Yorkshire."),
            Step::error(500, "the scripted model is down"),
        ],
        extra_env: vec![("LLM_MAX_RETRIES", "0".into())],
        ..Options::default()
    })
    .await;
    let body = chat
        .turn("alice", json!({"message": "Tell me about Leeds"}))
        .await;
    let conversation = body["conversation_id"].as_str().unwrap().to_owned();
    // The scripted model reports 100 tokens in and 20 out per response.
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 200, "output_tokens": 40, "total_tokens": 240})
    );
    let (status, failed) = chat
        .post(
            "alice",
            json!({"message": "And Bristol?", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(status, 502, "{failed}");

    let db = connect(chat.db_url.as_deref().unwrap()).await;
    let rows = db
        .query(
            "SELECT owner, conversation_id::text, seq, model, model_calls, input_tokens,
                    output_tokens, tool_calls, tool_errors, outcome, error
             FROM chat.turn_usage ORDER BY seq",
            &[],
        )
        .await
        .unwrap();
    let ledger: Vec<_> = rows
        .iter()
        .map(|r| {
            json!({
                "owner": r.get::<_, String>(0),
                "conversation_id": r.get::<_, String>(1),
                "seq": r.get::<_, Option<i32>>(2),
                "model": r.get::<_, String>(3),
                "model_calls": r.get::<_, i32>(4),
                "input_tokens": r.get::<_, i64>(5),
                "output_tokens": r.get::<_, i64>(6),
                "tool_calls": r.get::<_, i32>(7),
                "tool_errors": r.get::<_, i32>(8),
                "outcome": r.get::<_, String>(9),
                "error": r.get::<_, bool>(10),
            })
        })
        .collect();
    // The assistant messages are the 2nd and 4th of the conversation.
    let seqs: Vec<i64> = chat
        .messages("alice", &conversation)
        .await
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, [2, 4]);
    assert_eq!(
        ledger,
        [
            json!({
                "owner": "alice", "conversation_id": conversation, "seq": 2,
                "model": "scripted-model", "model_calls": 2, "input_tokens": 200,
                "output_tokens": 40, "tool_calls": 2, "tool_errors": 1,
                "outcome": "answered", "error": false,
            }),
            // The model never answered: nothing to charge, but the turn is on record.
            json!({
                "owner": "alice", "conversation_id": conversation, "seq": 4,
                "model": "scripted-model", "model_calls": 0, "input_tokens": 0,
                "output_tokens": 0, "tool_calls": 0, "tool_errors": 0,
                "outcome": "llm_unavailable", "error": true,
            }),
        ]
    );
}
