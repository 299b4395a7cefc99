//! What a PDF will cost pdf-extract, checked before it runs, and made cheaper where that
//! changes nothing it reads. pdf-extract (on lopdf) decodes a page's whole content into one
//! `Vec<Operation>`, inflates every stream it reads with no limit, follows a form that draws
//! itself until its stack overflows, and checks no time until it outputs a glyph: a 227 KB
//! page of 4 million path operators took 2.5 GB and 6 s (release build; the 114 KB
//! one, 7.3 GB and 163 s). So, first:
//! - object streams, which lopdf inflates while it loads a file, are decoded within the
//!   document's byte limit as it loads;
//! - the page tree is walked and what is wrong with it said (a loop, objects missing where the
//!   cross-reference table puts them) rather than "no text layer";
//! - the streams pages share (the forms they draw, fonts, CMaps, colour spaces) are decoded in
//!   place within that limit, all together, exactly as lopdf decodes them, so pdf-extract
//!   inflates none of them again at each use; images, which it would inflate and parse as
//!   content, are emptied;
//! - each page's content is decoded within the limit and counted, its tokens against
//!   `max_page_tokens` and its bytes with the forms it draws, each time drawn, against the
//!   limit, then left for lopdf to decode when its page comes (one page at a time); a form
//!   that draws itself, or forms nested past [`MAX_FORM_DEPTH`], are refused.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};

use pdf_extract::{Dictionary, Document, LoadOptions, Object, ObjectId};

use super::decode::{self, Decoded, OverLimit};
use super::lexer::{Lexer, Token};
use crate::extract::{Budget, ExtractError};

fn broken(reason: impl Into<String>) -> ExtractError {
    ExtractError::Broken("PDF", reason.into())
}

/// The bytes a document's streams may be kept decoded in: its object streams, forms, fonts,
/// CMaps. A page's content is held to the same limit page by page ([`Prepare::pages`]), and the
/// text to it as a whole (the collector).
#[derive(Debug)]
pub(super) struct Meter {
    used: u64,
    limit: u64,
}

impl Meter {
    pub(super) fn new(limit: u64) -> Meter {
        Meter { used: 0, limit }
    }

    fn left(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }

    fn charge(&mut self, bytes: u64) -> Result<(), ExtractError> {
        self.used = self.used.saturating_add(bytes);
        if self.used > self.limit {
            Err(ExtractError::TooLarge(self.limit))
        } else {
            Ok(())
        }
    }
}

thread_local! {
    /// What the object stream filter may still decode, and whether a stream went past it.
    /// lopdf takes the filter as a `fn`, which captures nothing; lopdf is built without its
    /// `rayon` feature, so the filter runs on the thread that loads the file.
    static OBJECT_STREAMS: Cell<(u64, bool)> = const { Cell::new((0, false)) };
}

/// lopdf's load filter: an object stream is decoded within what is left of the limit before
/// lopdf inflates it whole; past the limit it is emptied (lopdf then reads no object from it)
/// and the load is marked as over. Every object is kept: lopdf keeps the top-level object it
/// passed and the copy returned for an object from an object stream.
fn object_stream_filter(id: ObjectId, object: &mut Object) -> Option<(ObjectId, Object)> {
    let Object::Stream(stream) = object else {
        return Some((id, object.clone()));
    };
    if stream.dict.has_type(b"ObjStm") {
        let (left, over) = OBJECT_STREAMS.get();
        match decode::decode(stream, left) {
            // lopdf decodes it next, to no more than this.
            Ok(Decoded::Plain(data)) => OBJECT_STREAMS.set((left - data.len() as u64, over)),
            Ok(Decoded::AsStored) => {}
            Err(OverLimit) => {
                OBJECT_STREAMS.set((0, true));
                stream.set_plain_content(Vec::new());
            }
        }
    }
    // lopdf drops what it is given back for a top-level object: no copy of a stream.
    Some((id, Object::Null))
}

/// Loads the file with lopdf, its object streams decoded within the meter.
pub(super) fn load(bytes: &[u8], meter: &mut Meter) -> Result<Document, ExtractError> {
    OBJECT_STREAMS.set((meter.left(), false));
    let options = LoadOptions {
        filter: Some(object_stream_filter),
        ..LoadOptions::default()
    };
    // lopdf indexes and unwraps in places a malformed file reaches: a panic there is one
    // file's failure, not the run's.
    let loaded = std::panic::catch_unwind(|| Document::load_mem_with_options(bytes, options));
    let (left, over) = OBJECT_STREAMS.replace((0, false));
    if over {
        return Err(ExtractError::TooLarge(meter.limit));
    }
    meter.charge(meter.left() - left)?;
    loaded
        .map_err(|_| broken("the parser failed on it"))?
        .map_err(|e| broken(e.to_string()))
}

