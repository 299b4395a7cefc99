//! `parley_core::usage::report` against a real Postgres, over ledger rows written here: sums
//! per user, model and UTC day, each model's tokens at its own price, an unpriced model's cost
//! unknown (never 0), the period's bounds, one owner's rows, and day keys in UTC whatever the
//! server's time zone. (The chat's tests drive real turns into the ledger: tests/api/usage.rs.)

use chrono::{DateTime, Utc};
use parley_core::usage::{self, Grouping, Prices, Query, Report, Row};
use parley_testkit::TestDb;
use tokio_postgres::Client;

fn utc(rfc3339: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(rfc3339).unwrap().to_utc()
}

/// Four turns: alice on priced m-a and unpriced m-b, bob on m-a at midnight, carol before the
/// period.
const LEDGER: &[Entry] = &[
    (
        "alice",
        "m-a",
        "2026-11-27T10:00:00Z",
        2,
        1000,
        100,
        1,
        0,
        false,
    ),
    (
        "alice",
        "m-b",
        "2026-11-28T23:59:59Z",
        1,
        500,
        50,
        0,
        0,
        true,
    ),
    (
        "bob",
        "m-a",
        "2026-11-28T00:00:00Z",
        3,
        3000,
        300,
        2,
        1,
        false,
    ),
    (
        "carol",
        "m-a",
        "2026-11-26T23:59:59Z",
        1,
        10,
        10,
        0,
        0,
        false,
    ),
];

/// owner, model, at, model_calls, input, output, tool_calls, tool_errors, error.
type Entry = (
    &'static str,
    &'static str,
    &'static str,
    i32,
    i64,
    i64,
    i32,
    i32,
    bool,
);

async fn ledger() -> (TestDb, Client) {
    let db = TestDb::migrated().await;
    let client = db.client().await;
    for (owner, model, at, calls, input, output, tools, tool_errors, error) in LEDGER {
        client
            .execute(
                "INSERT INTO chat.turn_usage (turn_id, owner, conversation_id, seq, at, model, \
                 model_calls, input_tokens, output_tokens, tool_calls, tool_errors, outcome, error) \
                 VALUES (gen_random_uuid(), $1, gen_random_uuid(), 2, $2, $3, $4, $5, $6, $7, $8, \
                 CASE WHEN $9 THEN 'llm_failed' ELSE 'answered' END, $9)",
                &[
                    owner,
                    &utc(at),
                    model,
                    calls,
                    input,
                    output,
                    tools,
                    tool_errors,
                    error,
                ],
            )
            .await
            .expect("a ledger row");
    }
    (db, client)
}

fn query(by: Grouping, until: Option<&str>, owner: Option<&str>) -> Query {
    Query {
        since: utc("2026-11-27T00:00:00Z"),
        until: until.map(utc),
        by,
        owner: owner.map(str::to_owned),
    }
}

