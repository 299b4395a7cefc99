//! The documents demo domain through the real MCP function over HTTP: a slice of the PostgreSQL
//! manual loaded as courses (`parley demo-data --domain documents`), searched and read with user
//! tokens. Who may read what is the point: a user sees only the collections they are enrolled
//! in, whatever a tool's SQL says, and is told so when they ask for another.
//!
//! Needs the manual (`apt-get install postgresql-doc-15`) and the model (`scripts/model
//! install`). The slice is loaded once per test binary and shared: embedding it is the slow part.

use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use parley_core::config::Env;
use parley_mcp::Application;
use parley_testkit::TestDb;
use parley_testkit::domains::{DOCUMENTS_TOOLS, documents::ManualOptions};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

const SECRET: &str = "a-documents-test-secret-of-32-bytes-or-more";

/// Pages the tests ask about, loaded whatever the slice: the issue's example
/// (sql-set-transaction.html) among its neighbours, so the search has near misses to beat.
const PAGES: [&str; 8] = [
    "sql-set-transaction.html",
    "sql-begin.html",
    "sql-start-transaction.html",
    "sql-commit.html",
    "sql-rollback.html",
    "transaction-iso.html",
    "tutorial-transactions.html",
    "mvcc-intro.html",
];

/// Pages per part besides [`PAGES`]: 16 more over the eight parts. The built-in model embeds
/// a few chunks per second per core, so the slice stays small.
const PAGES_PER_PART: usize = 2;

/// The shared database. Only its URLs are kept, so tests on other runtimes can use it.
async fn manual_db() -> &'static TestDb {
    static DB: OnceCell<TestDb> = OnceCell::const_new();
    DB.get_or_init(|| {
        TestDb::with_manual(ManualOptions {
            pages_per_part: Some(PAGES_PER_PART),
            include: PAGES.iter().map(|p| (*p).to_owned()).collect(),
            ..ManualOptions::default()
        })
    })
    .await
}

struct App {
    url: String,
    http: reqwest::Client,
}

/// The mcp function serving the documents tools (and `extra_tools`, a tools file's text) over
/// the shared database, as its read-only login, with user tokens signed by [`SECRET`].
async fn spawn(extra_tools: Option<&str>) -> App {
    let db = manual_db().await;
    let mut tools = DOCUMENTS_TOOLS.to_owned();
    let extra = extra_tools.map(|text| {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), text).expect("write tools file");
        file
    });
    if let Some(file) = &extra {
        tools = format!("{tools},{}", file.path().display());
    }
    let env = Env::from_pairs([
        ("DATABASE_URL", db.readonly_url.clone()),
        ("TOOLS_FILE", tools),
        (
            "MCP_AUTH_TOKEN",
            "documents-service-token-0123456789".into(),
        ),
        ("JWT_SECRET", SECRET.into()),
        ("MCP_RESOURCE_URL", "http://127.0.0.1/mcp".into()),
        (
            "EMBEDDINGS_MODEL_DIR",
            parley_testkit::model_dir().display().to_string(),
        ),
        ("LISTEN_ADDR", "127.0.0.1:0".into()),
    ]);
    let app = Application::build(env)
        .await
        .unwrap_or_else(|e| panic!("the MCP function starts: {e}"));
    let addr = app.local_addr().expect("bound outside Lambda");
    app.spawn().expect("serving plain HTTP");
    // The tools file is read at start-up; the temporary file may go now.
    drop(extra);
    App {
        url: format!("http://{addr}/mcp"),
        http: reqwest::Client::new(),
    }
}

/// A user token with `sub` and, if any, `groups`.
fn user(sub: &str, groups: &[&str]) -> String {
    let mut claims = json!({"sub": sub, "exp": get_current_timestamp() + 600});
    if !groups.is_empty() {
        claims["groups"] = json!(groups);
    }
    encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("token")
}

impl App {
    /// `tools/call` as `token`: the JSON-RPC result.
    async fn call(&self, token: &str, tool: &str, arguments: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": arguments}});
        let response = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-06-18")
            .header("authorization", format!("Bearer {token}"))
            .body(body.to_string())
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.expect("JSON body");
        body.get("result")
            .cloned()
            .unwrap_or_else(|| panic!("no result in {body}"))
    }

