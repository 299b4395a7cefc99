//! Markdown (CommonMark with tables) to sections: headings make the heading path, code blocks
//! are kept line for line, list items and table rows are lines. Raw HTML (with the text
//! between an inline `<script>` or `<style>` and its end tag) and YAML front matter are left
//! out (its flat scalars become the document's metadata: `crate::metadata::front_matter`).
//! The first level-1 heading is the title.

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd};

use super::text::{SectionsBuilder, one_line};
use super::{Budget, ExtractError, Section};

/// Events between two checks of the time.
const EVENTS_PER_CHECK: usize = 1024;

pub(super) fn extract(
    source: &str,
    budget: &Budget,
) -> Result<(Option<String>, Vec<Section>), ExtractError> {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS;
    let mut b = SectionsBuilder::default();
    let mut title = None;
    // Text being gathered for a heading or a code block, which are written whole.
    let mut heading: Option<(u8, String)> = None;
    let mut code: Option<String> = None;
    let mut metadata = false;
    let mut first_cell = false;
    // Inside an inline `<script>` or `<style>`: its text is code, not prose.
    let mut script = false;
    for (n, event) in Parser::new_ext(source, options).enumerate() {
        if (n + 1).is_multiple_of(EVENTS_PER_CHECK) {
            budget.check_time()?;
        }
        // A paragraph or heading ends an unclosed inline script, as it ends its raw HTML.
        if matches!(event, Event::End(TagEnd::Paragraph | TagEnd::Heading(_))) {
            script = false;
        }
        match event {
            Event::InlineHtml(tag) => script = opens_script(&tag, script),
            Event::Text(_) | Event::Code(_) if script => {}
            Event::Start(Tag::MetadataBlock(_)) => metadata = true,
            Event::End(TagEnd::MetadataBlock(_)) => metadata = false,
            _ if metadata => {}
            // HeadingLevel::H1 is 1, through H6, 6.
            Event::Start(Tag::Heading { level, .. }) => {
                heading = Some((level as u8, String::new()))
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some((level, text)) = heading.take() {
                    if level == 1 && title.is_none() {
                        title = Some(one_line(&text)).filter(|t| !t.is_empty());
                    }
                    b.heading(level, &text);
                }
            }
            // A fence's language tag is not text: only the block's lines are kept.
            Event::Start(Tag::CodeBlock(_)) => code = Some(String::new()),
            Event::End(TagEnd::CodeBlock) => {
                if let Some(text) = code.take() {
                    b.verbatim(&text);
                }
            }
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, h)) = &mut heading {
                    h.push_str(&t);
                } else if let Some(c) = &mut code {
                    c.push_str(&t);
                } else {
                    b.text(&t);
                }
            }
            Event::SoftBreak => match &mut heading {
                Some((_, h)) => h.push(' '),
                None => b.text(" "),
            },
            Event::HardBreak => b.line_break(),
            Event::Start(Tag::Item) => {
                b.line_break();
                b.raw("- ");
            }
            Event::End(TagEnd::Item) => b.line_break(),
            Event::Start(Tag::TableHead | Tag::TableRow) => {
                b.line_break();
                first_cell = true;
            }
            Event::End(TagEnd::TableHead | TagEnd::TableRow) => b.line_break(),
            Event::Start(Tag::TableCell) => {
                if !first_cell {
                    b.raw(" | ");
                }
                first_cell = false;
                b.enter_cell();
            }
            Event::End(TagEnd::TableCell) => b.leave_cell(),
            Event::Start(
                Tag::Paragraph
                | Tag::BlockQuote(_)
                | Tag::List(_)
                | Tag::Table(_)
                | Tag::FootnoteDefinition(_),
            )
            | Event::End(
                TagEnd::Paragraph
                | TagEnd::BlockQuote(_)
                | TagEnd::List(_)
                | TagEnd::Table
                | TagEnd::FootnoteDefinition,
            )
            | Event::Rule => b.paragraph_break(),
            // Raw HTML, images' URLs, footnote marks, math and the rest carry no prose.
            _ => {}
        }
    }
    Ok((title, b.finish()))
}

/// Whether the text after inline HTML `tag` is a script's, given whether the text before was.
fn opens_script(tag: &CowStr<'_>, script: bool) -> bool {
    let tag = tag.trim_start().to_ascii_lowercase();
    if tag.starts_with("</script") || tag.starts_with("</style") {
        false
    } else if tag.starts_with("<script") || tag.starts_with("<style") {
        // `<script/>` encloses nothing.
        !tag.trim_end().ends_with("/>")
    } else {
        script
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_code_lists_and_tables() {
        let md = "---\nauthor: me\n---\nLead in.\n\n# Install *Guide*\n\nRead\nthis first.\n\n\
                  ## Linux\n\n```sh\n  apt install x\n```\n\n- one\n- two `code`\n\n\
                  | a | b |\n|---|---|\n| 1 | 2 |\n\n<div>raw</div>\n\n# Second\n\ntext\n";
        let (title, sections) = extract(md, &Budget::test()).unwrap();
        assert_eq!(title.as_deref(), Some("Install Guide"));
        assert_eq!(
            super::super::outline(&sections),
            [
                (String::new(), "Lead in."),
                ("Install Guide".into(), "Read this first."),
                (
                    "Install Guide / Linux".into(),
                    "  apt install x\n\n- one\n- two code\n\na | b\n1 | 2"
                ),
                ("Second".into(), "text"),
            ]
        );
    }

    #[test]
    fn inline_scripts_and_control_characters_are_left_out() {
        let md = "# Guide <script>alert(1)</script>\x07\n\ntext\x1b <SCRIPT>x()</SCRIPT>more <style>b{}\n\n## Next\n\nend\n";
        let (title, sections) = extract(md, &Budget::test()).unwrap();
        assert_eq!(title.as_deref(), Some("Guide"));
        assert_eq!(
            super::super::outline(&sections),
            [
                ("Guide".into(), "text more"),
                ("Guide / Next".into(), "end")
            ]
        );
    }
}
