//! The text both structured extractors write into: inline text with its whitespace collapsed,
//! paragraph and line breaks, verbatim blocks (code), and headings that close one section and
//! open the next under the heading path they make. Also plain text's extraction. Control
//! characters never get through: a title, heading or uri is one line, and text keeps only its
//! line breaks and tabs.

use super::Section;

/// Builds sections from a stream of extraction events.
#[derive(Debug, Default)]
pub(super) struct SectionsBuilder {
    /// Open headings, outermost first, with their levels (1-6).
    stack: Vec<(u8, String)>,
    sections: Vec<Section>,
    current: String,
    /// Whitespace seen since the last character written, written as one space before the next.
    space: bool,
    /// Inside a table cell, paragraph breaks would split the row: they become spaces.
    cell_depth: usize,
    /// The page the text being written is on, for paged formats (PDF).
    page: Option<u32>,
}

impl SectionsBuilder {
    /// Closes the current section and opens one under `text` at `level`; an empty heading is
    /// ignored.
    pub fn heading(&mut self, level: u8, text: &str) {
        let text = one_line(text);
        if text.is_empty() {
            return;
        }
        self.close_section();
        while self.stack.last().is_some_and(|(l, _)| *l >= level) {
            self.stack.pop();
        }
        self.stack.push((level, text));
    }

    /// Inline text: runs of whitespace become one space, none at a line's start.
    pub fn text(&mut self, text: &str) {
        for c in text.chars() {
            if c.is_whitespace() {
                self.space = true;
                continue;
            }
            if is_hidden(c) {
                continue;
            }
            if self.space && !self.current.is_empty() && !self.current.ends_with('\n') {
                self.current.push(' ');
            }
            self.space = false;
            self.current.push(c);
        }
    }

    /// Text written as is, without collapsing (a list marker, a cell separator).
    pub fn raw(&mut self, text: &str) {
        let spaced = text.starts_with(' ');
        if self.space && !spaced && !self.current.is_empty() && !self.current.ends_with(['\n', ' '])
        {
            self.current.push(' ');
        }
        self.space = false;
        self.current.push_str(text);
    }

    pub fn paragraph_break(&mut self) {
        if self.cell_depth > 0 {
            self.space = true;
            return;
        }
        self.trim_end();
        if !self.current.is_empty() && !self.current.ends_with("\n\n") {
            if self.current.ends_with('\n') {
                self.current.push('\n');
            } else {
                self.current.push_str("\n\n");
            }
        }
    }

    pub fn line_break(&mut self) {
        if self.cell_depth > 0 {
            self.space = true;
            return;
        }
        self.trim_end();
        if !self.current.is_empty() && !self.current.ends_with('\n') {
            self.current.push('\n');
        }
    }

    /// A block kept line for line (code, preformatted text), as its own paragraph.
    pub fn verbatim(&mut self, text: &str) {
        let text = text.trim_matches('\n').trim_end();
        if text.is_empty() {
            return;
        }
        self.paragraph_break();
        for (i, line) in text.lines().enumerate() {
            if i > 0 {
                self.current.push('\n');
            }
            self.current.push_str(&visible_line(line));
        }
        self.paragraph_break();
    }

    /// Closes the current section: what follows is on page `page` (from 1), under the same
    /// headings. Pages are kept apart so that each chunk starts on one known page.
    pub fn page(&mut self, page: u32) {
        self.close_section();
        self.page = Some(page);
    }

    pub fn enter_cell(&mut self) {
        self.cell_depth += 1;
    }

    pub fn leave_cell(&mut self) {
        self.cell_depth = self.cell_depth.saturating_sub(1);
    }

    pub fn finish(mut self) -> Vec<Section> {
        self.close_section();
        self.sections
    }

    fn close_section(&mut self) {
        self.trim_end();
        let text = std::mem::take(&mut self.current);
        self.space = false;
        // Not trim(): a section that opens with code keeps the code's indentation.
        let text = text.trim_start_matches('\n').trim_end();
        if !text.trim().is_empty() {
            self.sections.push(Section {
                heading: self.stack.iter().map(|(_, h)| h.clone()).collect(),
                text: text.to_owned(),
                page: self.page,
            });
        }
    }

    fn trim_end(&mut self) {
        let kept = self.current.trim_end_matches([' ', '\t']).len();
        self.current.truncate(kept);
        self.space = false;
    }
}

