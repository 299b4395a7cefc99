//! Extraction and chunking of real pages of the PostgreSQL manual (Debian's postgresql-doc-15,
//! the demo corpus): heading paths as the manual shows them, and none of DocBook's navigation.

use parley_ingest::{ChunkOptions, ExtractLimits, Extracted, Format, chunk_sections, extract};

const MANUAL: &str = "/usr/share/doc/postgresql-doc-15/html";

fn page(name: &str) -> Extracted {
    let path = std::path::Path::new(MANUAL).join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (install Debian's postgresql-doc-15)",
            path.display()
        )
    });
    extract(
        &bytes,
        Format::Html,
        name.trim_end_matches(".html"),
        &ExtractLimits::default(),
    )
    .expect("extracts")
}

fn headings(e: &Extracted) -> Vec<String> {
    e.sections.iter().map(|s| s.heading.join(" / ")).collect()
}

/// Every page's navigation bars hold these link texts; the pages' own text never does on
/// its own line.
fn assert_no_navigation(e: &Extracted) {
    for s in &e.sections {
        for line in s.text.lines() {
            for nav in ["Prev", "Next", "Up", "Home", "Prev Up Home Next"] {
                assert_ne!(line.trim(), nav, "navigation leaked into {:?}", s.heading);
            }
        }
        assert!(!s.text.contains("Prev | Up"), "{}", s.text);
    }
}

#[test]
fn a_reference_page_has_its_sections_and_no_navigation() {
    let e = page("sql-set-transaction.html");
    assert_eq!(e.title, "SET TRANSACTION");
    assert_eq!(
        headings(&e),
        [
            "SET TRANSACTION",
            "Synopsis",
            "Description",
            "Notes",
            "Examples",
            "Compatibility"
        ]
    );
    assert_eq!(
        e.sections[0].text,
        "SET TRANSACTION — set the characteristics of the current transaction"
    );
    // The synopsis is preformatted: its lines and indentation survive.
    assert!(
        e.sections[1]
            .text
            .contains("\n    READ WRITE | READ ONLY\n    [ NOT ] DEFERRABLE"),
        "{}",
        e.sections[1].text
    );
    assert!(
        !e.sections[0].text.contains("SQL Commands"),
        "the navheader's part name"
    );
    assert_no_navigation(&e);
}

#[test]
fn a_chapter_page_nests_subsections_and_admonitions_do_not_open_sections() {
    let e = page("transaction-iso.html");
    assert_eq!(e.title, "13.2. Transaction Isolation");
    assert_eq!(
        headings(&e),
        [
            "13.2. Transaction Isolation",
            "13.2. Transaction Isolation / 13.2.1. Read Committed Isolation Level",
            "13.2. Transaction Isolation / 13.2.2. Repeatable Read Isolation Level",
            "13.2. Transaction Isolation / 13.2.3. Serializable Isolation Level",
        ]
    );
    assert!(
        e.sections[0].text.contains("Important:\n"),
        "{}",
        e.sections[0].text
    );
    assert_no_navigation(&e);
}

#[test]
fn a_tutorial_page_keeps_its_query_output_tables_line_for_line() {
    let e = page("tutorial-select.html");
    assert_eq!(e.title, "2.5. Querying a Table");
    assert_eq!(headings(&e), ["2.5. Querying a Table"]);
    let text = &e.sections[0].text;
    assert!(
        text.contains("SELECT * FROM weather\n    WHERE city = 'San Francisco' AND prcp > 0.0;"),
        "{text}"
    );
    assert!(text.contains(" San Francisco |      46 |      50 | 0.25 | 1994-11-27\n"));
    assert_no_navigation(&e);

    let chunks = chunk_sections(&e.sections, &ChunkOptions::default());
    assert!(chunks.len() >= 3, "{} chunks", chunks.len());
    for c in &chunks {
        assert_eq!(c.heading, ["2.5. Querying a Table"]);
        assert!(!c.text.trim().is_empty());
        assert!(c.text.chars().count() <= 1150, "{}", c.text.chars().count());
    }
}

#[test]
fn every_page_of_the_manual_extracts_without_navigation() {
    let mut pages = 0;
    for entry in std::fs::read_dir(MANUAL).expect("the manual") {
        let path = entry.expect("an entry").path();
        if path.extension().is_none_or(|x| x != "html") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let e = page(&name);
        assert!(!e.title.is_empty(), "{name}");
        assert_no_navigation(&e);
        pages += 1;
    }
    assert!(pages > 1000, "{pages} pages");
}
