//! HTML to sections: the body's text in reading order, h1-h6 as the heading path, `pre` kept
//! line for line, table rows as lines of ` | `-separated cells. Page furniture is dropped:
//! script, style, nav, header, footer, forms, and the navigation bars DocBook puts around
//! every page of the PostgreSQL manual (`div.navheader`, `div.navfooter`). Parsed in slices
//! that stop at the nesting and time limits, and walked with a stack of its own, not recursion.

use std::borrow::Cow;
use std::cell::Cell;

use html5ever::tendril::{StrTendril, TendrilSink};
use html5ever::tree_builder::{ElementFlags, NodeOrText, QuirksMode, TreeSink};
use html5ever::{Attribute, QualName};
use scraper::{ElementRef, Html, HtmlTreeSink, Node, Selector};

use super::text::{SectionsBuilder, one_line};
use super::{Budget, ExtractError, Section};

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

/// Bytes of HTML given to the parser between two checks of the limits: 8 KiB is at most about
/// 2,700 elements (`<b>`), so a file stops within a few thousand elements of the depth limit.
const SLICE: usize = 8 * 1024;
/// Steps of the walk between two checks of the time.
const STEPS_PER_CHECK: usize = 1024;

pub(super) fn extract(
    source: &str,
    budget: &Budget,
) -> Result<(Option<String>, Vec<Section>), ExtractError> {
    let doc = parse(source, budget)?;
    let mut b = SectionsBuilder::default();
    let mut first_h1 = None;
    walk(doc.root_element(), &mut b, &mut first_h1, budget)?;
    // The title is raw text (RCDATA): markup in it is not parsed, so `<script>` arrives as
    // characters and is cut here.
    let title = Selector::parse("title")
        .ok()
        .and_then(|sel| doc.select(&sel).next())
        .map(|t| one_line(&without_scripts(&t.text().collect::<String>())))
        .filter(|t| !t.is_empty())
        .or(first_h1);
    Ok((title, b.finish()))
}

/// The document tree, or why not: fed to the parser a slice at a time, checking the deepest
/// nesting so far and the time after each.
fn parse(source: &str, budget: &Budget) -> Result<Html, ExtractError> {
    let limit = budget.limits.max_html_depth;
    let mut parser = html5ever::parse_document(
        DepthSink::new(HtmlTreeSink::new(Html::new_document())),
        Default::default(),
    );
    let mut rest = source;
    while !rest.is_empty() {
        let mut cut = rest.len().min(SLICE);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (slice, after) = rest.split_at(cut);
        parser.process(StrTendril::from_slice(slice));
        rest = after;
        if parser.tokenizer.sink.sink.deepest.get() > limit {
            return Err(ExtractError::TooDeep(limit));
        }
        budget.check_time()?;
    }
    Ok(parser.finish())
}

/// A node of the tree being built (scraper's arena index).
type Handle = <HtmlTreeSink as TreeSink>::Handle;

/// scraper's tree sink, also noting how deep each element lands when it is put in the tree
/// (its ancestors then), the deepest so far in `deepest`.
struct DepthSink {
    inner: HtmlTreeSink,
    deepest: Cell<usize>,
}

impl DepthSink {
    fn new(inner: HtmlTreeSink) -> DepthSink {
        DepthSink {
            inner,
            deepest: Cell::new(0),
        }
    }

    /// Notes a node put under `parent`: its depth counts the document node, so `<html>` is at
    /// 1 and a `<div>` in the `<body>` at 3. Counting its ancestors costs the depth, which the
    /// parser pays for every element anyway, and parsing stops within a slice of the limit.
    fn placed(&self, parent: Handle) {
        let depth = self
            .inner
            .0
            .borrow()
            .tree
            .get(parent)
            .map_or(0, |p| p.ancestors().count() + 1);
        if depth > self.deepest.get() {
            self.deepest.set(depth);
        }
    }
}
impl TreeSink for DepthSink {
    type Handle = Handle;
    type Output = Html;
    type ElemName<'a> = <HtmlTreeSink as TreeSink>::ElemName<'a>;

    fn finish(self) -> Html {
        self.inner.finish()
    }

    fn parse_error(&self, msg: Cow<'static, str>) {
        self.inner.parse_error(msg)
    }

    fn get_document(&self) -> Handle {
        self.inner.get_document()
    }

