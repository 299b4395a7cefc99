//! A document's card: one short text saying what the whole page is about (its title, its
//! opening lines, its section headings), embedded beside its chunks so a question that
//! describes a page ("physically reorder a table to follow an index") can find it even when no
//! single passage says so in those words (issue 24, granularities).

use crate::Section;

/// Characters of the document's opening text on its card: a reference page's one-line purpose
/// and the start of its first paragraph, well inside the model's 256 word pieces.
const OPENING_CHARS: usize = 400;

/// Headings listed on the card, outermost first, at most this many characters in all.
const HEADINGS_CHARS: usize = 300;

/// `Title. Opening text… Sections: A; B; C.`
pub fn card(title: &str, sections: &[Section]) -> String {
    let mut out = String::new();
    out.push_str(title.trim());
    let opening: String = sections
        .iter()
        .map(|s| s.text.trim())
        .filter(|t| !t.is_empty())
        .flat_map(|t| t.split_whitespace().chain(std::iter::once("")))
        .filter(|w| !w.is_empty())
        .scan(0usize, |len, w| {
            *len += w.chars().count() + 1;
            (*len <= OPENING_CHARS).then_some(w)
        })
        .collect::<Vec<_>>()
        .join(" ");
    if !opening.is_empty() {
        out.push_str(". ");
        out.push_str(&opening);
    }
    let mut seen = Vec::<&str>::new();
    let mut used = 0;
    for s in sections {
        if let Some(h) = s.heading.last().map(String::as_str)
            && h != title
            && !seen.contains(&h)
        {
            used += h.chars().count() + 2;
            if used > HEADINGS_CHARS {
                break;
            }
            seen.push(h);
        }
    }
    if !seen.is_empty() {
        out.push_str(". Sections: ");
        out.push_str(&seen.join("; "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(heading: &[&str], text: &str) -> Section {
        Section {
            heading: heading.iter().map(|h| (*h).to_owned()).collect(),
            text: text.into(),
            page: None,
        }
    }

    #[test]
    fn a_card_has_the_title_the_opening_lines_and_the_headings() {
        let sections = [
            section(
                &["CLUSTER"],
                "CLUSTER — cluster a table according to an index",
            ),
            section(
                &["CLUSTER", "Synopsis"],
                "CLUSTER [VERBOSE] table_name [ USING index_name ]",
            ),
            section(
                &["CLUSTER", "Description"],
                "CLUSTER instructs PostgreSQL to cluster the table.",
            ),
            section(&["CLUSTER", "Description"], "more"),
        ];
        let c = card("CLUSTER", &sections);
        assert!(
            c.starts_with("CLUSTER. CLUSTER — cluster a table according to an index CLUSTER"),
            "{c}"
        );
        assert!(c.ends_with(". Sections: Synopsis; Description"), "{c}");
    }

    #[test]
    fn long_openings_and_many_headings_are_cut() {
        let long = "word ".repeat(500);
        let many: Vec<Section> = (0..100)
            .map(|i| section(&["T", &format!("Heading number {i}")], &long))
            .collect();
        let c = card("T", &many);
        assert!(
            c.chars().count() < OPENING_CHARS + HEADINGS_CHARS + 40,
            "{}",
            c.len()
        );
        assert!(c.contains("Heading number 0") && !c.contains("Heading number 99"));
    }
}
