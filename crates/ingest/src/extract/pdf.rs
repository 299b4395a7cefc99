//! PDF to sections with `pdf-extract` (pure Rust, on `lopdf`): each page's glyphs with their
//! positions and sizes become lines, lines become paragraphs, lines set larger than the body
//! text become headings (PDFs rarely tag them), and a line repeated at the top or bottom of
//! most pages (a running header or footer, page numbers aside) is dropped. Pages stay apart.
//! Before pdf-extract runs, `guard` checks and bounds what it will cost (issue 32).

mod decode;
mod guard;
mod lexer;
mod xref;

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use pdf_extract::{Document, MediaBox, Object, OutputDev, OutputError, Transform};

use super::text::{SectionsBuilder, one_line};
use super::{Budget, ExtractError, Parts};
use guard::Meter;

/// A line this much larger than the body text (the size most characters are set in) is a
/// heading: 1.15 keeps a 10pt body's 11.5pt sub-headings and leaves bold body text out.
const HEADING_RATIO: f64 = 1.15;

/// Headings are short: a longer line set large is a pull quote or a title page's blurb.
const MAX_HEADING_CHARS: usize = 200;

/// A gap between two glyphs wider than this share of the font size is a space between words.
/// Kerning and the rounding of glyph widths leave gaps of up to ~0.15 (Chromium's headings);
/// a space is ~0.25-0.3.
const WORD_GAP: f64 = 0.2;

/// A gap wider than this share of the size separates words even on a page with space glyphs:
/// table cells and columns are placed apart without one.
const COLUMN_GAP: f64 = 1.0;

/// The lines at each edge of a page that may be a running header or footer.
const EDGE_LINES: usize = 2;

/// One line of a page, in the order the page draws it.
#[derive(Debug, Clone)]
struct Line {
    text: String,
    /// The baseline, from the page's bottom.
    y: f64,
    /// The largest character size on it, in points.
    size: f64,
    /// Characters on it.
    chars: usize,
}

/// One glyph as `pdf-extract` reports it.
#[derive(Debug, Clone)]
struct Glyph {
    x: f64,
    y: f64,
    size: f64,
    /// Where the next glyph would start without a gap.
    end: f64,
    text: String,
}

/// Collects each page's lines from the glyphs `pdf-extract` reports, within the time, the
/// characters a page may show and the bytes of text the document may unpack to.
struct Collector<'a> {
    budget: &'a Budget,
    pages: Vec<Vec<Line>>,
    glyphs: Vec<Glyph>,
    /// Why the collection stopped early; pdf-extract only sees a formatting error.
    stopped: Option<ExtractError>,
    seen: usize,
    /// Bytes of text kept so far, the current page's included.
    text_bytes: u64,
}

impl Collector<'_> {
    /// Stops pdf-extract with `why` (kept for the caller) if it is an error.
    fn check(&mut self, why: Result<(), ExtractError>) -> Result<(), OutputError> {
        why.map_err(|e| {
            self.stopped = Some(e);
            OutputError::FormatError(std::fmt::Error)
        })
    }
}

/// A page's glyphs, in the order it draws them, as lines. Where the page has space glyphs
/// (most producers, Chromium among them, draw them) only they separate words: glyph widths
/// read from subset fonts are often short, and a gap rule then splits words ("Syn o p si s").
/// Where it has none, a gap wider than [`WORD_GAP`] of the size is a space.
fn lines(glyphs: &[Glyph]) -> Vec<Line> {
    let spaced = glyphs.iter().any(|g| g.text.trim().is_empty());
    let mut lines: Vec<Line> = Vec::new();
    let mut last_end = f64::MAX;
    let mut space = false;
    for g in glyphs {
        if g.text.trim().is_empty() {
            space = true;
            continue;
        }
        let same_line = lines
            .last()
            .is_some_and(|l| (l.y - g.y).abs() <= g.size.max(l.size) * 0.5);
        if !same_line {
            lines.push(Line {
                text: String::new(),
                y: g.y,
                size: g.size,
                chars: 0,
            });
        } else if space
            || g.x > last_end + g.size * COLUMN_GAP
            || (!spaced && g.x > last_end + g.size * WORD_GAP)
        {
            lines.last_mut().expect("one is open").text.push(' ');
        }
        space = false;
        let line = lines.last_mut().expect("one is open");
        push_unligated(&mut line.text, &g.text);
        line.chars += g.text.chars().count();
        line.size = line.size.max(g.size);
        last_end = g.end;
    }
    lines
}