/// Characters a reader cannot see that change what they see: control characters other than
/// whitespace (an escape sequence recolours a terminal, a backspace hides what precedes it) and
/// the bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder text.
pub(crate) fn is_hidden(c: char) -> bool {
    (c.is_control() && !c.is_whitespace())
        || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// The most characters of a title or heading kept (then "…"), as a collection's title allows.
/// Every chunk carries its document's title and headings, stored and embedded: uncut, one
/// megabyte-long `<h1>` over a thousand chunks would cost a gigabyte.
pub const MAX_HEADING_CHARS: usize = 500;

/// Text on one line, whole: whitespace runs (line breaks included) to one space, trimmed,
/// hidden characters dropped. A paragraph's text; a title or heading is [`one_line`].
pub(crate) fn flat(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_whitespace() {
        let start = out.len();
        if start > 0 {
            out.push(' ');
        }
        out.extend(word.chars().filter(|&c| !is_hidden(c)));
        if out.len() == start + usize::from(start > 0) {
            out.truncate(start);
        }
    }
    out
}

/// One line for a title or heading: whitespace runs (line breaks included) to one space,
/// trimmed, hidden characters dropped, cut at [`MAX_HEADING_CHARS`].
pub(crate) fn one_line(text: &str) -> String {
    let mut out = String::new();
    let mut chars = 0;
    for word in text.split_whitespace() {
        let visible: String = word.chars().filter(|&c| !is_hidden(c)).collect();
        if visible.is_empty() {
            continue;
        }
        if chars > 0 {
            out.push(' ');
            chars += 1;
        }
        for c in visible.chars() {
            if chars == MAX_HEADING_CHARS {
                out.truncate(out.trim_end().len());
                out.push('…');
                return out;
            }
            out.push(c);
            chars += 1;
        }
    }
    out
}

/// One line of text kept as is but for its hidden characters and its control whitespace other
/// than tabs (a lone carriage return would overwrite the line when printed), end trimmed.
fn visible_line(line: &str) -> String {
    line.chars()
        .filter(|&c| c == '\t' || !(c.is_control() || is_hidden(c)))
        .collect::<String>()
        .trim_end()
        .to_owned()
}

/// Plain text: one section; lines kept, trailing spaces and runs of blank lines dropped.
pub(super) fn plain(source: &str) -> Vec<Section> {
    let mut text = String::with_capacity(source.len());
    let mut blank = false;
    for line in source.lines() {
        let line = visible_line(line);
        if line.is_empty() {
            blank = !text.is_empty();
            continue;
        }
        if !text.is_empty() {
            text.push_str(if blank { "\n\n" } else { "\n" });
        }
        blank = false;
        text.push_str(&line);
    }
    if text.is_empty() {
        Vec::new()
    } else {
        vec![Section {
            heading: Vec::new(),
            text,
            page: None,
        }]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_and_headings_are_one_visible_line_of_at_most_500_characters() {
        assert_eq!(one_line(" a\n\tb\x1b \x07 c\u{202e} "), "a b c");
        assert_eq!(one_line(&"x".repeat(5_000)), "x".repeat(500) + "…");
        assert_eq!(one_line(&"x".repeat(500)), "x".repeat(500));
        assert_eq!(flat(" a\n\tb\x1b \x07 c\u{202e} "), "a b c");
        assert_eq!(flat(&"x".repeat(5_000)), "x".repeat(5_000), "never cut");
        // Not a space before the ellipsis.
        let words = one_line(&"word ".repeat(1_000));
        assert_eq!(words, "word ".repeat(99) + "word…");
    }

    #[test]
    fn headings_nest_by_level_and_empty_sections_vanish() {
        let mut b = SectionsBuilder::default();
        b.text("intro  text\n here");
        b.heading(1, "Guide");
        b.heading(2, " Setup\n ");
        b.text("install it");
        b.paragraph_break();
        b.text("then run");
        b.heading(3, "Linux");
        b.verbatim("\n  apt install x  \n  run\n");
        b.heading(2, "Use");
        b.text("go");
        let s = b.finish();
        let got: Vec<(Vec<&str>, &str)> = s
            .iter()
            .map(|s| {
                (
                    s.heading.iter().map(String::as_str).collect(),
                    s.text.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (vec![], "intro text here"),
                (vec!["Guide", "Setup"], "install it\n\nthen run"),
                (vec!["Guide", "Setup", "Linux"], "  apt install x\n  run"),
                (vec!["Guide", "Use"], "go"),
            ]
        );
    }
}