/// m-a at 2 USD per million input tokens and 8 per million output; m-b unpriced.
fn prices() -> Prices {
    Prices::parse(r#"{"m-a": {"input": 2, "output": 8}}"#).unwrap()
}

/// Each row (then the totals) on one line: key, turns, model calls, input, output, tool calls,
/// tool errors, errors, cost (exact decimal text, or `?` for unknown), and the unpriced models.
fn all(report: &Report) -> Vec<String> {
    report
        .rows
        .iter()
        .chain([&report.totals])
        .map(|r: &Row| {
            format!(
                "{} {} {} {} {} {} {} {} {} [{}]",
                r.key,
                r.turns,
                r.model_calls,
                r.input_tokens,
                r.output_tokens,
                r.tool_calls,
                r.tool_errors,
                r.errors,
                r.cost.as_deref().unwrap_or("?"),
                r.unpriced.join(",")
            )
        })
        .collect()
}

#[tokio::test]
async fn per_user_each_models_tokens_cost_their_own_price_and_an_unpriced_model_makes_it_unknown() {
    let (_db, client) = ledger().await;
    let report = usage::report(&client, &query(Grouping::User, None, None), &prices())
        .await
        .unwrap();
    assert_eq!(
        all(&report),
        vec![
            // 1000*2 + 100*8 = 2800 micro-USD on m-a, and m-b's tokens at no known price.
            "alice 2 3 1500 150 1 0 1 ? [m-b]",
            // 3000*2 + 300*8 = 8400 micro-USD.
            "bob 1 3 3000 300 2 1 0 0.0084 []",
            "total 3 6 4500 450 3 1 1 ? [m-b]",
        ]
    );
    assert_eq!(report.totals.cost_number(), None);
    assert_eq!(report.rows[1].cost_number(), Some(0.0084));
}

#[tokio::test]
async fn per_model_and_per_utc_day_with_a_default_price_for_the_rest() {
    let (_db, client) = ledger().await;
    let by_model = usage::report(&client, &query(Grouping::Model, None, None), &prices())
        .await
        .unwrap();
    assert_eq!(
        all(&by_model),
        vec![
            "m-a 2 5 4000 400 3 1 0 0.0112 []",
            "m-b 1 1 500 50 0 0 1 ? [m-b]",
            "total 3 6 4500 450 3 1 1 ? [m-b]",
        ]
    );
    let with_default =
        Prices::parse(r#"{"m-a": {"input": 2, "output": 8}, "*": {"input": 1, "output": 1}}"#)
            .unwrap();
    let by_day = usage::report(&client, &query(Grouping::Day, None, None), &with_default)
        .await
        .unwrap();
    assert_eq!(
        all(&by_day),
        vec![
            "2026-11-27 1 2 1000 100 1 0 0 0.0028 []",
            // bob's 0.0084 on m-a and alice's 550 tokens at 1 USD per million: 0.00055.
            "2026-11-28 2 4 3500 350 2 1 1 0.00895 []",
            "total 3 6 4500 450 3 1 1 0.01175 []",
        ]
    );
}

#[tokio::test]
async fn one_owners_rows_and_the_period_end_is_not_included() {
    let (_db, client) = ledger().await;
    let bob = usage::report(&client, &query(Grouping::Day, None, Some("bob")), &prices())
        .await
        .unwrap();
    assert_eq!(
        all(&bob),
        vec![
            "2026-11-28 1 3 3000 300 2 1 0 0.0084 []",
            "total 1 3 3000 300 2 1 0 0.0084 []",
        ]
    );
    // bob's turn ended at exactly 2026-11-28T00:00:00Z: an end then leaves it out.
    let before = usage::report(
        &client,
        &query(Grouping::User, Some("2026-11-28T00:00:00Z"), None),
        &prices(),
    )
    .await
    .unwrap();
    assert_eq!(
        all(&before),
        vec![
            "alice 1 2 1000 100 1 0 0 0.0028 []",
            "total 1 2 1000 100 1 0 0 0.0028 []",
        ]
    );
}

#[tokio::test]
async fn a_period_without_turns_has_zero_totals_of_known_cost() {
    let (_db, client) = ledger().await;
    let mut q = query(Grouping::User, None, None);
    q.since = utc("2026-12-01T00:00:00Z");
    let report = usage::report(&client, &q, &Prices::default())
        .await
        .unwrap();
    assert_eq!(all(&report), vec!["total 0 0 0 0 0 0 0 0 []"]);
    assert_eq!(report.totals.cost_number(), Some(0.0));
}

#[tokio::test]
async fn days_are_utc_dates_whatever_the_servers_time_zone() {
    let (db, client) = ledger().await;
    // A database whose sessions default to UTC+14: carol's 23:59:59Z is the 27th there.
    client
        .batch_execute(&format!(
            "ALTER DATABASE {} SET timezone = 'Pacific/Kiritimati'",
            db.name
        ))
        .await
        .unwrap();
    let fresh = db.client().await;
    let mut q = query(Grouping::Day, None, Some("carol"));
    q.since = utc("2026-11-26T00:00:00Z");
    let report = usage::report(&fresh, &q, &prices()).await.unwrap();
    assert_eq!(
        report
            .rows
            .iter()
            .map(|r| r.key.as_str())
            .collect::<Vec<_>>(),
        ["2026-11-26"]
    );
}
