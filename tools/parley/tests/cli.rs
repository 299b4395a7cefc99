//! The `parley` command as a user runs it: the binary, its exit code and what it prints.

mod common;

use std::process::{Command, Output, Stdio};

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

/// Behind a transaction-mode pooler with one server connection (PgBouncer, as RDS Proxy or
/// PgBouncer in front of a deployment), two `migrate`s at once apply each migration once, two
/// `ingest`s at once and then `ingest --prune`, `enroll` and `collections` work, and nothing is
/// left on the server session the next client gets: no named prepared statement (two clients
/// taking turns on one session would also collide on a name), session setting, advisory lock,
/// temporary table or cursor.
/// What a run through `bouncer` printed, once it succeeded (else its errors and the pooler's
/// log).
fn succeeded(args: &[&str], out: Output, bouncer: &parley_testkit::PgBouncer) -> String {
    assert!(
        out.status.success(),
        "parley {args:?}: {}\nPgBouncer's log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        bouncer.log()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn migrate_and_ingest_through_a_transaction_pooler_leave_nothing_on_the_shared_server_session() {
    let db = FreshDb::create();
    let bouncer = parley_testkit::PgBouncer::start(&db.url, 1);
    let pooled = bouncer.url(&db.url);
    // Runs each `parley ARGS` at once through the pooler; their outputs once all succeeded.
    let run_at_once = |runs: &[&[&str]]| -> Vec<String> {
        let children: Vec<_> = runs
            .iter()
            .map(|args| {
                common::command_with_model(args, &pooled)
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .expect("parley starts")
            })
            .collect();
        runs.iter()
            .zip(children)
            .map(|(args, child)| {
                succeeded(
                    args,
                    child.wait_with_output().expect("parley runs"),
                    &bouncer,
                )
            })
            .collect()
    };
    let run = |args: &[&str]| run_at_once(&[args]).remove(0);

    let migrated = run_at_once(&[&["migrate"], &["migrate"]]).concat();
    let mut applied: Vec<&str> = migrated
        .lines()
        .filter_map(|l| l.strip_prefix("applied "))
        .collect();
    applied.sort_unstable();
    let embedded: Vec<&str> = parley_core::migrate::embedded()
        .expect("embedded migrations")
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(applied, embedded, "{migrated}");

    let handbook = tempfile::tempdir().unwrap();
    let policies = tempfile::tempdir().unwrap();
    let write = |dir: &tempfile::TempDir, name: &str, body: &str| {
        std::fs::write(dir.path().join(name), body).unwrap()
    };
    let path = |dir: &tempfile::TempDir| dir.path().to_str().expect("a UTF-8 path").to_owned();
    write(
        &handbook,
        "leave.md",
        "# Leave\n\nStaff take twenty days of annual leave.\n",
    );
    write(
        &handbook,
        "expenses.md",
        "# Expenses\n\nClaim travel within a month.\n",
    );
    write(&handbook, "old.txt", "Soon gone.\n");
    write(
        &policies,
        "security.md",
        "# Security\n\nLock your screen.\n",
    );
    let (handbook_path, policies_path) = (path(&handbook), path(&policies));
    let first = run_at_once(&[
        &["ingest", &handbook_path, "--collection", "handbook"],
        &["ingest", &policies_path, "--collection", "policies"],
    ]);
    assert!(first[0].contains(": 3 added, 0 replaced"), "{}", first[0]);
    assert!(first[1].contains(": 1 added, 0 replaced"), "{}", first[1]);
    write(
        &handbook,
        "leave.md",
        "# Leave\n\nStaff take twenty-five days of annual leave.\n",
    );
    std::fs::remove_file(handbook.path().join("old.txt")).unwrap();
    let second = run(&[
        "ingest",
        &handbook_path,
        "--collection",
        "handbook",
        "--prune",
    ]);
    assert!(
        second.contains(": 0 added, 1 replaced, 1 unchanged, 1 deleted"),
        "{second}"
    );
    run(&["enroll", "--collection", "handbook", "--group", "staff"]);
    let listed = run(&["collections"]);
    assert!(
        listed.contains("handbook") && listed.contains("policies"),
        "{listed}"
    );

    assert_eq!(
        db.query(
            "SELECT string_agg(d.uri || ':' || (SELECT count(*) FROM parley.chunks c
                                                 WHERE c.document_id = d.id), ',' ORDER BY d.uri)
               FROM parley.documents d"
        ),
        ["expenses.md:1,leave.md:1,security.md:1"]
    );
    assert_eq!(
        db.query("SELECT string_agg(kind || ':' || principal, ',') FROM parley.memberships"),
        ["group:staff"]
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let left = runtime.block_on(bouncer.leftovers(&db.url));
    assert!(left.is_empty(), "left on the server session: {left:?}");
}

