//! Aligned text tables for what the subcommands print on a terminal (`audit`, `collections`,
//! `enroll --list`). Cells hold text others chose (subjects, titles, SQL), so [`one_line`]
//! turns control characters into spaces: a row must not be able to drive the terminal.

/// `lines` (the header first) as columns two spaces apart; a column marked in `right_aligned`
/// is padded on the left (numbers), the others on the right, the last not at all.
pub fn aligned(lines: &[Vec<String>], right_aligned: &[bool]) -> String {
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for line in lines {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in lines {
        let mut text = String::new();
        for (i, cell) in line.iter().enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            let pad = " ".repeat(widths[i] - cell.chars().count());
            if right_aligned.get(i).copied().unwrap_or(false) {
                text.push_str(&pad);
                text.push_str(cell);
            } else {
                text.push_str(cell);
                // The last column is not padded: no trailing blanks on every line.
                if i + 1 < line.len() {
                    text.push_str(&pad);
                }
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out
}

/// Runs of whitespace and control characters (newlines, tabs, escapes) and the bidirectional
/// overrides that reorder what a terminal shows become single spaces.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut gap = false;
    for c in text.trim().chars() {
        if c.is_whitespace() || c.is_control() || is_bidi_control(c) {
            gap = true;
        } else {
            if gap && !out.is_empty() {
                out.push(' ');
            }
            gap = false;
            out.push(c);
        }
    }
    out
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// At most `max` characters, the last an ellipsis when something was cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}