/// Why `id`, which the file needs as `what`, is not there: a cross-reference table that gives
/// it an offset where it is not is broken (a damaged file, or one cut and joined).
fn missing(doc: &Document, id: ObjectId, what: &str) -> ExtractError {
    let listed = doc
        .reference_table
        .entries
        .iter()
        .filter(|(_, e)| matches!(e, pdf_extract::xref::XrefEntry::Normal { .. }))
        .count();
    let lost = doc
        .reference_table
        .entries
        .iter()
        .filter(|(n, e)| {
            matches!(e, pdf_extract::xref::XrefEntry::Normal { generation, .. }
                if !doc.objects.contains_key(&(**n, *generation)))
        })
        .count();
    if lost > 0 {
        broken(format!(
            "its cross-reference table is broken: {lost} of the {listed} objects it lists are \
             not at the offsets it gives, {what} (object {}) among them",
            id.0
        ))
    } else {
        broken(format!("{what} (object {}) is not in the file", id.0))
    }
}

/// Page trees deeper than this are refused: lopdf stops descending at 256 levels, and
/// pdf-extract looks a page's size and resources up through its parents, one stack frame each.
const MAX_TREE_DEPTH: usize = 256;

/// Walks the page tree as lopdf does (pdf-extract reads the pages lopdf finds), saying what is
/// wrong with it: no catalog or no tree, a node reached twice (a loop, which lopdf would go
/// round until its iteration limit), or, when no page can be read at all, the objects it needs
/// that are not where the cross-reference table says. Each page's parents must lead to the
/// root without a loop, and give it a size (pdf-extract would recurse forever, or panic).
/// The number of pages.
pub(super) fn check_page_tree(doc: &Document) -> Result<usize, ExtractError> {
    let root = doc
        .trailer
        .get(b"Root")
        .and_then(Object::as_reference)
        .map_err(|_| broken("its trailer names no catalog"))?;
    let catalog = doc
        .get_dictionary(root)
        .map_err(|_| missing(doc, root, "its catalog"))?;
    let tree = catalog
        .get(b"Pages")
        .and_then(Object::as_reference)
        .map_err(|_| broken("its catalog names no page tree"))?;
    let mut seen = HashSet::new();
    let mut stack = vec![(tree, 0)];
    let mut pages = Vec::new();
    let mut lost = None;
    while let Some((id, depth)) = stack.pop() {
        if !seen.insert(id) {
            return Err(broken(format!(
                "its page tree loops: object {} is reached twice",
                id.0
            )));
        }
        let Ok(node) = doc.get_dictionary(id) else {
            lost.get_or_insert(id);
            continue;
        };
        match node.get_type() {
            Ok(b"Page") => pages.push(id),
            Ok(b"Pages") if depth < MAX_TREE_DEPTH => {
                let kids = node
                    .get_deref(b"Kids", doc)
                    .and_then(Object::as_array)
                    .map(|k| k.as_slice())
                    .unwrap_or_default();
                for kid in kids.iter().rev() {
                    if let Ok(kid) = kid.as_reference() {
                        stack.push((kid, depth + 1));
                    }
                }
            }
            Ok(b"Pages") => {
                return Err(broken(format!(
                    "its page tree is more than {MAX_TREE_DEPTH} levels deep"
                )));
            }
            // lopdf passes over a node of no known type; so does pdf-extract.
            _ => {}
        }
    }
    if pages.is_empty() {
        return Err(match lost {
            Some(id) => missing(doc, id, "a node of its page tree"),
            None => broken("it has no pages"),
        });
    }
    for (n, &page) in pages.iter().enumerate() {
        let mut node = page;
        let mut parents = HashSet::from([page]);
        let mut sized = false;
        while let Ok(dict) = doc.get_dictionary(node) {
            sized |= dict.has(b"MediaBox");
            let Ok(parent) = dict.get(b"Parent").and_then(Object::as_reference) else {
                break;
            };
            if !parents.insert(parent) {
                return Err(broken(format!(
                    "its page tree loops: the parents of page {} lead back to themselves",
                    n + 1
                )));
            }
            if parents.len() > MAX_TREE_DEPTH {
                return Err(broken(format!(
                    "its page tree is more than {MAX_TREE_DEPTH} levels deep"
                )));
            }
            node = parent;
        }
        if !sized {
            return Err(broken(format!("page {} has no MediaBox (no size)", n + 1)));
        }
    }
    Ok(pages.len())
}