/// Typographic ligatures (one glyph for "fi") written as their letters, so words match.
fn push_unligated(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '\u{fb00}' => out.push_str("ff"),
            '\u{fb01}' => out.push_str("fi"),
            '\u{fb02}' => out.push_str("fl"),
            '\u{fb03}' => out.push_str("ffi"),
            '\u{fb04}' => out.push_str("ffl"),
            '\u{fb05}' | '\u{fb06}' => out.push_str("st"),
            c => out.push(c),
        }
    }
}

impl OutputDev for Collector<'_> {
    fn begin_page(
        &mut self,
        _: u32,
        _: &MediaBox,
        _: Option<(f64, f64, f64, f64)>,
    ) -> Result<(), OutputError> {
        self.glyphs.clear();
        // Time is checked at each page's edges too: a page may output no glyph at all.
        let time = self.budget.check_time();
        self.check(time)
    }

    fn end_page(&mut self) -> Result<(), OutputError> {
        self.pages.push(lines(&self.glyphs));
        self.glyphs.clear();
        let time = self.budget.check_time();
        self.check(time)
    }

    fn output_character(
        &mut self,
        trm: &Transform,
        width: f64,
        _spacing: f64,
        font_size: f64,
        text: &str,
    ) -> Result<(), OutputError> {
        self.seen += 1;
        if self.seen.is_multiple_of(512) {
            let time = self.budget.check_time();
            self.check(time)?;
        }
        if self.glyphs.len() >= self.budget.limits.max_page_chars {
            let full = Err(ExtractError::TooManyChars {
                page: self.pages.len() + 1,
                limit: self.budget.limits.max_page_chars,
            });
            return self.check(full);
        }
        self.text_bytes += text.len() as u64;
        if self.text_bytes > self.budget.limits.max_unpacked_bytes {
            let full = Err(ExtractError::TooLarge(
                self.budget.limits.max_unpacked_bytes,
            ));
            return self.check(full);
        }
        // The text matrix scales the font: the size drawn is the font size through it (the
        // side of the square of the same area, as pdf-extract's own text output measures it).
        let vx = font_size * (trm.m11 + trm.m21);
        let vy = font_size * (trm.m12 + trm.m22);
        let size = (vx * vy).abs().sqrt();
        self.glyphs.push(Glyph {
            x: trm.m31,
            y: trm.m32,
            size,
            end: trm.m31 + width * size,
            text: text.to_owned(),
        });
        Ok(())
    }

    fn begin_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_word(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    fn end_line(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    // A page of paths outputs no glyph; its painting operators are where time can be checked.
    fn stroke(
        &mut self,
        _: &Transform,
        _: &pdf_extract::ColorSpace,
        _: &[f64],
        _: &pdf_extract::Path,
    ) -> Result<(), OutputError> {
        self.paths()
    }

    fn fill(
        &mut self,
        _: &Transform,
        _: &pdf_extract::ColorSpace,
        _: &[f64],
        _: &pdf_extract::Path,
    ) -> Result<(), OutputError> {
        self.paths()
    }
}

impl Collector<'_> {
    /// A path painted: the time is checked every 512, as glyphs are.
    fn paths(&mut self) -> Result<(), OutputError> {
        self.seen += 1;
        if self.seen.is_multiple_of(512) {
            let time = self.budget.check_time();
            self.check(time)?;
        }
        Ok(())
    }
}

