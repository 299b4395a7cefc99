//! search_documents' `filters` over documents' metadata, end to end: Markdown files with front
//! matter ingested by `parley ingest --meta` (the CLI's own code, the real built-in model), then
//! searched through the mcp function over HTTP with equals, `in`, number and date ranges, and
//! malformed filters refused with a message a model can act on.

use parley_testkit::TestDb;
use parley_testkit::domains::DOCUMENTS_TOOLS;
use serde_json::{Value, json};

use crate::helpers::{Options, TestApp, env, ingest_folder, spawn_on};

/// Four leave policies, each the same topic (so every one matches the query by meaning and by
/// words) with its own metadata; `--meta region=emea` applies to all but the one whose front
/// matter names its own region.
const FILES: [(&str, &str); 4] = [
    (
        "hr-2024.md",
        "---\ndepartment: hr\nyear: 2024\npublished: 2024-03-01\n---\n\
         # Annual leave policy 2024\n\nEmployees accrue annual leave of two days a month.\n",
    ),
    (
        "hr-2021.md",
        "---\ndepartment: hr\nyear: 2021\npublished: 2021-06-15\n---\n\
         # Annual leave policy 2021\n\nEmployees accrue annual leave of one day a month.\n",
    ),
    (
        "it-2024.md",
        "---\ndepartment: it\nyear: 2024\npublished: 2024-09-10T12:00:00Z\nregion: apac\n---\n\
         # Annual leave policy for on-call engineers\n\n\
         Engineers on call accrue annual leave of three days a month.\n",
    ),
    (
        "handbook.md",
        "# Annual leave in the staff handbook\n\n\
         The handbook sums up annual leave for every team.\n",
    ),
];

async fn spawn_with_policies() -> TestApp {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in FILES {
        std::fs::write(dir.path().join(name), body).unwrap();
    }
    let printed = ingest_folder(
        &db,
        dir.path(),
        "policies",
        vec![("region".into(), json!("emea"))],
    )
    .await;
    assert!(printed.contains("4 added"), "{printed}");
    spawn_on(
        db,
        Options {
            extra_env: env(&[
                ("TOOLS_FILE", DOCUMENTS_TOOLS),
                (
                    "EMBEDDINGS_MODEL_DIR",
                    &parley_testkit::model_dir().display().to_string(),
                ),
            ]),
            ..Options::default()
        },
    )
    .await
    .expect("the MCP function starts with the documents tools")
}

/// The uris search_documents returns for "annual leave policy" under `filters`, sorted.
async fn found(app: &TestApp, filters: Value) -> Vec<String> {
    let rows = app
        .rows(
            "search_documents",
            json!({"query": "annual leave policy", "filters": filters, "limit": 20}),
        )
        .await["rows"]
        .clone();
    let mut uris: Vec<String> = rows
        .as_array()
        .unwrap_or_else(|| panic!("rows: {rows}"))
        .iter()
        .map(|r| r["uri"].as_str().unwrap().to_owned())
        .collect();
    uris.sort();
    uris.dedup();
    uris
}

#[tokio::test]
async fn filters_narrow_a_search_to_the_documents_whose_metadata_matches() {
    let app = spawn_with_policies().await;
    let all = ["handbook.md", "hr-2021.md", "hr-2024.md", "it-2024.md"];
    assert_eq!(found(&app, Value::Null).await, all);
    assert_eq!(found(&app, json!({})).await, all);

    // Equals: a string, and a number (front matter's `year: 2024` is stored as a number).
    assert_eq!(
        found(&app, json!({"department": "hr"})).await,
        ["hr-2021.md", "hr-2024.md"]
    );
    assert_eq!(
        found(&app, json!({"department": "hr", "year": 2024})).await,
        ["hr-2024.md"]
    );
    // --meta reached every file; front matter won where it named its own region.
    assert_eq!(
        found(&app, json!({"region": "emea"})).await,
        ["handbook.md", "hr-2021.md", "hr-2024.md"]
    );
    assert_eq!(found(&app, json!({"region": "apac"})).await, ["it-2024.md"]);

    // In.
    assert_eq!(
        found(&app, json!({"department": {"in": ["it", "finance"]}})).await,
        ["it-2024.md"]
    );
    // Number range; a document without the key never matches.
    assert_eq!(
        found(&app, json!({"year": {"gte": 2022}})).await,
        ["hr-2024.md", "it-2024.md"]
    );
    assert_eq!(
        found(&app, json!({"year": {"gt": 2000, "lt": 2024}})).await,
        ["hr-2021.md"]
    );
    // Date range, over a date and a timestamp alike.
    assert_eq!(
        found(
            &app,
            json!({"published": {"gte": "2024-01-01", "lt": "2024-09-10T12:00:00Z"}})
        )
        .await,
        ["hr-2024.md"]
    );
    assert_eq!(
        found(&app, json!({"published": {"lte": "2024-09-10T12:00:00Z"}})).await,
        ["hr-2021.md", "hr-2024.md", "it-2024.md"]
    );
    // Nothing matches: no rows, not an error.
    assert!(
        found(&app, json!({"department": "finance"}))
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_malformed_filter_is_refused_with_what_was_expected() {
    let app = spawn_with_policies().await;
    let search = |filters: Value| {
        let app = &app;
        async move {
            app.tool_error(
                "search_documents",
                json!({"query": "annual leave policy", "filters": filters}),
            )
            .await
        }
    };
    assert_eq!(
        search(json!({"year": {"between": [2020, 2024]}})).await,
        "filter `year`: unknown operator `between`; expected in, gte, gt, lte or lt (or a \
         plain value to equal)"
    );
    assert_eq!(
        search(json!({"department": {"in": "hr"}})).await,
        "filter `department`: `in` takes an array of values, e.g. {\"in\": [\"a\", \"b\"]}, \
         got \"hr\""
    );
    assert_eq!(
        search(json!({"published": {"gte": "last spring"}})).await,
        "filter `published`: `gte` takes a number or an ISO-8601 date such as \"2024-01-31\" \
         (or \"2024-01-31T09:00:00Z\"), got \"last spring\""
    );
    assert_eq!(
        search(json!({"department": ["hr", "it"]})).await,
        "filter `department`: an array; to match any of several values write {\"in\": \
         [\"hr\", \"it\"]}"
    );
    // Not an object at all: refused before Postgres, by the parameter's type.
    assert_eq!(
        search(json!("department=hr")).await,
        "invalid arguments: parameter `filters` must be a JSON object, got a string"
    );
}

#[tokio::test]
async fn list_collections_shows_the_metadata_keys_filters_can_use() {
    let app = spawn_with_policies().await;
    let rows = app.rows("list_collections", json!({})).await["rows"].clone();
    let metadata = &rows[0]["metadata"];
    assert_eq!(metadata["department"], json!(["hr", "it"]), "{metadata}");
    assert_eq!(metadata["region"], json!(["emea", "apac"]), "{metadata}");
    assert_eq!(metadata["year"], json!([2024, 2021]), "{metadata}");
    assert_eq!(
        metadata.as_object().unwrap().len(),
        4,
        "department, published, region, year: {metadata}"
    );
}
