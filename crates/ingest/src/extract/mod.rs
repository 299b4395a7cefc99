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
pub const EXTRACTOR_VERSION: &str = "parley-ingest/3";

/// Bounds on one file's extraction, so that one hostile file is skipped with a reason instead
/// of crashing or stalling the run.
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
    /// The most bytes a Word file's parts (`word/document.xml`, `word/styles.xml`) may unpack
    /// to: a zip of a few kilobytes can inflate to gigabytes. A 500-page manual's document.xml
    /// is ~10 MB.
    pub max_unpacked_bytes: u64,
}

impl Default for ExtractLimits {
    fn default() -> Self {
        ExtractLimits {
            max_html_depth: 512,
            max_time: Duration::from_secs(30),
            max_pdf_pages: 2000,
            max_unpacked_bytes: 64 << 20,
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
