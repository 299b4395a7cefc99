//! `parley ingest` and `parley enroll` as a user runs them: the built binary against a fresh
//! migrated database and the real built-in model, checking what it prints, its exit code and
//! the rows it leaves.

mod common;

use std::process::{Command, Output};

use common::{failure, rows, stdout_of};

use parley_testkit::TestDb;

fn parley(args: &[&str], database_url: &str) -> Output {
    common::parley_with_model(args, database_url)
}

/// Writes `body` at `rel` under `dir`, making the directories between.
fn write(dir: &tempfile::TempDir, rel: &str, body: &str) {
    let path = dir.path().join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

fn path(dir: &tempfile::TempDir) -> &str {
    dir.path().to_str().expect("a UTF-8 temp path")
}

#[tokio::test]
async fn ingest_reports_what_it_did_and_a_rerun_only_what_changed() {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir,
        "guide.md",
        "# Guide\n\nHow to start.\n\n## Next\n\nWhat follows.\n",
    );
    write(
        &dir,
        "ref/page.html",
        "<title>Page</title><h1>Page</h1><p>Reference text.</p>",
    );
    write(&dir, "empty.txt", "");
    write(&dir, "picture.png", "not text");

    let first = stdout_of(&parley(
        &[
            "ingest",
            path(&dir),
            "--collection",
            "docs",
            "--title",
            "The docs",
            "--description",
            "Guides and references",
            "--public",
        ],
        &db.url,
    ));
    assert!(first.contains("skipped empty.txt: empty file\n"), "{first}");
    assert!(
        first.contains(
            "docs (all-MiniLM-L6-v2@384): 2 added, 0 replaced, 0 unchanged, 0 deleted, 1 skipped; 3 chunks in "
        ),
        "{first}"
    );
    assert!(
        first
            .trim_end()
            .ends_with("; 1 files of other types ignored"),
        "{first}"
    );
    assert_eq!(
        rows(
            &db,
            "SELECT concat_ws('|', title, description, public) FROM parley.collections"
        )
        .await,
        ["The docs|Guides and references|t"]
    );
    assert_eq!(
        rows(
            &db,
            "SELECT uri || ':' || array_to_string(path, '/') FROM parley.documents ORDER BY uri"
        )
        .await,
        ["guide.md:", "ref/page.html:ref"]
    );

    std::fs::remove_file(dir.path().join("guide.md")).unwrap();
    let again = stdout_of(&parley(
        &["ingest", path(&dir), "--collection", "docs", "--prune"],
        &db.url,
    ));
    assert!(
        again.contains("0 added, 0 replaced, 1 unchanged, 1 deleted, 1 skipped; 0 chunks in"),
        "{again}"
    );
    // Options not given leave the collection's as they were.
    assert_eq!(
        rows(
            &db,
            "SELECT concat_ws('|', title, public) FROM parley.collections"
        )
        .await,
        ["The docs|t"]
    );
    assert_eq!(
        rows(&db, "SELECT uri FROM parley.documents").await,
        ["ref/page.html"]
    );
}

#[tokio::test]
async fn meta_and_front_matter_become_metadata_and_a_change_of_meta_alone_is_not_re_embedded() {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir,
        "policy.md",
        "---\ndepartment: hr\nyear: 2024\n---\n# Leave\n\nTwo days a month.\n",
    );
    write(&dir, "notes.txt", "Plain notes.\n");
    let ingest = |meta: &[&str]| {
        let mut args = vec!["ingest", path(&dir), "--collection", "docs"];
        for m in meta {
            args.extend(["--meta", m]);
        }
        stdout_of(&parley(&args, &db.url))
    };
    let metadata = || {
        rows(
            &db,
            "SELECT uri || ' ' || metadata::text FROM parley.documents ORDER BY uri",
        )
    };
    let first = ingest(&["department=all", "reviewed=true", "year=2020"]);
    assert!(first.contains("2 added"), "{first}");
    // The file's front matter wins over --meta on a shared key.
    assert_eq!(
        metadata().await,
        [
            r#"notes.txt {"year": 2020, "reviewed": true, "department": "all"}"#,
            r#"policy.md {"year": 2024, "reviewed": true, "department": "hr"}"#,
        ]
    );
    let chunks = || {
        rows(
            &db,
            "SELECT string_agg(id::text, ',' ORDER BY id) FROM parley.chunks",
        )
    };
    let before = chunks().await;

    let second = ingest(&["reviewed=false"]);
    assert!(
        second.contains("0 added, 0 replaced, 2 unchanged"),
        "{second}"
    );
    assert_eq!(
        metadata().await,
        [
            r#"notes.txt {"reviewed": false}"#,
            r#"policy.md {"year": 2024, "reviewed": false, "department": "hr"}"#,
        ]
    );
    assert_eq!(
        chunks().await,
        before,
        "the same chunks, not embedded again"
    );
}