    fn elem_name<'a>(&'a self, target: &'a Handle) -> Self::ElemName<'a> {
        self.inner.elem_name(target)
    }

    fn create_element(&self, name: QualName, attrs: Vec<Attribute>, flags: ElementFlags) -> Handle {
        self.inner.create_element(name, attrs, flags)
    }

    fn create_comment(&self, text: StrTendril) -> Handle {
        self.inner.create_comment(text)
    }

    fn create_pi(&self, target: StrTendril, data: StrTendril) -> Handle {
        self.inner.create_pi(target, data)
    }

    fn append(&self, parent: &Handle, child: NodeOrText<Handle>) {
        let element = matches!(child, NodeOrText::AppendNode(_));
        self.inner.append(parent, child);
        if element {
            self.placed(*parent);
        }
    }

    fn append_based_on_parent_node(
        &self,
        element: &Handle,
        prev_element: &Handle,
        child: NodeOrText<Handle>,
    ) {
        // As scraper does, but through this sink's own two ways in, so the depth is noted.
        let has_parent = self
            .inner
            .0
            .borrow()
            .tree
            .get(*element)
            .is_some_and(|e| e.parent().is_some());
        if has_parent {
            self.append_before_sibling(element, child)
        } else {
            self.append(prev_element, child)
        }
    }

    fn append_doctype_to_document(
        &self,
        name: StrTendril,
        public_id: StrTendril,
        system_id: StrTendril,
    ) {
        self.inner
            .append_doctype_to_document(name, public_id, system_id)
    }

    fn mark_script_already_started(&self, node: &Handle) {
        self.inner.mark_script_already_started(node)
    }

    fn pop(&self, node: &Handle) {
        self.inner.pop(node)
    }

    fn get_template_contents(&self, target: &Handle) -> Handle {
        self.inner.get_template_contents(target)
    }

    fn same_node(&self, x: &Handle, y: &Handle) -> bool {
        self.inner.same_node(x, y)
    }

    fn set_quirks_mode(&self, mode: QuirksMode) {
        self.inner.set_quirks_mode(mode)
    }

    fn append_before_sibling(&self, sibling: &Handle, new_node: NodeOrText<Handle>) {
        let parent = self
            .inner
            .0
            .borrow()
            .tree
            .get(*sibling)
            .and_then(|s| s.parent())
            .map(|p| p.id());
        let node = match &new_node {
            NodeOrText::AppendNode(n) => Some(*n),
            NodeOrText::AppendText(_) => None,
        };
        self.inner.append_before_sibling(sibling, new_node);
        if let (Some(parent), Some(_)) = (parent, node) {
            self.placed(parent);
        }
    }

    fn add_attrs_if_missing(&self, target: &Handle, attrs: Vec<Attribute>) {
        self.inner.add_attrs_if_missing(target, attrs)
    }

    fn associate_with_form(
        &self,
        target: &Handle,
        form: &Handle,
        nodes: (&Handle, Option<&Handle>),
    ) {
        self.inner.associate_with_form(target, form, nodes)
    }

    fn remove_from_parent(&self, target: &Handle) {
        self.inner.remove_from_parent(target)
    }

    fn reparent_children(&self, node: &Handle, new_parent: &Handle) {
        self.inner.reparent_children(node, new_parent)
    }

    fn is_mathml_annotation_xml_integration_point(&self, handle: &Handle) -> bool {
        self.inner
            .is_mathml_annotation_xml_integration_point(handle)
    }

    fn set_current_line(&self, line_number: u64) {
        self.inner.set_current_line(line_number)
    }

    fn allow_declarative_shadow_roots(&self, intended_parent: &Handle) -> bool {
        self.inner.allow_declarative_shadow_roots(intended_parent)
    }

    fn attach_declarative_shadow(
        &self,
        location: &Handle,
        template: &Handle,
        attrs: &[Attribute],
    ) -> bool {
        self.inner
            .attach_declarative_shadow(location, template, attrs)
    }

    fn maybe_clone_an_option_into_selectedcontent(&self, option: &Handle) {
        self.inner
            .maybe_clone_an_option_into_selectedcontent(option)
    }
}