/// A PDF's title (its Info dictionary's) and sections, page by page.
pub(super) fn extract(bytes: &[u8], budget: &Budget) -> Result<Parts, ExtractError> {
    let broken = |e: String| ExtractError::Broken("PDF", e);
    let limit = budget.limits.max_unpacked_bytes;
    // lopdf inflates cross-reference streams first, before any object.
    xref::check(bytes, limit).map_err(|_| ExtractError::TooLarge(limit))?;
    let mut meter = Meter::new(limit);
    let mut doc = guard::load(bytes, &mut meter)?;
    if doc.is_encrypted() && doc.decrypt("").is_err() {
        // Many PDFs are encrypted with an empty user password (only printing or copying is
        // restricted); the others need a password nobody gave.
        return Err(ExtractError::Encrypted);
    }
    let pages = guard::check_page_tree(&doc)?;
    if pages > budget.limits.max_pdf_pages {
        return Err(ExtractError::TooManyPages(
            pages,
            budget.limits.max_pdf_pages,
        ));
    }
    // lopdf's accessors index and unwrap in places a malformed file reaches.
    catch_unwind(AssertUnwindSafe(|| {
        guard::Prepare::new(budget, &mut meter).pages(&mut doc)
    }))
    .map_err(|_| broken("the parser failed on its structure".into()))??;
    let title = info_title(&doc);
    let mut collector = Collector {
        budget,
        pages: Vec::new(),
        glyphs: Vec::new(),
        stopped: None,
        seen: 0,
        text_bytes: 0,
    };
    // pdf-extract indexes and unwraps in places a malformed file reaches: a panic there is
    // one file's failure, not the run's.
    let out = catch_unwind(AssertUnwindSafe(|| {
        pdf_extract::output_doc(&doc, &mut collector)
    }));
    if let Some(why) = collector.stopped {
        return Err(why);
    }
    match out {
        Err(_) => return Err(broken("the parser failed on its content".into())),
        Ok(Err(e)) => return Err(broken(e.to_string())),
        Ok(Ok(())) => {}
    }
    let mut page_lines = collector.pages;
    if page_lines
        .iter()
        .all(|p| p.iter().all(|l| l.text.trim().is_empty()))
    {
        return Err(ExtractError::NoTextLayer(pages));
    }
    drop_running_lines(&mut page_lines);
    Ok((title, sections(&page_lines)))
}

/// The document's Title from its Info dictionary, if it names one.
fn info_title(doc: &Document) -> Option<String> {
    let info = doc.trailer.get(b"Info").ok()?;
    let info = match info {
        Object::Reference(id) => doc.get_dictionary(*id).ok()?,
        Object::Dictionary(d) => d,
        _ => return None,
    };
    let Object::String(raw, _) = info.get(b"Title").ok()? else {
        return None;
    };
    let text = decode_text_string(raw);
    let title = one_line(&text);
    (!title.is_empty()).then_some(title)
}

/// A PDF text string: UTF-16BE after its byte order mark, else (close enough to
/// PDFDocEncoding for titles) Latin-1.
fn decode_text_string(raw: &[u8]) -> String {
    if let Some(rest) = raw.strip_prefix(&[0xfe, 0xff]) {
        let units: Vec<u16> = rest
            .chunks_exact(2)
            .map(|p| u16::from_be_bytes([p[0], p[1]]))
            .collect();
        String::from_utf16_lossy(&units)
    } else if let Ok(s) = std::str::from_utf8(raw.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(raw))
    {
        s.to_owned()
    } else {
        raw.iter().map(|&b| b as char).collect()
    }
}

/// A line's text with its digits stood for by one `#`, so "Page 3 of 9" and "Page 4 of 9"
/// (or a date and a page number) count as the same running line.
fn running_key(text: &str) -> String {
    let mut key = String::new();
    let mut digits = false;
    for c in text.split_whitespace().flat_map(|w| w.chars().chain([' '])) {
        if c.is_ascii_digit() {
            if !digits {
                key.push('#');
            }
            digits = true;
        } else {
            key.push(c);
            digits = false;
        }
    }
    key.trim_end().to_owned()
}

