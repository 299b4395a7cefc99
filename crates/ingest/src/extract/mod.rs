//! A file's bytes to clean text: a title and sections, each under its heading path. Refuses
//! what is not text (NUL bytes, invalid UTF-8) or has none, with a reason for the summary.
//! Knows nothing of chunks, embeddings or storage.

mod html;
mod markdown;
mod text;

use std::path::Path;

/// Bumped whenever extraction or chunking changes what a file becomes, so the next run
/// replaces documents whose bytes did not change (it is part of the content hash).
pub const EXTRACTOR_VERSION: &str = "parley-ingest/1";

/// The formats Parley extracts, by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Html,
    Text,
}

impl Format {
    /// `.md .markdown .html .htm .txt .text`, in any case.
    pub fn of_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "md" | "markdown" => Some(Format::Markdown),
            "html" | "htm" => Some(Format::Html),
            "txt" | "text" => Some(Format::Text),
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
}

/// Extracts `bytes` as `format`; `stem` (the file name without extension) is the title when the
/// document names none.
pub fn extract(bytes: &[u8], format: Format, stem: &str) -> Result<Extracted, ExtractError> {
    if bytes.is_empty() {
        return Err(ExtractError::Empty);
    }
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(ExtractError::Binary(at));
    }
    let source =
        std::str::from_utf8(bytes).map_err(|e| ExtractError::InvalidUtf8(e.valid_up_to()))?;
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let (title, sections) = match format {
        Format::Markdown => markdown::extract(source),
        Format::Html => html::extract(source),
        Format::Text => (None, text::plain(source)),
    };
    if sections.is_empty() {
        return Err(ExtractError::NoText);
    }
    let title = title
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| stem.to_owned());
    Ok(Extracted { title, sections })
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
        assert_eq!(extract(b"", Format::Text, "x"), Err(ExtractError::Empty));
        assert_eq!(
            extract(b"ab\0cd", Format::Markdown, "x"),
            Err(ExtractError::Binary(2))
        );
        assert_eq!(
            extract(b"caf\xe9 au lait", Format::Text, "x"),
            Err(ExtractError::InvalidUtf8(3))
        );
        assert_eq!(
            extract(b"  \n\n \t", Format::Text, "x"),
            Err(ExtractError::NoText)
        );
        assert_eq!(
            extract(b"<html><script>x()</script></html>", Format::Html, "x"),
            Err(ExtractError::NoText)
        );
    }

    #[test]
    fn plain_text_is_one_section_titled_by_the_file_stem() {
        let e = extract(
            b"\xef\xbb\xbfFirst line\r\nsecond line\r\n\r\n\r\n\r\nNext para  \n",
            Format::Text,
            "notes",
        )
        .unwrap();
        assert_eq!(e.title, "notes");
        assert_eq!(
            e.sections,
            [Section {
                heading: vec![],
                text: "First line\nsecond line\n\nNext para".into()
            }]
        );
    }

    #[test]
    fn formats_come_from_extensions_in_any_case() {
        assert_eq!(Format::of_path(Path::new("a/B.MD")), Some(Format::Markdown));
        assert_eq!(Format::of_path(Path::new("x.htm")), Some(Format::Html));
        assert_eq!(Format::of_path(Path::new("x.text")), Some(Format::Text));
        assert_eq!(Format::of_path(Path::new("x.pdf")), None);
        assert_eq!(Format::of_path(Path::new("README")), None);
    }
}
