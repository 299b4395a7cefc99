//! The cross-reference streams of a PDF, checked before lopdf loads it: lopdf reads the one
//! `startxref` names and those before it (`/Prev`, `/XRefStm`) and inflates each whole, with no
//! limit, before it reads any object, so nothing else can stop a cross-reference stream that
//! inflates to gigabytes. Each is found where lopdf finds it, its dictionary read with the
//! content lexer, and its data decoded within the limit by [`super::decode`]; what cannot be
//! read here is left to lopdf, which fails on it too.

use pdf_extract::{Dictionary, Object, Stream};

use super::decode::{self, OverLimit};
use super::lexer::{Lexer, Token};

/// The most cross-reference sections followed back through `/Prev`; a file has one per
/// incremental update, a handful in practice.
const MAX_SECTIONS: usize = 64;

/// A dictionary's entries as far as the check needs them (numbers, names, arrays, dictionaries;
/// strings and references as null), `<<` already read; tokens up to its `>>` are consumed.
fn dictionary(lexer: &mut Lexer<'_>) -> Option<Dictionary> {
    let mut dict = Dictionary::new();
    loop {
        match lexer.next()? {
            Token::Close(_) => return Some(dict),
            Token::Name(key) => {
                let first = lexer.next()?;
                if let Token::Close(_) = first {
                    return Some(dict);
                }
                dict.set(key.to_vec(), value(lexer, first)?);
            }
            _ => {}
        }
    }
}

/// The object that starts with `first`.
fn value(lexer: &mut Lexer<'_>, first: Token<'_>) -> Option<Object> {
    Some(match first {
        Token::Number(n) => {
            // `12 0 R` is a reference: nothing lopdf can follow before it has read the table.
            let mut ahead = lexer.clone();
            if let (Some(Token::Number(_)), Some(Token::Operator(b"R"))) =
                (ahead.next(), ahead.next())
            {
                *lexer = ahead;
                return Some(Object::Null);
            }
            std::str::from_utf8(n)
                .ok()
                .and_then(|n| n.parse::<i64>().ok())
                .map_or(Object::Null, Object::Integer)
        }
        Token::Name(n) => Object::Name(n.to_vec()),
        Token::Open(b'<') => Object::Dictionary(dictionary(lexer)?),
        Token::Open(_) => {
            let mut items = Vec::new();
            loop {
                match lexer.next()? {
                    Token::Close(_) => break,
                    token => items.push(value(lexer, token)?),
                }
            }
            Object::Array(items)
        }
        _ => Object::Null,
    })
}

/// Checks every cross-reference stream lopdf will inflate while loading `bytes` against
/// `limit`; `Err` for the first that goes past it.
pub(super) fn check(bytes: &[u8], limit: u64) -> Result<(), OverLimit> {
    // lopdf reads offsets from the header on.
    let start = bytes.windows(5).position(|w| w == b"%PDF-").unwrap_or(0);
    let file = &bytes[start..];
    // lopdf takes the `startxref` just before the last `%%EOF`; every one is followed here
    // (one per incremental update), so a decoy after the end changes nothing.
    let mut offsets: Vec<usize> = file
        .windows(9)
        .enumerate()
        .filter(|(_, w)| *w == b"startxref")
        .filter_map(|(at, _)| match Lexer::new(&file[at + 9..]).next()? {
            Token::Number(n) => std::str::from_utf8(n).ok()?.parse::<usize>().ok(),
            _ => None,
        })
        .take(MAX_SECTIONS)
        .collect();
    let mut seen = Vec::new();
    while let Some(offset) = offsets.pop() {
        if seen.contains(&offset) || seen.len() >= 2 * MAX_SECTIONS || offset >= file.len() {
            continue;
        }
        seen.push(offset);
        let at = &file[offset..];
        let mut lexer = Lexer::new(at);
        let dict = match lexer.next() {
            // A table: its trailer names the sections before it.
            Some(Token::Operator(b"xref")) => trailer_after(at).and_then(|t| {
                let mut lexer = Lexer::new(t);
                matches!(lexer.next(), Some(Token::Open(b'<'))).then(|| dictionary(&mut lexer))?
            }),
            // `N G obj << ... >> stream`: a cross-reference stream.
            Some(Token::Number(_)) => {
                let obj = (lexer.next(), lexer.next(), lexer.next());
                match obj {
                    (
                        Some(Token::Number(_)),
                        Some(Token::Operator(b"obj")),
                        Some(Token::Open(b'<')),
                    ) => {
                        let dict = dictionary(&mut lexer);
                        if let Some(d) = &dict {
                            check_stream(&at[lexer.position()..], d, limit)?;
                        }
                        dict
                    }
                    _ => None,
                }
            }
            _ => None,
        };
        for key in [b"Prev".as_slice(), b"XRefStm"] {
            if let Some(Ok(n)) = dict.as_ref().map(|d| d.get(key).and_then(Object::as_i64)) {
                offsets.extend(usize::try_from(n).ok());
            }
        }
    }
    Ok(())
}

/// The trailer dictionary's bytes (from its `<<`) after a cross-reference table.
fn trailer_after(table: &[u8]) -> Option<&[u8]> {
    let at = table.windows(7).position(|w| w == b"trailer")?;
    Some(&table[at + 7..])
}

/// Decodes the stream that follows a dictionary (`stream`, an end of line, the data) within
/// `limit`. The data runs to `endstream` (or the end of the file), whatever `/Length` says: the
/// decoders stop at their own end, so more data never decodes to less.
fn check_stream(rest: &[u8], dict: &Dictionary, limit: u64) -> Result<(), OverLimit> {
    let mut lexer = Lexer::new(rest);
    if lexer.next() != Some(Token::Operator(b"stream")) {
        return Ok(());
    }
    let mut data = &rest[lexer.position()..];
    data = data.strip_prefix(b"\r").unwrap_or(data);
    data = data.strip_prefix(b"\n").unwrap_or(data);
    let end = data
        .windows(9)
        .position(|w| w == b"endstream")
        .unwrap_or(data.len());
    let stream = Stream::new(dict.clone(), data[..end].to_vec());
    decode::decode(&stream, limit).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dictionary_gives_its_numbers_names_filter_chain_and_parameters() {
        let mut lexer = Lexer::new(
            b"/Type /XRef /Size 7 /W [1 2 1] /Root 1 0 R /ID [<00> (x)] \
              /Filter [/FlateDecode] /DecodeParms << /Predictor 12 /Columns 4 >> /Prev 10 >> stream",
        );
        let dict = dictionary(&mut lexer).unwrap();
        assert_eq!(dict.get(b"Size").unwrap().as_i64().unwrap(), 7);
        assert_eq!(dict.get(b"Root").unwrap(), &Object::Null);
        assert_eq!(dict.get(b"Prev").unwrap().as_i64().unwrap(), 10);
        assert_eq!(
            dict.get(b"Filter").unwrap().as_array().unwrap(),
            &vec![Object::Name(b"FlateDecode".to_vec())]
        );
        let params = dict.get(b"DecodeParms").unwrap().as_dict().unwrap();
        assert_eq!(params.get(b"Columns").unwrap().as_i64().unwrap(), 4);
        assert_eq!(lexer.next(), Some(Token::Operator(b"stream")));
    }
}
