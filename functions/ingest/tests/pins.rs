//! The pin lint over the ingest function's request path (docs/rds-proxy.md): S3 events that
//! add, replace and delete documents, handled as Lambda calls the function, against a private
//! server that logs every statement. Nothing the function sends per event may be a statement
//! RDS Proxy documents as pinning a session.

use std::time::Duration;

use parley_core::config::Env;
use parley_ingest_function::Ingest;
use parley_testkit::pin_lint::StatementLog;
use parley_testkit::{Moto, TestDb};
use serde_json::{Value, json};

const BUCKET: &str = "team-docs";

fn event(name: &str, key: &str, sequencer: &str) -> Value {
    json!({"Records": [{"eventSource": "aws:s3", "eventName": name,
        "s3": {"bucket": {"name": BUCKET}, "object": {"key": key, "sequencer": sequencer}}}]})
}

#[tokio::test]
async fn ingesting_replacing_and_deleting_documents_sends_nothing_a_proxy_pins_on() {
    let log = StatementLog::start();
    let db = TestDb::migrated_on(&log.url()).await;
    let moto = Moto::start();
    let objects = moto.versioned_bucket(BUCKET).await;
    let env = Env::from_pairs(moto.env()).overlay([
        ("DATABASE_URL", db.url.clone()),
        (
            "EMBEDDINGS_MODEL_DIR",
            parley_testkit::model_dir().display().to_string(),
        ),
        ("DOCUMENTS_BUCKET", BUCKET.to_owned()),
    ]);
    let ingest = Ingest::start(env).await.expect("starts");
    let handle = |payload: Value| {
        let ingest = &ingest;
        async move {
            ingest
                .handle(payload, Duration::from_secs(60))
                .await
                .expect("handled")
        }
    };

    objects
        .put(
            "handbook/leave.md",
            "# Leave\n\nAsk your manager two weeks ahead.\n",
        )
        .await;
    handle(event("ObjectCreated:Put", "handbook/leave.md", "0A")).await;
    objects
        .put(
            "handbook/leave.md",
            "# Leave\n\nAsk your manager three weeks ahead.\n",
        )
        .await;
    handle(event("ObjectCreated:Put", "handbook/leave.md", "0B")).await;
    objects.delete("handbook/leave.md").await;
    handle(event("ObjectRemoved:Delete", "handbook/leave.md", "0C")).await;

    let seen = log.statements(&["parley-ingest"]).await;
    assert!(
        seen.iter().any(|s| s.statement.contains("documents")),
        "the log has no statement of the ingest function about documents: the lint would \
         pass by seeing nothing ({} statements)",
        seen.len()
    );
    let findings = log.findings(&["parley-ingest"]).await;
    assert!(
        findings.is_empty(),
        "{} statements would pin an RDS Proxy session:\n{}",
        findings.len(),
        findings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
}
