//! The docs' walkthroughs, run as a reader runs them: each fenced block marked
//! `<!-- walkthrough: NAME -->` (`... file=F`: saved as F, as the text says) in order, twice, in
//! a folder laid out like the repository's root, against a fresh database; then the mcp
//! function starts on the tools files they made. Unmarked blocks (`scripts/pg start`,
//! `scripts/dev`, `curl` to the running chat) need the running product and are not run here.

use std::path::{Path, PathBuf};
use std::process::Command;

use parley_core::config::Env;
use parley_mcp::Application;
use parley_testkit::TestDb;
use parley_testkit::domains::{DOCUMENTS_TOOLS, FEEDBACK_TOOLS, TASKS_TOOLS};

/// One marked block: its language and text, and the file the reader saves it as, if any.
#[derive(Debug)]
struct Step {
    lang: String,
    file: Option<String>,
    text: String,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The blocks of walkthrough `name` in `doc` (relative to the repository), in order. A marker
/// not followed by a fenced block fails: the test must read exactly what the reader copies.
fn walkthrough(doc: &str, name: &str) -> Vec<Step> {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let mut lines = text.lines().enumerate();
    let mut steps = Vec::new();
    while let Some((n, line)) = lines.next() {
        let Some(marker) = line
            .trim()
            .strip_prefix("<!-- walkthrough:")
            .and_then(|m| m.strip_suffix("-->"))
        else {
            continue;
        };
        let mut words = marker.split_whitespace();
        if words.next() != Some(name) {
            continue;
        }
        let file = words.next().map(|w| {
            w.strip_prefix("file=")
                .unwrap_or_else(|| panic!("{doc}:{}: `{w}` is not file=NAME", n + 1))
                .to_owned()
        });
        let lang = lines
            .next()
            .and_then(|(_, l)| l.strip_prefix("```"))
            .unwrap_or_else(|| {
                panic!(
                    "{doc}:{}: a walkthrough marker needs a fenced block on the next line",
                    n + 1
                )
            })
            .trim()
            .to_owned();
        let mut body = String::new();
        for (_, l) in lines.by_ref() {
            if l.trim_end() == "```" {
                break;
            }
            body.push_str(l);
            body.push('\n');
        }
        steps.push(Step {
            lang,
            file,
            text: body,
        });
    }
    assert!(!steps.is_empty(), "{doc} has no walkthrough `{name}`");
    steps
}

/// A folder laid out as the reader's repository root: `target/debug/parley` and the built-in
/// model under `.parley/models`, where the walkthroughs' commands look for them.
fn reader_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp dir");
    let link = |target: &Path, at: &str| {
        let at = root.path().join(at);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, at).unwrap();
    };
    link(
        Path::new(env!("CARGO_BIN_EXE_parley")),
        "target/debug/parley",
    );
    link(
        &parley_testkit::model_dir(),
        &format!(".parley/models/{}", parley_embed::BUILT_IN_MODEL),
    );
    root
}

