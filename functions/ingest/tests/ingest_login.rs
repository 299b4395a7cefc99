//! The ingest function connected as its own login, a member of migration 0025's
//! `parley_ingest_writer` and nothing else, as the template deploys it: every kind of S3 event
//! ingests as it does for the owner, and the login is refused whatever is not ingestion (the
//! chat tables, the audit, DDL).

use std::str::FromStr;
use std::time::Duration;

use parley_core::config::Env;
use parley_ingest_function::Ingest;
use parley_testkit::{Moto, TestDb, connect};
use serde_json::{Value, json};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

const BUCKET: &str = "team-docs";

/// A login in `parley_ingest_writer` made for this test's database (roles are cluster-wide, so
/// its name carries the database's), and its URL.
async fn ingest_login(db: &TestDb) -> (String, String) {
    let user = format!("parley_ingest_{}", &db.name["parley_test_".len()..]);
    db.client()
        .await
        .batch_execute(&format!(
            "CREATE ROLE {user} LOGIN PASSWORD 'ingest-pw' IN ROLE parley_ingest_writer"
        ))
        .await
        .expect("creating the ingest login");
    (user.clone(), url_as(db, &user, "ingest-pw"))
}

/// `db`'s URL with another user.
fn url_as(db: &TestDb, user: &str, password: &str) -> String {
    let config = tokio_postgres::Config::from_str(&db.url).expect("the test URL parses");
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        other => panic!("the test server is reached over TCP, not {other:?}"),
    };
    format!(
        "postgres://{user}:{password}@{host}:{}/{}",
        config.get_ports().first().copied().unwrap_or(5432),
        db.name
    )
}

fn event(key: &str, name: &str, sequencer: &str) -> Value {
    json!({"Records": [{"eventSource": "aws:s3", "eventName": name,
        "s3": {"bucket": {"name": BUCKET}, "object": {"key": key, "sequencer": sequencer}}}]})
}