/// Files built to break a run (nesting that overflowed the stack or ran for minutes, a named
/// pipe that blocked the read) are each listed with why; the rest are stored and the run
/// exits 0, warning on stderr.
#[tokio::test]
async fn hostile_files_are_listed_with_why_the_rest_are_stored_and_the_run_exits_0() {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    let nested = |n: usize| format!("{}<p>deep</p>{}", "<div>".repeat(n), "</div>".repeat(n));
    write(&dir, "deep.html", &nested(6_000));
    write(&dir, "deeper.html", &nested(200_000));
    write(&dir, "good.md", "# Good\n\nFine.\n");
    let fifo = dir.path().join("pipe.md");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());

    let out = parley(
        &[
            "ingest",
            path(&dir),
            fifo.to_str().unwrap(),
            "--collection",
            "docs",
        ],
        &db.url,
    );
    let stdout = stdout_of(&out);
    for line in [
        "skipped deep.html: HTML nested deeper than the limit of 512 elements\n",
        "skipped deeper.html: HTML nested deeper than the limit of 512 elements\n",
        "skipped pipe.md: not a regular file (a named pipe); only regular files are read\n",
        "docs (all-MiniLM-L6-v2@384): 1 added, 0 replaced, 0 unchanged, 0 deleted, 3 skipped;",
    ] {
        assert!(stdout.contains(line), "{line} not in {stdout}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "warning: 3 of 4 files skipped (listed above with why); the others were ingested"
        ),
        "{stderr}"
    );
    assert_eq!(
        rows(&db, "SELECT uri FROM parley.documents").await,
        ["good.md"]
    );
}

#[tokio::test]
async fn enroll_adds_and_removes_members_and_names_a_missing_collection() {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    write(&dir, "a.md", "# A\n\nText.\n");
    stdout_of(&parley(
        &["ingest", path(&dir), "--collection", "course-1"],
        &db.url,
    ));

    let added = stdout_of(&parley(
        &[
            "enroll",
            "--collection",
            "course-1",
            "--user",
            "student-1",
            "--group",
            "staff",
            "--user",
            "student-2",
        ],
        &db.url,
    ));
    assert_eq!(added.trim(), "course-1: 3 added, 0 were already members");
    let removed = stdout_of(&parley(
        &[
            "enroll",
            "--collection",
            "course-1",
            "--user",
            "student-2",
            "--user",
            "nobody",
            "--remove",
        ],
        &db.url,
    ));
    assert_eq!(removed.trim(), "course-1: 1 removed, 1 were not members");
    assert_eq!(
        rows(
            &db,
            "SELECT kind || ':' || principal FROM parley.memberships ORDER BY 1"
        )
        .await,
        ["group:staff", "user:student-1"]
    );

    let missing = parley(&["enroll", "--collection", "nope", "--user", "x"], &db.url);
    assert!(failure(&missing, 1).contains("nope: no collection by that name"));
}

/// Usage mistakes exit 2 before connecting (nothing listens on the URL's port).
#[test]
fn usage_mistakes_exit_2_with_the_reason() {
    let nowhere = "postgres://u@127.0.0.1:9/none";
    let dir = tempfile::tempdir().unwrap();
    write(&dir, "a.md", "# A\n");

    let bad_name = parley(&["ingest", path(&dir), "--collection", "Bad Name"], nowhere);
    assert!(failure(&bad_name, 2).contains("is not a collection name"));

    let missing = parley(&["ingest", "/no/such/dir", "--collection", "docs"], nowhere);
    assert!(failure(&missing, 2).contains("/no/such/dir: no such file or directory"));

    let no_paths = parley(&["ingest", "--collection", "docs"], nowhere);
    assert!(failure(&no_paths, 2).contains("<PATH>"));

    let bad_meta = parley(
        &[
            "ingest",
            path(&dir),
            "--collection",
            "docs",
            "--meta",
            "my key=x",
        ],
        nowhere,
    );
    let stderr = failure(&bad_meta, 2);
    assert!(
        stderr.contains("--meta key `my key` must be 1-64 characters"),
        "{stderr}"
    );
    let not_a_pair = parley(
        &["ingest", path(&dir), "--collection", "docs", "--meta", "hr"],
        nowhere,
    );
    assert!(failure(&not_a_pair, 2).contains("--meta `hr` is not key=value"));

    let no_members = parley(&["enroll", "--collection", "docs"], nowhere);
    assert!(failure(&no_members, 2).contains("--user"));

    let mut bad_setting = Command::new(env!("CARGO_BIN_EXE_parley"));
    bad_setting
        .args(["ingest", path(&dir), "--collection", "docs"])
        .env_clear()
        .env("DATABASE_URL", nowhere)
        .env("EMBEDDINGS", "magic");
    let out = bad_setting.output().expect("parley runs");
    assert!(failure(&out, 2).contains("invalid setting EMBEDDINGS"));
}
