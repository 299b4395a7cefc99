//! A document's metadata from outside its text: `parley ingest --meta key=value` pairs and the
//! flat scalars of a Markdown file's YAML front matter, held to one rule for keys and values so
//! that search filters (`parley.metadata_matches`, migrations/0018_metadata_filters.sql) can
//! name them. Reads no files and knows no storage.

use serde_json::{Map, Value};

/// The longest key, in characters: keys are what a model names in a filter.
pub const MAX_KEY_CHARS: usize = 64;

/// The longest value, in characters: metadata is for filtering, not a second body.
pub const MAX_VALUE_CHARS: usize = 1000;

/// Why a `--meta` pair was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    #[error("--meta `{0}` is not key=value")]
    NotAPair(String),
    #[error(
        "--meta key `{0}` must be 1-{MAX_KEY_CHARS} characters of letters, digits, '_', '-' and '.'"
    )]
    Key(String),
    #[error(
        "--meta `{key}`: the value is {chars} characters long, over the limit of {MAX_VALUE_CHARS}"
    )]
    ValueTooLong { key: String, chars: usize },
}

/// Whether `key` may name metadata: 1-64 ASCII letters, digits, `_`, `-` or `.`.
pub fn valid_key(key: &str) -> bool {
    (1..=MAX_KEY_CHARS).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// A value as written on a command line or in front matter: `true`/`false` (any case) are
/// booleans, a JSON number (`2024`, `-1.5`, `1e3`; not `007`, which keeps its zeros as a
/// string) is a number, anything else is the string.
pub fn scalar(text: &str) -> Value {
    match text.to_ascii_lowercase().as_str() {
        "true" => return Value::Bool(true),
        "false" => return Value::Bool(false),
        _ => {}
    }
    match serde_json::from_str::<serde_json::Number>(text) {
        Ok(n) if n.as_f64().is_some_and(f64::is_finite) => Value::Number(n),
        _ => Value::String(text.to_owned()),
    }
}

/// One `--meta key=value`: the key checked, the value typed by [`scalar`]. The value may be
/// empty or contain `=`; only the first `=` splits.
pub fn parse_pair(raw: &str) -> Result<(String, Value), MetadataError> {
    let (key, value) = raw
        .split_once('=')
        .ok_or_else(|| MetadataError::NotAPair(raw.to_owned()))?;
    let key = key.trim();
    if !valid_key(key) {
        return Err(MetadataError::Key(key.to_owned()));
    }
    let chars = value.chars().count();
    if chars > MAX_VALUE_CHARS {
        return Err(MetadataError::ValueTooLong {
            key: key.to_owned(),
            chars,
        });
    }
    Ok((key.to_owned(), scalar(value)))
}

/// The flat scalars of a Markdown file's YAML front matter: a `---` line first, then
/// `key: value` lines up to a `---` or `...` line (the block `extract`'s Markdown reader leaves
/// out of the text). Nested maps, lists, block scalars, anchors, nulls, keys that break
/// [`valid_key`] and values over [`MAX_VALUE_CHARS`] are left out: only what a filter can
/// compare is kept. Quoted values stay strings (`"2024"` is text); `# comments` are dropped.
/// A hand parser rather than a YAML crate: no YAML parser is in the tree, and flat scalars are
/// all that metadata holds.
pub fn front_matter(source: &str) -> Map<String, Value> {
    let mut out = Map::new();
    let source = source.strip_prefix('\u{feff}').unwrap_or(source);
    let mut lines = source.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return out;
    }
    let mut block = Vec::new();
    for line in lines {
        if matches!(line.trim_end(), "---" | "...") {
            for line in block {
                if let Some((key, value)) = front_matter_line(line) {
                    out.insert(key, value);
                }
            }
            return out;
        }
        block.push(line);
    }
    // Never closed: not front matter, as the Markdown reader sees it.
    Map::new()
}

/// One top-level `key: value` line of front matter, if it is a flat scalar worth keeping.
fn front_matter_line(line: &str) -> Option<(String, Value)> {
    // Indented lines belong to a nested map or a list; `- x` is a list item; `#` a comment.
    if line.starts_with([' ', '\t', '-', '#']) {
        return None;
    }
    let (key, rest) = line.split_once(':')?;
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let key = unquote(key.trim()).unwrap_or(key.trim());
    if !valid_key(key) {
        return None;
    }
    let rest = rest.trim();
    let value = if let Some(quoted) = quoted_value(rest) {
        Value::String(quoted.to_owned())
    } else {
        // A comment after a plain value starts at " #".
        let plain = rest.split_once(" #").map_or(rest, |(v, _)| v).trim_end();
        // Empty (a nested block follows), null, flow collections, block scalars, anchors,
        // aliases and tags are not flat scalars.
        if plain.is_empty()
            || matches!(plain, "~" | "null" | "Null" | "NULL")
            || plain.starts_with(['[', '{', '|', '>', '&', '*', '!'])
        {
            return None;
        }
        scalar(plain)
    };
    if value
        .as_str()
        .is_some_and(|s| s.chars().count() > MAX_VALUE_CHARS)
    {
        return None;
    }
    Some((key.to_owned(), value))
}