async fn one<T: for<'a> tokio_postgres::types::FromSql<'a>>(db: &Client, sql: &str) -> T {
    db.query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

#[tokio::test]
async fn every_kind_of_event_is_ingested_as_a_member_of_parley_ingest_writer() {
    let (moto, db) = (Moto::start(), TestDb::migrated().await);
    let objects = moto.versioned_bucket(BUCKET).await;
    let (user, url) = ingest_login(&db).await;
    let env = Env::from_pairs(moto.env()).overlay([
        ("DATABASE_URL", url.clone()),
        (
            "EMBEDDINGS_MODEL_DIR",
            parley_testkit::model_dir().display().to_string(),
        ),
        ("DOCUMENTS_BUCKET", BUCKET.to_owned()),
    ]);
    let ingest = Ingest::start(env).await.expect("starts");
    let handle = |payload| ingest.handle(payload, Duration::from_secs(120));
    let owner = db.client().await;
    let outcome = |answer: Value| answer["records"][0]["outcome"].as_str().unwrap().to_owned();

    // A new collection and its first document: the collection, the claim, the extraction
    // under way, the document with its sections, chunks and postings (the triggers' writes).
    objects
        .put(
            "handbook/leave.md",
            "# Leave\n\nAnnual leave is 25 days.\n\n## Carry-over\n\nFive days carry over.\n",
        )
        .await;
    let added = outcome(
        handle(event("handbook/leave.md", "ObjectCreated:Put", "0A"))
            .await
            .expect("ingested"),
    );
    assert!(added.starts_with("added ("), "{added}");
    // A new version replaces it: the old document deleted (its chunks by cascade, and the
    // trigger that takes their terms off the collection's statistics), the new one stored.
    objects
        .put(
            "handbook/leave.md",
            "# Leave\n\nAnnual leave is 30 days from 2027.\n",
        )
        .await;
    let replaced = outcome(
        handle(event("handbook/leave.md", "ObjectCreated:Put", "0B"))
            .await
            .expect("replaced"),
    );
    assert!(replaced.starts_with("replaced ("), "{replaced}");
    // The collection's settings object: its title and readers (the memberships replaced).
    objects
        .put(
            "handbook/_collection.json",
            r#"{"title": "Staff handbook", "readers": {"groups": ["staff"]}}"#,
        )
        .await;
    let settings = outcome(
        handle(event(
            "handbook/_collection.json",
            "ObjectCreated:Put",
            "0C",
        ))
        .await
        .expect("applied"),
    );
    assert_eq!(settings, "settings applied");
    let (title, readers, chunks, terms): (String, i64, i64, i64) = {
        let row = owner
            .query_one(
                "SELECT c.title, (SELECT count(*) FROM parley.memberships m WHERE m.collection_id = c.id),
                        c.chunk_count,
                        (SELECT count(*) FROM parley.chunk_terms t WHERE t.collection_id = c.id)
                   FROM parley.collections c WHERE c.name = 'handbook'",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2), row.get(3))
    };
    assert_eq!((title.as_str(), readers), ("Staff handbook", 1));
    assert!(chunks > 0 && terms > 0, "{chunks} chunks, {terms} postings");

    // The object deleted: the document goes, and the statistics with it.
    objects.delete("handbook/leave.md").await;
    let deleted = outcome(
        handle(event("handbook/leave.md", "ObjectRemoved:Delete", "0D"))
            .await
            .expect("deleted"),
    );
    assert_eq!(deleted, "deleted");
    let left: (i64, i64, String) = {
        let row = owner
            .query_one(
                "SELECT (SELECT count(*) FROM parley.documents),
                        (SELECT chunk_count FROM parley.collections WHERE name = 'handbook'),
                        (SELECT outcome FROM parley.s3_objects WHERE key = 'handbook/leave.md')",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(left, (0, 0, "deleted".to_owned()));

    // And all of it was done by the login, which owns nothing and inherits no owner's rights.
    let owns: bool = one(
        &owner,
        &format!(
            "SELECT pg_has_role('{user}', (SELECT relowner FROM pg_class WHERE oid = 'parley.chunks'::regclass), 'USAGE')"
        ),
    )
    .await;
    assert!(!owns, "{user} may act as the tables' owner");
    drop(ingest);
    drop_login(&owner, &user).await;
}

/// Roles outlive the test's database (`scripts/test` drops only databases): the login goes
/// once its test passed. It owns nothing and holds no grant but its group, so nothing stops it.
async fn drop_login(owner: &Client, user: &str) {
    owner
        .batch_execute(&format!("DROP ROLE {user}"))
        .await
        .unwrap_or_else(|e| panic!("dropping {user}: {e}"));
}

/// What `sql` fails with, as the login.
async fn refused(login: &Client, sql: &str) -> String {
    let e = login
        .batch_execute(sql)
        .await
        .expect_err(&format!("{sql} was allowed"));
    assert_eq!(
        e.code(),
        Some(&SqlState::INSUFFICIENT_PRIVILEGE),
        "{sql}: {e}"
    );
    parley_core::db::pg_message(&e)
}

#[tokio::test]
async fn the_ingest_group_is_refused_the_chat_tables_the_audit_and_ddl() {
    let db = TestDb::migrated().await;
    let (user, url) = ingest_login(&db).await;
    let login = connect(&url).await;

    let chat = refused(&login, "SELECT count(*) FROM chat.conversations").await;
    assert!(
        chat.starts_with("permission denied for schema chat"),
        "{chat}"
    );
    refused(
        &login,
        "INSERT INTO chat.messages (conversation_id, role, content) VALUES (1, 'user', 'x')",
    )
    .await;
    let audit = refused(&login, "SELECT count(*) FROM parley.audit").await;
    assert!(
        audit.starts_with("permission denied for table audit"),
        "{audit}"
    );
    refused(&login, "SELECT count(*) FROM parley.idempotency").await;
    // Nothing ingestion sends reads a chunk, so the group may not either.
    refused(&login, "SELECT count(*) FROM parley.chunks").await;
    for ddl in [
        "CREATE TABLE parley.scratch (id int)",
        "CREATE TABLE public.scratch (id int)",
        "ALTER TABLE parley.documents ADD COLUMN scratch int",
        "DROP TABLE parley.s3_objects",
        "TRUNCATE parley.documents",
        "CREATE INDEX ON parley.chunks (position)",
        "ALTER TABLE parley.chunks DISABLE ROW LEVEL SECURITY",
        "DROP POLICY ingest ON parley.documents",
        "GRANT SELECT ON parley.audit TO PUBLIC",
        "CREATE FUNCTION parley.scratch() RETURNS int LANGUAGE sql RETURN 1",
    ] {
        refused(&login, ddl).await;
    }
    // The one index ingestion may need, for a model whose vectors are not 384 long, comes
    // through the owner's function, which makes only that index.
    login
        .batch_execute("SELECT parley.ensure_embedding_index(8)")
        .await
        .expect("the index function is the group's");
    let made: bool = one(
        &login,
        "SELECT to_regclass('parley.chunks_embedding_8_idx') IS NOT NULL",
    )
    .await;
    assert!(made);
    let e = login
        .batch_execute("SELECT parley.ensure_embedding_index(4096)")
        .await
        .unwrap_err();
    assert!(
        parley_core::db::pg_message(&e).starts_with("an embedding index is for 1 to 2000"),
        "{e}"
    );
    drop(login);
    drop_login(&db.client().await, &user).await;
}
