//! PDF and Word files as Parley reads them: PDFs printed by headless Chromium from pages of the
//! PostgreSQL manual (headings, pages apart, running headers and footers dropped, `#page=N` in
//! search results), a .docx built here from minimal WordprocessingML, and encrypted and broken
//! files skipped with a reason while the run goes on.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use parley_ingest::{
    CollectionSpec, ExtractError, ExtractLimits, Format, IngestOptions, discover, extract, ingest,
};
use parley_testkit::TestDb;

const MANUAL: &str = "/usr/share/doc/postgresql-doc-15/html";

/// Prints `page` of the manual to a PDF in `dir` with headless Chromium, as a reader would
/// ("Print to PDF", with its date/title header and url/page-number footer). Fails, naming the
/// setup script, when Chromium or the manual is missing: a skipped check would pass silently.
fn print_to_pdf(page: &str, dir: &Path) -> PathBuf {
    let html = Path::new(MANUAL).join(page);
    assert!(
        html.exists(),
        "{} is missing: install postgresql-doc-15 (tests/page/run --deps-only)",
        html.display()
    );
    chromium_print(&html, &dir.join(page.replace(".html", ".pdf")), &[])
}

/// Prints `html` to `out` with headless Chromium and `extra` flags.
fn chromium_print(html: &Path, out: &Path, extra: &[&str]) -> PathBuf {
    let page = html.display();
    let status = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu"])
        .args(extra)
        .arg(format!("--print-to-pdf={}", out.display()))
        .arg(html)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run chromium ({e}): install it with tests/page/run --deps-only")
        });
    assert!(
        status.success() && out.exists(),
        "chromium failed on {page}"
    );
    out.to_path_buf()
}

#[test]
fn a_pdf_of_images_only_is_refused_for_having_no_text_layer() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("scan.html");
    // Shapes and no text, as a scanned page is an image without text; and without Chromium's
    // header and footer, which are text.
    std::fs::write(
        &html,
        "<svg width=400 height=300><rect width=400 height=300 fill=black/></svg>",
    )
    .unwrap();
    let pdf = chromium_print(
        &html,
        &dir.path().join("scan.pdf"),
        &["--no-pdf-header-footer"],
    );
    let bytes = std::fs::read(&pdf).unwrap();
    assert_eq!(
        extract(&bytes, Format::Pdf, "scan", &ExtractLimits::default()).unwrap_err(),
        ExtractError::NoTextLayer(1)
    );
}

fn read_pdf(path: &Path) -> parley_ingest::Extracted {
    let bytes = std::fs::read(path).unwrap();
    extract(&bytes, Format::Pdf, "stem", &ExtractLimits::default()).unwrap()
}

#[test]
fn a_printed_manual_page_keeps_its_headings_and_pages_without_running_headers_or_footers() {
    let dir = tempfile::tempdir().unwrap();
    let pdf = print_to_pdf("sql-createrole.html", dir.path());
    let doc = read_pdf(&pdf);

    // The page's <title>, which Chromium writes into the PDF's Info dictionary.
    assert_eq!(doc.title, "CREATE ROLE");
    // Headings by size: the manual sets the page's name and its sections' names alike.
    let headings: Vec<String> = doc.sections.iter().map(|s| s.heading.join(" / ")).collect();
    for want in [
        "CREATE ROLE",
        "Synopsis",
        "Description",
        "Examples",
        "See Also",
    ] {
        assert!(
            headings.iter().any(|h| h == want),
            "no section under {want:?} in {headings:?}"
        );
    }
    let pages: Vec<u32> = doc.sections.iter().filter_map(|s| s.page).collect();
    assert_eq!(pages.len(), doc.sections.len(), "every section has a page");
    assert!(pages.windows(2).all(|w| w[0] <= w[1]), "{pages:?}");
    assert!(*pages.last().unwrap() >= 3, "a multi-page print: {pages:?}");
    // The Examples are at the end of the page: not on its first printed page.
    let examples = doc
        .sections
        .iter()
        .find(|s| s.heading.last().is_some_and(|h| h == "Examples"))
        .unwrap();
    assert!(examples.page > Some(1), "{:?}", examples.page);
    assert!(examples.text.contains("CREATE ROLE jonathan LOGIN;"));

    // Chromium's header (date and time, title) and footer (file url, "n/5") are on every
    // page: dropped from all of them.
    let text: String = doc.sections.iter().map(|s| s.text.as_str()).collect();
    assert!(
        !text.contains("sql-createrole.html"),
        "the footer's url is dropped"
    );
    assert!(!text.contains(" AM CREATE ROLE") && !text.contains(" PM CREATE ROLE"));
    // Words are whole, ligatures spelled out ("different", not "dif ferent" or "diﬀerent").
    assert!(text.contains("in a different format"), "{text}");
    // The body text came through in reading order.
    let description = doc
        .sections
        .iter()
        .find(|s| s.heading.last().is_some_and(|h| h == "Description"))
        .unwrap();
    assert!(
        description
            .text
            .starts_with("CREATE ROLE adds a new role to a PostgreSQL database cluster."),
        "{}",
        description.text
    );
}

