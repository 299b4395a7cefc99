//! The manual loader against a real database: a slice loads into the eight collections with
//! the demo enrollments, a rerun changes nothing, and a missing manual is refused before
//! anything is written. Needs the manual (`apt-get install postgresql-doc-15`) and the model
//! (`scripts/model install`).

use parley_cli::demo::{DemoError, DemoOptions, Domain, load};
use parley_testkit::TestDb;
use parley_testkit::domains::documents::{ENROLLMENTS, ManualOptions};

fn documents(manual: ManualOptions) -> DemoOptions {
    DemoOptions {
        domains: vec![Domain::Documents],
        manual,
        embedder: Some(parley_testkit::embeddings::embedder()),
        ..DemoOptions::default()
    }
}

fn slice(pages_per_part: usize) -> ManualOptions {
    ManualOptions {
        pages_per_part: Some(pages_per_part),
        ..ManualOptions::default()
    }
}

#[tokio::test]
async fn a_slice_loads_every_part_with_its_enrollments_and_a_rerun_changes_nothing() {
    let db = TestDb::with_documents(1).await;
    let client = db.client().await;
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM parley.collections),
                    (SELECT count(*) FROM parley.documents),
                    (SELECT count(*) FROM parley.memberships),
                    (SELECT title FROM parley.collections WHERE name = 'pg-sql'),
                    (SELECT path FROM parley.documents WHERE uri = 'sql.html')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 8);
    assert_eq!(row.get::<_, i64>(1), 8, "one page a part");
    let memberships: usize = ENROLLMENTS.iter().map(|(_, courses)| courses.len()).sum();
    assert_eq!(row.get::<_, i64>(2), memberships as i64);
    assert_eq!(
        row.get::<_, String>(3),
        "PostgreSQL manual: The SQL Language"
    );
    assert_eq!(row.get::<_, Vec<String>>(4), Vec::<String>::new());

    let again = load(&mut db.client().await, &documents(slice(1)))
        .await
        .expect("reload")
        .documents
        .expect("documents loaded");
    let total = again.total();
    assert_eq!((total.added, total.unchanged, total.chunks), (0, 8, 0));
    assert_eq!(again.enrolled, 0);
}

#[tokio::test]
async fn a_missing_manual_is_refused_before_anything_is_loaded() {
    let db = TestDb::migrated().await;
    let mut options = documents(ManualOptions {
        dir: "/nonexistent/postgresql-doc".into(),
        ..ManualOptions::default()
    });
    options.domains = Domain::ALL.to_vec();
    let err = load(&mut db.client().await, &options).await.unwrap_err();
    assert!(matches!(err, DemoError::Documents(_)), "{err}");
    assert!(
        err.to_string()
            .contains("apt-get install postgresql-doc-15"),
        "{err}"
    );
    let loaded: bool = db
        .client()
        .await
        .query_one("SELECT to_regclass('public.lads') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!loaded, "the feedback domain was loaded before the refusal");
}
