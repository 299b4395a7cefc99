//! Word (`.docx`) to sections: the zip's `word/document.xml` read with `quick-xml`. Paragraphs
//! styled "heading 1".."heading 6" (by name in `word/styles.xml`, or the built-in ids
//! `Heading1`..) and "Title" open sections, numbered or bulleted paragraphs become "- item"
//! lines, and a table becomes one line per row with its cells joined by " | ".

use std::collections::HashMap;
use std::io::{Cursor, Read};

use quick_xml::XmlVersion;
use quick_xml::events::{BytesRef, BytesStart, Event};

use super::text::{SectionsBuilder, flat, one_line};
use super::{Budget, ExtractError, Parts};

fn broken(reason: impl std::fmt::Display) -> ExtractError {
    ExtractError::Broken("Word", reason.to_string())
}

/// One part of the package, unpacked within the limit; `None` if the package has no such part.
fn part(
    zip: &mut zip::ZipArchive<Cursor<&[u8]>>,
    name: &str,
    limit: u64,
) -> Result<Option<Vec<u8>>, ExtractError> {
    let file = match zip.by_name(name) {
        Ok(f) => f,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(e) => return Err(broken(e)),
    };
    let mut out = Vec::new();
    // The size the zip declares may lie: the read stops one byte past the limit.
    file.take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(broken)?;
    if out.len() as u64 > limit {
        return Err(ExtractError::TooLarge(limit));
    }
    Ok(Some(out))
}

pub(super) fn extract(bytes: &[u8], budget: &Budget) -> Result<Parts, ExtractError> {
    // Word encrypts a document by wrapping the package in an OLE compound file, the format
    // of the old binary .doc too: neither is a zip.
    if bytes.starts_with(&[0xd0, 0xcf, 0x11, 0xe0]) {
        return Err(broken(
            "an encrypted document or an old binary .doc (an OLE compound file, not a .docx package)",
        ));
    }
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(broken)?;
    let limit = budget.limits.max_unpacked_bytes;
    let document = part(&mut zip, "word/document.xml", limit)?
        .ok_or_else(|| broken("no word/document.xml in it"))?;
    let styles = match part(&mut zip, "word/styles.xml", limit)? {
        Some(xml) => heading_styles(&xml)?,
        None => HashMap::new(),
    };
    let title = match part(&mut zip, "docProps/core.xml", limit)? {
        Some(xml) => core_title(&xml),
        None => None,
    };
    Ok((title, body(&document, &styles, budget)?))
}

/// The local name of an element (`w:p` → `p`).
fn local(e: &BytesStart) -> String {
    e.local_name().as_ref().to_owned()
}

/// An attribute by local name (`w:val` → `val`).
fn attr(e: &BytesStart, name: &str) -> Option<String> {
    e.attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == name)
        .and_then(|a| {
            a.normalized_value(XmlVersion::Implicit1_0)
                .ok()
                .map(|v| v.into_owned())
        })
}

/// The heading level a style name or id stands for: "heading 2" / "Heading2" → 2, "Title" → 1.
fn heading_level(name: &str) -> Option<u8> {
    let lower = name.to_ascii_lowercase().replace(' ', "");
    if lower == "title" {
        return Some(1);
    }
    let n: u8 = lower.strip_prefix("heading")?.parse().ok()?;
    (1..=6).contains(&n).then_some(n)
}