/// Runs every step in `root` as the reader would after `eval "$(scripts/pg env)"`: files
/// saved, shell blocks run by bash, stopping at the first failing command.
fn run(steps: &[Step], root: &Path, db: &TestDb) {
    for step in steps {
        if let Some(file) = &step.file {
            std::fs::write(root.join(file), &step.text).unwrap();
            continue;
        }
        assert_eq!(
            step.lang, "sh",
            "a block the reader runs must be `sh`: {}",
            step.text
        );
        let out = Command::new("bash")
            .args(["-e", "-o", "pipefail", "-c", &step.text])
            .current_dir(root)
            .env("DATABASE_URL", &db.url)
            .env("PARLEY_PG_BIN", parley_testkit::pg_bin_dir())
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "{}\nexit {:?}\nstdout: {}\nstderr: {}",
            step.text,
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The mcp function starts, as `scripts/dev` starts it (its login `parley_mcp`, the demo
/// domains' tools files), with `extra` added to them: each file is read and every statement
/// prepared against `db`.
async fn mcp_starts_with(db: &TestDb, extra: &[PathBuf]) {
    let mut tools = vec![
        FEEDBACK_TOOLS.to_owned(),
        TASKS_TOOLS.to_owned(),
        DOCUMENTS_TOOLS.to_owned(),
    ];
    tools.extend(extra.iter().map(|p| p.display().to_string()));
    let mut login = url::Url::parse(&db.url).unwrap();
    login.set_username(MCP_LOGIN).unwrap();
    login.set_password(Some(MCP_LOGIN)).unwrap();
    let env = Env::from_pairs([
        ("DATABASE_URL", login.to_string()),
        ("TOOLS_FILE", tools.join(",")),
        (
            "EMBEDDINGS_MODEL_DIR",
            parley_testkit::model_dir().display().to_string(),
        ),
        ("LISTEN_ADDR", "127.0.0.1:0".into()),
    ]);
    if let Err(e) = Application::build(env).await {
        panic!(
            "the mcp function does not start on {}: {e}",
            tools.join(",")
        );
    }
}

/// `scripts/dev`'s login for the mcp function, which a walkthrough may grant roles to: made
/// as `scripts/dev` makes it (roles are cluster-wide, so it may exist already).
const MCP_LOGIN: &str = "parley_mcp";

async fn scripts_dev_login(db: &TestDb) {
    db.client()
        .await
        .batch_execute(&format!(
            "SET client_min_messages = warning;
             DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{MCP_LOGIN}') THEN
                     CREATE ROLE {MCP_LOGIN} LOGIN PASSWORD '{MCP_LOGIN}' IN ROLE parley_readonly;
                 END IF;
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
             END $$;
             GRANT parley_readonly TO {MCP_LOGIN};"
        ))
        .await
        .expect("scripts/dev's login");
}

async fn count(db: &TestDb, sql: &str) -> i64 {
    db.client()
        .await
        .query_one(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_first_tool_loads_beside_the_demo_domains() {
    let db = TestDb::with_demo_data(200).await;
    scripts_dev_login(&db).await;
    let root = reader_root();
    let steps = walkthrough("README.md", "first-tool");
    run(&steps, root.path(), &db);
    mcp_starts_with(&db, &[root.path().join("my-tools.toml")]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_orders_walkthrough_runs_twice_and_its_tools_load() {
    let db = TestDb::with_demo_data(200).await;
    scripts_dev_login(&db).await;
    let root = reader_root();
    let steps = walkthrough("docs/tools.md", "orders");
    run(&steps, root.path(), &db);
    run(&steps, root.path(), &db);
    // The sample orders went in once, for local-user (the superuser bypasses the policy).
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM orders WHERE customer = 'local-user'"
        )
        .await,
        3
    );
    assert_eq!(count(&db, "SELECT count(*) FROM orders").await, 3);
    mcp_starts_with(&db, &[root.path().join("orders.toml")]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_documents_walkthrough_runs_twice_and_ingests_the_handbook_once() {
    let db = TestDb::migrated().await;
    scripts_dev_login(&db).await;
    let root = reader_root();
    let steps = walkthrough("README.md", "documents");
    run(&steps, root.path(), &db);
    run(&steps, root.path(), &db);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM parley.documents d JOIN parley.collections c ON c.id = d.collection_id
             WHERE c.name = 'handbook'"
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM parley.memberships m JOIN parley.collections c ON c.id = m.collection_id
             WHERE c.name = 'handbook' AND m.kind = 'user' AND m.principal = 'local-user'"
        )
        .await,
        1
    );
    assert!(
        count(
            &db,
            "SELECT count(*) FROM parley.chunks k JOIN parley.documents d ON d.id = k.document_id
             JOIN parley.collections c ON c.id = d.collection_id WHERE c.name = 'handbook'"
        )
        .await
            > 0
    );
}
