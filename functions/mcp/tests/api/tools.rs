//! Each tool of the feedback demo (`domains/feedback/tools.toml`) answers correctly over the
//! demo data, checked against SQL run directly.

use serde_json::{Value, json};

use parley_testkit::TestDb;

use crate::helpers::{Options, client_call, env, spawn, spawn_app, spawn_on};

#[tokio::test]
async fn tools_list_publishes_every_feedback_tool_with_schema_and_read_only_hint() {
    let app = spawn_app().await;
    let client = app.client().await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "feedback_stats",
            "get_feedback",
            "lad_by_ref",
            "list_lads",
            "search_feedback"
        ]
    );
    for tool in &tools {
        let annotations = tool.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.read_only_hint, Some(true), "{}", tool.name);
        assert_eq!(tool.input_schema["type"], "object");
        assert_eq!(tool.input_schema["additionalProperties"], false);
        assert!(
            tool.description.as_ref().is_some_and(|d| d.len() > 80),
            "{} needs a real description",
            tool.name
        );
    }
    let search = tools.iter().find(|t| t.name == "search_feedback").unwrap();
    assert_eq!(search.input_schema["required"], json!(["query"]));
    assert_eq!(search.input_schema["properties"]["limit"]["maximum"], 50);
    assert_eq!(
        search.input_schema["properties"]["sentiment"]["enum"],
        json!(["negative", "neutral", "positive"])
    );
}

/// One tool of each kind of effect, the hints they publish following the file; the writes'
/// role may make them (start-up checks it).
const EFFECT_TOOLS: &str = r#"
[[tool]]
name = "count_lads"
description = "Counts districts."
sql = "SELECT count(*) AS n FROM lads"

[[tool]]
name = "close_feedback"
description = "Marks one feedback item closed; closing twice changes nothing more."
writes = true
destructive = false
idempotent = true
role = "parley_test_feedback_editor"
sql = "UPDATE feedback SET status = 'closed' WHERE id = :id RETURNING id, status"
[tool.params.id]
type = "integer"
required = true

[[tool]]
name = "delete_feedback"
description = "Deletes one feedback item."
writes = true
role = "parley_test_feedback_editor"
sql = "DELETE FROM feedback WHERE id = :id RETURNING id"
[tool.params.id]
type = "integer"
required = true
"#;

#[tokio::test]
async fn tools_list_publishes_the_effects_the_tools_file_declares() {
    let db = TestDb::with_demo_data(100).await;
    db.writer_role(
        "parley_test_feedback_editor",
        "GRANT SELECT, UPDATE, DELETE ON feedback TO parley_test_feedback_editor",
    )
    .await;
    let app = spawn_on(
        db,
        Options {
            tools_toml: Some(EFFECT_TOOLS.into()),
            ..Options::default()
        },
    )
    .await
    .expect("starts");
    let tools = app
        .client()
        .await
        .list_all_tools()
        .await
        .expect("tools/list");
    let hints = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).expect(name);
        let a = tool.annotations.as_ref().expect("annotations");
        (
            a.read_only_hint,
            a.destructive_hint,
            a.idempotent_hint,
            a.open_world_hint,
        )
    };
    let (yes, no) = (Some(true), Some(false));
    assert_eq!(hints("count_lads"), (yes, no, yes, no));
    assert_eq!(hints("close_feedback"), (no, no, yes, no), "as declared");
    assert_eq!(
        hints("delete_feedback"),
        (no, yes, no, no),
        "a write's defaults"
    );
}

#[tokio::test]
async fn lad_by_ref_accepts_codes_names_and_their_common_forms() {
    let app = spawn_app().await;
    for reference in [
        "E06000023",
        "e06000023 ",
        "Bristol, City of",
        "  BRISTOL,  city OF ",
        "Bristol",
        "bristol",
    ] {
        let out = app.rows("lad_by_ref", json!({"ref": reference})).await;
        assert_eq!(out["row_count"], 1, "{reference}: {out}");
        assert_eq!(out["rows"][0]["code"], "E06000023", "{reference}");
        assert_eq!(out["rows"][0]["name"], "Bristol, City of");
    }
    let out = app.rows("lad_by_ref", json!({"ref": "St Helens"})).await;
    assert_eq!(out["rows"][0]["name"], "St. Helens");
    let out = app
        .rows("lad_by_ref", json!({"ref": "Kingston upon Hull"}))
        .await;
    assert_eq!(out["rows"][0]["code"], "E06000010");
}

