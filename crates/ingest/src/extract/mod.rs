//! A file's bytes to clean text: a title and sections, each under its heading path (and, from
//! a PDF, on its page). Refuses what is not text (NUL bytes or invalid UTF-8 in a text format;
//! an encrypted, image-only or broken PDF or Word file), has none, or is built to exhaust the
//! extractor (past [`ExtractLimits`]), with a reason for the summary. Knows nothing of chunks,
//! embeddings or storage.

mod docx;
mod html;
mod markdown;
mod pdf;
pub(crate) mod text;

use std::path::Path;
use std::time::{Duration, Instant};

/// Bumped whenever extraction or chunking changes what a file becomes, so the next run
/// replaces documents whose bytes did not change (it is part of the content hash).
/// 2: script text and control characters no longer reach titles, headings or text.
/// 3: PDF and Word files; sections carry their page.
/// 4: a Word paragraph is kept whole (it was cut at 500 characters, as a heading is).
pub const EXTRACTOR_VERSION: &str = "parley-ingest/4";

/// Bounds on one file's extraction, so that one hostile file is skipped with a reason instead
/// of crashing or stalling the run. A document is also held to a number of chunks
/// ([`crate::ChunkOptions::max_chunks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtractLimits {
    /// HTML elements nested deeper than this refuse the file. The HTML parser checks the whole
    /// stack of open elements for each new element, so its time grows with depth squared: 200,000
    /// nested `<div>`s (2.2 MB) took 15 minutes. Browsers stop nesting at 512 (Blink) and real
    /// pages stay far below (the PostgreSQL manual: under 20).
    pub max_html_depth: usize,
    /// The time one file's extraction may take before the file is refused.
    pub max_time: Duration,
    /// A PDF with more pages than this is refused. Text extraction runs at roughly 50-100
    /// pages a second on one core, and embedding at ~10 chunks a second (about 2 per page), so
    /// 2,000 pages is already ~7 minutes of a run; a larger file is better split.
    pub max_pdf_pages: usize,
    /// The most bytes a compressed file may unpack to: a zip of a few kilobytes can inflate to
    /// gigabytes, and 400 KB of a PDF's Flate to 400 MB. For a Word file, each of its parts
    /// (`word/document.xml`, `word/styles.xml`); a 500-page manual's document.xml is ~10 MB.
    /// For a PDF, each of: one page's content with the forms it draws (each time drawn), the
    /// streams its pages share and are kept decoded (forms, fonts, CMaps, object streams; never
    /// images), all together, and its text. A page printed by Chromium decodes to ~50 KB, one
    /// set by LaTeX to ~10 KB, a book's fonts to a few MB. Nothing is inflated past it.
    pub max_unpacked_bytes: u64,
    /// The most tokens (operators and operands) one PDF page's content may hold, a form's
    /// counted each time the page draws it. pdf-extract decodes a stream's tokens all at once,
    /// each operand an `Object` of lopdf's, and keeps a path's points until it is painted:
    /// measured (release build), 130-210 bytes and ~0.4 µs a token, so a page of 4 million path
    /// operators (12 million tokens) took 2.5 GB and 6 s, and 4 million curves 4.4 GB. A dense
    /// page of text holds 5,000-20,000 tokens and a detailed chart ~100,000; 1,000,000 bounds a
    /// page to ~210 MB and well under a second.
    pub max_page_tokens: usize,
    /// The most characters one PDF page may show. pdf-extract reports each with its position
    /// and size, kept until the page ends: measured, ~90 bytes a character (a 43 KB page of 20
    /// million took 1.8 GB and 13 s). A dense page in 6-point type holds ~15,000; 100,000 is
    /// ~9 MB.
    pub max_page_chars: usize,
}