/// A stream's entry `key` (followed through references) as a dictionary.
fn dict_entry<'d>(doc: &'d Document, dict: &'d Dictionary, key: &[u8]) -> Option<&'d Dictionary> {
    let (_, object) = doc.dereference(dict.get(key).ok()?).ok()?;
    object.as_dict().ok()
}

/// The dictionary of object `id`, a dictionary or a stream's.
fn dict_of(doc: &Document, id: ObjectId) -> Option<&Dictionary> {
    match doc.objects.get(&id)? {
        Object::Dictionary(d) => Some(d),
        Object::Stream(s) => Some(&s.dict),
        _ => None,
    }
}

/// The object whose `/Resources` a page uses: the page's own or its nearest parent's, as
/// pdf-extract looks them up.
fn page_resources(doc: &Document, page: ObjectId) -> Option<ObjectId> {
    let mut node = page;
    for _ in 0..=MAX_TREE_DEPTH {
        let dict = doc.get_dictionary(node).ok()?;
        if dict_entry(doc, dict, b"Resources").is_some() {
            return Some(node);
        }
        node = dict.get(b"Parent").and_then(Object::as_reference).ok()?;
    }
    None
}

/// The resources dictionary `holder`'s `/Resources` names.
fn resources(doc: &Document, holder: Option<ObjectId>) -> Option<&Dictionary> {
    dict_entry(doc, dict_of(doc, holder?)?, b"Resources")
}

/// What `Do /name` draws with the resources at `holder`.
fn xobject(doc: &Document, holder: Option<ObjectId>, name: &[u8]) -> Option<ObjectId> {
    let xobjects = dict_entry(doc, resources(doc, holder)?, b"XObject")?;
    xobjects.get(name).and_then(Object::as_reference).ok()
}

/// A stream drawn by `Do` that pdf-extract runs as content (a form, or an XObject of no
/// subtype); images and PostScript XObjects it would parse as content too, to no end.
fn is_form(doc: &Document, id: ObjectId) -> bool {
    match doc.objects.get(&id) {
        Some(Object::Stream(s)) => match s.dict.get(b"Subtype").and_then(Object::as_name) {
            Ok(subtype) => subtype == b"Form",
            Err(_) => true,
        },
        _ => false,
    }
}

/// Forms nested deeper than this are refused: pdf-extract runs each inside the one that draws
/// it, a stack frame (and a decoded copy of its content) each, on a thread whose stack may be
/// 2 MiB; real files nest a handful.
const MAX_FORM_DEPTH: usize = 32;

/// The XObjects a content stream draws, by name, with how many times.
type Draws = Vec<(Vec<u8>, u64)>;

/// What running a stream once costs pdf-extract: the tokens it decodes and the bytes it
/// parses, each form it draws counted each time.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    tokens: u64,
    bytes: u64,
}

impl Cost {
    fn plus(self, other: Cost, times: u64) -> Cost {
        Cost {
            tokens: self
                .tokens
                .saturating_add(other.tokens.saturating_mul(times)),
            bytes: self.bytes.saturating_add(other.bytes.saturating_mul(times)),
        }
    }
}

/// Counts what each page costs and makes its shared streams plain. See the module doc.
pub(super) struct Prepare<'b> {
    budget: &'b Budget,
    meter: &'b mut Meter,
    /// Streams decoded in place, emptied, or checked and left to lopdf.
    decoded: HashSet<ObjectId>,
    /// What a stream costs, run with the resources of a holder.
    costs: HashMap<(ObjectId, Option<ObjectId>), Cost>,
    /// Resource holders whose streams other than XObjects are decoded.
    walked: HashSet<Option<ObjectId>>,
    /// The forms being counted, outermost first, to find one that draws itself.
    drawing: Vec<ObjectId>,
}