/// A zip of the given parts, deflated as Word writes them.
fn zip_parts(parts: &[(&str, &str)]) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    for (name, body) in parts {
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file(*name, options).unwrap();
        zip.write_all(body.as_bytes()).unwrap();
    }
    zip.finish().unwrap();
    out.into_inner()
}

const W: &str = "xmlns:w=\"http://schemas.openxmlformats.org/wordprocessingml/2006/main\"";

fn para(style: Option<&str>, list: bool, text: &str) -> String {
    let mut ppr = String::new();
    if let Some(s) = style {
        ppr.push_str(&format!("<w:pStyle w:val=\"{s}\"/>"));
    }
    if list {
        ppr.push_str("<w:numPr><w:ilvl w:val=\"0\"/><w:numId w:val=\"1\"/></w:numPr>");
    }
    format!("<w:p><w:pPr>{ppr}</w:pPr><w:r><w:t xml:space=\"preserve\">{text}</w:t></w:r></w:p>")
}

/// A minimal .docx: headings by a localised style id named "heading 1"/"heading 2" in
/// styles.xml, a bulleted list, a table and core properties with a title.
fn sample_docx() -> Vec<u8> {
    let cell = |t: &str| format!("<w:tc>{}</w:tc>", para(None, false, t));
    let row = |a: &str, b: &str| format!("<w:tr>{}{}</w:tr>", cell(a), cell(b));
    let body = [
        para(Some("Berschrift1"), false, "Backups"),
        para(None, false, "Take a base backup &amp; keep the WAL."),
        para(Some("Heading2"), false, "Tools"),
        para(Some("ListParagraph"), true, "pg_basebackup"),
        para(Some("ListParagraph"), true, "pg_dump"),
        format!(
            "<w:tbl>{}{}</w:tbl>",
            row("Tool", "Speed"),
            row("pg_dump", "slow")
        ),
        para(None, false, "After the table."),
    ]
    .concat();
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?><w:document {W}><w:body>{body}</w:body></w:document>"
    );
    let styles = format!(
        "<w:styles {W}><w:style w:type=\"paragraph\" w:styleId=\"Berschrift1\"><w:name w:val=\"heading 1\"/></w:style></w:styles>"
    );
    let core = "<cp:coreProperties xmlns:cp=\"http://schemas.openxmlformats.org/package/2006/metadata/core-properties\" xmlns:dc=\"http://purl.org/dc/elements/1.1/\"><dc:title>Backup notes</dc:title></cp:coreProperties>";
    zip_parts(&[
        ("word/document.xml", &document),
        ("word/styles.xml", &styles),
        ("docProps/core.xml", core),
    ])
}

#[test]
fn a_word_file_keeps_its_headings_list_and_table() {
    let doc = extract(
        &sample_docx(),
        Format::Docx,
        "stem",
        &ExtractLimits::default(),
    )
    .unwrap();
    assert_eq!(doc.title, "Backup notes");
    let got: Vec<(String, &str)> = doc
        .sections
        .iter()
        .map(|s| (s.heading.join(" / "), s.text.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("Backups".to_owned(), "Take a base backup & keep the WAL."),
            (
                "Backups / Tools".to_owned(),
                "- pg_basebackup\n- pg_dump\n\nTool | Speed\npg_dump | slow\n\nAfter the table."
            ),
        ]
    );
}

#[test]
fn a_long_word_paragraph_is_kept_whole() {
    let long = "All of this paragraph is kept, however long it runs. ".repeat(40);
    let document = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><w:document {W}><w:body>{}</w:body></w:document>",
        para(None, false, &long)
    );
    let docx = zip_parts(&[("word/document.xml", &document)]);
    let doc = extract(&docx, Format::Docx, "long", &ExtractLimits::default()).unwrap();
    let text: String = doc.sections.iter().map(|s| s.text.as_str()).collect();
    assert_eq!(text, long.trim_end());
}

