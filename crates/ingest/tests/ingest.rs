//! Ingestion into a real, migrated Postgres with the real built-in model: what is stored for
//! each format, incremental re-runs, bad files, a refused model, memberships, and a reader
//! that never sees half a document while a writer replaces it.

use parley_ingest::{
    CollectionSpec, IngestError, IngestOptions, Member, SourceFile, Summary, discover, enroll,
    ingest,
};
use parley_testkit::TestDb;

/// A directory of files for one test, removed when dropped.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Dir {
        Dir(tempfile::tempdir().expect("a temporary directory"))
    }

    fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) -> &Dir {
        let path = self.0.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
        self
    }

    fn remove(&self, rel: &str) {
        std::fs::remove_file(self.0.path().join(rel)).unwrap();
    }

    fn files(&self) -> Vec<SourceFile> {
        discover(&[self.0.path().to_path_buf()]).unwrap()
    }
}

async fn run(
    db: &TestDb,
    collection: &str,
    files: Vec<SourceFile>,
    options: &IngestOptions,
) -> Result<Summary, IngestError> {
    let mut client = db.client().await;
    let embedder = parley_testkit::embeddings::embedder();
    ingest(
        &mut client,
        &embedder,
        &CollectionSpec::named(collection),
        files,
        options,
    )
    .await
}

/// uri, section, position, heading, context, text, dimensions.
type ChunkRow = (String, i32, i32, Vec<String>, String, String, i32);

fn counts(s: &Summary) -> (u64, u64, u64, u64, usize) {
    (s.added, s.replaced, s.unchanged, s.deleted, s.skipped.len())
}

const GUIDE_MD: &str = "# Widget guide\n\nWidgets are small.\n\n## Installing\n\nRun the installer.\n\n\
                        ```sh\nwidget install --all\n```\n\n### On Linux\n\nUse the package.\n";
const PAGE_HTML: &str = "<html><head><title>Widget reference</title></head><body>\
     <div class=\"navheader\">Prev Up Home Next</div><h1>Reference</h1><p>All widgets.</p>\
     <h2>Sizes</h2><table><tr><th>Size</th><th>Grams</th></tr><tr><td>small</td><td>3</td></tr></table>\
     <div class=\"navfooter\">Prev Next</div></body></html>";

