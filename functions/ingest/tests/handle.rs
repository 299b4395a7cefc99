//! The ingest function's handler as Lambda calls it, against moto (S3 and SQS) and a real,
//! migrated Postgres with the built-in model: what an invocation answers, what it refuses into
//! the dead-letter queue, and what fails for Lambda to retry.

use std::time::Duration;

use parley_core::config::Env;
use parley_ingest_function::Ingest;
use parley_testkit::{Moto, TestDb};
use serde_json::{Value, json};

const BUCKET: &str = "team-docs";

struct Setup {
    _moto: Moto,
    _db: TestDb,
    sqs: aws_sdk_sqs::Client,
    queue: String,
    env: Env,
}

async fn setup() -> Setup {
    let (moto, db) = (Moto::start(), TestDb::migrated().await);
    let env = Env::from_pairs(moto.env());
    let sqs =
        aws_sdk_sqs::Client::new(&parley_core::aws::sdk_config(&env, "AWS_ENDPOINT_URL_SQS").await);
    let queue = sqs
        .create_queue()
        .queue_name("dead-letters")
        .send()
        .await
        .expect("creating the queue in moto")
        .queue_url
        .expect("a queue URL");
    let env = env.overlay([
        ("DATABASE_URL", db.url.clone()),
        (
            "EMBEDDINGS_MODEL_DIR",
            parley_testkit::model_dir().display().to_string(),
        ),
        ("INGEST_DLQ_URL", queue.clone()),
        ("DOCUMENTS_BUCKET", BUCKET.to_owned()),
    ]);
    Setup {
        _moto: moto,
        _db: db,
        sqs,
        queue,
        env,
    }
}

fn event(bucket: &str, key: &str) -> Value {
    json!({"Records": [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": bucket}, "object": {"key": key, "sequencer": "0A"}}}]})
}

async fn dead_letters(s: &Setup) -> Vec<Value> {
    let got = s
        .sqs
        .receive_message()
        .queue_url(&s.queue)
        .max_number_of_messages(10)
        .send()
        .await
        .expect("receiving from moto");
    got.messages()
        .iter()
        .map(|m| serde_json::from_str(m.body().unwrap_or("null")).unwrap())
        .collect()
}

#[tokio::test]
async fn an_event_from_another_bucket_is_dead_lettered_and_the_invocation_succeeds() {
    let s = setup().await;
    let ingest = Ingest::start(s.env.clone()).await.expect("starts");
    let answer = ingest
        .handle(
            event("someone-elses", "hr/leave.md"),
            Duration::from_secs(60),
        )
        .await
        .expect("a refusal is not a failure");
    assert_eq!(answer["records"][0]["outcome"], "refused");
    let letters = dead_letters(&s).await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["bucket"], "someone-elses");
    assert_eq!(letters[0]["key"], "hr/leave.md");
    assert_eq!(letters[0]["event"], "ObjectCreated:Put");
    assert!(
        letters[0]["reason"]
            .as_str()
            .unwrap()
            .contains("not the documents bucket (team-docs"),
        "{letters:?}"
    );
}

#[tokio::test]
async fn a_payload_that_is_not_an_s3_event_is_dead_lettered_with_what_it_lacks() {
    let s = setup().await;
    let ingest = Ingest::start(s.env.clone()).await.expect("starts");
    let answer = ingest
        .handle(json!({"hello": "world"}), Duration::from_secs(60))
        .await
        .expect("answered");
    assert_eq!(answer, json!({"records": []}));
    let letters = dead_letters(&s).await;
    assert!(
        letters[0]["reason"]
            .as_str()
            .unwrap()
            .contains("not an S3 event notification"),
        "{letters:?}"
    );
}

#[tokio::test]
async fn without_a_dead_letter_queue_a_refusal_fails_the_invocation() {
    let s = setup().await;
    // Nowhere to report: the invocation fails, so Lambda's own retries and dead-letter queue
    // keep the event rather than it being lost.
    let env = s.env.overlay([("INGEST_DLQ_URL", "")]);
    let ingest = Ingest::start(env).await.expect("starts");
    let err = ingest
        .handle(
            event("someone-elses", "hr/leave.md"),
            Duration::from_secs(60),
        )
        .await
        .expect_err("nowhere to report");
    assert!(err.to_string().contains("no INGEST_DLQ_URL"), "{err}");
    assert!(dead_letters(&s).await.is_empty());
}

#[tokio::test]
async fn a_bad_setting_stops_the_start_naming_it() {
    let s = setup().await;
    let env = s.env.overlay([("INGEST_MAX_OBJECT_BYTES", "lots")]);
    let err = Ingest::start(env).await.err().expect("refused");
    assert!(err.to_string().contains("INGEST_MAX_OBJECT_BYTES"), "{err}");
}

/// A one-page PDF, enough to be a document.
fn small_pdf() -> Vec<u8> {
    use parley_testkit::pdf::{pdf, stream};
    pdf(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>".to_vec(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
        stream("", b"BT /F1 12 Tf 72 720 Td (Quarterly report.) Tj ET"),
    ])
}

#[tokio::test]
async fn an_object_an_invocation_died_extracting_is_dead_lettered_once_instead_of_tried_again() {
    let s = setup().await;
    let objects = s._moto.versioned_bucket(BUCKET).await;
    let key = "hr/report.pdf";
    objects.put(key, small_pdf()).await;
    // What an invocation that died extracting this version (out of memory) leaves behind,
    // five minutes before Lambda's retry: its extraction recorded as under way.
    let dir = std::env::temp_dir().join(format!("parley-handle-{}", std::process::id()));
    let bucket = parley_ingest::s3::Bucket::from_env(&s.env).await;
    let parley_ingest::s3::Fetched::Object(read) = bucket
        .fetch(BUCKET, key, &dir, "report.pdf", 1 << 20)
        .await
        .unwrap()
    else {
        panic!("the object is there");
    };
    std::fs::remove_dir_all(&dir).unwrap();
    s._db
        .client()
        .await
        .execute(
            "INSERT INTO parley.s3_extractions (bucket, key, version_id, etag, started_at)
             VALUES ($1, $2, $3, $4, now() - interval '5 minutes')",
            &[&BUCKET, &key, &read.version_id, &read.etag],
        )
        .await
        .unwrap();

    let ingest = Ingest::start(s.env.clone()).await.expect("starts");
    let answer = ingest
        .handle(event(BUCKET, key), Duration::from_secs(60))
        .await
        .expect("a refusal is not a failure");
    assert_eq!(answer["records"][0]["outcome"], "refused", "{answer}");
    let letters = dead_letters(&s).await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    let reason = letters[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("an extraction of this version begun at ")
            && reason.contains("never finished (the process ran out of memory or time on it)"),
        "{reason}"
    );

    // Another event for the same version: answered from the record, not dead-lettered twice.
    let again = json!({"Records": [{"eventSource": "aws:s3", "eventName": "ObjectCreated:Put",
        "s3": {"bucket": {"name": BUCKET}, "object": {"key": key, "sequencer": "0B"}}}]});
    let answer = ingest.handle(again, Duration::from_secs(60)).await.unwrap();
    let outcome = answer["records"][0]["outcome"].as_str().unwrap();
    assert!(
        outcome.starts_with("already refused: an extraction"),
        "{answer}"
    );
    assert!(dead_letters(&s).await.is_empty());
}