impl Default for ExtractLimits {
    fn default() -> Self {
        ExtractLimits {
            max_html_depth: 512,
            max_time: Duration::from_secs(30),
            max_pdf_pages: 2000,
            max_unpacked_bytes: 64 << 20,
            max_page_tokens: 1_000_000,
            max_page_chars: 100_000,
        }
    }
}

/// The limits of one extraction in progress: when it must be done, and how deep HTML may nest.
#[derive(Debug, Clone, Copy)]
struct Budget {
    deadline: Instant,
    limits: ExtractLimits,
}

impl Budget {
    fn new(limits: &ExtractLimits) -> Budget {
        Budget {
            deadline: Instant::now() + limits.max_time,
            limits: *limits,
        }
    }

    /// The default limits, from now.
    #[cfg(test)]
    fn test() -> Budget {
        Budget::new(&ExtractLimits::default())
    }

    /// Err once the time is spent. Cheap enough for every few hundred steps of a loop.
    fn check_time(&self) -> Result<(), ExtractError> {
        if Instant::now() >= self.deadline {
            Err(ExtractError::TooSlow(self.limits.max_time))
        } else {
            Ok(())
        }
    }
}

/// The formats Parley extracts, by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Html,
    Text,
    Pdf,
    Docx,
}

impl Format {
    /// `.md .markdown .html .htm .txt .text .pdf .docx`, in any case.
    pub fn of_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "md" | "markdown" => Some(Format::Markdown),
            "html" | "htm" => Some(Format::Html),
            "txt" | "text" => Some(Format::Text),
            "pdf" => Some(Format::Pdf),
            "docx" => Some(Format::Docx),
            _ => None,
        }
    }
}

/// A document as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extracted {
    pub title: String,
    /// In reading order; none is empty.
    pub sections: Vec<Section>,
}

impl Extracted {
    /// Characters of text in all sections.
    pub fn chars(&self) -> usize {
        self.sections.iter().map(|s| s.text.chars().count()).sum()
    }
}

/// The text between one heading and the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The headings above it, outermost first; empty before the first heading.
    pub heading: Vec<String>,
    pub text: String,
    /// The page it is on (from 1), for paged formats (PDF): a section never spans pages.
    pub page: Option<u32>,
}

/// Why a file was not ingested; the message is the reason the summary lists.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    #[error("empty file")]
    Empty,
    #[error("binary file (NUL byte at offset {0})")]
    Binary(usize),
    #[error("not valid UTF-8 (at byte {0})")]
    InvalidUtf8(usize),
    #[error("no text left after extraction")]
    NoText,
    #[error("HTML nested deeper than the limit of {0} elements")]
    TooDeep(usize),
    #[error("extraction took longer than the limit of {} ms", .0.as_millis())]
    TooSlow(Duration),
    #[error("encrypted PDF (it needs a password to be read)")]
    Encrypted,
    #[error("no text layer ({0} pages of images only: it would need OCR)")]
    NoTextLayer(usize),
    #[error("{0} pages, over the limit of {1}")]
    TooManyPages(usize, usize),
    #[error("unpacks to more than the limit of {0} bytes")]
    TooLarge(u64),
    #[error("page {page} holds more than the limit of {limit} operators and operands")]
    TooManyTokens { page: usize, limit: usize },
    #[error("page {page} shows more than the limit of {limit} characters")]
    TooManyChars { page: usize, limit: usize },
    #[error("unreadable {0} file: {1}")]
    Broken(&'static str, String),
}

/// Extracts `bytes` as `format` within `limits`; `stem` (the file name without extension) is
/// the title when the document names none.
pub fn extract(
    bytes: &[u8],
    format: Format,
    stem: &str,
    limits: &ExtractLimits,
) -> Result<Extracted, ExtractError> {
    if bytes.is_empty() {
        return Err(ExtractError::Empty);
    }
    let budget = Budget::new(limits);
    let (title, sections) = match format {
        Format::Pdf => pdf::extract(bytes, &budget)?,
        Format::Docx => docx::extract(bytes, &budget)?,
        Format::Markdown | Format::Html | Format::Text => textual(bytes, format, &budget)?,
    };
    if sections.is_empty() {
        return Err(ExtractError::NoText);
    }
    let title = title
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| text::one_line(stem));
    Ok(Extracted { title, sections })
}

