//! `GET /api/usage` over a scripted day of traffic: two chats on one database, each asking
//! its own model (`LLM_MODEL` model-a and model-b, scripted with known tokens per answer),
//! three users (ana an admin by her token's `groups` claim), a tool call, a tool error and a
//! failed turn. What the API reports per user, model and day equals the ledger's own sums and
//! the script's tokens, priced from `MODEL_PRICES`; a non-admin sees only their own; a bad
//! parameter is a 400 naming it. (`parley usage` agreeing with it: tools/parley/tests/usage.rs.)

use parley_testkit::TestDb;
use parley_testkit::llm::{ScriptedLlm, Step, Usage};
use serde_json::{Value, json};

use crate::helpers::{
    FEEDBACK_ROWS, JWT_SECRET, TestChat, now, spawn_chat_with_settings, token, token_with,
};

const ADMIN_GROUP: &str = "usage-admins";
/// model-a: 2.5 USD per million input tokens, 10 per million output; model-b: 0.5 and 1.5.
const PRICES: &str =
    r#"{"model-a": {"input": 2.5, "output": 10}, "model-b": {"input": 0.5, "output": 1.5}}"#;

/// Tenth-micro-dollars (1e-7 USD) of `input`/`output` tokens of `model`: integers, so the
/// expected cost is exact.
fn cost_e7(model: &str, input: i64, output: i64) -> i64 {
    match model {
        "model-a" => input * 25 + output * 100,
        "model-b" => input * 5 + output * 15,
        other => panic!("no price for {other}"),
    }
}

/// The nearest double to `e7` × 1e-7 USD: what the API's exact decimal becomes in JSON.
fn usd(e7: i64) -> f64 {
    e7 as f64 / 1e7
}

struct Day {
    a: TestChat,
    b: TestChat,
    db: TestDb,
}

async fn chat(db: &TestDb, model: &str, usage: Usage, steps: Vec<Step>) -> TestChat {
    let llm = ScriptedLlm::start(steps).await;
    llm.set_usage(usage);
    spawn_chat_with_settings(
        db,
        &[],
        &[
            ("LLM_MODEL", model),
            ("LLM_MAX_RETRIES", "0"),
            ("ADMIN_GROUP", ADMIN_GROUP),
            ("MODEL_PRICES", PRICES),
        ],
        llm,
    )
    .await
}

fn admin_token(sub: &str) -> String {
    token_with(
        json!({"sub": sub, "groups": ["staff", ADMIN_GROUP], "exp": now() + 3600}),
        JWT_SECRET,
    )
}

