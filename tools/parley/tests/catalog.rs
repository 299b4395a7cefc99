//! `parley catalog init`, `refresh` and `check` against a real Postgres: a draft from bare
//! tables, a refresh that keeps what a person wrote and drops samples of columns marked
//! personal, a check that names what no longer fits, and a reader role that is not shown
//! what it cannot read.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::{failure, stdout_of};
use mcp::Mcp;
use parley_testkit::TestDb;

fn parley(args: &[&str], database_url: &str) -> std::process::Output {
    common::parley_with_model(args, database_url)
}

/// A small shop: customers in a few countries, their orders, and a staff table the reader
/// role may not read.
const SHOP: &str = "
CREATE SCHEMA shop;
CREATE TABLE shop.customer (customer_id int PRIMARY KEY, name text NOT NULL, email text,
                            country text, joined date);
CREATE TABLE shop.orders (order_id int PRIMARY KEY,
                          customer_id int NOT NULL REFERENCES shop.customer, total numeric(10,2));
CREATE TABLE shop.staff (staff_id int PRIMARY KEY, salary int);
INSERT INTO shop.customer
SELECT i, 'Customer ' || i, 'c' || i || '@example.com',
       (ARRAY['Brazil', 'Canada', 'France'])[1 + i % 3], date '2024-01-01' + i
FROM generate_series(1, 30) i;
INSERT INTO shop.orders SELECT i, 1 + i % 30, i * 1.5 FROM generate_series(1, 90) i;
";

async fn shop() -> (TestDb, tempfile::TempDir) {
    let db = TestDb::migrated().await;
    db.client().await.batch_execute(SHOP).await.unwrap();
    (db, tempfile::tempdir().unwrap())
}

#[tokio::test]
async fn init_drafts_refresh_keeps_edits_and_check_names_what_does_not_fit() {
    let (db, dir) = shop().await;
    let file = dir.path().join("catalog.toml");
    let path = file.to_str().unwrap();
    let said = stdout_of(&parley(
        &["catalog", "init", "--schema", "shop", "--out", path],
        &db.url,
    ));
    assert!(
        said.contains("3 tables, 10 columns (1 with their values listed), 1 foreign keys"),
        "{said}"
    );
    let draft = std::fs::read_to_string(&file).unwrap();
    // Countries repeat: listed. Names and e-mails are one per row: never listed.
    assert!(
        draft.contains("values = [\"Brazil\", \"Canada\", \"France\"]"),
        "{draft}"
    );
    assert!(!draft.contains("example.com"), "{draft}");
    assert!(
        draft.contains("min = \"2024-01-02\", max = \"2024-01-31\""),
        "{draft}"
    );
    assert!(
        draft.contains("from = \"shop.orders(customer_id)\""),
        "{draft}"
    );

    // A second init does not overwrite the team's file.
    let again = parley(
        &["catalog", "init", "--schema", "shop", "--out", path],
        &db.url,
    );
    assert!(failure(&again, 2).contains("catalog refresh"));

    // The team describes the orders, marks the country personal and adds a metric that plans
    // and one that does not.
    let edited = draft
        .replace(
            "name = \"shop.orders\"\n",
            "name = \"shop.orders\"\n# Written by the team.\ndescription = \"One sale.\"\n",
        )
        .replace("name = \"country\"\n", "name = \"country\"\npii = true\n")
        + "\n[[metric]]\nname = \"revenue\"\ntable = \"shop.orders\"\nsql = \"sum(total)\"\n\
           \n[[metric]]\nname = \"margin\"\ntable = \"shop.orders\"\nsql = \"sum(cost)\"\n";
    std::fs::write(&file, edited).unwrap();
    let client = db.client().await;
    client
        .batch_execute("ALTER TABLE shop.orders ADD COLUMN shipped date; DROP TABLE shop.staff")
        .await
        .unwrap();

    stdout_of(&parley(&["catalog", "refresh", path], &db.url));
    let refreshed = std::fs::read_to_string(&file).unwrap();
    assert!(refreshed.contains("# Written by the team.\ndescription = \"One sale.\""));
    assert!(refreshed.contains("name = \"shipped\""), "{refreshed}");
    assert!(
        !refreshed.contains("shop.staff"),
        "nobody wrote about it: {refreshed}"
    );
    assert!(
        !refreshed.contains("Brazil"),
        "a personal column is not sampled: {refreshed}"
    );

    let check = parley(&["catalog", "check", path], &db.url);
    let out = String::from_utf8_lossy(&check.stdout).into_owned();
    assert_eq!(check.status.code(), Some(1), "{out}");
    assert!(
        out.contains("metric margin: does not plan: column \"cost\" does not exist"),
        "{out}"
    );
    assert!(!out.contains("metric revenue"), "{out}");
}

