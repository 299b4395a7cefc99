//! `parley eval` as a team runs it: the built binary against a fresh migrated database with a
//! small handbook ingested by `parley ingest` and the real built-in model, checking the scores
//! it prints, a listed miss, the `--json` document and the exit code of a bad questions file.

mod common;

use std::process::{Command, Output};

use common::{failure, stdout_of};
use parley_testkit::TestDb;
use serde_json::Value;

fn parley(args: &[&str], database_url: &str) -> Output {
    common::parley_with_model(args, database_url)
}

fn write(dir: &tempfile::TempDir, rel: &str, body: &str) -> String {
    let path = dir.path().join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, body).unwrap();
    path.to_str().expect("a UTF-8 temp path").to_owned()
}

const QUESTIONS: &str = r#"
[[question]]
q = "How many days of paid holiday does someone who just joined get?"
pages = ["leave.md"]
kind = "paraphrase"
split = "dev"

[[question]]
q = "Where do I send the receipts for a train ticket?"
documents = ["handbook/expenses.md"]
kind = "keyword"
split = "held-out"

[[question]]
q = "What is the password of the guest wifi?"
pages = ["wifi.md"]
kind = "keyword"
split = "held-out"
"#;

/// A public handbook of three pages, ingested with `parley ingest`.
async fn handbook() -> (TestDb, tempfile::TempDir) {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir,
        "handbook/leave.md",
        "# Leave\n\n## Annual leave\nNew staff get 25 days of paid annual leave a year, plus \
         public holidays. After five years of service it rises to 28 days.\n\n## Sick leave\n\
         Tell your manager before 10:00 on the first day you are off sick.\n",
    );
    write(
        &dir,
        "handbook/expenses.md",
        "# Expenses\n\n## Travel\nBook trains in standard class. Send the receipts for tickets, \
         hotels and meals to finance@example.org within 30 days; they are repaid with the next \
         salary.\n",
    );
    write(
        &dir,
        "handbook/security.md",
        "# Security\n\n## Passwords\nUse a password manager. A password has at least 14 \
         characters and is never shared, written down or reused.\n\n## Laptops\nLock the screen \
         whenever you leave your desk.\n",
    );
    // The folder above, so the uris are handbook/leave.md and so on.
    stdout_of(&parley(
        &[
            "ingest",
            dir.path().to_str().unwrap(),
            "--collection",
            "handbook",
            "--public",
        ],
        &db.url,
    ));
    (db, dir)
}

#[tokio::test]
async fn eval_prints_each_method_s_scores_and_the_misses_with_what_came_instead() {
    let (db, dir) = handbook().await;
    let questions = write(&dir, "questions.toml", QUESTIONS);

    let text = stdout_of(&parley(&["eval", &questions], &db.url));
    assert!(
        text.starts_with(&format!(
            "3 questions from {questions}; tool search_documents in "
        )),
        "{text}"
    );
    assert!(
        text.contains("; searching as the service token (public collections)\n"),
        "{text}"
    );
    // Two of three answered in the top 5: recall@5 is 2/3 whatever the order.
    let line = |method: &str| {
        text.lines()
            .find(|l| l.starts_with(method))
            .unwrap_or_else(|| panic!("no {method} line in {text}"))
            .split_whitespace()
            .rev()
            .take(2)
            .map(|n| n.parse::<f64>().unwrap())
            .collect::<Vec<_>>()
    };
    let hybrid = line("hybrid (search_documents)");
    let (mrr, recall) = (hybrid[0], hybrid[1]);
    assert!((recall - 0.667).abs() < 1e-9, "{text}");
    assert!(mrr > 0.0 && mrr <= recall + 1e-9, "{text}");
    for branch in ["vector only", "words only (BM25)"] {
        let scores = line(branch);
        assert!(scores.iter().all(|s| (0.0..=1.0).contains(s)), "{text}");
    }
    assert!(text.contains("method"), "{text}");
    assert!(text.contains("recall@5"), "{text}");
    assert!(text.contains("dev (1) 1.00/"), "{text}");
    assert!(text.contains("held-out (2) 0.50/"), "{text}");
    assert!(text.contains("paraphrase (1) 1.00/"), "{text}");

    assert!(
        text.contains("misses: 1 of 3 questions have no answer in the first 5"),
        "{text}"
    );
    assert!(
        text.contains(
            "  \"What is the password of the guest wifi?\"\n    expected:     wifi.md\n    came instead: "
        ),
        "{text}"
    );
    // The words branch finds the passwords page for "password".
    let came = text
        .lines()
        .find(|l| l.starts_with("    came instead: "))
        .unwrap();
    assert!(came.contains("handbook/security.md"), "{came}");
    assert!(came.split(", ").count() <= 3, "{came}");
}