#[tokio::test]
async fn lad_by_ref_feedback_summary_matches_the_database() {
    let app = spawn_app().await;
    let out = app.rows("lad_by_ref", json!({"ref": "E08000025"})).await;
    let district = &out["rows"][0];
    assert_eq!(district["name"], "Birmingham");
    assert_eq!(district["utla_code"], "E08000025");
    let row = app
        .sql_one(
            "SELECT count(*), round(avg(rating), 2)::text, count(*) FILTER (WHERE sentiment = 'negative')
             FROM feedback WHERE lad_code = 'E08000025'",
        )
        .await;
    let total: i64 = row.get(0);
    assert!(total > 0, "the demo data gives Birmingham feedback");
    assert_eq!(district["feedback"]["total"], total);
    assert_eq!(district["feedback"]["negative"], row.get::<_, i64>(2));
    // Numeric values arrive exactly as Postgres computed them.
    let average: Option<String> = row.get(1);
    assert_eq!(
        district["feedback"]["average_rating"].to_string(),
        average.unwrap()
    );
}

#[tokio::test]
async fn lad_by_ref_offers_candidates_when_nothing_matches_exactly() {
    let app = spawn_app().await;
    let out = app.rows("lad_by_ref", json!({"ref": "Newcastle"})).await;
    let names: Vec<_> = out["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        names.contains(&"Newcastle upon Tyne".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"Newcastle-under-Lyme".to_owned()),
        "{names:?}"
    );
    assert!(
        out["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["match"] == "partial")
    );
    let none = app.rows("lad_by_ref", json!({"ref": "Atlantis"})).await;
    assert_eq!(none["row_count"], 0);
    assert_eq!(none["truncated"], false);
}

#[tokio::test]
async fn list_lads_filters_by_upper_tier_and_reports_truncation() {
    let app = spawn_app().await;
    let kent = app.rows("list_lads", json!({"upper_tier": "Kent"})).await;
    let expected: i64 = app
        .sql_one("SELECT count(*) FROM lads WHERE utla_name = 'Kent'")
        .await
        .get(0);
    assert_eq!(kent["row_count"], expected);
    assert!(
        kent["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["utla_name"] == "Kent")
    );

    let all = app.rows("list_lads", json!({"limit": 400})).await;
    assert_eq!(all["row_count"], 331);
    assert_eq!(all["truncated"], false);

    let five = app.rows("list_lads", json!({"limit": 5})).await;
    assert_eq!(five["row_count"], 5);
    assert_eq!(five["truncated"], true);
    assert_eq!(five["truncated_reason"], "max_rows");

    let wales = app
        .rows("list_lads", json!({"country": "Wales", "limit": 400}))
        .await;
    assert_eq!(wales["row_count"], 22);
}

#[tokio::test]
async fn search_feedback_ranks_matches_and_honours_filters() {
    let app = spawn_app().await;
    let out = app
        .rows("search_feedback", json!({"query": "pothole", "limit": 20}))
        .await;
    let rows = out["rows"].as_array().unwrap();
    assert!(!rows.is_empty(), "the demo data mentions potholes");
    let ranks: Vec<f64> = rows.iter().map(|r| r["rank"].as_f64().unwrap()).collect();
    assert!(
        ranks.windows(2).all(|w| w[0] >= w[1]),
        "best matches first: {ranks:?}"
    );
    assert!(
        rows.iter()
            .all(|r| r["snippet"].as_str().unwrap().contains("**"))
    );

    let filtered = app
        .rows(
            "search_feedback",
            json!({"query": "bin OR collection", "category": "waste", "sentiment": "negative",
                   "from": "2025-06-01", "to": "2025-12-31", "limit": 50}),
        )
        .await;
    for row in filtered["rows"].as_array().unwrap() {
        assert_eq!(row["category"], "waste");
        assert_eq!(row["sentiment"], "negative");
        let created = row["created_at"].as_str().unwrap();
        assert!(
            ("2025-06-01".."2026-01-01").contains(&&created[..10]),
            "{created}"
        );
    }

    let district = app
        .rows(
            "search_feedback",
            json!({"query": "pothole OR road", "district": "Leeds", "limit": 50}),
        )
        .await;
    assert!(
        district["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["lad_code"] == "E08000035")
    );
}

#[tokio::test]
async fn search_feedback_total_matches_a_direct_full_text_query() {
    let app = spawn_app().await;
    let expected: i64 = app
        .sql_one("SELECT count(*) FROM feedback WHERE search @@ websearch_to_tsquery('english', 'mould') AND lad_code = 'E08000025'")
        .await
        .get(0);
    let out = app
        .rows(
            "search_feedback",
            json!({"query": "mould", "district": "Birmingham", "limit": 50}),
        )
        .await;
    assert_eq!(out["row_count"].as_i64().unwrap(), expected.min(50));
}

#[tokio::test]
async fn feedback_stats_without_arguments_groups_everything_by_category() {
    let app = spawn_app().await;
    let out = app.rows("feedback_stats", json!({})).await;
    let rows = out["rows"].as_array().unwrap();
    let total: i64 = rows.iter().map(|r| r["count"].as_i64().unwrap()).sum();
    let expected: i64 = app.sql_one("SELECT count(*) FROM feedback").await.get(0);
    assert_eq!(total, expected);
    assert_eq!(rows.len(), 8, "eight categories");
    let roads = rows.iter().find(|r| r["key"] == "roads").unwrap();
    let avg: String = app
        .sql_one("SELECT round(avg(rating), 2)::text FROM feedback WHERE category = 'roads'")
        .await
        .get(0);
    assert_eq!(roads["average_rating"].to_string(), avg);
}

#[tokio::test]
async fn feedback_stats_groups_by_month_in_order_and_by_district_with_names() {
    let app = spawn_app().await;
    let months = app
        .rows("feedback_stats", json!({"group_by": "month"}))
        .await;
    let keys: Vec<_> = months["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_owned())
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert!(keys.len() >= 20, "two years of data: {keys:?}");

    let districts = app
        .rows(
            "feedback_stats",
            json!({"group_by": "district", "category": "noise", "from": "2025-01-01"}),
        )
        .await;
    let expected: i64 = app
        .sql_one("SELECT count(*) FROM feedback WHERE category = 'noise' AND created_at >= '2025-01-01T00:00:00Z'")
        .await
        .get(0);
    let rows = districts["rows"].as_array().unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r["count"].as_i64().unwrap())
            .sum::<i64>(),
        expected
    );
    let birmingham = rows.iter().find(|r| r["key"] == "E08000025");
    if let Some(b) = birmingham {
        assert_eq!(b["label"], "Birmingham");
    }
}

#[tokio::test]
async fn get_feedback_returns_the_stored_item_exactly() {
    let app = spawn_app().await;
    let row = app
        .sql_one("SELECT id, title, body, to_json(created_at)::text FROM feedback ORDER BY id DESC LIMIT 1")
        .await;
    let id: i64 = row.get(0);
    let out = app.rows("get_feedback", json!({"id": id})).await;
    let item = &out["rows"][0];
    assert_eq!(item["id"], id);
    assert_eq!(item["title"], row.get::<_, String>(1));
    assert_eq!(item["body"], row.get::<_, String>(2));
    assert_eq!(
        Value::from(item["created_at"].as_str().unwrap()),
        serde_json::from_str::<Value>(&row.get::<_, String>(3)).unwrap()
    );

    let missing = app.rows("get_feedback", json!({"id": 999_999_999})).await;
    assert_eq!(missing["row_count"], 0);
}

#[tokio::test]
async fn bad_arguments_are_tool_errors_naming_the_parameter() {
    let app = spawn_app().await;
    let cases = [
        (
            "search_feedback",
            json!({}),
            "missing required parameter `query`",
        ),
        (
            "search_feedback",
            json!({"query": 42}),
            "parameter `query` must be a string",
        ),
        (
            "search_feedback",
            json!({"query": "x", "limit": 500}),
            "parameter `limit` must be at most 50",
        ),
        (
            "search_feedback",
            json!({"query": "x", "sentiment": "furious"}),
            "parameter `sentiment` must be one of",
        ),
        (
            "search_feedback",
            json!({"query": "x", "from": "last week"}),
            "parameter `from` must be a date",
        ),
        (
            "search_feedback",
            json!({"query": "x", "distrct": "Leeds"}),
            "unknown parameter `distrct`",
        ),
        (
            "get_feedback",
            json!({"id": "seven"}),
            "parameter `id` must be an integer",
        ),
        (
            "lad_by_ref",
            json!({"ref": ""}),
            "parameter `ref` must be at least 1 characters",
        ),
    ];
    for (tool, args, expected) in cases {
        let message = app.tool_error(tool, args.clone()).await;
        assert!(message.contains(expected), "{tool} {args}: {message}");
    }
}

#[tokio::test]
async fn injection_attempts_stay_data() {
    let app = spawn_app().await;
    for attack in [
        "'; DROP TABLE lads; --",
        "x') OR 1=1 --",
        "Bristol\"; DELETE FROM feedback; --",
    ] {
        let out = app.rows("lad_by_ref", json!({"ref": attack})).await;
        assert_eq!(out["row_count"], 0, "{attack}");
        app.rows("search_feedback", json!({"query": attack})).await;
    }
    let lads: i64 = app.sql_one("SELECT count(*) FROM lads").await.get(0);
    assert_eq!(lads, 331);
    let feedback: i64 = app.sql_one("SELECT count(*) FROM feedback").await.get(0);
    assert_eq!(feedback as u64, crate::helpers::FEEDBACK_ROWS);
}

#[tokio::test]
async fn a_real_mcp_client_gets_structured_content_and_the_same_json_as_text() {
    let app = spawn_app().await;
    let client = app.client().await;
    let result = client_call(&client, "lad_by_ref", json!({"ref": "Leeds"})).await;
    assert_eq!(result.is_error, Some(false));
    let structured = result.structured_content.expect("structured content");
    assert_eq!(structured["rows"][0]["code"], "E08000035");
    let text = result.content[0]
        .as_text()
        .expect("text block")
        .text
        .clone();
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), structured);
}