#[tokio::test]
async fn a_draft_made_as_the_reader_role_shows_only_what_it_can_read() {
    let (db, dir) = shop().await;
    let file = dir.path().join("catalog.toml");
    let path = file.to_str().unwrap();
    db.client()
        .await
        .batch_execute(
            // Roles are the server's, not the database's: made once, granted here.
            "DO $$ BEGIN CREATE ROLE catalog_test_reader LOGIN; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
             GRANT USAGE ON SCHEMA shop TO catalog_test_reader; \
             GRANT SELECT ON shop.orders TO catalog_test_reader; \
             GRANT SELECT (customer_id, country) ON shop.customer TO catalog_test_reader",
        )
        .await
        .unwrap();
    let url = db.url.replacen("postgres@", "catalog_test_reader@", 1);
    stdout_of(&parley(
        &["catalog", "init", "--schema", "shop", "--out", path],
        &url,
    ));
    let draft = std::fs::read_to_string(&file).unwrap();
    assert!(!draft.contains("shop.staff"), "{draft}");
    assert!(draft.contains("name = \"country\""), "{draft}");
    for hidden in ["\"name\"", "\"email\"", "\"joined\""] {
        assert!(
            !draft.contains(&format!("name = {hidden}")),
            "{hidden}: {draft}"
        );
    }
}

/// The shop with a customer whose name has accents, readable by the mcp function's role (for
/// the verified query), and two readers: `parley_sql_reader` reads the customers and their
/// orders; `catalog_test_narrow` only two columns of the customers.
async fn served_shop() -> (TestDb, tempfile::TempDir, String) {
    let (db, dir) = shop().await;
    mcp::scripts_dev_login(&db).await;
    db.client()
        .await
        .batch_execute(
            "INSERT INTO shop.customer VALUES (31, 'Luís Gonçalves', 'luis@example.com', \
                                               'Brazil', NULL); \
             GRANT USAGE ON SCHEMA shop TO parley_readonly, parley_sql_reader; \
             GRANT SELECT ON shop.customer, shop.orders TO parley_readonly, parley_sql_reader; \
             DO $$ BEGIN CREATE ROLE catalog_test_narrow NOLOGIN; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
             GRANT USAGE ON SCHEMA shop TO catalog_test_narrow; \
             GRANT SELECT (customer_id, country) ON shop.customer TO catalog_test_narrow",
        )
        .await
        .unwrap();
    let file = dir.path().join("catalog.toml");
    let path = file.to_str().unwrap().to_owned();
    stdout_of(&parley(
        &["catalog", "init", "--schema", "shop", "--out", &path],
        &db.url,
    ));
    // The team marks the e-mail personal and adds a verified query and a rule.
    let draft = std::fs::read_to_string(&file).unwrap();
    let edited = draft.replace("name = \"email\"\n", "name = \"email\"\npii = true\n")
        + "\n[[verified_query]]\nname = \"orders_by_country\"\n\
           questions = [\"How many orders came from each country?\"]\n\
           description = \"Orders and their value per customer country.\"\n\
           sql = \"SELECT c.country, count(*) AS orders, sum(o.total) AS value \
                   FROM shop.orders o JOIN shop.customer c USING (customer_id) \
                   WHERE :country::text IS NULL OR c.country = :country \
                   GROUP BY c.country ORDER BY c.country\"\n\
           [verified_query.params.country]\ntype = \"string\"\n\
           \n[[instruction]]\nname = \"money\"\ntext = \"Order totals are in euros, tax included.\"\n";
    std::fs::write(&file, edited).unwrap();
    let said = stdout_of(&parley(&["catalog", "index", &path], &db.url));
    assert!(said.contains("search index: "), "{said}");
    (db, dir, path)
}

fn tools_file(dir: &tempfile::TempDir, name: &str, catalog: &str, reader: Option<&str>) -> String {
    let path = dir.path().join(name);
    let reader = reader.map_or(String::new(), |r| format!("reader = \"{r}\"\n"));
    std::fs::write(&path, format!("[catalog]\nfile = \"{catalog}\"\n{reader}")).unwrap();
    path.to_str().unwrap().to_owned()
}