/// Style ids to heading levels, from the styles' names ("heading 1"), which Word keeps in
/// English whatever the document's language, while ids may be localised ("berschrift1").
fn heading_styles(xml: &[u8]) -> Result<HashMap<String, u8>, ExtractError> {
    let mut reader = quick_xml::Reader::from_reader(xml);
    let mut out = HashMap::new();
    let mut id: Option<String> = None;
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf).map_err(broken)? {
            Event::Start(e) | Event::Empty(e) => match local(&e).as_str() {
                "style" => id = attr(&e, "styleId"),
                "name" => {
                    if let (Some(id), Some(level)) =
                        (&id, attr(&e, "val").as_deref().and_then(heading_level))
                    {
                        out.insert(id.clone(), level);
                    }
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    Ok(out)
}

/// `dc:title` from the package's core properties.
fn core_title(xml: &[u8]) -> Option<String> {
    let mut reader = quick_xml::Reader::from_reader(xml);
    let mut buf = Vec::new();
    let mut inside = false;
    let mut title = String::new();
    loop {
        match reader.read_event_into(&mut buf).ok()? {
            Event::Start(e) if e.local_name().as_ref() == "title" => inside = true,
            Event::End(e) if e.local_name().as_ref() == "title" => break,
            Event::Text(t) if inside => title.push_str(&t.xml_content(XmlVersion::Implicit1_0)),
            Event::GeneralRef(r) if inside => title.push_str(&reference(&r)),
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    let title = one_line(&title);
    (!title.is_empty()).then_some(title)
}

/// What an entity or character reference in text stands for (Word writes only the five
/// predefined entities); an unknown one is dropped.
fn reference(r: &BytesRef) -> String {
    if let Ok(Some(c)) = r.resolve_char_ref() {
        return c.to_string();
    }
    match r.xml_content(XmlVersion::Implicit1_0).as_ref() {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        _ => "",
    }
    .to_owned()
}

/// The paragraph being read.
#[derive(Default)]
struct Paragraph {
    text: String,
    heading: Option<u8>,
    list: bool,
}

/// The body's paragraphs and tables, in order.
fn body(
    xml: &[u8],
    styles: &HashMap<String, u8>,
    budget: &Budget,
) -> Result<Vec<super::Section>, ExtractError> {
    let mut reader = quick_xml::Reader::from_reader(xml);
    let mut out = SectionsBuilder::default();
    let mut buf = Vec::new();
    let mut para: Option<Paragraph> = None;
    let mut in_text = false;
    // Open tables' rows, innermost last: each row's cells, each cell's text.
    let mut tables: Vec<Vec<String>> = Vec::new();
    let mut events = 0usize;
    loop {
        events += 1;
        if events.is_multiple_of(4096) {
            budget.check_time()?;
        }
        let event = reader.read_event_into(&mut buf).map_err(broken)?;
        match event {
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(event, Event::Empty(_));
                match local(e).as_str() {
                    "p" if !empty => para = Some(Paragraph::default()),
                    "pStyle" => {
                        if let Some(p) = &mut para {
                            let id = attr(e, "val").unwrap_or_default();
                            p.heading = styles.get(&id).copied().or_else(|| heading_level(&id));
                        }
                    }
                    "numPr" => {
                        if let Some(p) = &mut para {
                            p.list = true;
                        }
                    }
                    "t" if !empty => in_text = true,
                    "tab" | "br" | "cr" => {
                        if let Some(p) = &mut para {
                            p.text.push(' ');
                        }
                    }
                    "tbl" if !empty && tables.is_empty() => out.paragraph_break(),
                    "tr" if !empty => tables.push(Vec::new()),
                    "tc" if !empty => {
                        if let Some(row) = tables.last_mut() {
                            row.push(String::new());
                        }
                    }
                    _ => {}
                }
            }
            Event::Text(t) if in_text => {
                if let Some(p) = &mut para {
                    p.text.push_str(&t.xml_content(XmlVersion::Implicit1_0));
                }
            }
            Event::GeneralRef(r) if in_text => {
                if let Some(p) = &mut para {
                    p.text.push_str(&reference(&r));
                }
            }
            Event::End(e) => match e.local_name().as_ref() {
                "t" => in_text = false,
                "p" => {
                    let Some(p) = para.take() else { continue };
                    // Whole: a heading is cut where headings are (`SectionsBuilder::heading`),
                    // a paragraph never.
                    let text = flat(&p.text);
                    if text.is_empty() {
                        continue;
                    }
                    if let Some(cell) = tables.last_mut().and_then(|row| row.last_mut()) {
                        if !cell.is_empty() {
                            cell.push(' ');
                        }
                        cell.push_str(&text);
                    } else if let Some(level) = p.heading {
                        out.heading(level, &text);
                    } else if p.list {
                        out.line_break();
                        out.raw("- ");
                        out.text(&text);
                        out.line_break();
                    } else {
                        out.paragraph_break();
                        out.text(&text);
                        out.paragraph_break();
                    }
                }
                "tr" => {
                    let Some(row) = tables.pop() else { continue };
                    let line = row.iter().map(|c| c.trim()).collect::<Vec<_>>().join(" | ");
                    if let Some(cell) = tables.last_mut().and_then(|r| r.last_mut()) {
                        // A table in a cell: its rows join the outer cell's text.
                        if !cell.is_empty() {
                            cell.push(' ');
                        }
                        cell.push_str(&line);
                    } else if !line.replace('|', "").trim().is_empty() {
                        out.line_break();
                        out.text(&line);
                        out.line_break();
                    }
                }
                "tbl" => out.paragraph_break(),
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    Ok(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heading_styles_are_read_by_name_and_by_built_in_id() {
        assert_eq!(heading_level("heading 3"), Some(3));
        assert_eq!(heading_level("Heading1"), Some(1));
        assert_eq!(heading_level("Title"), Some(1));
        assert_eq!(heading_level("heading 7"), None);
        assert_eq!(heading_level("Normal"), None);
    }

    #[test]
    fn a_file_that_is_not_a_zip_is_broken() {
        match extract(b"PK\x03\x04 not really", &Budget::test()) {
            Err(ExtractError::Broken("Word", _)) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_encrypted_document_is_refused_as_one() {
        let ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1 EncryptedPackage";
        let err = extract(ole, &Budget::test()).unwrap_err();
        assert!(err.to_string().contains("an encrypted document"), "{err}");
    }
}
