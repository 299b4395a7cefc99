//! Sections to chunks: what search ranks and the model reads. A section is never merged with
//! another; within one, paragraphs are packed up to the target size, a paragraph too long for
//! one chunk is cut between sentences (then between words), and each chunk after the first
//! repeats the previous one's last sentences (up to the overlap) so an answer straddling a cut
//! is still found whole in one of them. Sizes are in characters.

use crate::extract::Section;

/// How big chunks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkOptions {
    /// A chunk grows up to this many characters (a single piece longer than it is cut); with
    /// the overlap a chunk may reach target + overlap. ~1000 characters is ~250 word pieces,
    /// inside the built-in model's 256.
    pub target_chars: usize,
    /// Characters of the previous chunk repeated at the start of the next; at most half the
    /// target.
    pub overlap_chars: usize,
    /// A document cut into more chunks than this is skipped (issue 32): a 236 KB Word file
    /// unpacked to 60 MB of text, 70,000 chunks, and the run stored nothing else for minutes.
    /// The built-in model embeds ~10 chunks a second on one core, so 5,000 (a 1,500-page book
    /// of dense text, ~5 MB) is ~8 minutes of a run; a larger document is better split.
    pub max_chunks: usize,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        ChunkOptions {
            target_chars: 1000,
            overlap_chars: 150,
            max_chunks: 5000,
        }
    }
}

impl ChunkOptions {
    /// No more chunks than `chars` characters of text are cut into at the least: none holds
    /// more than the target, the overlap and a break, and a cut drops at most a paragraph
    /// break; halved again for margin. A document over [`ChunkOptions::max_chunks`] by this
    /// count is skipped without being cut (60 MB of text takes seconds to cut).
    pub fn fewest_chunks(&self, chars: usize) -> usize {
        chars / (2 * (self.target_chars.max(1) + self.overlap_chars) + 8)
    }
}

/// One chunk of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The index of the section it was cut from.
    pub section: usize,
    /// Its place in the document, from 0.
    pub position: usize,
    pub heading: Vec<String>,
    pub text: String,
    /// Its section's page (PDF), where its text starts: sections never span pages.
    pub page: Option<u32>,
}

/// Every section's chunks, numbered in document order.
pub fn chunk_sections(sections: &[Section], options: &ChunkOptions) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    for (i, section) in sections.iter().enumerate() {
        for text in split(&section.text, options) {
            chunks.push(Chunk {
                section: i,
                position: chunks.len(),
                heading: section.heading.clone(),
                text,
                page: section.page,
            });
        }
    }
    chunks
}

/// How a piece joins the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Join {
    Paragraph,
    Line,
    Space,
}

impl Join {
    fn as_str(self) -> &'static str {
        match self {
            Join::Paragraph => "\n\n",
            Join::Line => "\n",
            Join::Space => " ",
        }
    }
}

