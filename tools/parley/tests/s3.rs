//! `parley ingest s3://...`, `parley sync s3://...` and `parley catalog index s3://...` as a
//! user (or the admin function, on its schedule) runs them: the built binary against moto's S3
//! (a versioned bucket) and a fresh migrated database with the real built-in model, checking
//! what it prints, its exit code and the rows it leaves.

mod common;

use std::process::{Command, Output};

use common::{failure, rows, stdout_of};
use parley_testkit::{Moto, TestDb};

fn parley(args: &[&str], db: &TestDb, moto: &Moto) -> Output {
    Command::new(env!("CARGO_BIN_EXE_parley"))
        .args(args)
        .env_clear()
        .env("DATABASE_URL", &db.url)
        .env("EMBEDDINGS_MODEL_DIR", parley_testkit::model_dir())
        .envs(moto.env())
        .output()
        .expect("parley runs")
}

#[tokio::test]
async fn ingest_loads_each_folder_into_its_collection_and_sync_removes_what_is_gone() {
    let (db, moto) = (TestDb::migrated().await, Moto::start());
    let bucket = moto.versioned_bucket("team-docs").await;
    bucket
        .put("hr/leave.md", "# Leave\n\nTwenty-five days a year.\n")
        .await;
    bucket
        .put("hr/pay.txt", "Pay day is the last Friday.\n")
        .await;
    bucket
        .put(
            "hr/_collection.json",
            r#"{"title": "HR policies", "readers": {"groups": ["hr"]}}"#,
        )
        .await;
    bucket.put("hr/broken.docx", "not a zip").await;
    bucket
        .put("it/vpn.md", "# VPN\n\nUse it from home.\n")
        .await;
    bucket.put("readme.md", "# Where things go\n").await;

    let first = stdout_of(&parley(&["ingest", "s3://team-docs/"], &db, &moto));
    assert!(
        first.contains(
            "refused s3://team-docs/readme.md: the key is not under a collection's folder"
        ),
        "{first}"
    );
    assert!(first.contains("skipped hr/broken.docx: "), "{first}");
    assert!(
        first.contains(
            "hr (all-MiniLM-L6-v2@384): 2 added, 0 replaced, 0 unchanged, 0 deleted, 1 skipped;"
        ),
        "{first}"
    );
    assert!(
        first.contains("it (all-MiniLM-L6-v2@384): 1 added,"),
        "{first}"
    );
    assert!(
        first.contains("s3://team-docs/: 2 collections, 1 settings objects applied"),
        "{first}"
    );
    assert_eq!(
        rows(&db, "SELECT c.name || ':' || d.uri FROM parley.documents d JOIN parley.collections c ON c.id = d.collection_id ORDER BY 1").await,
        ["hr:leave.md", "hr:pay.txt", "it:vpn.md"]
    );
    assert_eq!(
        rows(&db, "SELECT title || ':' || m.principal FROM parley.collections c JOIN parley.memberships m ON m.collection_id = c.id").await,
        ["HR policies:hr"]
    );

    // A deletion whose event was lost: ingest alone keeps the document, sync removes it, and
    // only under its prefix.
    bucket.delete("hr/pay.txt").await;
    bucket.delete("it/vpn.md").await;
    let again = stdout_of(&parley(&["ingest", "s3://team-docs/hr/"], &db, &moto));
    assert!(
        again.contains(
            "hr (all-MiniLM-L6-v2@384): 0 added, 0 replaced, 1 unchanged, 0 deleted, 1 skipped"
        ),
        "{again}"
    );
    let synced = stdout_of(&parley(&["sync", "s3://team-docs/hr/"], &db, &moto));
    assert!(
        synced.contains(
            "hr (all-MiniLM-L6-v2@384): 0 added, 0 replaced, 1 unchanged, 1 deleted, 1 skipped"
        ),
        "{synced}"
    );
    assert_eq!(
        rows(&db, "SELECT c.name || ':' || d.uri FROM parley.documents d JOIN parley.collections c ON c.id = d.collection_id ORDER BY 1").await,
        ["hr:leave.md", "it:vpn.md"]
    );
}

