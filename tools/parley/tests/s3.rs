//! `parley ingest s3://...` and `parley sync s3://...` as a user runs them: the built binary
//! against moto's S3 (a versioned bucket) and a fresh migrated database with the real built-in
//! model, checking what it prints, its exit code and the rows it leaves.

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