/// One text cut into chunks (none empty).
pub fn split(text: &str, options: &ChunkOptions) -> Vec<String> {
    let target = options.target_chars.max(1);
    let overlap = options.overlap_chars.min(target / 2);
    let mut pieces = Vec::new();
    for paragraph in text.split("\n\n") {
        let paragraph = paragraph.trim_matches('\n').trim_end();
        if paragraph.trim().is_empty() {
            continue;
        }
        if chars(paragraph) <= target {
            pieces.push((Join::Paragraph, paragraph.to_owned()));
            continue;
        }
        for (i, (join, sentence)) in sentences(paragraph).into_iter().enumerate() {
            let join = if i == 0 { Join::Paragraph } else { join };
            if chars(sentence) <= target {
                pieces.push((join, sentence.to_owned()));
            } else {
                for (j, part) in words(sentence, target).into_iter().enumerate() {
                    pieces.push((if j == 0 { join } else { Join::Space }, part));
                }
            }
        }
    }

    let mut chunks = Vec::new();
    let mut current = String::new();
    let mut len = 0;
    for (join, piece) in pieces {
        let piece_len = chars(&piece);
        if current.is_empty() {
            current = piece;
            len = piece_len;
        } else if len + join.as_str().len() + piece_len <= target {
            current.push_str(join.as_str());
            current.push_str(&piece);
            len += join.as_str().len() + piece_len;
        } else {
            let tail = overlap_tail(&current, overlap).to_owned();
            chunks.push(std::mem::take(&mut current));
            if !tail.is_empty() {
                current = tail;
                current.push_str(join.as_str());
            }
            current.push_str(&piece);
            len = chars(&current);
        }
    }
    if !current.trim().is_empty() {
        chunks.push(current);
    }
    chunks
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// A paragraph's sentences: cut after `.`, `!` or `?` followed by whitespace, and at line ends
/// (code, lists, table rows). Each with how it joins the previous one.
fn sentences(paragraph: &str) -> Vec<(Join, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut join = Join::Paragraph;
    let mut iter = paragraph.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        let end = if c == '\n' {
            Some((i, Join::Line))
        } else if matches!(c, '.' | '!' | '?') && iter.peek().is_some_and(|(_, n)| *n == ' ') {
            Some((i + 1, Join::Space))
        } else {
            None
        };
        if let Some((end, next_join)) = end {
            let s = paragraph[start..end].trim_end();
            if !s.trim().is_empty() {
                out.push((join, s));
                join = next_join;
            }
            // After a sentence the spaces are separators; after a newline they are indentation.
            start = if next_join == Join::Space {
                end + paragraph[end..].len() - paragraph[end..].trim_start_matches(' ').len()
            } else {
                end + 1
            };
        }
    }
    let s = paragraph[start.min(paragraph.len())..].trim_end();
    if !s.trim().is_empty() {
        out.push((join, s));
    }
    out
}

