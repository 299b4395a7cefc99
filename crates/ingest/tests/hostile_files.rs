//! Files built to exhaust the extractor or to mislead it (issue 32), each skipped with a
//! reason that says what is wrong with it, in bounded memory and time; and a folder holding
//! them beside good files, whose good files are all stored.

mod hostile;

use std::path::PathBuf;

/// Writes the hostile files at the sizes the issue measured to `$HOSTILE_DIR`, to measure an
/// extraction's memory and time by hand (`/usr/bin/time -v`). Not a check: run it with
/// `cargo test -p parley-ingest --test hostile_files -- --ignored write_full_size`.
#[test]
#[ignore]
fn write_full_size_hostile_files() {
    let dir = PathBuf::from(std::env::var("HOSTILE_DIR").expect("HOSTILE_DIR names a folder"));
    std::fs::create_dir_all(&dir).unwrap();
    let files: [(&str, Vec<u8>); 10] = [
        ("paths.pdf", hostile::path_bomb(4_000_000)),
        ("flate-bomb.pdf", hostile::flate_bomb(400 << 20)),
        ("text-bomb.pdf", hostile::text_bomb(20_000_000)),
        ("broken-xref.pdf", hostile::broken_xref()),
        ("page-loop.pdf", hostile::cyclic_page_tree()),
        ("form-loop.pdf", hostile::form_loop()),
        ("objstm-bomb.pdf", hostile::object_stream_bomb(1 << 30)),
        ("xref-bomb.pdf", hostile::xref_stream_bomb(1 << 30)),
        ("report.docx", hostile::docx_of_text(60_000_000)),
        (
            "good.pdf",
            hostile::text_pdf(&["A good file.", "It is stored."]),
        ),
    ];
    for (name, bytes) in files {
        println!("{name}: {} bytes", bytes.len());
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

use std::time::Duration;

use parley_ingest::{
    ChunkOptions, CollectionSpec, ExtractError, ExtractLimits, Extracted, Format, IngestOptions,
    Summary, discover, extract, ingest,
};
use parley_testkit::TestDb;

fn pdf(bytes: &[u8], limits: &ExtractLimits) -> Result<Extracted, ExtractError> {
    extract(bytes, Format::Pdf, "hostile", limits)
}

fn defaults() -> ExtractLimits {
    ExtractLimits::default()
}

/// The reason of a broken PDF, or a panic naming what came instead.
fn broken(got: Result<Extracted, ExtractError>) -> String {
    match got {
        Err(ExtractError::Broken("PDF", reason)) => reason,
        other => panic!("not refused as a broken PDF: {other:?}"),
    }
}

#[test]
fn a_good_pdf_is_read_with_its_lines() {
    let doc = pdf(
        &hostile::text_pdf(&["Backups run nightly.", "Restores are tested weekly."]),
        &defaults(),
    )
    .unwrap();
    let text: Vec<&str> = doc.sections.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(text, ["Backups run nightly. Restores are tested weekly."]);
}

#[test]
fn a_page_of_path_operators_is_refused_for_them_before_pdf_extract_decodes_any() {
    // 350,000 operators with two operands each: 1,050,000 tokens, over the 1,000,000 a page
    // may hold. Before, pdf-extract decoded them all (4 million: 2.5 GB and 6 s).
    assert_eq!(
        pdf(&hostile::path_bomb(350_000), &defaults()).unwrap_err(),
        ExtractError::TooManyTokens {
            page: 1,
            limit: 1_000_000
        }
    );
}

#[test]
fn a_flate_bomb_is_refused_having_inflated_no_more_than_the_limit() {
    let limits = ExtractLimits {
        max_unpacked_bytes: 1 << 20,
        ..defaults()
    };
    assert_eq!(
        pdf(&hostile::flate_bomb(4 << 20), &limits).unwrap_err(),
        ExtractError::TooLarge(1 << 20)
    );
    // The same page inflating to less is read (as a page without text).
    assert_eq!(
        pdf(&hostile::flate_bomb(512 << 10), &limits).unwrap_err(),
        ExtractError::NoTextLayer(1)
    );
}

#[test]
fn an_object_stream_that_inflates_past_the_limit_is_refused_while_the_file_loads() {
    let limits = ExtractLimits {
        max_unpacked_bytes: 1 << 20,
        ..defaults()
    };
    assert_eq!(
        pdf(&hostile::object_stream_bomb(4 << 20), &limits).unwrap_err(),
        ExtractError::TooLarge(1 << 20)
    );
    let small = pdf(&hostile::object_stream_bomb(1 << 10), &limits).unwrap();
    assert_eq!(small.sections[0].text, "Beside an object stream.");
}

#[test]
fn a_cross_reference_stream_that_inflates_past_the_limit_is_refused_before_lopdf_loads_it() {
    let limits = ExtractLimits {
        max_unpacked_bytes: 1 << 20,
        ..defaults()
    };
    assert_eq!(
        pdf(&hostile::xref_stream_bomb(4 << 20), &limits).unwrap_err(),
        ExtractError::TooLarge(1 << 20)
    );
    let small = pdf(&hostile::xref_stream_bomb(1 << 10), &limits).unwrap();
    assert_eq!(
        small.sections[0].text,
        "Listed by a cross-reference stream."
    );
}

#[test]
fn a_page_of_text_operators_is_refused_for_its_characters() {
    assert_eq!(
        pdf(&hostile::text_bomb(150_000), &defaults()).unwrap_err(),
        ExtractError::TooManyChars {
            page: 1,
            limit: 100_000
        }
    );
}

#[test]
fn a_pdf_without_text_is_held_to_the_time_limit_too() {
    // Before, the time was checked only as glyphs came out: a page of paths had none.
    let limits = ExtractLimits {
        max_time: Duration::ZERO,
        ..defaults()
    };
    assert_eq!(
        pdf(&hostile::path_bomb(1_000), &limits).unwrap_err(),
        ExtractError::TooSlow(Duration::ZERO)
    );
}

#[test]
fn broken_cross_reference_offsets_are_named_as_what_is_wrong() {
    let reason = broken(pdf(&hostile::broken_xref(), &defaults()));
    assert_eq!(
        reason,
        "its cross-reference table is broken: 5 of the 5 objects it lists are not at the \
         offsets it gives, its catalog (object 1) among them"
    );
}

#[test]
fn a_page_tree_that_loops_is_named_as_what_is_wrong() {
    let reason = broken(pdf(&hostile::cyclic_page_tree(), &defaults()));
    assert_eq!(reason, "its page tree loops: object 2 is reached twice");
}

#[test]
fn forms_nested_a_few_deep_are_read_and_deeper_ones_refused_before_pdf_extract_recurses() {
    let doc = pdf(&hostile::nested_forms(5), &defaults()).unwrap();
    assert_eq!(doc.sections[0].text, "Deep inside.");
    let reason = broken(pdf(&hostile::nested_forms(40), &defaults()));
    assert_eq!(reason, "its forms are nested more than 32 deep");
}

#[test]
fn a_form_that_draws_itself_is_refused_instead_of_overflowing_the_stack() {
    let reason = broken(pdf(&hostile::form_loop(), &defaults()));
    assert_eq!(reason, "a form (object 6) draws itself, which never ends");
}

#[test]
fn the_hand_written_zlib_stream_inflates_to_its_zeros() {
    use std::io::Read;
    for n in [0, 1, 258, 259, 1000, 1 << 20] {
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&hostile::zlib_zeros(n)[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out.len(), n);
        assert!(out.iter().all(|&b| b == 0));
    }
}

/// One run of `parley ingest` over `dir` into collection `name`.
async fn ingest_folder(
    db: &TestDb,
    dir: &std::path::Path,
    name: &str,
    options: &IngestOptions,
) -> Summary {
    ingest(
        &mut db.client().await,
        &parley_testkit::embeddings::embedder(),
        &CollectionSpec::named(name),
        discover(&[dir.to_path_buf()]).unwrap(),
        options,
    )
    .await
    .unwrap()
}

/// The files a run skipped, with why.
fn skipped(summary: &Summary) -> Vec<(&str, &str)> {
    summary
        .skipped
        .iter()
        .map(|s| (s.uri.as_str(), s.reason.as_str()))
        .collect()
}

/// The uris of the documents stored, in order.
async fn stored_uris(db: &TestDb) -> Vec<String> {
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
async fn a_folder_of_hostile_files_stores_its_good_files_and_says_what_is_wrong_with_each_other() {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    let files: [(&str, Vec<u8>); 12] = [
        ("good.pdf", hostile::text_pdf(&["Backups run nightly."])),
        (
            "notes.md",
            b"# Notes\n\nRestores are tested weekly.\n".to_vec(),
        ),
        ("small.docx", hostile::small_docx("Keep three copies.")),
        ("paths.pdf", hostile::path_bomb(350_000)),
        ("flate-bomb.pdf", hostile::flate_bomb(9 << 20)),
        ("objstm-bomb.pdf", hostile::object_stream_bomb(9 << 20)),
        ("text-bomb.pdf", hostile::text_bomb(150_000)),
        ("broken-xref.pdf", hostile::broken_xref()),
        ("page-loop.pdf", hostile::cyclic_page_tree()),
        ("form-loop.pdf", hostile::form_loop()),
        // 136 chunks, over the 50 this run allows a document.
        ("report.docx", hostile::docx_of_text(100_000)),
        (
            "zz-last.pdf",
            hostile::text_pdf(&["Stored after all the others."]),
        ),
    ];
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    // Limits lowered so the files stay small; the defaults are measured against full-size
    // files by hand (write_full_size_hostile_files).
    let options = IngestOptions {
        extract: ExtractLimits {
            max_unpacked_bytes: 8 << 20,
            ..ExtractLimits::default()
        },
        chunk: ChunkOptions {
            max_chunks: 50,
            ..ChunkOptions::default()
        },
        ..IngestOptions::default()
    };
    let summary = ingest_folder(&db, dir.path(), "mixed", &options).await;
    let reasons = skipped(&summary);
    assert_eq!(
        reasons,
        [
            (
                "broken-xref.pdf",
                "unreadable PDF file: its cross-reference table is broken: 5 of the 5 objects \
                 it lists are not at the offsets it gives, its catalog (object 1) among them"
            ),
            (
                "flate-bomb.pdf",
                "unpacks to more than the limit of 8388608 bytes"
            ),
            (
                "form-loop.pdf",
                "unreadable PDF file: a form (object 6) draws itself, which never ends"
            ),
            (
                "objstm-bomb.pdf",
                "unpacks to more than the limit of 8388608 bytes"
            ),
            (
                "page-loop.pdf",
                "unreadable PDF file: its page tree loops: object 2 is reached twice"
            ),
            (
                "paths.pdf",
                "page 1 holds more than the limit of 1000000 operators and operands"
            ),
            (
                "report.docx",
                "its text (100366 characters) makes 136 chunks, over the limit of 50 a document \
                 may have; split it"
            ),
            (
                "text-bomb.pdf",
                "page 1 shows more than the limit of 100000 characters"
            ),
        ],
        "{summary}"
    );
    assert_eq!(
        stored_uris(&db).await,
        ["good.pdf", "notes.md", "small.docx", "zz-last.pdf"]
    );
    assert_eq!(summary.added, 4);
}

#[tokio::test]
async fn a_word_file_of_too_many_chunks_is_skipped_and_the_files_beside_it_are_stored() {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    // 136 chunks, and some 550 (too many to be worth cutting), over the 50 allowed here; the
    // issue's file was 60 MB of text, 80,000 chunks, and its run stored nothing for minutes.
    std::fs::write(
        dir.path().join("a-report.docx"),
        hostile::docx_of_text(100_000),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("b-annual.docx"),
        hostile::docx_of_text(400_000),
    )
    .unwrap();
    std::fs::write(dir.path().join("c-notes.md"), "# Notes\n\nShort.\n").unwrap();
    std::fs::write(
        dir.path().join("d-memo.docx"),
        hostile::small_docx("Brief."),
    )
    .unwrap();
    let options = IngestOptions {
        chunk: ChunkOptions {
            max_chunks: 50,
            ..ChunkOptions::default()
        },
        ..IngestOptions::default()
    };
    let summary = ingest_folder(&db, dir.path(), "reports", &options).await;
    let reasons = skipped(&summary);
    assert_eq!(
        reasons,
        [
            (
                "a-report.docx",
                "its text (100366 characters) makes 136 chunks, over the limit of 50 a document \
                 may have; split it"
            ),
            (
                "b-annual.docx",
                "its text (401101 characters) makes more than the limit of 50 chunks a document \
                 may have; split it"
            ),
        ]
    );
    assert_eq!((summary.added, summary.chunks), (2, 2), "{summary}");
}