/// The day: model-a answers 1000 tokens in and 100 out each time, model-b 300 and 30.
/// ana (admin): a tool call and its answer on model-a (2 model calls, 1 tool call).
/// ben: a plain answer on model-a; a call with bad arguments (a tool error) and an answer on
/// model-b. cy: a failed turn on model-b (its model answers 500), then an answer on model-a.
async fn scripted_day() -> Day {
    let db = TestDb::with_demo_data(FEEDBACK_ROWS).await;
    let a = chat(
        &db,
        "model-a",
        Usage {
            input: 1000,
            output: 100,
        },
        vec![
            Step::call("list_lads", r#"{"upper_tier": "Kent", "limit": 3}"#),
            Step::text("Three districts."),
            Step::text("Hello ben."),
            Step::text("Hello cy."),
        ],
    )
    .await;
    let b = chat(
        &db,
        "model-b",
        Usage {
            input: 300,
            output: 30,
        },
        vec![
            Step::call("lad_by_ref", r#"{"ref": "Leeds""#),
            Step::text("That call was malformed."),
            Step::error(500, "the model is down"),
        ],
    )
    .await;
    let (status, ana) = post(&a, &admin_token("ana"), "List Kent's districts").await;
    assert_eq!(status, 200, "{ana}");
    assert_eq!(ana["traces"][0]["is_error"], false, "{ana}");
    let (status, ben) = post(&a, &token("ben"), "Hello").await;
    assert_eq!(status, 200, "{ben}");
    let (status, ben) = post(&b, &token("ben"), "Tell me about Leeds").await;
    assert_eq!(status, 200, "{ben}");
    assert_eq!(ben["traces"][0]["is_error"], true, "{ben}");
    let (status, cy) = post(&b, &token("cy"), "Anything").await;
    assert_eq!(status, 502, "{cy}");
    let (status, cy) = post(&a, &token("cy"), "Hello").await;
    assert_eq!(status, 200, "{cy}");
    Day { a, b, db }
}

async fn post(chat: &TestChat, bearer: &str, message: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/api/chat", chat.base))
        .bearer_auth(bearer)
        .json(&json!({"message": message}))
        .send()
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn usage(chat: &TestChat, bearer: Option<&str>, query: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(format!("{}/api/usage{query}", chat.base));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The ledger's own sums per key (`owner`, `model` or the UTC day), each with its cost in
/// 1e-7 USD from the per-model sums: the report's rows as the test computes them.
async fn ledger(db: &TestDb, key: &str, owner: Option<&str>) -> Vec<Value> {
    let sql = format!(
        "SELECT {key} AS key, model, count(*)::int8, sum(model_calls)::int8, \
         sum(input_tokens)::int8, sum(output_tokens)::int8, sum(tool_calls)::int8, \
         sum(tool_errors)::int8, (count(*) FILTER (WHERE error))::int8 \
         FROM chat.turn_usage WHERE $1::text IS NULL OR owner = $1 \
         GROUP BY 1, 2 ORDER BY ({key}) COLLATE \"C\", 2"
    );
    let rows = db.client().await.query(&sql, &[&owner]).await.unwrap();
    let mut out: Vec<(String, [i64; 8])> = Vec::new();
    for row in rows {
        let key: String = row.get(0);
        let model: String = row.get(1);
        let n: Vec<i64> = (2..9).map(|i| row.get::<_, i64>(i)).collect();
        let cost = cost_e7(&model, n[2], n[3]);
        let sums = [n[0], n[1], n[2], n[3], n[4], n[5], n[6], cost];
        match out.last_mut() {
            Some((last, acc)) if *last == key => {
                acc.iter_mut().zip(sums).for_each(|(a, s)| *a += s);
            }
            _ => out.push((key, sums)),
        }
    }
    out.into_iter().map(|(key, s)| row(&key, s)).collect()
}

/// A row as the API gives it: turns, model calls, tokens in and out, tool calls, tool errors,
/// errors, then the cost in 1e-7 USD.
fn row(key: &str, s: [i64; 8]) -> Value {
    json!({
        "key": key, "turns": s[0], "model_calls": s[1], "input_tokens": s[2],
        "output_tokens": s[3], "tool_calls": s[4], "tool_errors": s[5], "errors": s[6],
        "cost": usd(s[7]), "unpriced": [],
    })
}

fn totals(rows: &[Value]) -> Value {
    let field = |name: &str| rows.iter().map(|r| r[name].as_i64().unwrap()).sum::<i64>();
    let cost: f64 = rows.iter().map(|r| r["cost"].as_f64().unwrap()).sum();
    let mut total = row(
        "total",
        [
            field("turns"),
            field("model_calls"),
            field("input_tokens"),
            field("output_tokens"),
            field("tool_calls"),
            field("tool_errors"),
            field("errors"),
            0,
        ],
    );
    total["cost"] = json!(cost);
    total
}

/// The cost fields of `report` and `expected` agree to the nanodollar, and everything else
/// exactly (a sum of doubles may differ from the exact decimal in its last bit).
fn assert_rows(report: &Value, expected: &[Value]) {
    let strip = |v: &Value| {
        let mut v = v.clone();
        let cost = v["cost"].take();
        (v, cost.as_f64())
    };
    let got: Vec<Value> = report["rows"].as_array().unwrap().clone();
    assert_eq!(got.len(), expected.len(), "{report:#}");
    for (g, e) in got
        .iter()
        .chain([&report["totals"]])
        .zip(expected.iter().chain([&totals(expected)]))
    {
        let ((g, gc), (e, ec)) = (strip(g), strip(e));
        assert_eq!(g, e, "{report:#}");
        let (gc, ec) = (gc.expect("a known cost"), ec.unwrap());
        assert!((gc - ec).abs() < 1e-9, "cost {gc} vs {ec}: {report:#}");
    }
}

#[tokio::test]
async fn an_admin_sees_everyones_usage_per_user_model_and_day_as_the_ledger_and_the_prices_say() {
    let day = scripted_day().await;
    let admin = admin_token("ana");

    // Per user (an admin's default): the script's tokens, the ledger's sums, priced per model.
    let (status, by_user) = usage(&day.a, Some(&admin), "?since=1d").await;
    assert_eq!(status, 200, "{by_user}");
    assert_eq!(by_user["admin"], true);
    assert_eq!(by_user["by"], "user");
    assert_eq!(by_user["currency"], "USD");
    assert_eq!(by_user["prices"]["model-a"]["input"], json!(2.5));
    assert_eq!(by_user["prices"]["model-b"]["output"], json!(1.5));
    let expected = [
        // 2 model calls of 1000/100 tokens and one tool call.
        row(
            "ana",
            [1, 2, 2000, 200, 1, 0, 0, cost_e7("model-a", 2000, 200)],
        ),
        // 1 call on model-a; 2 on model-b with a tool error.
        row(
            "ben",
            [
                2,
                3,
                1600,
                160,
                1,
                1,
                0,
                cost_e7("model-a", 1000, 100) + cost_e7("model-b", 600, 60),
            ],
        ),
        // The failed turn counts as a turn and an error; its model answered nothing.
        row(
            "cy",
            [2, 1, 1000, 100, 0, 0, 1, cost_e7("model-a", 1000, 100)],
        ),
    ];
    assert_rows(&by_user, &expected);
    assert_rows(&by_user, &ledger(&day.db, "owner", None).await);
    // The exact costs: 0.007, 0.00389 and 0.0035 USD; 0.01439 in all.
    assert_eq!(by_user["rows"][0]["cost"], json!(0.007));
    assert_eq!(by_user["rows"][1]["cost"], json!(0.00389));
    assert_eq!(by_user["totals"]["cost"], json!(0.01439));

    // Per model, from the other instance: the same ledger, whichever chat is asked.
    let (status, by_model) = usage(&day.b, Some(&admin), "?since=1d&by=model").await;
    assert_eq!(status, 200, "{by_model}");
    assert_rows(&by_model, &ledger(&day.db, "model", None).await);
    assert_eq!(by_model["rows"][0]["key"], "model-a");
    assert_eq!(by_model["rows"][0]["cost"], json!(0.014));
    assert_eq!(by_model["rows"][1]["key"], "model-b");
    assert_eq!(by_model["rows"][1]["cost"], json!(0.00039));

    // Per UTC day.
    let (status, by_day) = usage(&day.a, Some(&admin), "?since=7d&by=day").await;
    assert_eq!(status, 200, "{by_day}");
    let days = ledger(
        &day.db,
        "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
        None,
    )
    .await;
    assert_rows(&by_day, &days);
    assert_eq!(by_day["totals"]["turns"], 5);
}

#[tokio::test]
async fn a_user_outside_the_admin_group_sees_only_their_own_usage() {
    let day = scripted_day().await;
    // ben's default: his own, per day.
    let (status, own) = usage(&day.a, Some(&token("ben")), "").await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["admin"], false);
    assert_eq!(own["by"], "day");
    assert_eq!(own["owner"], "ben");
    let days = ledger(
        &day.db,
        "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
        Some("ben"),
    )
    .await;
    assert_rows(&own, &days);
    assert_eq!(own["totals"]["turns"], 2);
    // Asking per user or per model still shows only his turns.
    let (_, users) = usage(&day.b, Some(&token("ben")), "?by=user").await;
    let keys: Vec<&str> = users["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["ben"], "{users}");
    let (_, models) = usage(&day.b, Some(&token("ben")), "?by=model").await;
    assert_rows(&models, &ledger(&day.db, "model", Some("ben")).await);
    // A member of other groups, or of one named like the admin group but for its case, is
    // not an admin.
    let lookalike = token_with(
        json!({"sub": "cy", "groups": ["Usage-Admins", "staff"], "exp": now() + 3600}),
        JWT_SECRET,
    );
    let (_, cy) = usage(&day.a, Some(&lookalike), "?by=user").await;
    assert_eq!(cy["admin"], false);
    assert_eq!(cy["rows"].as_array().unwrap().len(), 1, "{cy}");
    assert_eq!(cy["rows"][0]["key"], "cy");
    // A user with no turns: no rows, zero totals of known cost.
    let (_, nobody) = usage(&day.a, Some(&token("dee")), "").await;
    assert_eq!(nobody["rows"], json!([]));
    assert_eq!(nobody["totals"]["turns"], 0);
    assert_eq!(nobody["totals"]["cost"], json!(0.0));
    // Without a token: 401, as every route.
    let (status, _) = usage(&day.a, None, "").await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_bad_parameter_is_a_400_naming_it_and_the_forms_it_takes() {
    let day = scripted_day().await;
    let admin = admin_token("ana");
    for (query, names) in [
        ("?since=yesterday", "`since`"),
        ("?since=0d", "`since`"),
        ("?since=7w", "`since`"),
        ("?until=7d", "`until`"),
        ("?since=2026-11-02&until=2026-11-01", "`until`"),
        ("?by=week", "`by`"),
        ("?by=User", "`by`"),
        ("?owner=ben", "owner"),
    ] {
        let (status, body) = usage(&day.a, Some(&admin), query).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["code"], "invalid_query", "{query}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{query}: {message}");
    }
    let (_, body) = usage(&day.a, Some(&admin), "?since=7w").await;
    let message = body["error"]["message"].as_str().unwrap();
    for form in ["7d", "24h", "2026-11-01", "RFC 3339"] {
        assert!(message.contains(form), "{message}");
    }
    let (_, body) = usage(&day.a, Some(&admin), "?by=week").await;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("user, model or day"),
        "{body}"
    );
}

#[tokio::test]
async fn with_chat_auth_none_the_one_local_user_sees_everyones_usage() {
    let day = scripted_day().await;
    let local = spawn_chat_with_settings(
        &day.db,
        &[],
        &[("CHAT_AUTH", "none"), ("MODEL_PRICES", PRICES)],
        ScriptedLlm::start(vec![]).await,
    )
    .await;
    let (status, report) = usage(&local, None, "?since=1d").await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["admin"], true);
    assert_eq!(report["by"], "user");
    assert_rows(&report, &ledger(&day.db, "owner", None).await);
    assert_eq!(report["totals"]["turns"], 5);
}
