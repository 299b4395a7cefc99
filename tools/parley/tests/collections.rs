//! `parley collections`, `parley collections remove` and `parley enroll --list` as a user runs
//! them (the built binary on a fresh migrated database, folders ingested with the real model),
//! and the same commands through the admin function's `{"command": [...]}` invocation.

mod common;

use std::io::{Read, Write};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{failure, stdout_of};
use parley_cli::admin::Admin;
use parley_core::config::Env;
use parley_testkit::TestDb;
use serde_json::{Value, json};

fn parley_command(args: &[&str], database_url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_parley"));
    command
        .args(args)
        .env_clear()
        .env("DATABASE_URL", database_url)
        .env("EMBEDDINGS_MODEL_DIR", parley_testkit::model_dir());
    command
}

/// A run with no terminal: stdin is /dev/null, as under cron or CI.
fn parley(args: &[&str], database_url: &str) -> Output {
    parley_command(args, database_url)
        .stdin(Stdio::null())
        .output()
        .expect("parley runs")
}

/// Two collections: `course-1` (two documents, a group and a user enrolled) and the public
/// `handbook` (one document, no members).
async fn two_collections() -> TestDb {
    let db = TestDb::migrated().await;
    common::ingest_files(
        &db.url,
        "course-1",
        &[
            (
                "week-1.md",
                "# Week 1\n\nJoins and keys.\n\n## Exercises\n\nWrite a join.\n",
            ),
            ("week-2.md", "# Week 2\n\nIndexes.\n"),
        ],
        &["--title", "Databases 101"],
    );
    common::ingest_files(
        &db.url,
        "handbook",
        &[("leave.md", "# Leave\n\nAsk your manager.\n")],
        &["--public"],
    );
    stdout_of(&parley(
        &[
            "enroll",
            "--collection",
            "course-1",
            "--group",
            "students",
            "--user",
            "teacher-1",
        ],
        &db.url,
    ));
    db
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    db.client()
        .await
        .query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}

#[tokio::test]
async fn collections_lists_counts_model_size_and_readers_as_a_table_and_as_json() {
    let db = two_collections().await;
    let chunks = count(
        &db,
        "SELECT count(*) FROM parley.chunks k JOIN parley.collections c ON c.id = k.collection_id
          WHERE c.name = 'course-1'",
    )
    .await;
    assert!(chunks >= 2, "{chunks}");

    let lines = json_lines(&stdout_of(&parley(&["collections", "--json"], &db.url)));
    assert_eq!(lines.len(), 2);
    let course = &lines[0];
    let bytes = course["bytes"].as_i64().expect("bytes");
    // At least the 384 four-byte floats of each chunk's embedding.
    assert!(bytes > chunks * 384 * 4, "{bytes}");
    let keys: Vec<&String> = course.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "bytes",
            "chunks",
            "description",
            "dims",
            "documents",
            "groups",
            "model",
            "name",
            "public",
            "title",
            "updated_at",
            "users"
        ]
    );
    assert_eq!(
        (
            &course["name"],
            &course["title"],
            &course["documents"],
            &course["chunks"],
            &course["model"],
            &course["dims"],
            &course["public"],
            &course["groups"],
            &course["users"],
        ),
        (
            &json!("course-1"),
            &json!("Databases 101"),
            &json!(2),
            &json!(chunks),
            &json!("all-MiniLM-L6-v2@384"),
            &json!(384),
            &json!(false),
            &json!(["students"]),
            &json!(["teacher-1"]),
        )
    );
    assert_eq!(
        (
            &lines[1]["name"],
            &lines[1]["documents"],
            &lines[1]["public"]
        ),
        (&json!("handbook"), &json!(1), &json!(true))
    );
    assert_eq!(lines[1]["groups"], json!([]));

    let table = stdout_of(&parley(&["collections"], &db.url));
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect();
    assert_eq!(
        rows[0],
        [
            "name",
            "title",
            "documents",
            "chunks",
            "model",
            "size",
            "public",
            "readers"
        ]
    );
    assert_eq!(
        rows[1][..4],
        ["course-1", "Databases 101", "2", &chunks.to_string()]
    );
    assert_eq!(rows[1][4], "all-MiniLM-L6-v2@384");
    assert!(rows[1][5].ends_with("KiB"), "{table}");
    assert_eq!(rows[1][6..], ["no", "group:students, user:teacher-1"]);
    assert_eq!(rows[2][6..], ["yes"], "no readers column for none: {table}");
}