#[tokio::test]
async fn by_default_a_session_keeps_no_prepared_statement_between_calls() {
    let plans = plans_after_calls(&[], 3).await;
    assert_eq!(plans["row_count"], 0, "{plans}");
}

/// The `plans` rows of the one pooled connection after `calls` lookups and searches, with
/// `settings` over the defaults.
async fn plans_after_calls(settings: &[(&str, &str)], calls: i64) -> Value {
    let mut extra_env = env(&[("DB_POOL_MAX_SIZE", "1")]);
    extra_env.extend(env(settings));
    let app = spawn(Options {
        tools_toml: Some(with_plans_tool()),
        extra_env,
        ..Options::default()
    })
    .await;
    for id in 1..=calls {
        app.rows("get_feedback", json!({"id": id})).await;
        app.rows("search_feedback", json!({"query": "pothole"}))
            .await;
    }
    app.rows("plans", json!({})).await
}

/// The feedback tools plus one that shows how the session's prepared statements were planned.
fn with_plans_tool() -> String {
    format!(
        "{}\n{}",
        std::fs::read_to_string(crate::helpers::FEEDBACK_TOOLS_FILE).expect("feedback tools"),
        r#"
[[tool]]
name = "plans"
description = "How this session's prepared statements were planned."
sql = """
SELECT statement LIKE '%f.id = $1%' AS get_feedback,
       statement LIKE '%websearch_to_tsquery%' AS search_feedback,
       generic_plans, custom_plans
FROM pg_prepared_statements
WHERE (statement LIKE '%f.id = $1%' OR statement LIKE '%websearch_to_tsquery%')
  AND statement NOT LIKE '%pg_prepared_statements%'
"""
"#
    )
}

