//! What an object's key means: `<collection>/<path…>` is a document of the collection stored
//! under the uri `<path…>` (as `parley ingest <folder>` would store the folder's file), and
//! `<collection>/_collection.json` is the collection's settings object. Also `s3://` URLs
//! and event sequencers.

use std::path::Path;

use crate::extract::Format;
use crate::extract::text::is_hidden;

/// The name of a collection's settings object, under the collection's folder.
pub const SETTINGS_OBJECT: &str = "_collection.json";

/// The longest path segment a key may have: a file name on Linux (the object is written to a
/// temporary file under its own path).
const MAX_SEGMENT_BYTES: usize = 255;

/// `s3://bucket/prefix`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Url {
    pub bucket: String,
    /// May be empty (the whole bucket); no leading `/`.
    pub prefix: String,
}

impl S3Url {
    /// `None` unless `raw` starts with `s3://`; else the URL or why it is not one.
    pub fn parse(raw: &str) -> Option<Result<S3Url, String>> {
        let rest = raw.strip_prefix("s3://")?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || ".-".contains(c));
        Some(if valid_bucket {
            Ok(S3Url {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
            })
        } else {
            Err(format!(
                "{raw}: \"{bucket}\" is not an S3 bucket name (3-63 lower-case letters, digits, '.' and '-')"
            ))
        })
    }

    /// For pruning: the collection the prefix lies inside, if it reaches past one, and the
    /// part of the uri it fixes (`manual/ch1/` is collection `manual`, uris starting `ch1/`).
    pub fn within_collection(&self) -> Option<(&str, &str)> {
        self.prefix.split_once('/')
    }
}

impl std::fmt::Display for S3Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// What a key is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Document {
        collection: String,
        uri: String,
    },
    Settings {
        collection: String,
    },
    /// Not something to ingest, and not a mistake either: a console "folder", a hidden file,
    /// a format Parley does not read. Said why, and left alone.
    Ignored(String),
}

/// The key's place, or why the key cannot be ingested (a mistake to report).
pub fn place(key: &str) -> Result<Place, String> {
    let Some((collection, path)) = key.split_once('/') else {
        return Err(format!(
            "the key is not under a collection's folder: put documents at <collection>/<path>, e.g. manual/{key}"
        ));
    };
    if let Err(e) = crate::check_collection_name(collection) {
        return Err(e.to_string());
    }
    if path.is_empty() || path.ends_with('/') {
        return Ok(Place::Ignored("a folder, not a file".into()));
    }
    if path == SETTINGS_OBJECT {
        return Ok(Place::Settings {
            collection: collection.to_owned(),
        });
    }
    for segment in path.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(format!(
                "the key's path has an empty, \".\" or \"..\" part, so it names no file: {path}"
            ));
        }
        if segment.len() > MAX_SEGMENT_BYTES {
            return Err(format!(
                "a part of the key's path is {} bytes long, over the {MAX_SEGMENT_BYTES} a file name may have",
                segment.len()
            ));
        }
        if segment.starts_with('.') || segment.chars().next().is_some_and(is_hidden) {
            return Ok(Place::Ignored("a hidden file or folder".into()));
        }
    }
    if Format::of_path(Path::new(path)).is_none() {
        return Ok(Place::Ignored(
            "not a Markdown, HTML, text, PDF or Word file".into(),
        ));
    }
    Ok(Place::Document {
        collection: collection.to_owned(),
        uri: path.to_owned(),
    })
}

/// An event's sequencer in the form `parley.s3_objects` compares: S3 says to right-pad the
/// shorter of two sequencers with zeros and compare them as text, so all are padded to 64
/// upper-case hex digits. `None` for anything else (then the event is not compared).
pub fn normalise_sequencer(raw: &str) -> Option<String> {
    let raw = raw.trim();
    if raw.is_empty() || raw.len() > 64 || !raw.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut s = raw.to_ascii_uppercase();
    s.extend(std::iter::repeat_n('0', 64 - raw.len()));
    Some(s)
}

/// An S3 event's key: URL-encoded as an HTML form value (`+` for a space).
pub fn decode_event_key(raw: &str) -> String {
    url::form_urlencoded::parse(format!("k={raw}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_names_its_collection_and_the_uri_the_document_gets() {
        assert_eq!(
            place("manual/sql/select.html"),
            Ok(Place::Document {
                collection: "manual".into(),
                uri: "sql/select.html".into()
            })
        );
        assert_eq!(
            place("hr/_collection.json"),
            Ok(Place::Settings {
                collection: "hr".into()
            })
        );
        assert!(matches!(place("hr/"), Ok(Place::Ignored(_))));
        assert!(matches!(place("hr/.DS_Store"), Ok(Place::Ignored(_))));
        assert!(matches!(place("hr/photo.jpg"), Ok(Place::Ignored(_))));
    }

    #[test]
    fn keys_that_cannot_be_documents_say_why() {
        assert!(
            place("loose.pdf")
                .unwrap_err()
                .contains("collection's folder")
        );
        assert!(
            place("Upper/x.pdf")
                .unwrap_err()
                .contains("collection name")
        );
        assert!(place("hr/../etc/passwd.txt").unwrap_err().contains(".."));
        assert!(place("hr//x.txt").unwrap_err().contains("empty"));
        let long = format!("hr/{}.txt", "a".repeat(300));
        assert!(place(&long).unwrap_err().contains("255"));
    }

    #[test]
    fn sequencers_compare_as_s3_says_after_padding() {
        let a = normalise_sequencer("0055AED6DCD90281E5").unwrap();
        let b = normalise_sequencer("0055AED6DCD90281E6").unwrap();
        assert!(a < b);
        // Different lengths: right-padded, so a longer sequencer with the same start is later.
        let c = normalise_sequencer("0055aed6dcd90281e500").unwrap();
        assert_eq!(a, c);
        let d = normalise_sequencer("0055AED6DCD90281E501").unwrap();
        assert!(a < d && d < b);
        assert_eq!(a.len(), 64);
        assert_eq!(normalise_sequencer("not hex"), None);
        assert_eq!(normalise_sequencer(""), None);
    }

    #[test]
    fn event_keys_are_decoded_as_form_values() {
        assert_eq!(
            decode_event_key("hr/Leave+policy+%282026%29.pdf"),
            "hr/Leave policy (2026).pdf"
        );
        assert_eq!(decode_event_key("hr/a%2Bb.txt"), "hr/a+b.txt");
    }

    #[test]
    fn s3_urls_parse_into_bucket_and_prefix() {
        assert_eq!(
            S3Url::parse("s3://team-docs/manual/ch1/"),
            Some(Ok(S3Url {
                bucket: "team-docs".into(),
                prefix: "manual/ch1/".into()
            }))
        );
        assert_eq!(
            S3Url::parse("s3://team-docs"),
            Some(Ok(S3Url {
                bucket: "team-docs".into(),
                prefix: String::new()
            }))
        );
        assert!(S3Url::parse("s3://Bad_Bucket/x").unwrap().is_err());
        assert_eq!(S3Url::parse("./docs"), None);
        let u = S3Url::parse("s3://b-1/manual/ch1/").unwrap().unwrap();
        assert_eq!(u.within_collection(), Some(("manual", "ch1/")));
    }
}
