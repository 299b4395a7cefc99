//! Ingestion from S3 against a real S3 API (moto's server, a versioned bucket) and a real,
//! migrated Postgres with the built-in model: events applied one key at a time, repeated and
//! out of order; refusals; a collection's settings object; a sync after lost events.

use parley_core::config::Env;
use parley_ingest::IngestOptions;
use parley_ingest::s3::{Bucket, ObjectEvent, Outcome, S3Url, apply_event, sync};
use parley_testkit::{Moto, MotoBucket, TestDb};

const BUCKET: &str = "team-docs";

/// moto with a versioned bucket, and the client ingestion reads it with.
struct S3 {
    _moto: Moto,
    objects: MotoBucket,
    bucket: Bucket,
}

impl S3 {
    async fn start() -> S3 {
        let moto = Moto::start();
        let objects = moto.versioned_bucket(BUCKET).await;
        let bucket = Bucket::from_env(&Env::from_pairs(moto.env())).await;
        S3 {
            _moto: moto,
            objects,
            bucket,
        }
    }

    async fn put(&self, key: &str, body: impl Into<Vec<u8>>) {
        self.objects.put(key, body).await
    }

    async fn delete(&self, key: &str) {
        self.objects.delete(key).await
    }

    /// `sync` of `url` with pruning, as `parley sync` runs it.
    async fn sync(&self, db: &TestDb, url: &str) -> parley_ingest::s3::SyncSummary {
        let url = S3Url::parse(url).unwrap().unwrap();
        let embedder = parley_testkit::embeddings::embedder();
        let options = IngestOptions::default();
        sync(
            &mut db.client().await,
            &embedder,
            &self.bucket,
            &url,
            &options,
            true,
        )
        .await
        .unwrap()
    }

    async fn apply(&self, db: &TestDb, key: &str, sequencer: &str) -> Result<Outcome, String> {
        self.apply_with(db, key, sequencer, &IngestOptions::default())
            .await
    }

    async fn apply_with(
        &self,
        db: &TestDb,
        key: &str,
        sequencer: &str,
        options: &IngestOptions,
    ) -> Result<Outcome, String> {
        let mut client = db.client().await;
        let event = ObjectEvent {
            bucket: BUCKET.into(),
            key: key.into(),
            sequencer: Some(sequencer.into()),
            version_id: None,
            name: "ObjectCreated:Put".into(),
        };
        let embedder = parley_testkit::embeddings::embedder();
        apply_event(&mut client, &embedder, &self.bucket, &event, options)
            .await
            .map_err(|e| format!("{}{e}", if e.is_permanent() { "permanent: " } else { "" }))
    }
}

/// The document's chunk texts in order, or `None` when it is not stored.
async fn chunks(db: &TestDb, collection: &str, uri: &str) -> Option<Vec<String>> {
    let client = db.client().await;
    let doc = client
        .query_opt(
            "SELECT d.id FROM parley.documents d JOIN parley.collections c ON c.id = d.collection_id
              WHERE c.name = $1 AND d.uri = $2",
            &[&collection, &uri],
        )
        .await
        .unwrap()?;
    let id: i64 = doc.get(0);
    let rows = client
        .query(
            "SELECT text FROM parley.chunks WHERE document_id = $1 ORDER BY section, position",
            &[&id],
        )
        .await
        .unwrap();
    Some(rows.into_iter().map(|r| r.get(0)).collect())
}

async fn chunk_count(db: &TestDb) -> i64 {
    db.client()
        .await
        .query_one("SELECT count(*) FROM parley.chunks", &[])
        .await
        .unwrap()
        .get(0)
}

const V1: &str = "# Leave\n\nStaff take twenty days of annual leave.\n";
const V2: &str = "# Leave\n\nStaff take twenty-five days of annual leave, and carry five over.\n";