#[test]
fn a_word_file_that_unpacks_past_the_limit_is_refused() {
    let limits = ExtractLimits {
        max_unpacked_bytes: 100,
        ..ExtractLimits::default()
    };
    assert_eq!(
        extract(&sample_docx(), Format::Docx, "x", &limits).unwrap_err(),
        ExtractError::TooLarge(100)
    );
}

#[tokio::test]
async fn pdf_passages_are_found_on_their_page_and_bad_files_are_skipped_with_reasons() {
    let db = TestDb::migrated().await;
    let dir = tempfile::tempdir().unwrap();
    print_to_pdf("sql-createrole.html", dir.path());
    std::fs::write(dir.path().join("notes.docx"), sample_docx()).unwrap();
    std::fs::write(
        dir.path().join("garbage.pdf"),
        b"%PDF-1.7\nthis is not a PDF",
    )
    .unwrap();
    std::fs::write(dir.path().join("fake.docx"), b"not a zip").unwrap();
    // An encrypted PDF: a trailer naming an /Encrypt dictionary needs a password to be read.
    std::fs::write(dir.path().join("locked.pdf"), encrypted_pdf()).unwrap();

    let files = discover(&[dir.path().to_path_buf()]).unwrap();
    let mut client = db.client().await;
    let embedder = parley_testkit::embeddings::embedder();
    let summary = ingest(
        &mut client,
        &embedder,
        &CollectionSpec::named("docs"),
        files,
        &IngestOptions::default(),
    )
    .await
    .unwrap();
    let mut reasons: Vec<(String, String)> = summary
        .skipped
        .iter()
        .map(|s| (s.uri.clone(), s.reason.clone()))
        .collect();
    reasons.sort();
    assert_eq!(summary.added, 2, "{reasons:?}");
    let uris: Vec<&str> = reasons.iter().map(|(u, _)| u.as_str()).collect();
    assert_eq!(uris, ["fake.docx", "garbage.pdf", "locked.pdf"]);
    assert!(
        reasons[0].1.starts_with("unreadable Word file"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].1.starts_with("unreadable PDF file"),
        "{reasons:?}"
    );
    assert_eq!(
        reasons[2].1,
        "encrypted PDF (it needs a password to be read)"
    );

    // What search_documents returns as the uri: the PDF's with the chunk's page.
    let rows = client
        .query(
            "SELECT d.uri || coalesce('#page=' || c.page, ''), c.heading, c.text
             FROM parley.chunks c JOIN parley.documents d ON d.id = c.document_id
             ORDER BY d.uri, c.position",
            &[],
        )
        .await
        .unwrap();
    let pdf: Vec<(String, Vec<String>, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .filter(|(u, _, _): &(String, _, _)| u.starts_with("sql-createrole.pdf"))
        .collect();
    assert!(pdf.iter().all(|(u, _, _)| u.contains("#page=")), "{pdf:?}");
    let example = pdf
        .iter()
        .find(|(_, _, t)| t.contains("CREATE ROLE jonathan LOGIN;"))
        .unwrap();
    assert_ne!(example.0, "sql-createrole.pdf#page=1");
    let docx: Vec<String> = rows
        .iter()
        .map(|r| r.get::<_, String>(0))
        .filter(|u| u.starts_with("notes"))
        .collect();
    assert!(
        !docx.is_empty() && docx.iter().all(|u| u == "notes.docx"),
        "{docx:?}"
    );
}

/// A one-page PDF whose trailer names an encryption dictionary (RC4, 40-bit) with an owner
/// and user password entry that the empty password does not open.
fn encrypted_pdf() -> Vec<u8> {
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
        "<< /Filter /Standard /V 1 /R 2 /O <0000000000000000000000000000000000000000000000000000000000000000> /U <0000000000000000000000000000000000000000000000000000000000000000> /P -4 >>",
    ]
    .map(|o| o.as_bytes().to_vec());
    parley_testkit::pdf::pdf_with(
        &objects,
        "/Encrypt 4 0 R /ID [<00112233445566778899aabbccddeeff> <00112233445566778899aabbccddeeff>] ",
        |offset| offset,
    )
}