/// The indexes of a page's top and bottom [`EDGE_LINES`] lines, by position on the page.
fn edge_lines(lines: &[Line]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..lines.len())
        .filter(|&i| !lines[i].text.trim().is_empty())
        .collect();
    order.sort_by(|&a, &b| lines[b].y.total_cmp(&lines[a].y));
    let mut edges: Vec<usize> = order.iter().take(EDGE_LINES).copied().collect();
    edges.extend(order.iter().rev().take(EDGE_LINES));
    edges.sort_unstable();
    edges.dedup();
    edges
}

/// Drops running headers and footers: a line at a page's edge whose text (digits aside)
/// is at an edge of more than half the pages, when there are at least two.
fn drop_running_lines(pages: &mut [Vec<Line>]) {
    if pages.len() < 2 {
        return;
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for lines in pages.iter() {
        let mut keys: Vec<String> = edge_lines(lines)
            .into_iter()
            .map(|i| running_key(&lines[i].text))
            .collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            *seen.entry(key).or_default() += 1;
        }
    }
    let count = pages.len();
    let running = |key: &str| seen.get(key).is_some_and(|&n| n * 2 > count);
    for lines in pages.iter_mut() {
        let drop: Vec<usize> = edge_lines(lines)
            .into_iter()
            .filter(|&i| running(&running_key(&lines[i].text)))
            .collect();
        for i in drop.into_iter().rev() {
            lines.remove(i);
        }
    }
}

/// The size most characters are set in, rounded to a quarter point.
fn body_size(pages: &[Vec<Line>]) -> f64 {
    let mut chars: HashMap<i64, usize> = HashMap::new();
    for line in pages.iter().flatten() {
        *chars.entry((line.size * 4.0).round() as i64).or_default() += line.chars;
    }
    chars
        .into_iter()
        .max_by_key(|&(size, n)| (n, -size))
        .map_or(0.0, |(size, _)| size as f64 / 4.0)
}

fn is_heading(line: &Line, body: f64) -> bool {
    line.size >= body * HEADING_RATIO
        && line.chars <= MAX_HEADING_CHARS
        && line.text.chars().any(char::is_alphabetic)
}

/// Pages to sections: headings by size (the largest size is level 1), paragraphs where the
/// gap between two lines is wider than a line and a half.
fn sections(pages: &[Vec<Line>]) -> Vec<super::Section> {
    let body = body_size(pages);
    let mut sizes: Vec<i64> = pages
        .iter()
        .flatten()
        .filter(|l| is_heading(l, body))
        .map(|l| (l.size * 4.0).round() as i64)
        .collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    sizes.dedup();
    let level = |size: f64| {
        let key = (size * 4.0).round() as i64;
        let at = sizes.iter().position(|&s| s == key).unwrap_or(sizes.len());
        (at + 1).min(6) as u8
    };

    let mut out = SectionsBuilder::default();
    for (n, lines) in pages.iter().enumerate() {
        out.page(n as u32 + 1);
        let mut pending: Option<(f64, String)> = None;
        let mut last: Option<&Line> = None;
        for line in lines {
            if is_heading(line, body) {
                // A heading wrapped over two lines is one heading.
                match &mut pending {
                    Some((size, text)) if (*size - line.size).abs() < 0.25 => {
                        text.push(' ');
                        text.push_str(&line.text);
                    }
                    _ => {
                        if let Some((size, text)) = pending.take() {
                            out.heading(level(size), &text);
                        }
                        pending = Some((line.size, line.text.clone()));
                    }
                }
                last = None;
                continue;
            }
            if let Some((size, text)) = pending.take() {
                out.heading(level(size), &text);
            }
            if let Some(prev) = last {
                let gap = (prev.y - line.y).abs();
                if gap > prev.size.max(line.size) * 1.5 || line.y > prev.y {
                    out.paragraph_break();
                } else {
                    out.line_break();
                }
            }
            out.text(&line.text);
            last = Some(line);
        }
        if let Some((size, text)) = pending.take() {
            out.heading(level(size), &text);
        }
    }
    let mut sections = out.finish();
    // Lines of a paragraph were kept apart above so a list stays a list; a line that ends in
    // the middle of a sentence is joined to the next, so chunks cut between sentences.
    for s in &mut sections {
        s.text = join_wrapped(&s.text);
    }
    sections
}

