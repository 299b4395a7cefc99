//! `parley catalog init`, `refresh` and `check` against a real Postgres: a draft from bare
//! tables, a refresh that keeps what a person wrote and drops samples of columns marked
//! personal, a check that names what no longer fits, and a reader role that is not shown
//! what it cannot read.

mod common;

use common::{failure, stdout_of};
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