#[tokio::test]
async fn s3_urls_refuse_local_only_options_and_bad_bucket_names() {
    let (db, moto) = (TestDb::migrated().await, Moto::start());
    let err = failure(
        &parley(
            &["ingest", "s3://team-docs/hr/", "--collection", "hr"],
            &db,
            &moto,
        ),
        2,
    );
    assert!(err.contains("--collection is for local files"), "{err}");
    let err = failure(
        &parley(&["ingest", "s3://team-docs/hr/", "./docs"], &db, &moto),
        2,
    );
    assert!(err.contains("not both"), "{err}");
    let err = failure(&parley(&["sync", "s3://Team_Docs/"], &db, &moto), 2);
    assert!(err.contains("not an S3 bucket name"), "{err}");
    let err = failure(&parley(&["sync"], &db, &moto), 2);
    assert!(err.contains("name the prefix to sync"), "{err}");
    let err = failure(&parley(&["ingest", "./docs"], &db, &moto), 2);
    assert!(
        err.contains("--collection NAME is required for local files"),
        "{err}"
    );
}

/// A catalog file as a team keeps it next to its tools file: one described table whose
/// `country` values are indexed for `find_values`.
const SHOP_CATALOG: &str = r#"schemas = ["shop"]

[[table]]
name = "shop.customer"
description = "People who bought something from the shop."
db = { kind = "table", rows = 3, primary_key = ["customer_id"] }

[[table.column]]
name = "customer_id"
db = { type = "integer", nullable = false }

[[table.column]]
name = "country"
synonyms = ["nation"]
db = { type = "text", nullable = true, values = ["Brazil", "Canada", "France"] }
"#;

#[tokio::test]
async fn catalog_index_reads_the_catalog_file_from_s3_and_a_missing_one_names_the_fix() {
    let (db, moto) = (TestDb::migrated().await, Moto::start());
    db.client()
        .await
        .batch_execute(
            "CREATE SCHEMA shop; \
             CREATE TABLE shop.customer (customer_id int PRIMARY KEY, country text); \
             INSERT INTO shop.customer VALUES (1, 'Brazil'), (2, 'Canada'), (3, 'France')",
        )
        .await
        .unwrap();
    let bucket = moto.versioned_bucket("team-config").await;
    bucket.put("parley/catalog.toml", SHOP_CATALOG).await;

    let said = stdout_of(&parley(
        &["catalog", "index", "s3://team-config/parley/catalog.toml"],
        &db,
        &moto,
    ));
    assert!(
        said.contains("search index: 3 entries, 3 values of 1 text columns"),
        "{said}"
    );
    assert_eq!(
        rows(
            &db,
            "SELECT kind || ':' || name FROM parley.catalog_entries ORDER BY id"
        )
        .await,
        [
            "table:shop.customer",
            "column:shop.customer.customer_id",
            "column:shop.customer.country"
        ]
    );
    assert_eq!(
        rows(
            &db,
            "SELECT value FROM parley.catalog_values ORDER BY value"
        )
        .await,
        ["Brazil", "Canada", "France"]
    );

    // A key that is not there, a bucket that is not there: each says what to do, and the index
    // stays as it was.
    let missing = failure(
        &parley(
            &["catalog", "index", "s3://team-config/parley/catalogue.toml"],
            &db,
            &moto,
        ),
        1,
    );
    assert!(
        missing.starts_with("error: s3://team-config/parley/catalogue.toml: S3 has no such key"),
        "{missing}"
    );
    assert!(
        missing.contains(
            "upload the catalog file (`aws s3 cp catalog.toml \
             s3://team-config/parley/catalogue.toml`) or correct the key (the template's \
             CatalogFileS3Uri)"
        ),
        "{missing}"
    );
    let no_bucket = failure(
        &parley(
            &["catalog", "index", "s3://team-konfig/parley/catalog.toml"],
            &db,
            &moto,
        ),
        1,
    );
    assert!(
        no_bucket.contains("S3 has no bucket `team-konfig`"),
        "{no_bucket}"
    );
    assert_eq!(
        rows(&db, "SELECT count(*)::text FROM parley.catalog_entries").await,
        ["3"]
    );

    // A URI that names no object is refused before anything is read.
    let shapeless = failure(
        &parley(
            &["catalog", "index", "s3://team-config/parley/"],
            &db,
            &moto,
        ),
        2,
    );
    assert!(shapeless.contains("s3://<bucket>/<key>"), "{shapeless}");
}