/// The text between matching single or double quotes that wrap all of `text`.
fn unquote(text: &str) -> Option<&str> {
    ['"', '\''].into_iter().find_map(|q| {
        text.strip_prefix(q)
            .and_then(|t| t.strip_suffix(q))
            .filter(|_| text.len() >= 2)
    })
}

/// A quoted value, its trailing comment ignored: `"a # b" # note` is `a # b`.
fn quoted_value(text: &str) -> Option<&str> {
    let q = text.chars().next().filter(|c| matches!(c, '"' | '\''))?;
    let inner = &text[1..];
    let end = inner.find(q)?;
    let after = inner[end + 1..].trim();
    (after.is_empty() || after.starts_with('#')).then(|| &inner[..end])
}

/// A document's metadata: `base` (`--meta`), then the file's own (`own`, e.g. S3 user
/// metadata), then its front matter, each later one winning on a shared key: what a file says
/// about itself beats what a run says about every file.
pub fn merge(base: &Map<String, Value>, own: &Value, front: Map<String, Value>) -> Value {
    let mut out = base.clone();
    if let Value::Object(own) = own {
        out.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    out.extend(front);
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn meta_pairs_become_numbers_booleans_or_strings() {
        let cases = [
            ("year=2024", "year", json!(2024)),
            ("ratio=-1.5", "ratio", json!(-1.5)),
            ("draft=true", "draft", json!(true)),
            ("draft=FALSE", "draft", json!(false)),
            ("zip=007", "zip", json!("007")),
            ("department=hr", "department", json!("hr")),
            ("published=2024-01-31", "published", json!("2024-01-31")),
            ("query=a=b", "query", json!("a=b")),
            ("note=", "note", json!("")),
            ("v1.x_y-z=1e3", "v1.x_y-z", json!(1000.0)),
        ];
        for (raw, key, value) in cases {
            assert_eq!(parse_pair(raw), Ok((key.to_owned(), value)), "{raw}");
        }
    }

    #[test]
    fn a_bad_meta_pair_is_refused_naming_it() {
        assert_eq!(
            parse_pair("department"),
            Err(MetadataError::NotAPair("department".into()))
        );
        let err = parse_pair("my key=x").unwrap_err();
        assert_eq!(err, MetadataError::Key("my key".into()));
        assert!(err.to_string().contains("`my key`"), "{err}");
        assert_eq!(parse_pair("=x"), Err(MetadataError::Key(String::new())));
        let long = "k".repeat(MAX_KEY_CHARS + 1);
        assert_eq!(
            parse_pair(&format!("{long}=x")),
            Err(MetadataError::Key(long))
        );
        let err = parse_pair(&format!("k={}", "é".repeat(MAX_VALUE_CHARS + 1))).unwrap_err();
        assert!(err.to_string().contains("1001 characters"), "{err}");
        assert!(parse_pair(&format!("k={}", "é".repeat(MAX_VALUE_CHARS))).is_ok());
    }

    #[test]
    fn front_matter_keeps_flat_scalars_and_leaves_out_the_rest() {
        let md = "---\n\
                  title: \"Leave policy\" # shown in the page\n\
                  department: hr\n\
                  year: 2024\n\
                  published: 2024-03-01\n\
                  draft: false\n\
                  code: '2024'\n\
                  empty:\n\
                  nothing: ~\n\
                  tags:\n  - a\n  - b\n\
                  owner:\n  name: x\n\
                  list: [a, b]\n\
                  text: |\n  many lines\n\
                  bad key: x\n\
                  url: https://example.com/a#b\n\
                  # a comment: not a key\n\
                  ---\n# Body\n\nyear: 1999\n";
        assert_eq!(
            Value::Object(front_matter(md)),
            json!({
                "title": "Leave policy",
                "department": "hr",
                "year": 2024,
                "published": "2024-03-01",
                "draft": false,
                "code": "2024",
                "url": "https://example.com/a#b",
            })
        );
    }

    #[test]
    fn text_without_a_closed_front_matter_block_has_no_metadata() {
        assert!(front_matter("# Title\n\nyear: 2024\n").is_empty());
        assert!(front_matter("---\nyear: 2024\n\nno end").is_empty());
        assert!(front_matter("\n---\nyear: 2024\n---\n").is_empty());
        assert_eq!(
            Value::Object(front_matter("---\r\nyear: 2024\r\n...\r\ntext")),
            json!({"year": 2024})
        );
    }

    #[test]
    fn front_matter_beats_the_files_own_metadata_which_beats_meta() {
        let base = json!({"department": "all", "year": 2020, "source": "cli"});
        let own = json!({"year": "2023", "bucket": "b"});
        let front = front_matter("---\nyear: 2024\n---\n");
        assert_eq!(
            merge(base.as_object().unwrap(), &own, front),
            json!({"department": "all", "year": 2024, "source": "cli", "bucket": "b"})
        );
        assert_eq!(merge(&Map::new(), &Value::Null, Map::new()), json!({}));
    }
}