/// A title if the document names one, and its sections.
type Parts = (Option<String>, Vec<Section>);

/// The text formats: UTF-8 without NUL bytes.
fn textual(bytes: &[u8], format: Format, budget: &Budget) -> Result<Parts, ExtractError> {
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(ExtractError::Binary(at));
    }
    let source =
        std::str::from_utf8(bytes).map_err(|e| ExtractError::InvalidUtf8(e.valid_up_to()))?;
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    Ok(match format {
        Format::Markdown => markdown::extract(source, budget)?,
        Format::Html => html::extract(source, budget)?,
        Format::Text | Format::Pdf | Format::Docx => (None, text::plain(source)),
    })
}

/// Sections as (heading path joined by " / ", text), for tests' expectations.
#[cfg(test)]
fn outline(sections: &[Section]) -> Vec<(String, &str)> {
    sections
        .iter()
        .map(|s| (s.heading.join(" / "), s.text.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_bytes_are_refused_with_a_reason() {
        assert_eq!(
            extract(b"", Format::Text, "x", &ExtractLimits::default()),
            Err(ExtractError::Empty)
        );
        assert_eq!(
            extract(b"ab\0cd", Format::Markdown, "x", &ExtractLimits::default()),
            Err(ExtractError::Binary(2))
        );
        assert_eq!(
            extract(
                b"caf\xe9 au lait",
                Format::Text,
                "x",
                &ExtractLimits::default()
            ),
            Err(ExtractError::InvalidUtf8(3))
        );
        assert_eq!(
            extract(b"  \n\n \t", Format::Text, "x", &ExtractLimits::default()),
            Err(ExtractError::NoText)
        );
        assert_eq!(
            extract(
                b"<html><script>x()</script></html>",
                Format::Html,
                "x",
                &ExtractLimits::default()
            ),
            Err(ExtractError::NoText)
        );
    }

    #[test]
    fn plain_text_is_one_section_titled_by_the_file_stem() {
        let e = extract(
            b"\xef\xbb\xbfFirst line\r\nsecond line\r\n\r\n\r\n\r\nNext para  \n",
            Format::Text,
            "notes",
            &ExtractLimits::default(),
        )
        .unwrap();
        assert_eq!(e.title, "notes");
        assert_eq!(
            e.sections,
            [Section {
                heading: vec![],
                text: "First line\nsecond line\n\nNext para".into(),
                page: None,
            }]
        );
    }

    #[test]
    fn control_characters_are_dropped_from_plain_text_and_from_a_stem_title() {
        let e = extract(
            b"\x1b[31mred\x1b[0m\tok\r\n\x07\n\nnext\x08\n",
            Format::Text,
            "bell\x07 \u{202e}notes",
            &ExtractLimits::default(),
        )
        .unwrap();
        assert_eq!(e.title, "bell notes");
        assert_eq!(e.sections[0].text, "[31mred[0m\tok\n\nnext");
    }

    #[test]
    fn formats_come_from_extensions_in_any_case() {
        assert_eq!(Format::of_path(Path::new("a/B.MD")), Some(Format::Markdown));
        assert_eq!(Format::of_path(Path::new("x.htm")), Some(Format::Html));
        assert_eq!(Format::of_path(Path::new("x.text")), Some(Format::Text));
        assert_eq!(Format::of_path(Path::new("x.PDF")), Some(Format::Pdf));
        assert_eq!(Format::of_path(Path::new("x.docx")), Some(Format::Docx));
        assert_eq!(Format::of_path(Path::new("x.doc")), None);
        assert_eq!(Format::of_path(Path::new("README")), None);
    }
}