/// A step of the walk: a node to visit, or what to write once an element's children are done.
enum Step<'a> {
    Element(ElementRef<'a>),
    Text(&'a str),
    /// An admonition's heading, written as a label ("Note:") rather than a section.
    Label(ElementRef<'a>),
    Raw(&'static str),
    ParagraphBreak,
    LineBreak,
    EnterCell,
    LeaveCell,
}

/// Writes the text under `root` in reading order. Iterative: a page nested thousands deep
/// must not take the process's stack with it (6,000 `<div>`s overflowed a debug build's).
fn walk(
    root: ElementRef<'_>,
    b: &mut SectionsBuilder,
    first_h1: &mut Option<String>,
    budget: &Budget,
) -> Result<(), ExtractError> {
    let mut stack = vec![Step::Element(root)];
    let mut steps = 0usize;
    while let Some(step) = stack.pop() {
        steps += 1;
        if steps.is_multiple_of(STEPS_PER_CHECK) {
            budget.check_time()?;
        }
        match step {
            Step::Element(el) => enter(el, b, first_h1, &mut stack),
            Step::Text(t) => b.text(t),
            Step::Label(h) => {
                b.text(&visible_text(h));
                b.raw(":");
                b.line_break();
            }
            Step::Raw(r) => b.raw(r),
            Step::ParagraphBreak => b.paragraph_break(),
            Step::LineBreak => b.line_break(),
            Step::EnterCell => b.enter_cell(),
            Step::LeaveCell => b.leave_cell(),
        }
    }
    Ok(())
}

/// Writes what comes before `el`'s children and pushes its children and what comes after
/// them (in reverse, as the stack pops them).
fn enter<'a>(
    el: ElementRef<'a>,
    b: &mut SectionsBuilder,
    first_h1: &mut Option<String>,
    stack: &mut Vec<Step<'a>>,
) {
    let e = el.value();
    let name = e.name();
    if dropped(el) {
        return;
    }
    if let Some(level) = heading_level(name) {
        let text = visible_text(el);
        if level == 1 && first_h1.is_none() {
            *first_h1 = Some(one_line(&text)).filter(|t| !t.is_empty());
        }
        b.heading(level, &text);
        return;
    }
    if name == "div" && e.classes().any(|c| ADMONITIONS.contains(&c)) {
        b.paragraph_break();
        stack.push(Step::ParagraphBreak);
        for child in el.children().rev() {
            match ElementRef::wrap(child) {
                Some(h) if heading_level(h.value().name()).is_some() => stack.push(Step::Label(h)),
                Some(other) => stack.push(Step::Element(other)),
                None => {
                    if let Node::Text(t) = child.value() {
                        stack.push(Step::Text(t));
                    }
                }
            }
        }
        return;
    }
    match name {
        "pre" => b.verbatim(&visible_text(el)),
        "br" => b.line_break(),
        "hr" => b.paragraph_break(),
        "li" => {
            b.line_break();
            b.raw("- ");
            stack.push(Step::LineBreak);
            children(el, stack);
        }
        "tr" => {
            b.line_break();
            stack.push(Step::LineBreak);
            let cells: Vec<ElementRef<'a>> = el.children().filter_map(ElementRef::wrap).collect();
            for (i, cell) in cells.into_iter().enumerate().rev() {
                stack.push(Step::LeaveCell);
                children(cell, stack);
                stack.push(Step::EnterCell);
                if i > 0 {
                    stack.push(Step::Raw(" | "));
                }
            }
        }
        _ if BLOCKS.contains(&name) => {
            b.paragraph_break();
            stack.push(Step::ParagraphBreak);
            children(el, stack);
        }
        _ if LINES.contains(&name) => {
            b.line_break();
            stack.push(Step::LineBreak);
            children(el, stack);
        }
        _ => children(el, stack),
    }
}

/// Pushes `el`'s text and element children, last first.
fn children<'a>(el: ElementRef<'a>, stack: &mut Vec<Step<'a>>) {
    for child in el.children().rev() {
        match child.value() {
            Node::Text(t) => stack.push(Step::Text(t)),
            Node::Element(_) => {
                if let Some(child) = ElementRef::wrap(child) {
                    stack.push(Step::Element(child));
                }
            }
            _ => {}
        }
    }
}

/// Page furniture and scripts: never document text, wherever they sit.
fn dropped(el: ElementRef<'_>) -> bool {
    let e = el.value();
    DROPPED.contains(&e.name()) || e.classes().any(|c| DROPPED_CLASSES.contains(&c))
}

/// The text under `el` as a reader sees it: a heading's or a `pre`'s, without the scripts,
/// styles and furniture inside it (`<h1>Hi<script>track()</script></h1>` is "Hi").
fn visible_text(el: ElementRef<'_>) -> String {
    let mut out = String::new();
    let mut stack = vec![*el];
    while let Some(node) = stack.pop() {
        if let Node::Text(t) = node.value() {
            out.push_str(t);
        } else if ElementRef::wrap(node).is_some_and(|e| node.id() == el.id() || !dropped(e)) {
            stack.extend(node.children().rev());
        }
    }
    out
}

/// `text` without what `<script>` and `<style>` elements written in it enclose (to its end if
/// one is not closed).
fn without_scripts(text: &str) -> Cow<'_, str> {
    let lower = text.to_ascii_lowercase();
    if !lower.contains("<script") && !lower.contains("<style") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let next = ["script", "style"]
            .iter()
            .filter_map(|tag| lower[at..].find(&format!("<{tag}")).map(|i| (at + i, *tag)))
            .min();
        let Some((open, tag)) = next else {
            out.push_str(&text[at..]);
            break;
        };
        out.push_str(&text[at..open]);
        out.push(' ');
        let close = format!("</{tag}");
        at = match lower[open..].find(&close) {
            Some(i) => {
                let end = open + i;
                lower[end..].find('>').map_or(text.len(), |j| end + j + 1)
            }
            None => text.len(),
        };
    }
    Cow::Owned(out)
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
    use super::super::ExtractLimits;
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
        let (title, sections) = extract(PAGE, &Budget::test()).unwrap();
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
        let (title, _) = extract(
            "<body><h1>Only <i>this</i></h1><p>x</p></body>",
            &Budget::test(),
        )
        .unwrap();
        assert_eq!(title.as_deref(), Some("Only this"));
        let (none, _) = extract("<body><p>x</p></body>", &Budget::test()).unwrap();
        assert_eq!(none, None);
    }

    /// `n` `<div>`s, each inside the one before, around a paragraph.
    fn nested(n: usize) -> String {
        format!("{}<p>deep</p>{}", "<div>".repeat(n), "</div>".repeat(n))
    }

    #[test]
    fn pages_nested_past_the_limit_are_refused_before_the_parse_runs_away() {
        for n in [6_000, 200_000] {
            assert_eq!(
                extract(&nested(n), &Budget::test()).unwrap_err(),
                ExtractError::TooDeep(512),
                "{n} deep"
            );
        }
        // Unclosed paragraphs and list items close each other: a long page of them is flat.
        let flat = "<p>para".repeat(5_000) + &"<li>item".repeat(5_000);
        assert!(extract(&flat, &Budget::test()).is_ok());
    }

    #[test]
    fn deep_pages_under_a_raised_limit_are_walked_without_recursion() {
        let budget = Budget::new(&ExtractLimits {
            max_html_depth: 10_000,
            ..ExtractLimits::default()
        });
        // Deep enough that a walk recursing per level would need megabytes of a test thread's
        // 2 MiB stack (6,000 overflowed a debug build's 8 MiB main thread).
        let (_, sections) = extract(&nested(3_000), &budget).unwrap();
        assert_eq!(super::super::outline(&sections), [(String::new(), "deep")]);
    }

    #[test]
    fn a_page_that_outlasts_the_time_limit_is_refused() {
        let budget = Budget::new(&ExtractLimits {
            max_time: std::time::Duration::ZERO,
            ..ExtractLimits::default()
        });
        assert_eq!(
            extract(PAGE, &budget).unwrap_err(),
            ExtractError::TooSlow(std::time::Duration::ZERO)
        );
    }

    #[test]
    fn scripts_and_control_characters_stay_out_of_titles_headings_and_text() {
        let page = "<title>Guide<script>alert(1)</script> to\x07 widgets\x1b<STYLE>b{}</style></title>\
                    <h1>Hi<script>track()</script>\x08 there\u{202e}</h1>\
                    <p>a\x1bb\tc</p><pre>x\x1b\ty\r\n</pre>";
        let (title, sections) = extract(page, &Budget::test()).unwrap();
        assert_eq!(title.as_deref(), Some("Guide to widgets"));
        assert_eq!(
            super::super::outline(&sections),
            [("Hi there".into(), "ab c\n\nx\ty")]
        );
    }
}