#[tokio::test]
async fn eval_json_has_the_overall_scores_groups_branches_and_misses() {
    let (db, dir) = handbook().await;
    let questions = write(&dir, "questions.toml", QUESTIONS);

    let out = stdout_of(&parley(
        &["eval", &questions, "--json", "--k", "3", "--misses", "0"],
        &db.url,
    ));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["questions"], 3);
    assert_eq!(v["k"], 3);
    assert_eq!(v["tool"], "search_documents");
    assert_eq!(v["model"], "all-MiniLM-L6-v2@384");
    assert_eq!(v["overall"]["method"], "hybrid (search_documents)");
    assert!((v["overall"]["recall"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9);
    let names = |list: &Value| -> Vec<String> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|g| {
                g["name"]
                    .as_str()
                    .or(g["method"].as_str())
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(names(&v["groups"]["split"]), ["dev", "held-out"]);
    assert_eq!(names(&v["groups"]["kind"]), ["keyword", "paraphrase"]);
    assert_eq!(names(&v["groups"]["part"]), Vec::<String>::new());
    assert_eq!(
        names(&v["branches"]),
        [
            "vector only",
            "words only (BM25)",
            "pages only (cards)",
            "pages by words only (BM25)"
        ]
    );
    assert!(v["branches"][0]["groups"]["split"].is_array());
    assert_eq!(v["branches_not_compared"], Value::Null);
    // --misses 0 lists none but still counts them.
    assert_eq!(v["missed"], 1);
    assert_eq!(v["misses"], serde_json::json!([]));

    let out = stdout_of(&parley(
        &["eval", &questions, "--json", "--split", "held-out"],
        &db.url,
    ));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["questions"], 2);
    assert_eq!(
        v["misses"][0]["q"],
        "What is the password of the guest wifi?"
    );
    assert_eq!(v["misses"][0]["expected"], serde_json::json!(["wifi.md"]));
    let came = v["misses"][0]["came_instead"].as_array().unwrap();
    assert!(!came.is_empty() && came.len() <= 3, "{came:?}");
}

/// A stand-in `/rerank` that knows the answers: a passage holding one (the annual leave
/// days, the expenses address) scores 0, any other 1, so a right page falls below every other
/// page found. Its requests are counted; its URL.
async fn answer_demoting_reranker() -> (std::sync::Arc<std::sync::atomic::AtomicUsize>, String) {
    use axum::{Json, Router, routing::post};
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = requests.clone();
    let app = Router::new().route(
        "/rerank",
        post(move |Json(body): Json<Value>| async move {
            let n = body["documents"].as_array().map_or(0, Vec::len);
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let results: Vec<Value> = (0..n)
                .map(|i| {
                    let text = body["documents"][i].as_str().unwrap_or_default();
                    let right = text.contains("25 days") || text.contains("finance@example.org");
                    serde_json::json!({"index": i, "relevance_score": if right { 0.0 } else { 1.0 }})
                })
                .collect();
            Json(serde_json::json!({ "results": results }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/rerank", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (requests, url)
}

#[tokio::test]
async fn with_a_reranker_configured_eval_scores_the_hybrid_reranked_too() {
    let (db, dir) = handbook().await;
    // A page near both answerable questions, so each finds another page to rank.
    write(
        &dir,
        "handbook/travel.md",
        "# Travel\n\n## Trains and leave\nA train ticket for a work trip is booked by the office; \
         days spent travelling count as working days, not paid leave or holiday.\n",
    );
    stdout_of(&parley(
        &[
            "ingest",
            dir.path().to_str().unwrap(),
            "--collection",
            "handbook",
            "--public",
        ],
        &db.url,
    ));
    let questions = write(&dir, "questions.toml", QUESTIONS);
    let (requests, url) = answer_demoting_reranker().await;
    let database_url = db.url.clone();
    // The server runs on this test's runtime while the command is waited for elsewhere.
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_parley"))
            .args(["eval", &questions, "--json", "--k", "3"])
            .env_clear()
            .env("DATABASE_URL", database_url)
            .env("EMBEDDINGS_MODEL_DIR", parley_testkit::model_dir())
            .env("RERANK", "http")
            .env("RERANK_URL", url)
            .output()
            .expect("parley runs")
    })
    .await
    .unwrap();
    let v: Value = serde_json::from_str(&stdout_of(&output)).unwrap();
    assert_eq!(
        requests.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one request per question with rows to order: the wifi question finds one page at \
         most, and a call sends no request for a single row"
    );
    assert_eq!(v["reranked"]["method"], "reranked (http)", "{v:#}");
    let branches: Vec<&str> = v["branches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["method"].as_str().unwrap())
        .collect();
    assert!(
        !branches.iter().any(|b| b.starts_with("reranked")),
        "{branches:?}"
    );
    // The stand-in puts the right pages below the others, so they rank lower than the
    // hybrid ranks them.
    let mrr = |m: &Value| m["mrr_at_10"].as_f64().unwrap();
    assert!(
        mrr(&v["reranked"]) < mrr(&v["overall"]),
        "reranked {} vs hybrid {}",
        v["reranked"],
        v["overall"]
    );
}

#[tokio::test]
async fn a_private_collection_is_searched_as_the_user_named_by_user() {
    let (db, dir) = handbook().await;
    write(
        &dir,
        "board/minutes.md",
        "# Board minutes\n\nThe board approved the new office lease in Leeds.\n",
    );
    stdout_of(&parley(
        &[
            "ingest",
            dir.path().join("board").to_str().unwrap(),
            "--collection",
            "board",
        ],
        &db.url,
    ));
    stdout_of(&parley(
        &["enroll", "--collection", "board", "--user", "ann"],
        &db.url,
    ));
    let questions = write(
        &dir,
        "board.toml",
        "[[question]]\nq = \"Which office lease did the board approve?\"\n\
         pages = [\"minutes.md\"]\ncollection = \"board\"\n",
    );

    let refused = failure(&parley(&["eval", &questions], &db.url), 1);
    assert!(
        refused.contains("question 1 (\"Which office lease did the board approve?\")")
            && refused.contains("there is no collection named \"board\" that you may read"),
        "{refused}"
    );
    let text = stdout_of(&parley(&["eval", &questions, "--user", "ann"], &db.url));
    assert!(text.contains("; searching as user ann\n"), "{text}");
    assert!(text.contains("misses: 0 of 1 questions"), "{text}");
}

#[tokio::test]
async fn a_tool_without_branches_is_scored_alone_and_says_why() {
    let (db, dir) = handbook().await;
    let tools = write(
        &dir,
        "tools.toml",
        r#"
[[tool]]
name = "find_by_title"
description = "Documents whose title contains the query."
limit_param = "limit"
sql = """
SELECT d.uri FROM parley.documents d
WHERE d.title ILIKE '%' || :query || '%'
ORDER BY d.uri
LIMIT :limit
"""

[tool.params.query]
type = "string"
required = true

[tool.params.limit]
type = "integer"
default = 10
"#,
    );
    let questions = write(
        &dir,
        "titles.toml",
        "[[question]]\nq = \"Expenses\"\npages = [\"expenses.md\"]\n\n\
         [[question]]\nq = \"Holidays\"\npages = [\"leave.md\"]\n",
    );

    let text = stdout_of(&parley(
        &[
            "eval",
            &questions,
            "--tools",
            &tools,
            "--tool",
            "find_by_title",
        ],
        &db.url,
    ));
    let hybrid = text
        .lines()
        .find(|l| l.starts_with("find_by_title "))
        .unwrap_or_else(|| panic!("{text}"));
    let scores: Vec<&str> = hybrid.split_whitespace().skip(1).collect();
    assert_eq!(scores, ["0.500", "0.500"], "{text}");
    assert!(
        text.contains(
            "(branches not compared: the tool's SQL is not as expected: it does not start with WITH"
        ),
        "{text}"
    );
    assert!(!text.contains("vector only"), "{text}");
    assert!(
        text.contains("  \"Holidays\"\n    expected:     leave.md\n    came instead: nothing\n"),
        "{text}"
    );

    let missing = failure(
        &parley(&["eval", &questions, "--tools", &tools], &db.url),
        2,
    );
    assert!(
        missing.contains(
            "has no tool named `search_documents` (pass the search tool with --tool NAME)"
        ),
        "{missing}"
    );
}

#[test]
fn a_malformed_questions_file_exits_2_naming_the_question_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let questions = write(
        &dir,
        "questions.toml",
        "[[question]]\nq = \"fine\"\npages = [\"a.md\"]\n\n\
         [[question]]\nq = \"How do I claim travel?\"\ndocuments = [\"expenses.md\"]\n\
         split = \"test\"\n",
    );
    // Refused before connecting: the database in DATABASE_URL is never reached.
    let err = failure(
        &parley(&["eval", &questions], "postgres://nobody@127.0.0.1:1/none"),
        2,
    );
    assert!(
        err.contains("question 2 (\"How do I claim travel?\")")
            && err.contains("`split` is \"test\"; it must be dev or held-out"),
        "{err}"
    );

    let unknown = write(
        &dir,
        "typo.toml",
        "[[question]]\nq = \"x\"\npgaes = [\"a.md\"]\n",
    );
    let err = failure(
        &parley(&["eval", &unknown], "postgres://nobody@127.0.0.1:1/none"),
        2,
    );
    assert!(
        err.contains("question 1 (\"x\")") && err.contains("pgaes"),
        "{err}"
    );

    // More rows than the tool allows: a usage mistake, told before connecting.
    let fine = write(
        &dir,
        "fine.toml",
        "[[question]]\nq = \"x\"\npages = [\"a.md\"]\n",
    );
    let err = failure(
        &parley(
            &["eval", &fine, "--k", "25"],
            "postgres://nobody@127.0.0.1:1/none",
        ),
        2,
    );
    assert!(
        err.contains("tool `search_documents` refuses the arguments") && err.contains("limit"),
        "{err}"
    );
}