#[tokio::test]
async fn an_object_becomes_a_document_of_its_folders_collection_and_its_deletion_removes_it() {
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    s3.put("hr/policies/leave.md", V1).await;

    let outcome = s3.apply(&db, "hr/policies/leave.md", "0100").await.unwrap();
    assert!(
        matches!(
            outcome,
            Outcome::Stored {
                replaced: false,
                chunks: 1
            }
        ),
        "{outcome:?}"
    );
    let texts = chunks(&db, "hr", "policies/leave.md")
        .await
        .expect("stored");
    assert!(texts[0].contains("twenty days"), "{texts:?}");
    let source: String = db
        .client()
        .await
        .query_one("SELECT metadata->>'source' FROM parley.documents", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(source, "s3://team-docs/hr/policies/leave.md");

    s3.delete("hr/policies/leave.md").await;
    let outcome = s3.apply(&db, "hr/policies/leave.md", "0200").await.unwrap();
    assert_eq!(outcome, Outcome::Deleted { existed: true });
    assert_eq!(chunks(&db, "hr", "policies/leave.md").await, None);
    assert_eq!(chunk_count(&db).await, 0);
}

#[tokio::test]
async fn repeated_and_out_of_order_events_leave_the_newest_content_once() {
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    s3.put("hr/leave.md", V1).await;
    s3.put("hr/leave.md", V2).await;

    // The overwrite's event arrives first, then the create's, then the overwrite's again.
    let first = s3.apply(&db, "hr/leave.md", "0200").await.unwrap();
    assert!(matches!(first, Outcome::Stored { .. }), "{first:?}");
    assert_eq!(
        s3.apply(&db, "hr/leave.md", "0100").await.unwrap(),
        Outcome::Stale
    );
    assert_eq!(
        s3.apply(&db, "hr/leave.md", "0200").await.unwrap(),
        Outcome::Stale
    );
    let texts = chunks(&db, "hr", "leave.md").await.unwrap();
    assert!(texts.iter().any(|t| t.contains("twenty-five")), "{texts:?}");
    assert_eq!(chunk_count(&db).await, texts.len() as i64, "no chunk twice");

    // The create's event handled first reads what the bucket holds now (the overwrite), and the
    // overwrite's event then finds it stored.
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    s3.put("hr/leave.md", V1).await;
    s3.put("hr/leave.md", V2).await;
    assert!(matches!(
        s3.apply(&db, "hr/leave.md", "01").await.unwrap(),
        Outcome::Stored { .. }
    ));
    assert_eq!(
        s3.apply(&db, "hr/leave.md", "02").await.unwrap(),
        Outcome::Unchanged
    );
    let texts = chunks(&db, "hr", "leave.md").await.unwrap();
    assert!(texts.iter().any(|t| t.contains("twenty-five")), "{texts:?}");
    assert_eq!(chunk_count(&db).await, texts.len() as i64);
}

#[tokio::test]
async fn a_late_create_event_after_a_delete_does_not_bring_the_document_back() {
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    s3.put("hr/leave.md", V1).await;
    s3.apply(&db, "hr/leave.md", "0100").await.unwrap();
    s3.delete("hr/leave.md").await;
    assert_eq!(
        s3.apply(&db, "hr/leave.md", "0300").await.unwrap(),
        Outcome::Deleted { existed: true }
    );
    // An overwrite's event delayed past the delete's.
    assert_eq!(
        s3.apply(&db, "hr/leave.md", "0200").await.unwrap(),
        Outcome::Stale
    );
    assert_eq!(chunks(&db, "hr", "leave.md").await, None);
}

#[tokio::test]
async fn a_write_loses_to_a_later_read_recorded_first() {
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    s3.put("hr/leave.md", V1).await;
    s3.apply(&db, "hr/leave.md", "0100").await.unwrap();
    // Another instance read the object after this one will, and recorded it first.
    db.client()
        .await
        .execute(
            "UPDATE parley.s3_objects SET fetched_at = now() + interval '1 hour'",
            &[],
        )
        .await
        .unwrap();
    s3.put("hr/leave.md", V2).await;
    assert_eq!(
        s3.apply(&db, "hr/leave.md", "0200").await.unwrap(),
        Outcome::Superseded
    );
    let texts = chunks(&db, "hr", "leave.md").await.unwrap();
    assert!(texts[0].contains("twenty days"), "unchanged: {texts:?}");
}

#[tokio::test]
async fn a_corrupt_file_is_refused_for_good_and_does_not_stop_the_next() {
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    s3.put(
        "hr/broken.pdf",
        b"%PDF-1.7\nthis is not a PDF body".to_vec(),
    )
    .await;
    s3.put("hr/leave.md", V1).await;

    let err = s3.apply(&db, "hr/broken.pdf", "0100").await.unwrap_err();
    assert!(
        err.starts_with("permanent: s3://team-docs/hr/broken.pdf:"),
        "{err}"
    );
    assert!(err.to_lowercase().contains("pdf"), "{err}");
    // The same version again (a repeated event with a new sequencer, a sync): not reported twice.
    assert!(matches!(
        s3.apply(&db, "hr/broken.pdf", "0200").await.unwrap(),
        Outcome::AlreadyRefused(_)
    ));
    assert!(matches!(
        s3.apply(&db, "hr/leave.md", "0100").await.unwrap(),
        Outcome::Stored { .. }
    ));
}

#[tokio::test]
async fn keys_outside_a_collection_are_refused_and_other_files_ignored() {
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    s3.put("loose.md", V1).await;
    let err = s3.apply(&db, "loose.md", "01").await.unwrap_err();
    assert!(
        err.starts_with("permanent:") && err.contains("<collection>/<path>"),
        "{err}"
    );
    s3.put("hr/photo.jpg", b"jpeg".to_vec()).await;
    assert!(matches!(
        s3.apply(&db, "hr/photo.jpg", "01").await.unwrap(),
        Outcome::Ignored(_)
    ));
}

#[tokio::test]
async fn an_object_over_the_limit_or_too_slow_to_embed_in_time_is_refused() {
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    s3.put("hr/leave.md", V1).await;
    let small = IngestOptions {
        max_document_bytes: 10,
        ..IngestOptions::default()
    };
    let err = s3
        .apply_with(&db, "hr/leave.md", "01", &small)
        .await
        .unwrap_err();
    assert!(
        err.starts_with("permanent:") && err.contains("larger than the limit of 10 bytes"),
        "{err}"
    );

    let no_time = IngestOptions {
        deadline: Some(std::time::Instant::now()),
        ..IngestOptions::default()
    };
    let err = s3
        .apply_with(&db, "hr/leave.md", "02", &no_time)
        .await
        .unwrap_err();
    assert!(
        err.starts_with("permanent:") && err.contains("would not finish"),
        "{err}"
    );
    assert_eq!(chunks(&db, "hr", "leave.md").await, None);
}

#[tokio::test]
async fn the_settings_object_sets_title_visibility_and_the_whole_list_of_readers() {
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    s3.put(
        "hr/_collection.json",
        r#"{"title": "HR policies", "description": "Leave and pay", "public": false,
            "readers": {"groups": ["hr", "managers"], "users": ["auth0|7"]}}"#,
    )
    .await;
    assert_eq!(
        s3.apply(&db, "hr/_collection.json", "01").await.unwrap(),
        Outcome::Settings
    );
    let client = db.client().await;
    let row = client
        .query_one(
            "SELECT title, description, public FROM parley.collections WHERE name = 'hr'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "HR policies");
    assert_eq!(
        row.get::<_, Option<String>>(1).as_deref(),
        Some("Leave and pay")
    );
    assert!(!row.get::<_, bool>(2));
    let members = |client: tokio_postgres::Client| async move {
        client
            .query(
                "SELECT kind || ':' || principal FROM parley.memberships ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        members(client).await,
        ["group:hr", "group:managers", "user:auth0|7"]
    );

    // A new list replaces the old one; a misspelt key is refused with the keys there are.
    s3.put(
        "hr/_collection.json",
        r#"{"readers": {"groups": ["staff"]}}"#,
    )
    .await;
    assert_eq!(
        s3.apply(&db, "hr/_collection.json", "02").await.unwrap(),
        Outcome::Settings
    );
    assert_eq!(members(db.client().await).await, ["group:staff"]);
    s3.put("hr/_collection.json", r#"{"titel": "x"}"#).await;
    let err = s3
        .apply(&db, "hr/_collection.json", "03")
        .await
        .unwrap_err();
    assert!(
        err.starts_with("permanent:") && err.contains("titel"),
        "{err}"
    );
}

#[tokio::test]
async fn sync_repairs_a_prefix_after_lost_events() {
    let (db, s3) = (TestDb::migrated().await, S3::start().await);
    // Handled: an object later deleted without its event arriving.
    s3.put("hr/old.md", V1).await;
    s3.apply(&db, "hr/old.md", "01").await.unwrap();
    s3.delete("hr/old.md").await;
    // Never handled: objects whose events were lost, and one in another collection.
    s3.put("hr/leave.md", V2).await;
    s3.put("hr/pay.txt", "Pay day is the last Friday of the month.\n")
        .await;
    s3.put("hr/_collection.json", r#"{"title": "HR"}"#).await;
    s3.put("it/vpn.md", "# VPN\n\nUse the VPN from home.\n")
        .await;

    let summary = s3.sync(&db, "s3://team-docs/hr/").await;
    let hr = &summary.collections["hr"];
    assert_eq!(
        (hr.added, hr.deleted, hr.skipped.len()),
        (2, 1, 0),
        "{summary:?}"
    );
    assert_eq!(summary.settings, 1);
    assert!(
        !summary.collections.contains_key("it"),
        "outside the prefix"
    );
    assert_eq!(chunks(&db, "hr", "old.md").await, None);
    assert!(chunks(&db, "hr", "pay.txt").await.is_some());

    // Again: nothing to do, nothing downloaded again.
    let again = s3.sync(&db, "s3://team-docs/hr/").await;
    let hr = &again.collections["hr"];
    assert_eq!(
        (hr.added, hr.replaced, hr.unchanged, hr.deleted),
        (0, 0, 2, 0),
        "{again:?}"
    );
}
