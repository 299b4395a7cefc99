//! What the test binaries of the `parley` command need to read its runs.

use std::process::Output;

/// The run's standard output, after checking it exited 0 (its stderr in the failure message).
pub fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The run's standard error, after checking it exited with `code`.
pub fn failure(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    stderr
}

/// The first column of each row `sql` returns, as text.
// Not every test binary that shares this module reads rows.
#[allow(dead_code)]
pub async fn rows(db: &parley_testkit::TestDb, sql: &str) -> Vec<String> {
    db.client()
        .await
        .query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// `parley ARGS` on the database at `database_url` with the built-in model and nothing else of
/// the caller's environment.
// Not every test binary that shares this module runs the command this way.
#[allow(dead_code)]
pub fn parley_with_model(args: &[&str], database_url: &str) -> Output {
    command_with_model(args, database_url)
        .output()
        .expect("parley runs")
}

/// [`parley_with_model`] not yet run, for tests that run several at once.
#[allow(dead_code)]
pub fn command_with_model(args: &[&str], database_url: &str) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_parley"));
    command
        .args(args)
        .env_clear()
        .env("DATABASE_URL", database_url)
        .env("EMBEDDINGS_MODEL_DIR", parley_testkit::model_dir());
    command
}

/// `parley ingest` (with the built-in model) of `files`, each `(name, text)`, written to a
/// folder of their own, into `collection` with the `extra` options; fails the test unless the
/// run succeeds.
#[allow(dead_code)]
pub fn ingest_files(database_url: &str, collection: &str, files: &[(&str, &str)], extra: &[&str]) {
    let dir = tempfile::tempdir().expect("a folder");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("a file written");
    }
    let folder = dir.path().to_str().expect("a UTF-8 path");
    let mut args = vec!["ingest", folder, "--collection", collection];
    args.extend(extra);
    stdout_of(&parley_with_model(&args, database_url));
}
