//! An S3 object that kills the process extracting it (issue 32): the process really dies, out
//! of memory under an address-space limit, while it extracts a PDF with the byte limit taken
//! off; the next attempt at the same version, as Lambda's retry of the event makes it, finds
//! the extraction that never finished and refuses the object instead of dying the same way.
//! The dying process is this test binary again, running [`poison_child`] alone.

mod hostile;

use std::process::Command;

use parley_core::config::Env;
use parley_ingest::s3::{Bucket, ObjectEvent, Outcome, S3Error, apply_event};
use parley_ingest::{ExtractLimits, IngestOptions};
use parley_testkit::{Moto, TestDb};

const BUCKET: &str = "team-docs";
const KEY: &str = "hr/bomb.pdf";

/// Set, with the database's URL, for the child process only.
const CHILD_DB: &str = "PARLEY_POISON_CHILD_DB";

fn event(sequencer: &str) -> ObjectEvent {
    ObjectEvent {
        bucket: BUCKET.into(),
        key: KEY.into(),
        sequencer: Some(sequencer.into()),
        version_id: None,
        name: "ObjectCreated:Put".into(),
    }
}

/// The process that dies: loads the model, then limits its address space to what it uses and
/// 256 MiB more, and extracts a page whose content inflates to 1 GiB, no byte limit set.
/// Not a test of its own: [`a_process_that_dies_extracting_an_object_leaves_it_refused_for_the_retry`]
/// runs it.
#[test]
#[ignore]
fn poison_child() {
    let Ok(db_url) = std::env::var(CHILD_DB) else {
        return;
    };
    let env = Env::from_process();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let embedder = parley_testkit::embeddings::embedder();
        let s3 = Bucket::from_env(&env).await;
        let mut client = parley_testkit::connect(&db_url).await;
        let unlimited = IngestOptions {
            extract: ExtractLimits {
                max_unpacked_bytes: u64::MAX,
                ..ExtractLimits::default()
            },
            ..IngestOptions::default()
        };
        limit_address_space(256 << 20);
        let outcome = apply_event(&mut client, &embedder, &s3, &event("01"), &unlimited).await;
        // Reaching this line means the process survived: the parent fails on the exit code.
        eprintln!("survived: {outcome:?}");
        std::process::exit(3);
    });
}

/// Limits this process's address space to its size now and `more` bytes, with util-linux's
/// `prlimit` (the workspace forbids the `unsafe` a `setrlimit` call needs).
fn limit_address_space(more: u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let vm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let limit = vm_kib * 1024 + more;
    let set = Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--as={limit}"))
        .status()
        .expect("prlimit (util-linux) limits the child's memory");
    assert!(set.success());
}

#[tokio::test]
async fn a_process_that_dies_extracting_an_object_leaves_it_refused_for_the_retry() {
    let (moto, db) = (Moto::start(), TestDb::migrated().await);
    let objects = moto.versioned_bucket(BUCKET).await;
    // A page whose content inflates to 1 GiB of zeros (6.8 MB as stored).
    let bomb = hostile::pdf(&[
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>".to_vec(),
        hostile::stream("/Filter /FlateDecode", &hostile::zlib_zeros(1 << 30)),
    ]);
    objects.put(KEY, bomb).await;

    let child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "poison_child", "--ignored", "--nocapture"])
        .envs(moto.env())
        .env(CHILD_DB, &db.url)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&child.stderr);
    {
        use std::os::unix::process::ExitStatusExt;
        // SIGABRT: what Rust does when an allocation fails.
        assert_eq!(
            child.status.signal(),
            Some(6),
            "the child should die of a failed allocation: {:?}\n{stderr}",
            child.status
        );
    }
    assert!(stderr.contains("memory allocation"), "{stderr}");

    let s3 = Bucket::from_env(&Env::from_pairs(moto.env())).await;
    let embedder = parley_testkit::embeddings::embedder();
    let mut client = db.client().await;
    let unlimited = IngestOptions {
        extract: ExtractLimits {
            max_unpacked_bytes: u64::MAX,
            ..ExtractLimits::default()
        },
        ..IngestOptions::default()
    };
    // At once, the extraction may still be running elsewhere (a duplicate event): left to it,
    // and the invocation fails for Lambda to retry later.
    let err = apply_event(&mut client, &embedder, &s3, &event("01"), &unlimited)
        .await
        .unwrap_err();
    assert!(!err.is_permanent(), "{err}");
    assert!(
        err.to_string()
            .contains("another ingestion began extracting this version"),
        "{err}"
    );

    // Lambda's retry comes a minute or more later: past the extraction time limit, the
    // extraction never finished, and the object is refused for good.
    client
        .execute(
            "UPDATE parley.s3_extractions SET started_at = started_at - interval '1 minute'",
            &[],
        )
        .await
        .unwrap();
    let err = apply_event(&mut client, &embedder, &s3, &event("01"), &unlimited)
        .await
        .unwrap_err();
    assert!(err.is_permanent(), "{err}");
    let S3Error::Refused { reason, .. } = &err else {
        panic!("{err}");
    };
    assert!(
        reason.starts_with("an extraction of this version begun at ")
            && reason.ends_with(
                " never finished (the process ran out of memory or time on it); it is not tried again"
            ),
        "{reason}"
    );
    // Recorded: a later event for the same version is answered without reading it again, and
    // nothing is left under way.
    assert!(matches!(
        apply_event(&mut client, &embedder, &s3, &event("02"), &unlimited)
            .await
            .unwrap(),
        Outcome::AlreadyRefused(_)
    ));
    let left: i64 = client
        .query_one("SELECT count(*) FROM parley.s3_extractions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}