#[tokio::test]
async fn with_cached_statements_a_lookup_keeps_the_plan_cache_and_a_search_is_planned_per_call() {
    let plans = plans_after_calls(&[("MCP_STATEMENTS", "cached")], 8).await;
    let row = |tool: &str| {
        plans["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r[tool] == true))
            .cloned()
            .unwrap_or_else(|| panic!("no prepared statement for {tool}: {plans}"))
    };
    let lookup = row("get_feedback");
    assert!(
        lookup["generic_plans"].as_i64() > Some(0),
        "get_feedback runs Postgres' cached generic plan: {lookup}"
    );
    let search = row("search_feedback");
    assert_eq!(search["generic_plans"], 0, "{search}");
    assert_eq!(search["custom_plans"], 8, "{search}");
}

#[tokio::test]
async fn percent_and_underscore_are_text_to_find_not_wildcards() {
    let app = spawn_app().await;
    for text in ["%", "_", "%%%"] {
        let out = app.rows("list_lads", json!({"name_contains": text})).await;
        assert_eq!(out["row_count"], 0, "{text}: {out}");
        let out = app.rows("lad_by_ref", json!({"ref": text})).await;
        assert_eq!(out["row_count"], 0, "{text}: {out}");
    }
    let out = app
        .rows("list_lads", json!({"name_contains": "upon"}))
        .await;
    assert!(out["row_count"].as_u64() > Some(0), "{out}");
}

/// Rows far larger than the byte cap: the result stops at the cap.
const LARGE_ROWS: &str = r#"
[[tool]]
name = "large"
description = "Large rows."
max_rows = 1000
max_bytes = 100000
sql = "SELECT g AS n, repeat('x', 30000) AS filler FROM generate_series(1, 1000) g"
"#;

#[tokio::test]
async fn rows_past_the_byte_cap_are_cut_with_the_reason() {
    let app = spawn(Options {
        tools_toml: Some(LARGE_ROWS.into()),
        ..Options::default()
    })
    .await;
    let result = app.call("large", json!({})).await;
    let text = result["content"][0]["text"].as_str().expect("text");
    assert!(text.len() <= 100_000, "{} bytes", text.len());
    let out = &result["structuredContent"];
    assert_eq!(out["truncated"], true);
    assert_eq!(out["truncated_reason"], "max_bytes");
    assert_eq!(out["row_count"], 3);
    assert_eq!(out["rows"][2]["n"], 3);
}