fn tables_of(rows: &[serde_json::Value]) -> Vec<String> {
    rows.iter()
        .flat_map(|r| [r["table"].as_str(), r["related_table"].as_str()])
        .flatten()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn search_catalog_and_find_values_answer_under_the_readers_privileges() {
    let (db, dir, catalog) = served_shop().await;
    let tools = tools_file(&dir, "tools.toml", &catalog, None);
    let mcp = Mcp::start(&db, &[tools]).await;

    let rows = mcp
        .rows(
            "ana",
            "search_catalog",
            serde_json::json!({"question": "Which customers placed the largest orders?"}),
        )
        .await;
    let tables = tables_of(&rows);
    assert!(tables.contains(&"shop.orders".to_owned()), "{rows:?}");
    assert!(tables.contains(&"shop.customer".to_owned()), "{rows:?}");
    let join = rows
        .iter()
        .find(|r| r["kind"] == "relationship")
        .unwrap_or_else(|| panic!("the join between the tables found: {rows:?}"));
    assert_eq!(
        join["join"], "shop.orders.customer_id = shop.customer.customer_id",
        "{join}"
    );
    // The reader may not read the staff: nothing of it is described, however it is asked.
    let staff = mcp
        .rows(
            "ana",
            "search_catalog",
            serde_json::json!({"question": "staff salary", "limit": 50}),
        )
        .await;
    assert!(
        !tables_of(&staff).contains(&"shop.staff".to_owned()),
        "{staff:?}"
    );
    let rules = mcp
        .rows(
            "ana",
            "search_catalog",
            serde_json::json!({"question": "what currency are order totals in?"}),
        )
        .await;
    assert!(
        rules
            .iter()
            .any(|r| r["kind"] == "instruction" && r["name"] == "money"),
        "{rules:?}"
    );

    // Loose matching: accents and case; the stored spelling comes back.
    let found = mcp
        .rows(
            "ana",
            "find_values",
            serde_json::json!({"text": "goncalves"}),
        )
        .await;
    assert_eq!(found[0]["table"], "shop.customer", "{found:?}");
    assert_eq!(found[0]["column"], "name", "{found:?}");
    assert_eq!(found[0]["value"], "Luís Gonçalves", "{found:?}");
    // A typo still finds it.
    let typo = mcp
        .rows(
            "ana",
            "find_values",
            serde_json::json!({"text": "Luis Gonsalves"}),
        )
        .await;
    assert_eq!(typo[0]["value"], "Luís Gonçalves", "{typo:?}");
    // A personal column's values are never indexed.
    let email = mcp
        .rows(
            "ana",
            "find_values",
            serde_json::json!({"text": "luis@example.com"}),
        )
        .await;
    assert!(email.iter().all(|r| r["column"] != "email"), "{email:?}");

    // The verified query is a tool of its own, run under the caller's identity.
    let verified = mcp
        .rows(
            "ana",
            "verified_orders_by_country",
            serde_json::json!({"country": "Brazil"}),
        )
        .await;
    assert_eq!(verified.len(), 1, "{verified:?}");
    assert_eq!(verified[0]["country"], "Brazil");

    // A second reader that may read only the customers' id and country.
    let narrow = tools_file(&dir, "narrow.toml", &catalog, Some("catalog_test_narrow"));
    let mcp = Mcp::start(&db, &[narrow]).await;
    let rows = mcp
        .rows(
            "ana",
            "search_catalog",
            serde_json::json!({"question": "customer names and their orders", "limit": 50}),
        )
        .await;
    assert!(!rows.is_empty());
    for row in &rows {
        assert_ne!(row["table"], "shop.orders", "{row}");
        assert_ne!(row["related_table"], "shop.orders", "{row}");
        if row["kind"] == "column" {
            assert!(
                row["column"] == "customer_id" || row["column"] == "country",
                "{row}"
            );
        }
    }
    let none = mcp
        .rows(
            "ana",
            "find_values",
            serde_json::json!({"text": "goncalves"}),
        )
        .await;
    assert!(
        none.is_empty(),
        "the narrow reader cannot read names: {none:?}"
    );
    let country = mcp
        .rows("ana", "find_values", serde_json::json!({"text": "brasil"}))
        .await;
    assert_eq!(country[0]["value"], "Brazil", "{country:?}");
}

#[tokio::test]
async fn eval_catalog_scores_tables_and_values_per_split() {
    let (db, dir, catalog) = served_shop().await;
    let tools = tools_file(&dir, "tools.toml", &catalog, None);
    let questions = dir.path().join("questions.jsonl");
    std::fs::write(
        &questions,
        concat!(
            r#"{"question": "What did Luis Goncalves order?", "tables": ["shop.customer", "shop.orders"], "values": [{"text": "Luis Goncalves", "table": "shop.customer", "column": "name", "value": "Luís Gonçalves"}], "split": "dev"}"#,
            "\n",
            r#"{"question": "How many customers are in each country?", "tables": ["shop.customer"], "split": "held-out"}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = stdout_of(&parley(
        &[
            "eval",
            "catalog",
            "--questions",
            questions.to_str().unwrap(),
            "--tools",
            &tools,
            "--json",
        ],
        &db.url,
    ));
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let groups = &report["groups"];
    assert_eq!(groups["all"]["questions"], 2, "{report}");
    assert_eq!(groups["dev"]["complete@10"], 1.0, "{report}");
    assert_eq!(groups["held-out"]["recall@5"], 1.0, "{report}");
    assert_eq!(groups["dev"]["value_hit@5"], 1.0, "{report}");
    assert_eq!(groups["held-out"]["values"], 0, "{report}");

    let text = stdout_of(&parley(
        &[
            "eval",
            "catalog",
            "--questions",
            questions.to_str().unwrap(),
            "--tools",
            &tools,
        ],
        &db.url,
    ));
    assert!(text.contains("complete@10"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("held-out")), "{text}");

    // A line that is not a question is named by its number.
    std::fs::write(&questions, "{\"question\": \"q\", \"tables\": []}\n").unwrap();
    let bad = parley(
        &[
            "eval",
            "catalog",
            "--questions",
            questions.to_str().unwrap(),
            "--tools",
            &tools,
        ],
        &db.url,
    );
    assert!(failure(&bad, 2).contains("line 1"), "usage error");
}