/// A sentence longer than the target, cut between words (a word longer than it, anywhere).
fn words(sentence: &str, target: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut len = 0;
    for word in sentence.split_whitespace() {
        let mut word = word;
        loop {
            // Counted no further than the target: a 10 MB word (a file without spaces) is cut
            // 10,000 times, and counting all that is left each time made the cutting quadratic
            // (about 5 s for 10 MB in a debug build).
            let wlen = word.chars().take(target + 1).count();
            let sep = usize::from(!current.is_empty());
            if len + sep + wlen <= target {
                if sep == 1 {
                    current.push(' ');
                }
                current.push_str(word);
                len += sep + wlen;
                break;
            }
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
                len = 0;
                continue;
            }
            // One word longer than a chunk: cut it at the target.
            let cut = word
                .char_indices()
                .nth(target)
                .map_or(word.len(), |(i, _)| i);
            out.push(word[..cut].to_owned());
            word = &word[cut..];
            if word.is_empty() {
                break;
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The end of `chunk` to repeat at the start of the next: at most `overlap` characters,
/// starting at a sentence (or line) start if one is in reach, else at a word.
fn overlap_tail(chunk: &str, overlap: usize) -> &str {
    if overlap == 0 {
        return "";
    }
    let n = chars(chunk);
    if n <= overlap {
        return chunk.trim_start();
    }
    let from = chunk.char_indices().nth(n - overlap).map_or(0, |(i, _)| i);
    let bytes = chunk.as_bytes();
    let starts = |k: usize, sentence: bool| {
        k > 0
            && k < bytes.len()
            && chunk.is_char_boundary(k)
            && !bytes[k].is_ascii_whitespace()
            && if sentence {
                bytes[k - 1] == b'\n'
                    || (bytes[k - 1] == b' '
                        && k >= 2
                        && matches!(bytes[k - 2], b'.' | b'!' | b'?'))
            } else {
                bytes[k - 1].is_ascii_whitespace()
            }
    };
    (from..bytes.len())
        .find(|&k| starts(k, true))
        .or_else(|| (from..bytes.len()).find(|&k| starts(k, false)))
        .map_or("", |k| &chunk[k..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(target: usize, overlap: usize) -> ChunkOptions {
        ChunkOptions {
            target_chars: target,
            overlap_chars: overlap,
            ..ChunkOptions::default()
        }
    }

    #[test]
    fn the_fewest_chunks_a_text_is_cut_into_is_never_more_than_it_is_cut_into() {
        let options = ChunkOptions::default();
        for text in [
            "word ".repeat(50_000),
            "a\n\nb\n\n".repeat(20_000),
            "One sentence. Another one here! ".repeat(10_000),
            "x".repeat(300_000),
        ] {
            let section = Section {
                heading: vec![],
                text: text.trim().to_owned(),
                page: None,
            };
            let chunks = chunk_sections(std::slice::from_ref(&section), &options).len();
            let fewest = options.fewest_chunks(section.text.chars().count());
            assert!(
                fewest <= chunks && fewest * 3 >= chunks,
                "{fewest} {chunks}"
            );
        }
    }

    #[test]
    fn a_word_of_megabytes_is_cut_into_parts_of_the_target() {
        let options = ChunkOptions::default();
        let word = "x".repeat(4_000_000);
        let parts = words(&word, options.target_chars);
        assert_eq!(parts.len(), 4_000);
        assert!(parts.iter().all(|p| p.len() == 1000));
    }

    #[test]
    fn short_text_is_one_chunk_and_paragraphs_pack_to_the_target() {
        assert_eq!(split("Hello world.", &opts(100, 20)), ["Hello world."]);
        let text = "aaaa aaaa.\n\nbbbb bbbb.\n\ncccc cccc.";
        assert_eq!(
            split(text, &opts(24, 0)),
            ["aaaa aaaa.\n\nbbbb bbbb.", "cccc cccc."]
        );
    }

    #[test]
    fn long_paragraphs_cut_between_sentences_and_repeat_the_last_one() {
        let text = "One two three. Four five six. Seven eight nine. Ten eleven twelve.";
        let chunks = split(text, &opts(40, 20));
        assert_eq!(
            chunks,
            [
                "One two three. Four five six.",
                "Four five six. Seven eight nine.",
                "Seven eight nine. Ten eleven twelve."
            ]
        );
    }

    #[test]
    fn nothing_is_lost_and_no_chunk_is_empty_or_far_over_the_target() {
        let word = "x".repeat(2500);
        let text = format!(
            "{}\n\n{}\n\n  indented code\n  more code\n\n{word} tail.",
            "Lorem ipsum dolor sit amet. ".repeat(80),
            "word ".repeat(400),
        );
        let o = opts(1000, 150);
        let chunks = split(&text, &o);
        assert!(chunks.len() > 5, "{}", chunks.len());
        for c in &chunks {
            assert!(!c.trim().is_empty());
            assert!(chars(c) <= 1000 + 150 + 2, "{} chars", chars(c));
        }
        let joined = chunks.concat();
        for must in ["indented code\n  more code", "tail.", "Lorem ipsum"] {
            assert!(joined.contains(must), "{must}");
        }
        assert!(joined.matches('x').count() >= 2500);
    }

    #[test]
    fn chunks_carry_their_sections_heading_and_number_on_through_the_document() {
        let sections = vec![
            Section {
                heading: vec!["A".into()],
                text: "First. ".repeat(30).trim_end().to_owned(),
                page: None,
            },
            Section {
                heading: vec!["A".into(), "B".into()],
                text: "Second.".into(),
                page: Some(2),
            },
        ];
        let chunks = chunk_sections(&sections, &opts(100, 20));
        let last = chunks.last().unwrap();
        assert_eq!(last.heading, ["A", "B"]);
        assert_eq!(last.text, "Second.");
        assert_eq!(last.section, 1);
        assert_eq!(last.page, Some(2));
        assert_eq!(chunks[0].page, None);
        assert_eq!(
            chunks.iter().map(|c| c.position).collect::<Vec<_>>(),
            (0..chunks.len()).collect::<Vec<_>>()
        );
        assert!(chunks[..chunks.len() - 1].iter().all(|c| c.section == 0));
    }
}
