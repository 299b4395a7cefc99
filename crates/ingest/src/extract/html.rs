//! HTML to sections: the body's text in reading order, h1-h6 as the heading path, `pre` kept
//! line for line, table rows as lines of ` | `-separated cells. Page furniture is dropped:
//! script, style, nav, header, footer, forms, and the navigation bars DocBook puts around
//! every page of the PostgreSQL manual (`div.navheader`, `div.navfooter`).

use scraper::{ElementRef, Html, Node, Selector};

use super::Section;
use super::text::{SectionsBuilder, collapse};

/// Elements whose content is never document text.
const DROPPED: &[&str] = &[
    "script", "style", "nav", "header", "footer", "noscript", "template", "head", "svg", "iframe",
    "button", "select", "textarea", "input", "form", "object", "canvas",
];
/// Classes of DocBook's navigation bars (Prev / Up / Home / Next).
const DROPPED_CLASSES: &[&str] = &["navheader", "navfooter"];
/// Classes of DocBook's admonitions: their heading ("Note", "Warning") labels the box, it
/// does not open a section, or the text after the box would land under "Note".
const ADMONITIONS: &[&str] = &["note", "tip", "important", "warning", "caution"];
/// Elements that start and end a paragraph.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "aside",
    "blockquote",
    "ul",
    "ol",
    "dl",
    "table",
    "thead",
    "tbody",
    "tfoot",
    "figure",
    "figcaption",
    "caption",
    "address",
    "details",
    "summary",
    "fieldset",
    "center",
];
/// Elements that sit on their own line.
const LINES: &[&str] = &["dt", "dd", "td", "th"];

pub(super) fn extract(source: &str) -> (Option<String>, Vec<Section>) {
    let doc = Html::parse_document(source);
    let mut b = SectionsBuilder::default();
    let mut first_h1 = None;
    walk(doc.root_element(), &mut b, &mut first_h1);
    let title = Selector::parse("title")
        .ok()
        .and_then(|sel| doc.select(&sel).next())
        .map(|t| collapse(&t.text().collect::<String>()))
        .filter(|t| !t.is_empty())
        .or(first_h1);
    (title, b.finish())
}

fn walk(el: ElementRef<'_>, b: &mut SectionsBuilder, first_h1: &mut Option<String>) {
    let e = el.value();
    let name = e.name();
    if DROPPED.contains(&name) || e.classes().any(|c| DROPPED_CLASSES.contains(&c)) {
        return;
    }
    if let Some(level) = heading_level(name) {
        let text = el.text().collect::<String>();
        if level == 1 && first_h1.is_none() {
            *first_h1 = Some(collapse(&text)).filter(|t| !t.is_empty());
        }
        b.heading(level, &text);
        return;
    }
    if name == "div" && e.classes().any(|c| ADMONITIONS.contains(&c)) {
        b.paragraph_break();
        for child in el.children() {
            match ElementRef::wrap(child) {
                Some(h) if heading_level(h.value().name()).is_some() => {
                    b.text(&h.text().collect::<String>());
                    b.raw(":");
                    b.line_break();
                }
                Some(other) => walk(other, b, first_h1),
                None => {
                    if let Node::Text(t) = child.value() {
                        b.text(t);
                    }
                }
            }
        }
        b.paragraph_break();
        return;
    }
    match name {
        "pre" => b.verbatim(&el.text().collect::<String>()),
        "br" => b.line_break(),
        "hr" => b.paragraph_break(),
        "li" => {
            b.line_break();
            b.raw("- ");
            children(el, b, first_h1);
            b.line_break();
        }
        "tr" => {
            b.line_break();
            let mut first = true;
            for cell in el.children().filter_map(ElementRef::wrap) {
                if !first {
                    b.raw(" | ");
                }
                first = false;
                b.enter_cell();
                children(cell, b, first_h1);
                b.leave_cell();
            }
            b.line_break();
        }
        _ if BLOCKS.contains(&name) => {
            b.paragraph_break();
            children(el, b, first_h1);
            b.paragraph_break();
        }
        _ if LINES.contains(&name) => {
            b.line_break();
            children(el, b, first_h1);
            b.line_break();
        }
        _ => children(el, b, first_h1),
    }
}

fn children(el: ElementRef<'_>, b: &mut SectionsBuilder, first_h1: &mut Option<String>) {
    for child in el.children() {
        match child.value() {
            Node::Text(t) => b.text(t),
            Node::Element(_) => {
                if let Some(child) = ElementRef::wrap(child) {
                    walk(child, b, first_h1);
                }
            }
            _ => {}
        }
    }
}

/// h1-h6 as 1-6.
fn heading_level(name: &str) -> Option<u8> {
    match name.as_bytes() {
        [b'h', d @ b'1'..=b'6'] => Some(d - b'0'),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"<!DOCTYPE html><html><head><title> Widgets
      Guide </title><style>p{}</style></head><body>
      <nav><a href="/">Home</a> | <a>Next</a></nav>
      <div class="navheader"><table><tr><th>Prev</th><th>Up</th></tr></table></div>
      <h1>Widgets</h1><p>Widgets are   <b>small</b>
      things.</p>
      <h2>Making one</h2><p>First, cut.</p><pre>
  fn make() {
      cut();
  }
</pre><ul><li>one</li><li>two <code>x</code></li></ul>
      <h3>Sizes</h3><table><tr><th>Name</th><th>Size</th></tr><tr><td><p>small</p></td><td>1</td></tr></table>
      <h2>Using one</h2><script>track()</script><p>Just use it.</p>
      <footer>Copyright</footer><div class="navfooter">Prev Next</div></body></html>"#;

    #[test]
    fn headings_make_the_path_and_furniture_is_gone() {
        let (title, sections) = extract(PAGE);
        assert_eq!(title.as_deref(), Some("Widgets Guide"));
        assert_eq!(
            super::super::outline(&sections),
            [
                ("Widgets".into(), "Widgets are small things."),
                (
                    "Widgets / Making one".into(),
                    "First, cut.\n\n  fn make() {\n      cut();\n  }\n\n- one\n- two x"
                ),
                (
                    "Widgets / Making one / Sizes".into(),
                    "Name | Size\nsmall | 1"
                ),
                ("Widgets / Using one".into(), "Just use it."),
            ]
        );
        let all: String = sections.iter().map(|s| s.text.as_str()).collect();
        for leak in ["Home", "Prev", "Copyright", "track", "p{}"] {
            assert!(!all.contains(leak), "{leak} leaked: {all}");
        }
    }

    #[test]
    fn the_first_h1_titles_a_page_without_a_title_element() {
        let (title, _) = extract("<body><h1>Only <i>this</i></h1><p>x</p></body>");
        assert_eq!(title.as_deref(), Some("Only this"));
        let (none, _) = extract("<body><p>x</p></body>");
        assert_eq!(none, None);
    }
}
