//! The docs' walkthroughs, run as a reader runs them: each fenced block marked
//! `<!-- walkthrough: NAME -->` (`... file=F`: saved as F, as the text says) in order, twice, in
//! a folder laid out like the repository's root, against a fresh database, leaving nothing
//! there that `git status` would show; then the mcp function starts on the tools files they
//! made and their tools answer as the walkthrough says. Unmarked blocks (`scripts/pg start`,
//! `scripts/dev`, `curl` to the running chat) need the running product and are not run here:
//! the tool calls stand in for the chat's.

use std::path::{Path, PathBuf};
use std::process::Command;

use parley_testkit::TestDb;
use parley_testkit::domains::{DOCUMENTS_TOOLS, FEEDBACK_TOOLS, TASKS_TOOLS};
use serde_json::json;

#[path = "common/mcp.rs"]
mod mcp;

use mcp::{Mcp, scripts_dev_login};

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

/// Where the walkthrough saved its tools file (its `file=` ending in `.toml` other than
/// `questions.toml`), in `root`: the test follows the text wherever it puts it.
fn saved_tools_file(steps: &[Step], root: &Path) -> PathBuf {
    let file = steps
        .iter()
        .filter_map(|s| s.file.as_deref())
        .find(|f| f.ends_with(".toml") && !f.ends_with("questions.toml"))
        .expect("the walkthrough saves a tools file");
    root.join(file)
}

/// Fails unless everything the walkthrough left at the top of `root` is something the
/// repository's .gitignore ignores (`target/`, `.parley/`): a reader who follows it in their
/// clone must find `git status` clean. Only whole top-level names are matched (`/target`,
/// `target/`, `target`), which is all .gitignore holds at the root.
fn assert_leaves_git_status_clean(root: &Path) {
    let gitignore = std::fs::read_to_string(repo().join(".gitignore")).expect(".gitignore");
    let ignored: Vec<&str> = gitignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_start_matches('/').trim_end_matches('/'))
        .collect();
    let mut left: Vec<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| !ignored.contains(&name.as_str()))
        .collect();
    left.sort();
    assert!(
        left.is_empty(),
        "following the walkthrough leaves {left:?} in the repository's root for `git status` \
         to show: save into .parley/ (ignored) instead"
    );
}

/// The mcp function on the demo domains' tools files and `extra`, as `scripts/dev` serves it
/// with `PARLEY_EXTRA_TOOLS`.
async fn mcp_with_demo_tools(db: &TestDb, extra: &[PathBuf]) -> Mcp {
    let mut tools = vec![
        FEEDBACK_TOOLS.to_owned(),
        TASKS_TOOLS.to_owned(),
        DOCUMENTS_TOOLS.to_owned(),
    ];
    tools.extend(extra.iter().map(|p| p.display().to_string()));
    Mcp::start(db, &tools).await
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
async fn the_first_tool_loads_beside_the_demo_domains_and_answers() {
    let db = TestDb::with_demo_data(200).await;
    scripts_dev_login(&db).await;
    let root = reader_root();
    let steps = walkthrough("README.md", "first-tool");
    run(&steps, root.path(), &db);
    assert_leaves_git_status_clean(root.path());
    let mcp = mcp_with_demo_tools(&db, &[saved_tools_file(&steps, root.path())]).await;
    let rows = mcp
        .rows("local-user", "worst_rated_districts", json!({"limit": 5}))
        .await;
    assert!(rows.len() <= 5, "{rows:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_orders_walkthrough_runs_twice_and_its_tools_act_for_the_caller() {
    let db = TestDb::with_demo_data(200).await;
    scripts_dev_login(&db).await;
    let root = reader_root();
    let steps = walkthrough("docs/tools.md", "orders");
    run(&steps, root.path(), &db);
    run(&steps, root.path(), &db);
    assert_leaves_git_status_clean(root.path());
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
    // The tools do what the walkthrough says: the caller's orders only, and a cancel that
    // runs as shop_orders_writer through the grant the SQL gave parley_mcp.
    let mcp = mcp_with_demo_tools(&db, &[saved_tools_file(&steps, root.path())]).await;
    let orders = mcp.rows("local-user", "my_orders", json!({})).await;
    assert_eq!(orders.len(), 3, "{orders:?}");
    assert!(
        mcp.rows("someone-else", "my_orders", json!({}))
            .await
            .is_empty()
    );
    let cosy = orders
        .iter()
        .find(|o| o["item"] == "Tea cosy")
        .unwrap_or_else(|| panic!("no tea cosy in {orders:?}"));
    let cancelled = mcp
        .rows("local-user", "cancel_order", json!({"id": cosy["id"]}))
        .await;
    assert_eq!(
        cancelled,
        vec![json!({"id": cosy["id"], "status": "cancelled"})]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_documents_walkthrough_runs_twice_ingests_the_handbook_once_and_finds_the_answer() {
    // After scripts/dev, as the walkthrough says: the demo domains are there.
    let db = TestDb::with_demo_data(200).await;
    scripts_dev_login(&db).await;
    let root = reader_root();
    let steps = walkthrough("README.md", "documents");
    run(&steps, root.path(), &db);
    run(&steps, root.path(), &db);
    assert_leaves_git_status_clean(root.path());
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
    // What the chat's curl asks, as the documents tools answer local-user.
    let mcp = mcp_with_demo_tools(&db, &[]).await;
    let found = mcp
        .rows(
            "local-user",
            "search_documents",
            json!({"query": "How many days of leave do new staff get?"}),
        )
        .await;
    assert!(
        found
            .iter()
            .any(|r| r["collection"] == "handbook" && r["snippet"].to_string().contains("25 days")),
        "{found:?}"
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

/// The tools files `scripts/dev` serves unless `TOOLS_FILE` is set, from the script itself.
fn scripts_dev_tools_files() -> Vec<String> {
    let script = std::fs::read_to_string(repo().join("scripts/dev")).expect("scripts/dev");
    let list = script
        .lines()
        .find_map(|l| l.trim().strip_prefix("tools_file=${TOOLS_FILE:-"))
        .and_then(|l| l.strip_suffix('}'))
        .expect("scripts/dev sets tools_file=${TOOLS_FILE:-<default list>}");
    list.split(',').map(str::to_owned).collect()
}

#[test]
fn the_readme_names_every_tools_file_scripts_dev_serves() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let files = scripts_dev_tools_files();
    assert!(files.len() >= 3, "{files:?}");
    for file in &files {
        assert!(
            readme.contains(&format!("`{file}`")),
            "README.md does not name `{file}`, which scripts/dev serves"
        );
    }
}