    /// A successful call's rows.
    async fn rows(&self, token: &str, tool: &str, arguments: Value) -> Vec<Value> {
        let result = self.call(token, tool, arguments).await;
        assert_eq!(result["isError"], false, "tool error: {result}");
        result["structuredContent"]["rows"]
            .as_array()
            .unwrap_or_else(|| panic!("no rows in {result}"))
            .clone()
    }

    /// A refused call's message.
    async fn refusal(&self, token: &str, tool: &str, arguments: Value) -> String {
        let result = self.call(token, tool, arguments).await;
        assert_eq!(result["isError"], true, "expected a refusal: {result}");
        result["content"][0]["text"]
            .as_str()
            .expect("text")
            .to_owned()
    }
}

fn column<'a>(rows: &'a [Value], name: &str) -> Vec<&'a str> {
    rows.iter()
        .map(|r| r[name].as_str().unwrap_or_else(|| panic!("{name} in {r}")))
        .collect()
}

#[tokio::test]
async fn the_issues_question_finds_the_set_transaction_page_in_the_top_five() {
    let app = spawn(None).await;
    let rows = app
        .rows(
            &user("local-user", &[]),
            "search_documents",
            json!({"query": "how do I keep a transaction from changing data?", "limit": 5}),
        )
        .await;
    let uris = column(&rows, "uri");
    assert!(uris.contains(&"sql-set-transaction.html"), "{uris:?}");
    let row = &rows[0];
    for key in [
        "chunk_id",
        "document_id",
        "collection",
        "title",
        "uri",
        "heading",
        "snippet",
        "score",
    ] {
        assert!(!row[key].is_null(), "{key} in {row}");
    }
    assert!(row["snippet"].as_str().unwrap().chars().count() <= 800);
    let scores: Vec<f64> = rows.iter().map(|r| r["score"].as_f64().unwrap()).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
}

#[tokio::test]
async fn a_user_sees_hits_only_from_the_collections_they_are_enrolled_in() {
    let app = spawn(None).await;
    let query = json!({"query": "SET TRANSACTION READ ONLY isolation level", "limit": 20});
    // student-1 takes the tutorial and the SQL language; the reference pages are not theirs.
    let student = app
        .rows(&user("student-1", &[]), "search_documents", query.clone())
        .await;
    assert!(!student.is_empty());
    for collection in column(&student, "collection") {
        assert!(
            ["pg-tutorial", "pg-sql"].contains(&collection),
            "{collection}"
        );
    }
    // local-user also takes the reference, where the SET TRANSACTION page is.
    let local = app
        .rows(&user("local-user", &[]), "search_documents", query.clone())
        .await;
    assert!(column(&local, "collection").contains(&"pg-reference"));
    // A group in the token enrolls too: dba reads admin, reference and internals.
    let dba = app
        .rows(&user("someone", &["dba"]), "search_documents", query)
        .await;
    for collection in column(&dba, "collection") {
        assert!(
            ["pg-admin", "pg-reference", "pg-internals"].contains(&collection),
            "{collection}"
        );
    }
    // Nobody enrolled anywhere is told so, rather than finding nothing.
    let stranger = app
        .refusal(
            &user("stranger", &[]),
            "search_documents",
            json!({"query": "transaction"}),
        )
        .await;
    assert!(
        stranger.starts_with("you may read no collection"),
        "{stranger}"
    );
}

#[tokio::test]
async fn searching_a_collection_the_caller_is_not_enrolled_in_is_refused_with_a_message() {
    let app = spawn(None).await;
    let message = app
        .refusal(
            &user("student-1", &[]),
            "search_documents",
            json!({"query": "SET TRANSACTION", "collection": "pg-reference"}),
        )
        .await;
    assert!(
        message.contains("there is no collection named \"pg-reference\" that you may read"),
        "{message}"
    );
    let message = app
        .refusal(
            &user("student-1", &[]),
            "search_documents",
            json!({"query": "SET TRANSACTION", "collection": "no-such-course"}),
        )
        .await;
    assert!(
        message.contains("there is no collection named \"no-such-course\""),
        "{message}"
    );
    // Their own course searches fine.
    let rows = app
        .rows(
            &user("student-1", &[]),
            "search_documents",
            json!({"query": "transactions", "collection": "pg-sql"}),
        )
        .await;
    assert!(column(&rows, "collection").iter().all(|c| *c == "pg-sql"));
}

