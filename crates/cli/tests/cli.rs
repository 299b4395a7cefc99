//! The `parley` command as a user runs it: the binary, its exit code and what it prints.

use std::process::{Command, Output};

fn parley(args: &[&str], database_url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_parley"))
        .args(args)
        .env_clear()
        .env("DATABASE_URL", database_url)
        .output()
        .expect("parley runs")
}

/// The shared test server's URL (`eval "$(scripts/pg env)"`), pointed at database `name`.
fn url_for_database(name: &str) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL is set for the tests");
    let mut url = url::Url::parse(&base).expect("DATABASE_URL is a URL");
    url.set_path(&format!("/{name}"));
    url.to_string()
}

#[test]
fn a_missing_database_is_reported_in_postgres_own_words() {
    let name = format!("parley_nope_{}", std::process::id());
    let out = parley(&["migrate"], &url_for_database(&name));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("database \"{name}\" does not exist")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

#[test]
fn demo_data_refuses_zero_feedback_rows() {
    // Refused before connecting: nothing listens on this port.
    let out = parley(
        &["demo-data", "--feedback", "0"],
        "postgres://u@127.0.0.1:9/none",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--feedback"), "{stderr}");
    assert!(
        stderr.contains("would empty the feedback table"),
        "{stderr}"
    );
}
