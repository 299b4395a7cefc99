//! `parley search` as a user runs it: the built binary on a fresh migrated database with two
//! collections ingested by `parley ingest` (the real model), checked against what the mcp
//! function's own `search_documents` answers the same user.

mod common;

#[path = "common/mcp.rs"]
mod mcp;

use common::{failure, parley_with_model, stdout_of};
use mcp::{Mcp, scripts_dev_login};
use parley_testkit::TestDb;
use parley_testkit::domains::DOCUMENTS_TOOLS;
use serde_json::{Value, json};

/// `handbook`, public (leave and pay), and `course-1`, private with `teacher-1` enrolled.
async fn two_collections() -> TestDb {
    let db = TestDb::migrated().await;
    common::ingest_files(
        &db.url,
        "handbook",
        &[
            (
                "leave.md",
                "# Leave\n\n## Annual leave\nNew staff get 25 days of paid annual leave a year, \
                 plus public holidays.\n\n## Sick leave\nTell your manager before 10:00 on the \
                 first day you are off sick.\n",
            ),
            (
                "pay.md",
                "# Pay\n\nSalaries are paid on the last working day of each month.\n",
            ),
        ],
        &["--public"],
    );
    common::ingest_files(
        &db.url,
        "course-1",
        &[(
            "week-1.md",
            "# Week 1\n\n## Joins\nA join combines the rows of two tables on a condition.\n",
        )],
        &[],
    );
    stdout_of(&parley_with_model(
        &["enroll", "--collection", "course-1", "--user", "teacher-1"],
        &db.url,
    ));
    db
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn search_from_the_shell_returns_what_the_mcp_functions_search_tool_returns() {
    let db = two_collections().await;
    scripts_dev_login(&db).await;
    let mcp = Mcp::start(&db, &[DOCUMENTS_TOOLS.to_owned()]).await;
    for (query, collection, limit) in [
        ("How do I combine two tables?", None, None),
        ("When is salary paid?", Some("handbook"), Some(1)),
        ("What does a join do?", Some("course-1"), None),
    ] {
        let mut arguments = json!({"query": query});
        let mut argv = vec!["search", query, "--user", "teacher-1", "--json"];
        if let Some(c) = collection {
            arguments["collection"] = json!(c);
            argv.extend(["--collection", c]);
        }
        let limit_text = limit.map(|n: u16| n.to_string());
        if let (Some(n), Some(text)) = (limit, &limit_text) {
            arguments["limit"] = json!(n);
            argv.extend(["--limit", text]);
        }
        let from_mcp = mcp.rows("teacher-1", "search_documents", arguments).await;
        let from_shell = json_lines(&stdout_of(&parley_with_model(&argv, &db.url)));
        assert!(!from_mcp.is_empty(), "{query}: the tool found something");
        assert_eq!(from_shell, from_mcp, "{query}");
    }
}

#[tokio::test]
async fn search_prints_a_table_of_the_public_collections_and_refuses_what_the_caller_may_not_read()
{
    let db = two_collections().await;
    let table = stdout_of(&parley_with_model(
        &["search", "How many days of annual leave do new staff get?"],
        &db.url,
    ));
    let lines: Vec<&str> = table.lines().collect();
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["#", "score", "collection", "uri", "heading", "snippet"]
    );
    assert!(
        lines[1].starts_with("1  ")
            && lines[1]
                .contains("  handbook    leave.md  Leave › Annual leave  New staff get 25 days"),
        "{table}"
    );
    assert!(
        lines[1..].iter().all(|l| l.contains("  handbook  ")),
        "only the public collection, without --user: {table}"
    );

    let refused = parley_with_model(&["search", "joins", "--collection", "course-1"], &db.url);
    let stderr = failure(&refused, 1);
    assert!(
        stderr.contains("there is no collection named \"course-1\" that you may read")
            && stderr.contains("without --user"),
        "{stderr}"
    );
    let one = stdout_of(&parley_with_model(
        &[
            "search",
            "joins",
            "--collection",
            "course-1",
            "--user",
            "teacher-1",
            "--limit",
            "1",
        ],
        &db.url,
    ));
    assert_eq!(one.lines().count(), 2, "the header and one row: {one}");
    assert!(one.contains("course-1    week-1.md"), "{one}");
}

#[test]
fn a_limit_or_tool_the_search_refuses_is_a_usage_error_before_connecting() {
    // Nothing listens on this port: a usage error must come first.
    let nowhere = "postgres://u@127.0.0.1:9/none";
    let too_many = failure(
        &parley_with_model(&["search", "x", "--limit", "50"], nowhere),
        2,
    );
    assert!(too_many.contains("limit"), "{too_many}");
    let no_tool = failure(
        &parley_with_model(&["search", "x", "--tool", "nope"], nowhere),
        2,
    );
    assert!(no_tool.contains("has no tool named `nope`"), "{no_tool}");
}