#[tokio::test]
async fn read_document_returns_sections_in_order_and_refuses_an_unreadable_collection() {
    let app = spawn(None).await;
    let local = user("local-user", &[]);
    let sections = app
        .rows(
            &local,
            "read_document",
            json!({"uri": "sql-set-transaction.html"}),
        )
        .await;
    assert!(sections.len() > 1, "{sections:?}");
    assert_eq!(sections[0]["title"], "SET TRANSACTION");
    assert_eq!(sections[0]["collection"], "pg-reference");
    assert_eq!(sections[0]["path"], "Part VI. Reference › SQL Commands");
    let order: Vec<i64> = sections
        .iter()
        .map(|s| s["section"].as_i64().unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
    let text: String = column(&sections, "text").concat();
    assert!(text.contains("READ ONLY"), "{text}");

    // One section by its heading, any case.
    let description = app
        .rows(
            &local,
            "read_document",
            json!({"document_id": sections[0]["document_id"], "section": "description"}),
        )
        .await;
    assert!(!description.is_empty());
    for s in &description {
        assert!(
            s["heading"].as_str().unwrap().contains("Description"),
            "{s}"
        );
    }

    // student-1 is not enrolled in the reference.
    let message = app
        .refusal(
            &user("student-1", &[]),
            "read_document",
            json!({"uri": "sql-set-transaction.html"}),
        )
        .await;
    // Refused as if it did not exist: the collection is not named.
    assert!(
        message.contains(
            "there is no document with uri \"sql-set-transaction.html\" that you may read"
        ),
        "{message}"
    );
    assert!(!message.contains("pg-reference"), "{message}");
}

#[tokio::test]
async fn list_collections_shows_only_the_readable_ones_and_how() {
    let app = spawn(None).await;
    let rows = app
        .rows(&user("student-1", &["dba"]), "list_collections", json!({}))
        .await;
    let names = column(&rows, "name");
    assert_eq!(
        names,
        [
            "pg-admin",
            "pg-internals",
            "pg-reference",
            "pg-sql",
            "pg-tutorial"
        ]
    );
    let how: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["enrolled"].as_str().unwrap()))
        .collect();
    assert!(how.contains(&("pg-sql", "user")), "{how:?}");
    assert!(how.contains(&("pg-admin", "group")), "{how:?}");
    let admin = rows.iter().find(|r| r["name"] == "pg-admin").unwrap();
    assert_eq!(admin["groups"], json!(["dba"]));
    assert!(admin["documents"].as_i64().unwrap() > 0);
    assert!(admin["chunks"].as_i64().unwrap() >= admin["documents"].as_i64().unwrap());
}

#[tokio::test]
async fn row_level_security_holds_for_a_tool_that_forgets_the_membership_filter() {
    let careless = r#"
[[tool]]
name = "every_chunk"
description = "All chunks' collections, with no enrollment check at all."
sql = """
SELECT DISTINCT k.name
FROM parley.chunks c JOIN parley.collections k ON k.id = c.collection_id
ORDER BY 1
"""

[[tool]]
name = "every_section"
description = "Counts of sections per collection, unfiltered."
sql = "SELECT count(DISTINCT collection_id) AS collections FROM parley.sections"
"#;
    let app = spawn(Some(careless)).await;
    let rows = app
        .rows(&user("student-1", &[]), "every_chunk", json!({}))
        .await;
    assert_eq!(column(&rows, "name"), ["pg-sql", "pg-tutorial"]);
    let rows = app
        .rows(&user("student-1", &[]), "every_section", json!({}))
        .await;
    assert_eq!(rows[0]["collections"], 2);
    let rows = app
        .rows(&user("stranger", &[]), "every_chunk", json!({}))
        .await;
    assert!(rows.is_empty(), "{rows:?}");
}