impl<'b> Prepare<'b> {
    pub(super) fn new(budget: &'b Budget, meter: &'b mut Meter) -> Prepare<'b> {
        Prepare {
            budget,
            meter,
            decoded: HashSet::new(),
            costs: HashMap::new(),
            walked: HashSet::new(),
            drawing: Vec::new(),
        }
    }

    /// Every page pdf-extract will read, in its order: each within `max_page_tokens`, and its
    /// content with the forms it draws within the byte limit.
    pub(super) fn pages(&mut self, doc: &mut Document) -> Result<(), ExtractError> {
        let pages: Vec<ObjectId> = doc.get_pages().into_values().collect();
        for (n, page) in pages.into_iter().enumerate() {
            self.budget.check_time()?;
            let holder = page_resources(doc, page);
            let mut cost = Cost::default();
            for content in doc.get_page_contents(page) {
                cost = cost.plus(self.run(doc, content, holder, false)?, 1);
            }
            let limit = self.budget.limits.max_page_tokens;
            if cost.tokens > limit as u64 {
                return Err(ExtractError::TooManyTokens { page: n + 1, limit });
            }
            if cost.bytes > self.meter.limit {
                return Err(ExtractError::TooLarge(self.meter.limit));
            }
        }
        Ok(())
    }

    /// What pdf-extract costs when it runs stream `id` (a page's content, or a `form`) with
    /// the resources at `holder`. A form is decoded in place (pdf-extract would inflate it
    /// again at each draw); a page's content, read once, is decoded here only to be counted
    /// and left for lopdf to decode, within the limit now, when pdf-extract reaches its page:
    /// one page's content is in memory at a time.
    fn run(
        &mut self,
        doc: &mut Document,
        id: ObjectId,
        holder: Option<ObjectId>,
        form: bool,
    ) -> Result<Cost, ExtractError> {
        if let Some(&cost) = self.costs.get(&(id, holder)) {
            return Ok(cost);
        }
        if self.drawing.contains(&id) {
            return Err(broken(format!(
                "a form (object {}) draws itself, which never ends",
                id.0
            )));
        }
        if self.drawing.len() > MAX_FORM_DEPTH {
            return Err(broken(format!(
                "its forms are nested more than {MAX_FORM_DEPTH} deep"
            )));
        }
        self.walk_resources(doc, holder)?;
        let (mut cost, draws) = if form {
            self.decode_in_place(doc, id)?;
            match doc.objects.get(&id) {
                Some(Object::Stream(s)) => self.lex(&s.content)?,
                _ => (Cost::default(), Vec::new()),
            }
        } else {
            match self.check_content(doc, id)? {
                Some(data) => self.lex(&data)?,
                None => match doc.objects.get(&id) {
                    Some(Object::Stream(s)) => self.lex(&s.content)?,
                    _ => (Cost::default(), Vec::new()),
                },
            }
        };
        self.drawing.push(id);
        for (name, times) in draws {
            let Some(drawn) = xobject(doc, holder, &name) else {
                continue;
            };
            if !is_form(doc, drawn) {
                self.empty(doc, drawn);
                continue;
            }
            // A form without resources of its own uses its caller's, as pdf-extract does.
            let own =
                dict_of(doc, drawn).is_some_and(|d| dict_entry(doc, d, b"Resources").is_some());
            let inner = self.run(doc, drawn, if own { Some(drawn) } else { holder }, true)?;
            cost = cost.plus(inner, times);
        }
        self.drawing.pop();
        self.costs.insert((id, holder), cost);
        Ok(cost)
    }

    /// A page's content stream decoded within the limit, to be counted; `None` when
    /// pdf-extract reads it as stored (its filters, which lopdf cannot finish undoing, are
    /// dropped: lopdf would first undo every one it knows, unbounded).
    fn check_content(
        &mut self,
        doc: &mut Document,
        id: ObjectId,
    ) -> Result<Option<Vec<u8>>, ExtractError> {
        let Some(Object::Stream(stream)) = doc.objects.get_mut(&id) else {
            return Ok(None);
        };
        match decode::decode(stream, self.meter.limit) {
            Ok(Decoded::Plain(data)) => Ok(Some(data)),
            Ok(Decoded::AsStored) => {
                if self.decoded.insert(id) {
                    let stored = std::mem::take(&mut stream.content);
                    stream.set_plain_content(stored);
                }
                Ok(None)
            }
            Err(OverLimit) => Err(ExtractError::TooLarge(self.meter.limit)),
        }
    }

    /// A stream's cost by itself (its tokens, up to one past the cap: more need not be
    /// counted, and its bytes) and the XObjects it draws.
    fn lex(&self, content: &[u8]) -> Result<(Cost, Draws), ExtractError> {
        let mut tokens = 0u64;
        let mut draws: HashMap<&[u8], u64> = HashMap::new();
        let mut name = None;
        for token in Lexer::new(content) {
            tokens += 1;
            if tokens.is_multiple_of(1 << 16) {
                self.budget.check_time()?;
            }
            if tokens > self.budget.limits.max_page_tokens as u64 {
                break;
            }
            match token {
                Token::Name(n) => name = Some(n),
                Token::Operator(b"Do") => {
                    if let Some(n) = name.take() {
                        *draws.entry(n).or_default() += 1;
                    }
                }
                Token::Operator(_) => name = None,
                _ => {}
            }
        }
        let cost = Cost {
            tokens,
            bytes: content.len() as u64,
        };
        Ok((
            cost,
            draws.into_iter().map(|(n, t)| (n.to_vec(), t)).collect(),
        ))
    }

    /// Decodes stream `id` once, in place and within the meter: once [`decode::decode`] has
    /// shown lopdf's decoding stays in the limit, with lopdf's own, so pdf-extract reads what it
    /// always read. A stream lopdf cannot decode keeps its bytes and loses its filters
    /// (pdf-extract reads them as stored either way, and lopdf would first undo every filter it
    /// knows, unbounded).
    fn decode_in_place(&mut self, doc: &mut Document, id: ObjectId) -> Result<(), ExtractError> {
        if !self.decoded.insert(id) {
            return Ok(());
        }
        let Some(Object::Stream(stream)) = doc.objects.get_mut(&id) else {
            return Ok(());
        };
        match decode::decode(stream, self.meter.left()) {
            Ok(Decoded::Plain(bound)) => {
                drop(bound);
                let data = stream
                    .decompressed_content()
                    .unwrap_or_else(|_| stream.content.clone());
                self.meter.charge(data.len() as u64)?;
                stream.set_plain_content(data);
            }
            Ok(Decoded::AsStored) => {
                let stored = std::mem::take(&mut stream.content);
                stream.set_plain_content(stored);
            }
            Err(OverLimit) => return Err(ExtractError::TooLarge(self.meter.limit)),
        }
        Ok(())
    }

    /// Empties an image (or another XObject that is not a form): pdf-extract would inflate it
    /// and parse its pixels as content, and no text is in them.
    fn empty(&mut self, doc: &mut Document, id: ObjectId) {
        if !self.decoded.insert(id) {
            return;
        }
        if let Some(Object::Stream(stream)) = doc.objects.get_mut(&id) {
            stream.set_plain_content(Vec::new());
        }
    }

    /// Decodes the streams the resources at `holder` lead to, other than XObjects (which are
    /// read only if drawn): fonts and their files, CMaps, colour spaces, patterns, shadings.
    fn walk_resources(
        &mut self,
        doc: &mut Document,
        holder: Option<ObjectId>,
    ) -> Result<(), ExtractError> {
        if !self.walked.insert(holder) {
            return Ok(());
        }
        let Some(resources) = resources(doc, holder) else {
            return Ok(());
        };
        let mut streams = Vec::new();
        let mut seen = HashSet::new();
        let mut stack: Vec<&Object> = resources
            .iter()
            .filter(|(k, _)| k.as_slice() != b"XObject")
            .map(|(_, v)| v)
            .collect();
        let mut steps = 0usize;
        while let Some(object) = stack.pop() {
            steps += 1;
            if steps.is_multiple_of(4096) {
                self.budget.check_time()?;
            }
            match object {
                Object::Reference(id) => {
                    if !self.decoded.contains(id)
                        && seen.insert(*id)
                        && let Some(target) = doc.objects.get(id)
                    {
                        if matches!(target, Object::Stream(_)) {
                            streams.push(*id);
                        }
                        stack.push(target);
                    }
                }
                Object::Array(items) => stack.extend(items),
                Object::Dictionary(dict) => stack.extend(
                    dict.iter()
                        .filter(|(k, _)| !matches!(k.as_slice(), b"XObject" | b"Parent"))
                        .map(|(_, v)| v),
                ),
                Object::Stream(stream) => stack.extend(
                    stream
                        .dict
                        .iter()
                        .filter(|(k, _)| !matches!(k.as_slice(), b"XObject" | b"Parent"))
                        .map(|(_, v)| v),
                ),
                _ => {}
            }
        }
        for id in streams {
            let image = matches!(
                doc.objects.get(&id),
                Some(Object::Stream(s)) if s.dict.get(b"Subtype").and_then(Object::as_name).is_ok_and(|t| t == b"Image")
            );
            if image {
                self.empty(doc, id);
            } else {
                self.decode_in_place(doc, id)?;
            }
        }
        Ok(())
    }
}