/// Behind a pooler that hands out its two server connections in turn, each transaction of a
/// run lands on the other one: a statement prepared by name in one transaction and bound in
/// the next would fail at once, where with one server connection it fails only when another
/// client comes between.
#[test]
fn the_command_prepares_nothing_by_name_across_transactions() {
    let db = FreshDb::create();
    let bouncer = parley_testkit::PgBouncer::start_rotating(&db.url, 2);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(bouncer.open(&db.url, 2));
    let pooled = bouncer.url(&db.url);
    let run = |args: &[&str]| {
        let out = common::command_with_model(args, &pooled).output();
        succeeded(args, out.expect("parley runs"), &bouncer)
    };
    run(&["migrate"]);
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(
        docs.path().join("leave.md"),
        "# Leave\n\nStaff take twenty days of annual leave.\n",
    )
    .unwrap();
    let docs_path = docs.path().to_str().expect("a UTF-8 path");
    let ingested = run(&["ingest", docs_path, "--collection", "handbook"]);
    assert!(ingested.contains(": 1 added, 0 replaced"), "{ingested}");
    let again = run(&["ingest", docs_path, "--collection", "handbook", "--prune"]);
    assert!(again.contains("1 unchanged"), "{again}");
    run(&["enroll", "--collection", "handbook", "--group", "staff"]);
    assert!(run(&["collections"]).contains("handbook"));
    assert_eq!(
        db.query("SELECT count(*) FROM parley.chunks"),
        ["1"],
        "the document is stored"
    );
}

#[test]
fn demo_data_before_migrate_says_to_migrate_first() {
    let db = FreshDb::create();
    for domain in ["feedback", "tasks", "chinook"] {
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

/// What each subcommand's summary in `parley --help` must speak of, so it cannot stand in for
/// another's (as `sync` once showed the text of ingest's size options).
const SUMMARY_WORDS: &[(&str, &[&str])] = &[
    ("migrate", &["migrations"]),
    ("demo-data", &["demo"]),
    (
        "ingest",
        &[
            "Markdown",
            "HTML",
            "text",
            "PDF",
            "Word",
            ".docx",
            "collection",
        ],
    ),
    ("sync", &["S3", "bucket"]),
    ("search", &["Search", "documents"]),
    (
        "collections",
        &["collections", "public", "private", "remove"],
    ),
    ("enroll", &["readers"]),
    ("audit", &["audit trail"]),
    ("logins", &["login roles"]),
    ("eval", &["Score", "questions"]),
    ("check", &["running stack", "fix"]),
    ("usage", &["Usage", "cost"]),
    ("feedback", &["feedback", "JSONL"]),
    ("catalog", &["catalog", "tables"]),
    ("help", &["help"]),
];

#[test]
fn every_subcommand_has_a_summary_of_its_own_in_the_help() {
    let help = stdout_of(&parley(&["--help"], "postgres://u@127.0.0.1:9/none"));
    let listed: Vec<(String, String)> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let (name, summary) = l.trim().split_once(' ').unwrap_or((l.trim(), ""));
            (name.to_owned(), summary.trim().to_owned())
        })
        .collect();
    let mut names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    let mut expected: Vec<&str> = SUMMARY_WORDS.iter().map(|(n, _)| *n).collect();
    names.sort_unstable();
    expected.sort_unstable();
    assert_eq!(names, expected, "a row in SUMMARY_WORDS per subcommand");
    for (name, summary) in &listed {
        let words = SUMMARY_WORDS.iter().find(|(n, _)| n == name).unwrap().1;
        for word in words {
            assert!(
                summary.contains(word),
                "`parley {name}`'s summary does not speak of {word:?}: {summary:?}"
            );
        }
        let shared: Vec<&str> = listed
            .iter()
            .filter(|(other, s)| other != name && s == summary)
            .map(|(other, _)| other.as_str())
            .collect();
        assert!(shared.is_empty(), "{name} has the summary of {shared:?}");
    }
}