/// Joins a paragraph's lines wrapped at the page's margin: a line break is kept only before
/// a line that starts a list item ("•", "-", "1.") .
fn join_wrapped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, para) in text.split("\n\n").enumerate() {
        if i > 0 {
            out.push_str("\n\n");
        }
        for (j, line) in para.lines().enumerate() {
            if j > 0 {
                let item = line.starts_with(['•', '-', '–', '◦', '▪'])
                    || line.split_once(". ").is_some_and(|(n, _)| {
                        !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())
                    });
                if item {
                    out.push('\n');
                } else if out.ends_with('-') && !out.ends_with(" -") {
                    // A word hyphenated at the margin.
                    out.pop();
                } else {
                    out.push(' ');
                }
            }
            out.push_str(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, y: f64, size: f64) -> Line {
        Line {
            text: text.into(),
            y,
            size,
            chars: text.chars().count(),
        }
    }

    const BODY: [[&str; 2]; 3] = [
        ["Roles own objects.", "A role may log in."],
        ["Passwords expire.", "Until a given time."],
        ["Members inherit.", "Privileges flow down."],
    ];

    #[test]
    fn a_line_at_the_top_or_bottom_of_most_pages_is_dropped_whatever_its_page_number() {
        let mut pages: Vec<Vec<Line>> = (1..=3)
            .map(|n| {
                let body = [BODY[n - 1][0], BODY[n - 1][1]];
                vec![
                    line("11/27/26, 8:05 AM  PostgreSQL: CREATE ROLE", 800.0, 8.0),
                    line(body[0], 700.0, 10.0),
                    line(body[1], 600.0, 10.0),
                    line(&format!("file:///doc/sql-createrole.html {n}/3"), 20.0, 8.0),
                ]
            })
            .collect();
        drop_running_lines(&mut pages);
        for (n, lines) in pages.iter().enumerate() {
            let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
            assert_eq!(texts, BODY[n]);
        }
    }

    #[test]
    fn larger_lines_become_headings_by_size_and_pages_stay_apart() {
        let pages = vec![
            vec![
                line("Chapter One", 800.0, 20.0),
                line("Body text that runs on and", 760.0, 10.0),
                line("wraps to the next line.", 748.0, 10.0),
                line("A Section", 700.0, 14.0),
                line("More body text here.", 680.0, 10.0),
            ],
            vec![line("Still in the section.", 800.0, 10.0)],
        ];
        let sections = sections(&pages);
        let got: Vec<(String, &str, Option<u32>)> = sections
            .iter()
            .map(|s| (s.heading.join(" / "), s.text.as_str(), s.page))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "Chapter One".into(),
                    "Body text that runs on and wraps to the next line.",
                    Some(1)
                ),
                (
                    "Chapter One / A Section".into(),
                    "More body text here.",
                    Some(1)
                ),
                (
                    "Chapter One / A Section".into(),
                    "Still in the section.",
                    Some(2)
                ),
            ]
        );
    }

    #[test]
    fn garbage_is_a_broken_file_not_a_panic() {
        let budget = Budget::test();
        for bytes in [
            &b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF"[..],
            b"not a pdf at all",
            b"%PDF-1.4\n\xff\xfe\x00garbage",
        ] {
            match extract(bytes, &budget) {
                Err(ExtractError::Broken("PDF", _)) | Err(ExtractError::NoTextLayer(_)) => {}
                other => panic!("{other:?}"),
            }
        }
    }
}