#[tokio::test]
async fn enroll_list_says_who_may_read_each_collection() {
    let db = two_collections().await;
    let table = stdout_of(&parley(&["enroll", "--list"], &db.url));
    assert_eq!(
        table,
        "\
collection  title          readers
course-1    Databases 101  group:students, user:teacher-1
handbook    handbook       everyone (public)
"
    );
    let one = stdout_of(&parley(
        &["enroll", "--list", "--collection", "course-1", "--json"],
        &db.url,
    ));
    assert_eq!(
        json_lines(&one),
        [json!({"collection": "course-1", "public": false,
                "groups": ["students"], "users": ["teacher-1"]})]
    );
    let unknown = parley(&["enroll", "--list", "--collection", "nope"], &db.url);
    assert!(failure(&unknown, 2).contains("nope: no collection by that name"));
    let mixed = parley(&["enroll", "--list", "--user", "x"], &db.url);
    assert!(failure(&mixed, 2).contains("--list"));
}

#[tokio::test]
async fn remove_deletes_that_collection_its_chunks_and_readers_and_leaves_the_other() {
    let db = two_collections().await;
    let chunks_before = count(&db, "SELECT count(*) FROM parley.chunks").await;
    let handbook_chunks = count(
        &db,
        "SELECT count(*) FROM parley.chunks k JOIN parley.collections c ON c.id = k.collection_id
          WHERE c.name = 'handbook'",
    )
    .await;

    let removed = stdout_of(&parley(
        &["collections", "remove", "course-1", "--yes"],
        &db.url,
    ));
    assert_eq!(
        removed,
        format!(
            "removed course-1: 2 documents, {} chunks, 2 readers\n",
            chunks_before - handbook_chunks
        )
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM parley.collections WHERE name <> 'handbook'"
        )
        .await,
        0
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM parley.chunks").await,
        handbook_chunks
    );
    assert_eq!(count(&db, "SELECT count(*) FROM parley.documents").await, 1);
    let handbook_sections = count(&db, "SELECT count(*) FROM parley.sections").await;
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM parley.sections s JOIN parley.collections c
                 ON c.id = s.collection_id WHERE c.name = 'handbook'"
        )
        .await,
        handbook_sections,
        "no section of the removed collection is left"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM parley.memberships").await,
        0
    );

    let again = parley(&["collections", "remove", "course-1", "--yes"], &db.url);
    assert!(
        failure(&again, 2).contains("course-1: no collection by that name"),
        "an unknown name is a usage error naming it"
    );
}

#[tokio::test]
async fn remove_without_yes_refuses_when_stdin_is_not_a_terminal_and_removes_nothing() {
    let db = two_collections().await;
    let out = parley(&["collections", "remove", "course-1"], &db.url);
    assert!(
        failure(&out, 2).contains(
            "removing course-1 asks for its name to be typed again, and standard input is not a \
             terminal: add --yes"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM parley.collections").await,
        2
    );
}

/// On a terminal (util-linux `script` gives the run a pseudo-terminal), the name typed decides.
#[tokio::test]
async fn on_a_terminal_remove_asks_and_only_the_typed_name_confirms() {
    let db = two_collections().await;
    let on_a_terminal = |typed: &str| {
        // `script` runs the command line through a shell: the URL and paths have no quotes.
        let line = format!(
            "{} collections remove course-1",
            env!("CARGO_BIN_EXE_parley")
        );
        let mut child = Command::new("script")
            .args(["--quiet", "--return", "--command", &line, "/dev/null"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", &db.url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script runs");
        // Typed ahead, as a person may: the terminal holds it until the prompt reads it. The
        // pipe stays open until the run ends, so `script` never sees end-of-input first.
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(typed.as_bytes()).unwrap();
        stdin.flush().unwrap();
        let status = child.wait().unwrap();
        drop(stdin);
        let mut stdout = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut stdout)
            .unwrap();
        (status, stdout)
    };

    let (status, text) = on_a_terminal("course-2\n");
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains("This deletes course-1 (Databases 101): 2 documents"),
        "{text}"
    );
    assert!(text.contains("course-1 was not removed: the name typed did not match"));
    assert_eq!(
        count(&db, "SELECT count(*) FROM parley.collections").await,
        2
    );

    let (status, text) = on_a_terminal("course-1\n");
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("removed course-1: 2 documents"), "{text}");
    assert_eq!(
        count(&db, "SELECT count(*) FROM parley.collections").await,
        1
    );
}

