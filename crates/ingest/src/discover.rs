//! Which files a run ingests, and the uri each is stored under: a directory is walked (hidden
//! entries skipped, symbolic links not followed) and its files' uris are relative to it; a
//! file named directly has its parent as root. Only the formats [`Format`] knows are kept.

use std::path::{Path, PathBuf};

use crate::IngestError;
use crate::extract::Format;
use crate::extract::text::is_hidden;

/// One file to ingest.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFile {
    /// The directory the uri is relative to.
    pub root: PathBuf,
    /// The file itself (root joined with the relative path).
    pub path: PathBuf,
    /// `documents.path` (part / chapter / section); `None`: the uri's directories.
    pub structure: Option<Vec<String>>,
    /// `documents.metadata`; `Value::Null` is stored as `{}`.
    pub metadata: serde_json::Value,
}

impl SourceFile {
    pub fn new(root: impl Into<PathBuf>, path: impl Into<PathBuf>) -> SourceFile {
        SourceFile {
            root: root.into(),
            path: path.into(),
            structure: None,
            metadata: serde_json::Value::Null,
        }
    }

    /// The path relative to the root, '/'-separated: what `documents.uri` holds and search
    /// results show. Control characters and bidirectional overrides in a file name are written
    /// as `%XX` escapes of their UTF-8 bytes, so the uri is one visible line that still tells
    /// the files apart.
    pub fn uri(&self) -> String {
        let rel = self.path.strip_prefix(&self.root).unwrap_or(&self.path);
        rel.components()
            .filter_map(|c| match c {
                std::path::Component::Normal(s) => Some(escape_hidden(&s.to_string_lossy())),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// The structure given, else the uri's directories (`guide/setup/install.md` → guide, setup).
    pub fn structure(&self) -> Vec<String> {
        match &self.structure {
            Some(s) => s.clone(),
            None => {
                let uri = self.uri();
                let mut parts: Vec<String> = uri.split('/').map(str::to_owned).collect();
                parts.pop();
                parts
            }
        }
    }

    pub fn format(&self) -> Option<Format> {
        Format::of_path(&self.path)
    }
}

fn escape_hidden(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if is_hidden(c) || c.is_control() {
            let mut buf = [0; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// What [`discover_all`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovered {
    /// In a stable order: each argument's files sorted by path, arguments in the order given.
    pub files: Vec<SourceFile>,
    /// Files left out because their extension names no format Parley extracts.
    pub ignored: u64,
}

/// The files to ingest under `paths` (see the module doc), dropping other formats.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<SourceFile>, IngestError> {
    Ok(discover_all(paths)?.files)
}

/// [`discover`], also counting the files it ignored, for the run's summary.
pub fn discover_all(paths: &[PathBuf]) -> Result<Discovered, IngestError> {
    let mut found = Discovered::default();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => IngestError::NotFound(path.clone()),
            _ => IngestError::Walk {
                path: path.clone(),
                source: e,
            },
        })?;
        if meta.is_dir() {
            walk(path, &mut found)?;
        } else {
            let root = path
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            keep(&root, path.clone(), &mut found);
        }
    }
    Ok(found)
}

fn walk(root: &Path, found: &mut Discovered) -> Result<(), IngestError> {
    let walker = walkdir::WalkDir::new(root)
        .sort_by_file_name()
        .into_iter()
        // Depth 0 is the root itself, which may well be `.`.
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walker {
        let entry = entry.map_err(|e| IngestError::Walk {
            path: e.path().unwrap_or(root).to_path_buf(),
            source: e.into(),
        })?;
        if entry.file_type().is_file() {
            keep(root, entry.into_path(), found);
        }
    }
    Ok(())
}

fn keep(root: &Path, path: PathBuf, found: &mut Discovered) {
    if Format::of_path(&path).is_some() {
        found.files.push(SourceFile::new(root, path));
    } else {
        found.ignored += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_are_relative_to_the_root_and_slash_separated() {
        let f = SourceFile::new("/docs", "/docs/guide/setup/install.md");
        assert_eq!(f.uri(), "guide/setup/install.md");
        assert_eq!(f.structure(), ["guide", "setup"]);
        let top = SourceFile::new("/docs", "/docs/index.html");
        assert_eq!(top.uri(), "index.html");
        assert!(top.structure().is_empty());
    }

    #[test]
    fn control_characters_in_file_names_are_escaped_in_the_uri() {
        let f = SourceFile::new("/docs", "/docs/a\nb/c\u{1b}[31m\u{202e}d.md");
        assert_eq!(f.uri(), "a%0Ab/c%1B[31m%E2%80%AEd.md");
        assert_eq!(f.structure(), ["a%0Ab"]);
    }

    #[test]
    fn a_walk_keeps_known_formats_skips_hidden_entries_and_counts_the_rest() {
        let dir = std::env::temp_dir().join(format!("parley-discover-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (p, body) in [
            ("b.md", "# B"),
            ("a/x.html", "<p>x</p>"),
            ("a/y.txt", "y"),
            ("a/z.pdf", "%PDF"),
            ("a/w.doc", "old Word"),
            (".git/config", "[core]"),
            (".hidden.md", "# no"),
            ("IMAGE.PNG", "png"),
        ] {
            let path = dir.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, body).unwrap();
        }
        let found = discover_all(std::slice::from_ref(&dir)).unwrap();
        let uris: Vec<String> = found.files.iter().map(SourceFile::uri).collect();
        assert_eq!(uris, ["a/x.html", "a/y.txt", "a/z.pdf", "b.md"]);
        assert_eq!(found.ignored, 2);

        let single = discover(&[dir.join("a/x.html")]).unwrap();
        assert_eq!(single[0].uri(), "x.html");

        let missing = discover(&[dir.join("nope")]).unwrap_err();
        assert!(matches!(missing, IngestError::NotFound(_)), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