#[tokio::test]
async fn each_format_is_stored_with_its_title_structure_sections_and_embedded_chunks() {
    let db = TestDb::migrated().await;
    let dir = Dir::new();
    dir.write("guide/intro.md", GUIDE_MD)
        .write("reference.html", PAGE_HTML)
        .write("notes.txt", "Plain notes.\n\nSecond paragraph.\n");

    let summary = run(&db, "widgets", dir.files(), &IngestOptions::default())
        .await
        .unwrap();
    assert_eq!(counts(&summary), (3, 0, 0, 0, 0), "{summary:?}");
    assert_eq!(summary.chunks, 6);

    let c = db.client().await;
    let coll = c
        .query_one(
            "SELECT title, public, embedding_model, embedding_dims FROM parley.collections WHERE name = 'widgets'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(coll.get::<_, String>(0), "widgets");
    assert!(!coll.get::<_, bool>(1));
    assert_eq!(coll.get::<_, String>(2), "all-MiniLM-L6-v2@384");
    assert_eq!(coll.get::<_, i32>(3), 384);

    let docs: Vec<(String, String, Vec<String>, serde_json::Value)> = c
        .query(
            "SELECT uri, title, path, metadata FROM parley.documents ORDER BY uri",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect();
    assert_eq!(
        docs,
        [
            (
                "guide/intro.md".into(),
                "Widget guide".into(),
                vec!["guide".into()],
                serde_json::json!({})
            ),
            (
                "notes.txt".into(),
                "notes".into(),
                vec![],
                serde_json::json!({})
            ),
            (
                "reference.html".into(),
                "Widget reference".into(),
                vec![],
                serde_json::json!({})
            ),
        ]
    );

    let chunks: Vec<ChunkRow> = c
        .query(
            "SELECT d.uri, c.section, c.position, c.heading, c.context, c.text, vector_dims(c.embedding)
               FROM parley.chunks c JOIN parley.documents d ON d.id = c.document_id
              ORDER BY d.uri, c.position",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5), r.get(6)))
        .collect();
    let view: Vec<(&str, i32, i32, &str)> = chunks
        .iter()
        .map(|(uri, section, position, _, context, _, _)| {
            (uri.as_str(), *section, *position, context.as_str())
        })
        .collect();
    assert_eq!(
        view,
        [
            ("guide/intro.md", 0, 0, "Widget guide"),
            ("guide/intro.md", 1, 1, "Widget guide › Installing"),
            (
                "guide/intro.md",
                2,
                2,
                "Widget guide › Installing › On Linux"
            ),
            ("notes.txt", 0, 0, "notes"),
            ("reference.html", 0, 0, "Widget reference › Reference"),
            (
                "reference.html",
                1,
                1,
                "Widget reference › Reference › Sizes"
            ),
        ]
    );
    assert!(chunks.iter().all(|c| c.6 == 384));
    let texts: Vec<&str> = chunks.iter().map(|c| c.5.as_str()).collect();
    assert!(
        texts.contains(&"Run the installer.\n\nwidget install --all"),
        "{texts:?}"
    );
    assert!(texts.contains(&"Size | Grams\nsmall | 3"), "{texts:?}");
    assert!(texts.iter().all(|t| !t.contains("Prev")), "{texts:?}");
    let headings: Vec<&Vec<String>> = chunks.iter().map(|c| &c.3).collect();
    assert_eq!(headings[2], &["Widget guide", "Installing", "On Linux"]);

    // Sections are what read_document returns: the same cut, in order.
    let sections: Vec<(i32, Vec<String>)> = c
        .query(
            "SELECT s.ord, s.heading FROM parley.sections s JOIN parley.documents d ON d.id = s.document_id
              WHERE d.uri = 'reference.html' ORDER BY s.ord",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        sections,
        [
            (0, vec!["Reference".to_string()]),
            (1, vec!["Reference".to_string(), "Sizes".to_string()])
        ]
    );

    // The full-text index sees the context: the title finds the page.
    let hit: String = c
        .query_one(
            "SELECT d.uri FROM parley.chunks c JOIN parley.documents d ON d.id = c.document_id
              WHERE c.tsv @@ websearch_to_tsquery('english', 'widget reference grams')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(hit, "reference.html");
}

#[tokio::test]
async fn a_rerun_skips_unchanged_replaces_changed_and_prunes_removed_documents() {
    let db = TestDb::migrated().await;
    let dir = Dir::new();
    dir.write("a.md", "# A\n\nAlpha text.\n")
        .write("b.md", "# B\n\nBeta text.\n")
        .write("c.txt", "Gamma text.\n");
    let opts = IngestOptions::default();
    let first = run(&db, "docs", dir.files(), &opts).await.unwrap();
    assert_eq!(counts(&first), (3, 0, 0, 0, 0));

    let again = run(&db, "docs", dir.files(), &opts).await.unwrap();
    assert_eq!(counts(&again), (0, 0, 3, 0, 0));
    assert_eq!(again.chunks, 0);

    dir.write("b.md", "# B\n\nBeta text, revised.\n")
        .write("d.md", "# D\n\nDelta text.\n");
    dir.remove("c.txt");
    let without_prune = run(&db, "docs", dir.files(), &opts).await.unwrap();
    assert_eq!(counts(&without_prune), (1, 1, 1, 0, 0));

    let pruned = run(
        &db,
        "docs",
        dir.files(),
        &IngestOptions {
            prune: true,
            ..opts.clone()
        },
    )
    .await
    .unwrap();
    assert_eq!(counts(&pruned), (0, 0, 3, 1, 0));

    let c = db.client().await;
    let uris: Vec<String> = c
        .query("SELECT uri FROM parley.documents ORDER BY uri", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(uris, ["a.md", "b.md", "d.md"]);
    let b: String = c
        .query_one(
            "SELECT string_agg(c.text, ' ') FROM parley.chunks c JOIN parley.documents d ON d.id = c.document_id
              WHERE d.uri = 'b.md'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(b, "Beta text, revised.");
    // Nothing left behind by the replaced and deleted documents.
    let orphans: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM parley.chunks WHERE document_id NOT IN (SELECT id FROM parley.documents))
                  + (SELECT count(*) FROM parley.sections WHERE document_id NOT IN (SELECT id FROM parley.documents))",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(orphans, 0);
}

#[tokio::test]
async fn bad_files_are_skipped_with_reasons_and_the_run_goes_on() {
    let db = TestDb::migrated().await;
    let dir = Dir::new();
    dir.write("binary.txt", b"PK\x03\x04\0\0zip")
        .write("empty.md", "")
        .write("huge.txt", "big ".repeat(600))
        .write("latin1.txt", b"caf\xe9 cr\xe8me")
        .write("only-script.html", "<html><script>x()</script></html>")
        .write("good.md", "# Good\n\nFine.\n");
    let opts = IngestOptions {
        max_document_bytes: 2000,
        ..IngestOptions::default()
    };
    let s = run(&db, "bad", dir.files(), &opts).await.unwrap();
    assert_eq!(counts(&s), (1, 0, 0, 0, 5), "{s:?}");
    let reasons: Vec<(&str, &str)> = s
        .skipped
        .iter()
        .map(|k| (k.uri.as_str(), k.reason.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("binary.txt", "binary file (NUL byte at offset 4)"),
            ("empty.md", "empty file"),
            (
                "huge.txt",
                "larger than the limit of 2000 bytes (2400 bytes)"
            ),
            ("latin1.txt", "not valid UTF-8 (at byte 3)"),
            ("only-script.html", "no text left after extraction"),
        ]
    );
}

/// An HTML page of `n` `<div>`s, each inside the one before.
fn nested_divs(n: usize) -> String {
    format!(
        "<title>Deep</title>{}<p>deep</p>{}",
        "<div>".repeat(n),
        "</div>".repeat(n)
    )
}

fn reasons(s: &Summary) -> Vec<(&str, &str)> {
    s.skipped
        .iter()
        .map(|k| (k.uri.as_str(), k.reason.as_str()))
        .collect()
}

async fn uris(db: &TestDb) -> Vec<String> {
    db.client()
        .await
        .query("SELECT uri FROM parley.documents ORDER BY uri", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test]
async fn deeply_nested_html_is_skipped_with_a_reason_and_the_other_files_are_stored() {
    let db = TestDb::migrated().await;
    let dir = Dir::new();
    // 6,000 overflowed the stack of a debug build; 200,000 (1 MB) parsed for minutes.
    dir.write("a.md", "# A\n\nFirst.\n")
        .write("deep.html", nested_divs(6_000))
        .write("deeper.html", nested_divs(200_000))
        .write("z.html", "<title>Z</title><p>Last.</p>");
    let s = run(&db, "hostile", dir.files(), &IngestOptions::default())
        .await
        .unwrap();
    assert_eq!(counts(&s), (2, 0, 0, 0, 2), "{s:?}");
    let too_deep = "HTML nested deeper than the limit of 512 elements";
    assert_eq!(
        reasons(&s),
        [("deep.html", too_deep), ("deeper.html", too_deep)]
    );
    assert_eq!(uris(&db).await, ["a.md", "z.html"]);
}

#[tokio::test]
async fn special_files_and_overlong_paths_are_skipped_without_being_read() {
    let db = TestDb::migrated().await;
    let dir = Dir::new();
    let root = dir.0.path();
    // 10 directories of 220 characters: a uri of 2,217, over the table's 2,000.
    let long: Vec<String> = (0..10).map(|i| format!("{i}{}", "d".repeat(219))).collect();
    let long = format!("{}/long.md", long.join("/"));
    dir.write(&long, "# Long\n\nText.\n")
        .write("good.md", "# Good\n\nFine.\n");
    let fifo = root.join("pipe.md");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", root.join("zero.txt")).unwrap();

    // A walk passes over the pipe and the link; named one by one they reach the run.
    let mut files = dir.files();
    files.push(SourceFile::new(root, fifo));
    files.push(SourceFile::new(root, root.join("zero.txt")));
    files.push(SourceFile::new("/dev", "/dev/zero"));
    let s = run(&db, "special", files, &IngestOptions::default())
        .await
        .unwrap();
    assert_eq!(counts(&s), (1, 0, 0, 0, 4), "{s:?}");
    let shown = format!("0{}...", "d".repeat(79));
    assert_eq!(
        reasons(&s),
        [
            (
                shown.as_str(),
                "its path is 2217 characters long, over the limit of 2000"
            ),
            (
                "pipe.md",
                "not a regular file (a named pipe); only regular files are read"
            ),
            (
                "zero.txt",
                "not a regular file (a character device); only regular files are read"
            ),
            (
                "zero",
                "not a regular file (a character device); only regular files are read"
            ),
        ]
    );
    assert_eq!(uris(&db).await, ["good.md"]);
}

#[tokio::test]
async fn titles_headings_and_uris_are_stored_without_scripts_or_control_characters() {
    let db = TestDb::migrated().await;
    let dir = Dir::new();
    dir.write(
        "bell\x07page.html",
        "<title>Guide<script>alert(1)</script> to\x1b[2J widgets</title>\
         <h1>Hi<script>track()</script>\x08 there</h1><p>Some\x1b text.</p>",
    );
    let s = run(&db, "clean", dir.files(), &IngestOptions::default())
        .await
        .unwrap();
    assert_eq!(counts(&s), (1, 0, 0, 0, 0), "{s:?}");
    let row = db
        .client()
        .await
        .query_one(
            "SELECT d.uri, d.title, c.heading, c.context, c.text
             FROM parley.documents d JOIN parley.chunks c ON c.document_id = d.id",
            &[],
        )
        .await
        .unwrap();
    let got: (String, String, Vec<String>, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    assert_eq!(
        got,
        (
            "bell%07page.html".into(),
            "Guide to[2J widgets".into(),
            vec!["Hi there".into()],
            "Guide to[2J widgets › Hi there".into(),
            "Some text.".into()
        )
    );
}

#[tokio::test]
async fn a_collection_embedded_with_another_model_is_refused_naming_both() {
    let db = TestDb::migrated().await;
    db.client()
        .await
        .batch_execute(
            "INSERT INTO parley.collections (name, title, embedding_model, embedding_dims)
             VALUES ('other', 'Other', 'text-embedding-3-small@1536', 1536)",
        )
        .await
        .unwrap();
    let dir = Dir::new();
    dir.write("a.md", "# A\n\nText.\n");
    let err = run(&db, "other", dir.files(), &IngestOptions::default())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, IngestError::ModelMismatch { .. }), "{msg}");
    assert!(
        msg.contains("text-embedding-3-small@1536") && msg.contains("all-MiniLM-L6-v2@384"),
        "{msg}"
    );
    let docs: i64 = db
        .client()
        .await
        .query_one("SELECT count(*) FROM parley.documents", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(docs, 0);
}

#[tokio::test]
async fn a_reader_never_sees_half_a_document_while_it_is_replaced() {
    let db = TestDb::migrated().await;
    let dir = Dir::new();
    // Two versions, several chunks each, every chunk of a version marked with its word.
    let version = |word: &str| {
        (0..12)
            .map(|i| {
                format!(
                    "## Part {i}\n\n{}\n",
                    format!("{word} sentence number {i}. ").repeat(20)
                )
            })
            .collect::<String>()
    };
    let (alpha, beta) = (version("alpha"), version("beta"));
    dir.write("doc.md", &alpha);
    run(&db, "live", dir.files(), &IngestOptions::default())
        .await
        .unwrap();

    let reader = db.client().await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reading = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut reads = 0u32;
            let mut seen = std::collections::BTreeSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let row = reader
                    .query_one(
                        "SELECT count(*), count(*) FILTER (WHERE text LIKE '%alpha%'),
                                count(*) FILTER (WHERE text LIKE '%beta%')
                           FROM parley.chunks c JOIN parley.documents d ON d.id = c.document_id
                          WHERE d.uri = 'doc.md'",
                        &[],
                    )
                    .await
                    .unwrap();
                let (all, a, b): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
                assert!(all > 0, "read {reads}: no chunks");
                assert!(
                    a == all || b == all,
                    "read {reads}: {a} alpha and {b} beta of {all}"
                );
                seen.insert(if a == all { "alpha" } else { "beta" });
                reads += 1;
            }
            (reads, seen)
        })
    };
    for round in 0..6 {
        dir.write("doc.md", if round % 2 == 0 { &beta } else { &alpha });
        let s = run(&db, "live", dir.files(), &IngestOptions::default())
            .await
            .unwrap();
        assert_eq!(counts(&s), (0, 1, 0, 0, 0));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reads, seen) = reading.await.expect("the reader saw only whole documents");
    assert!(reads > 10, "only {reads} reads");
    assert_eq!(seen.len(), 2, "the reader saw both versions: {seen:?}");
}

#[tokio::test]
async fn enroll_adds_and_removes_users_and_groups() {
    let db = TestDb::migrated().await;
    let dir = Dir::new();
    dir.write("a.md", "# A\n\nText.\n");
    run(&db, "course-1", dir.files(), &IngestOptions::default())
        .await
        .unwrap();
    let c = db.client().await;
    let members = [
        Member::User("student-1".into()),
        Member::Group("staff".into()),
    ];
    assert_eq!(enroll(&c, "course-1", &members, false).await.unwrap(), 2);
    assert_eq!(enroll(&c, "course-1", &members, false).await.unwrap(), 0);
    let rows: Vec<String> = c
        .query(
            "SELECT kind || ':' || principal FROM parley.memberships ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows, ["group:staff", "user:student-1"]);
    assert_eq!(
        enroll(&c, "course-1", &members[..1], true).await.unwrap(),
        1
    );
    let err = enroll(&c, "nope", &members, false).await.unwrap_err();
    assert_eq!(err.to_string(), "nope: no collection by that name");
}

#[tokio::test]
async fn each_document_gets_a_card_and_an_old_one_without_gets_it_without_re_embedding() {
    let db = TestDb::migrated().await;
    let dir = Dir::new();
    dir.write("guide.md", GUIDE_MD);
    run(&db, "widgets", dir.files(), &IngestOptions::default())
        .await
        .unwrap();
    let client = db.client().await;
    let card = |client: tokio_postgres::Client| async move {
        let row = client
            .query_one(
                "SELECT card, vector_dims(card_embedding), (SELECT array_agg(id ORDER BY id) FROM parley.chunks)
                   FROM parley.documents",
                &[],
            )
            .await
            .unwrap();
        (
            row.get::<_, Option<String>>(0),
            row.get::<_, Option<i32>>(1),
            row.get::<_, Vec<i64>>(2),
        )
    };
    let (text, dims, chunk_ids) = card(client).await;
    let text = text.expect("a card");
    assert!(
        text.starts_with("Widget guide. Widgets are small.")
            && text.contains("Sections: Installing"),
        "{text}"
    );
    assert_eq!(dims, Some(384));

    // As a document stored before migration 0019 is: no card. A re-run with the file unchanged
    // makes its card from the stored sections and leaves its chunks as they were.
    db.client()
        .await
        .execute(
            "UPDATE parley.documents SET card = NULL, card_embedding = NULL",
            &[],
        )
        .await
        .unwrap();
    let again = run(&db, "widgets", dir.files(), &IngestOptions::default())
        .await
        .unwrap();
    assert_eq!(counts(&again), (0, 0, 1, 0, 0));
    let (refilled, dims, same_chunks) = card(db.client().await).await;
    assert_eq!(refilled.as_deref(), Some(text.as_str()));
    assert_eq!(dims, Some(384));
    assert_eq!(same_chunks, chunk_ids, "chunks not written again");
}

/// What migrations 0017 and 0020's triggers keep, recomputed from the chunks as they are now:
/// rows of the stored statistics that differ from the recomputation (empty when true).
async fn bm25_drift(db: &TestDb) -> Vec<String> {
    let c = db.client().await;
    let rows = c
        .query(
            "WITH tf AS (
               SELECT c.id AS chunk_id, c.document_id, c.collection_id, f.term, f.tf
               FROM parley.chunks c, parley.term_frequencies(c.tsv) f
             ), expected_postings AS (
               SELECT chunk_id, document_id, collection_id, term, tf FROM tf
             ), stored_postings AS (
               SELECT chunk_id, document_id, collection_id, term, tf FROM parley.chunk_terms
             ), expected_df AS (
               SELECT collection_id, term, count(*)::int AS df FROM tf GROUP BY 1, 2
             ), expected_totals AS (
               SELECT k.id, count(c.id) AS chunks,
                      coalesce((SELECT sum(t.tf) FROM tf t WHERE t.collection_id = k.id), 0) AS terms
               FROM parley.collections k LEFT JOIN parley.chunks c ON c.collection_id = k.id
               GROUP BY k.id
             )
             SELECT 'posting missing: ' || e::text FROM (TABLE expected_postings EXCEPT TABLE stored_postings) e
             UNION ALL
             SELECT 'posting extra: ' || s::text FROM (TABLE stored_postings EXCEPT TABLE expected_postings) s
             UNION ALL
             SELECT 'df: ' || x::text FROM ((TABLE expected_df EXCEPT SELECT collection_id, term, df FROM parley.collection_terms)
                                           UNION ALL
                                           (SELECT collection_id, term, df FROM parley.collection_terms EXCEPT TABLE expected_df)) x
             UNION ALL
             SELECT 'totals: ' || k.name || ' has ' || k.chunk_count || '/' || k.term_count
                    || ', expected ' || e.chunks || '/' || e.terms
             FROM parley.collections k JOIN expected_totals e ON e.id = k.id
             WHERE k.chunk_count <> e.chunks OR abs(k.term_count - e.terms) > 1e-6
             UNION ALL
             SELECT 'impact not positive: ' || chunk_id FROM parley.chunk_terms WHERE NOT impact > 0",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test]
async fn bm25_statistics_stay_true_as_documents_are_added_replaced_pruned_and_removed() {
    let db = TestDb::migrated().await;
    let (docs, other) = (Dir::new(), Dir::new());
    docs.write("a.md", "# Vacuum\n\nVacuum reclaims storage occupied by dead tuples.\n")
        .write("b.md", "# Cluster\n\nCluster physically reorders a table on an index.\n\n## Notes\n\nThe table is locked while it is reordered.\n")
        .write("c.txt", "Storage of large objects, storage in pieces.\n");
    other.write(
        "x.md",
        "# Vacuum elsewhere\n\nAnother collection says vacuum twice: vacuum.\n",
    );
    let opts = IngestOptions::default();
    run(&db, "docs", docs.files(), &opts).await.unwrap();
    run(&db, "other", other.files(), &opts).await.unwrap();
    assert_eq!(bm25_drift(&db).await, Vec::<String>::new(), "after adding");
    let c = db.client().await;
    let postings: i64 = c
        .query_one("SELECT count(*) FROM parley.chunk_terms", &[])
        .await
        .unwrap()
        .get(0);
    assert!(postings > 10, "{postings} postings");
    // The same word in two collections is counted in each: a collection's df says nothing of
    // the other's chunks.
    let vacuum: Vec<(String, i32)> = c
        .query(
            "SELECT k.name, t.df FROM parley.collection_terms t JOIN parley.collections k ON k.id = t.collection_id
              WHERE t.term = 'vacuum' ORDER BY k.name",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(vacuum, [("docs".to_owned(), 1), ("other".to_owned(), 1)]);

    docs.write(
        "b.md",
        "# Cluster\n\nCLUSTER reorders the table once; later rows are not reordered.\n",
    )
    .write("d.md", "# Reindex\n\nReindex rebuilds an index.\n");
    docs.remove("c.txt");
    let pruned = IngestOptions {
        prune: true,
        ..opts.clone()
    };
    run(&db, "docs", docs.files(), &pruned).await.unwrap();
    assert_eq!(
        bm25_drift(&db).await,
        Vec::<String>::new(),
        "after replacing and pruning"
    );
    let objects: i64 = c
        .query_one(
            "SELECT count(*) FROM parley.collection_terms WHERE term = 'object'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(objects, 0, "a term no chunk has any more is gone");

    c.execute("DELETE FROM parley.collections WHERE name = 'other'", &[])
        .await
        .unwrap();
    assert_eq!(
        bm25_drift(&db).await,
        Vec::<String>::new(),
        "after removing a collection"
    );
    let left: i64 = c
        .query_one(
            "SELECT (SELECT count(*) FROM parley.chunk_terms t WHERE NOT EXISTS
                       (SELECT FROM parley.collections k WHERE k.id = t.collection_id))
                  + (SELECT count(*) FROM parley.collection_terms t WHERE NOT EXISTS
                       (SELECT FROM parley.collections k WHERE k.id = t.collection_id))",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        left, 0,
        "nothing of the removed collection's statistics is left"
    );
}
