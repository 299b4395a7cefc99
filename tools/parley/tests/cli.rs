//! The `parley` command as a user runs it: the binary, its exit code and what it prints.

mod common;

use std::process::{Command, Output};

use common::{failure, stdout_of};

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
    let stderr = failure(&parley(&["migrate"], &url_for_database(&name)), 1);
    assert!(
        stderr.contains(&format!("database \"{name}\" does not exist")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
}

/// Runs `parley` with arguments it must refuse as a usage error, before connecting (nothing
/// listens on the URL's port), and returns what it printed.
fn usage_error(args: &[&str]) -> String {
    failure(&parley(args, "postgres://u@127.0.0.1:9/none"), 2)
}

#[test]
fn demo_data_refuses_zero_feedback_rows() {
    let stderr = usage_error(&["demo-data", "--feedback", "0"]);
    assert!(stderr.contains("--feedback"), "{stderr}");
    assert!(
        stderr.contains("would empty the feedback table"),
        "{stderr}"
    );
}

/// A fresh, empty database on the shared test server, dropped when the returned guard is.
struct FreshDb {
    name: String,
    url: String,
}

impl FreshDb {
    fn create() -> FreshDb {
        let name = format!(
            "parley_test_cli_{}_{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        admin(&format!("CREATE DATABASE {name}"));
        let url = url_for_database(&name);
        FreshDb { name, url }
    }

    fn query(&self, sql: &str) -> Vec<String> {
        query(&self.url, sql)
    }
}

impl Drop for FreshDb {
    fn drop(&mut self) {
        admin(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ));
    }
}

fn admin(sql: &str) {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL is set for the tests");
    query(&url, sql);
}

/// Runs one statement and returns its rows' first column as text.
fn query(url: &str, sql: &str) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        client
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(row) => {
                    Some(row.get(0).unwrap_or("NULL").to_owned())
                }
                _ => None,
            })
            .collect()
    })
}

#[test]
fn migrate_creates_parleys_schema_and_no_demo_tables() {
    let db = FreshDb::create();
    let out = stdout_of(&parley(&["migrate"], &db.url));
    assert!(out.contains("applied 0001_roles.sql"), "{out}");
    assert_eq!(
        db.query(
            "SELECT concat_ws(',', to_regclass('chat.conversations'), to_regclass('parley.idempotency'), \
             to_regclass('public.lads'), to_regclass('public.tasks'))"
        ),
        ["chat.conversations,parley.idempotency"]
    );
    assert_eq!(
        stdout_of(&parley(&["migrate"], &db.url)).trim(),
        "schema up to date"
    );
}

#[test]
fn demo_data_before_migrate_says_to_migrate_first() {
    let db = FreshDb::create();
    for domain in ["feedback", "tasks"] {
        let out = parley(&["demo-data", "--domain", domain], &db.url);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{domain}: {stderr}");
        assert!(
            stderr.contains("run `parley migrate` before `parley demo-data`"),
            "{stderr}"
        );
    }
    assert_eq!(db.query("SELECT to_regclass('public.lads') IS NULL"), ["t"]);
}

#[test]
fn audit_before_migrate_says_to_migrate_first() {
    let db = FreshDb::create();
    let stderr = failure(&parley(&["audit"], &db.url), 1);
    assert!(
        stderr.contains("this database has no parley.audit table; run `parley migrate` first"),
        "{stderr}"
    );
}

#[test]
fn demo_data_loads_only_the_chosen_domain_and_a_rerun_changes_nothing() {
    let db = FreshDb::create();
    stdout_of(&parley(&["migrate"], &db.url));

    let first = stdout_of(&parley(&["demo-data", "--domain", "tasks"], &db.url));
    assert!(
        first.contains("tasks: 6 added for local-user (6 in all)"),
        "{first}"
    );
    assert!(!first.contains("feedback"), "{first}");
    assert_eq!(db.query("SELECT to_regclass('public.lads') IS NULL"), ["t"]);

    let again = stdout_of(&parley(&["demo-data", "--domain", "tasks"], &db.url));
    assert!(
        again.contains("tasks: 0 added for local-user (6 in all)"),
        "{again}"
    );
}

#[test]
fn demo_data_loads_every_domain_by_default() {
    let db = FreshDb::create();
    stdout_of(&parley(&["migrate"], &db.url));

    let first = stdout_of(&parley(&["demo-data", "--feedback", "50"], &db.url));
    assert!(first.contains("lads: 331 rows (331 changed)"), "{first}");
    assert!(first.contains("feedback: 50 rows in"), "{first}");
    assert!(first.contains("tasks: 6 added"), "{first}");

    let again = stdout_of(&parley(&["demo-data", "--feedback", "50"], &db.url));
    assert!(again.contains("lads: 331 rows (0 changed)"), "{again}");
    assert!(
        again.contains("feedback: 50 rows for seed 2021 already loaded, nothing to do"),
        "{again}"
    );
    assert!(again.contains("tasks: 0 added"), "{again}");
}

#[test]
fn demo_data_refuses_an_unknown_domain_naming_the_known_ones() {
    let stderr = usage_error(&["demo-data", "--domain", "orders"]);
    assert!(
        stderr.contains("feedback") && stderr.contains("tasks"),
        "{stderr}"
    );
}