#[tokio::test]
async fn the_admin_function_lists_removes_with_yes_only_and_lists_readers() {
    let db = two_collections().await;
    let admin = Admin::new(Env::from_pairs([("DATABASE_URL", db.url.clone())])).unwrap();
    let run = |command: Value| {
        let admin = admin.clone();
        async move {
            admin
                .handle(json!({ "command": command }), Duration::from_secs(60))
                .await
                .expect("an answer")
        }
    };

    let listed = run(json!(["collections", "--json"])).await;
    assert_eq!(listed["ok"], true, "{listed}");
    let lines = json_lines(listed["output"].as_str().unwrap());
    assert_eq!(
        lines.iter().map(|l| l["name"].clone()).collect::<Vec<_>>(),
        [json!("course-1"), json!("handbook")]
    );
    let table = run(json!(["collections"])).await;
    assert!(
        table["output"]
            .as_str()
            .unwrap()
            .starts_with("name      title"),
        "{table}"
    );

    let readers = run(json!(["enroll", "--list"])).await;
    assert_eq!(readers["ok"], true, "{readers}");
    assert!(
        readers["output"]
            .as_str()
            .unwrap()
            .contains("course-1    Databases 101  group:students, user:teacher-1\n"),
        "{readers}"
    );

    let unasked = run(json!(["collections", "remove", "course-1"])).await;
    assert_eq!(unasked["ok"], false);
    assert!(
        unasked["error"].as_str().unwrap().contains("add \"--yes\""),
        "{unasked}"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM parley.collections").await,
        2
    );

    let removed = run(json!(["collections", "remove", "course-1", "--yes"])).await;
    assert_eq!(removed["ok"], true, "{removed}");
    assert!(
        removed["output"]
            .as_str()
            .unwrap()
            .starts_with("removed course-1: 2 documents, "),
        "{removed}"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM parley.collections").await,
        1
    );

    let unknown = run(json!(["collections", "remove", "nope", "--yes"])).await;
    assert_eq!(
        unknown,
        json!({"ok": false, "output": "",
               "error": "nope: no collection by that name; `parley collections` lists them"})
    );
}

/// Whether the collection `name` is public, as stored.
async fn is_public(db: &TestDb, name: &str) -> bool {
    db.client()
        .await
        .query_one(
            "SELECT public FROM parley.collections WHERE name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_collection_made_public_is_made_private_again_and_back() {
    let db = two_collections().await;
    assert!(is_public(&db, "handbook").await, "ingested --public");

    let private = stdout_of(&parley(
        &["collections", "set", "handbook", "--private"],
        &db.url,
    ));
    assert_eq!(
        private,
        "handbook is now private: nobody is enrolled in it, so no caller may search it until \
         `parley enroll --collection handbook` adds readers\n"
    );
    assert!(!is_public(&db, "handbook").await);
    let listed = json_lines(&stdout_of(&parley(&["collections", "--json"], &db.url)));
    assert_eq!(listed[1]["public"], json!(false), "{listed:?}");
    // What the mcp function's tools see: the service token may read no collection now.
    let readable = count(
        &db,
        "SELECT cardinality(parley.readable_collections())::bigint",
    )
    .await;
    assert_eq!(readable, 0);

    let again = stdout_of(&parley(
        &["collections", "set", "handbook", "--private"],
        &db.url,
    ));
    assert!(again.starts_with("handbook is already private"), "{again}");
    let course = stdout_of(&parley(
        &["collections", "set", "course-1", "--private"],
        &db.url,
    ));
    assert_eq!(
        course,
        "course-1 is already private: only its 2 readers (groups and users enrolled) may \
         search and read it\n"
    );

    let public = stdout_of(&parley(
        &["collections", "set", "handbook", "--public"],
        &db.url,
    ));
    assert_eq!(
        public,
        "handbook is now public: every caller may search and read it\n"
    );
    assert!(is_public(&db, "handbook").await);

    let unknown = parley(&["collections", "set", "nope", "--private"], &db.url);
    assert!(failure(&unknown, 2).contains("nope: no collection by that name"));
    let neither = parley(&["collections", "set", "handbook"], &db.url);
    assert!(failure(&neither, 2).contains("--public|--private"));

    // The function runs it too: it needs no terminal.
    let admin = Admin::new(Env::from_pairs([("DATABASE_URL", db.url.clone())])).unwrap();
    let answer = admin
        .handle(
            json!({"command": ["collections", "set", "handbook", "--private"]}),
            Duration::from_secs(60),
        )
        .await
        .expect("an answer");
    assert_eq!(answer["ok"], true, "{answer}");
    assert!(!is_public(&db, "handbook").await);
}
