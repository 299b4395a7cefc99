//! Every repository path the docs mention exists: a guide that four files point to once did
//! not. Checks the Markdown docs, the crates', tools', domains' and tests' READMEs and the root
//! YAML/TOML files.
//!
//! Matching is by hand (about twenty lines): the `regex` crate is not in Cargo.lock, and
//! `regex-lite` (which is) has no look-behind, which the "not part of a longer token" rule needs.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level folders whose paths the docs cite. A token that starts with one of these and a
/// slash, and is not part of a longer path or word, must name something that exists.
const ROOTS: [&str; 10] = [
    "docs",
    "tools",
    "domains",
    "scripts",
    "crates",
    "functions",
    "migrations",
    "events",
    "tests",
    "data",
];

/// MCP methods the docs name, which read like paths under `tools/`.
const MCP_METHODS: [&str; 2] = ["tools/call", "tools/list"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files checked: `*.md`, `*.yaml`, `*.toml` at the root, `docs/**/*.md`, `events/*.md`,
/// `crates/*/README.md`, `tools/*/README.md`, `domains/*/README.md`, `tests/*/README.md`.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let ends = |p: &Path, exts: &[&str]| {
        p.extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| exts.contains(&e))
    };
    for entry in read_dir(root) {
        if entry.is_file() && ends(&entry, &["md", "yaml", "toml"]) {
            found.push(entry);
        }
    }
    let mut stack = vec![root.join("docs")];
    while let Some(dir) = stack.pop() {
        for entry in read_dir(&dir) {
            if entry.is_dir() {
                stack.push(entry);
            } else if ends(&entry, &["md"]) {
                found.push(entry);
            }
        }
    }
    for entry in read_dir(&root.join("events")) {
        if entry.is_file() && ends(&entry, &["md"]) {
            found.push(entry);
        }
    }
    for parent in ["crates", "tools", "domains", "tests"] {
        for dir in read_dir(&root.join(parent)) {
            let readme = dir.join("README.md");
            if readme.is_file() {
                found.push(readme);
            }
        }
    }
    found.sort();
    found
}

fn read_dir(dir: &Path) -> Vec<PathBuf> {
    match fs::read_dir(dir) {
        Ok(entries) => entries.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    }
}

/// Tokens like `scripts/pg` or `functions/mcp/tools.toml`: one of [`ROOTS`] and a slash, not
/// preceded by a word character, `/`, `.` or `-` (so `target/debug/deps` or `.parley/venv`
/// do not count), running over `[A-Za-z0-9_./-]` and ending on a letter, digit or `_`. Globs
/// (`*`, `<...>`, `{...}` right after the token) are skipped.
fn repo_paths(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let path_byte = |b: u8| b.is_ascii_alphanumeric() || b"_./-".contains(&b);
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_token = i == 0 || !(path_byte(bytes[i - 1]) || bytes[i - 1] == b'/');
        let root = ROOTS.iter().find(|r| {
            bytes[i..].starts_with(r.as_bytes()) && bytes.get(i + r.len()) == Some(&b'/')
        });
        let (true, Some(_)) = (starts_token, root) else {
            i += 1;
            continue;
        };
        let mut end = i;
        while end < bytes.len() && path_byte(bytes[end]) {
            end += 1;
        }
        let glob = matches!(bytes.get(end), Some(b'*' | b'<' | b'{'));
        let mut token = &text[i..end];
        while token.ends_with(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            token = &token[..token.len() - 1];
        }
        if !glob && token.contains('/') && !token.ends_with('/') && !MCP_METHODS.contains(&token) {
            found.push(token.to_owned());
        }
        i = end.max(i + 1);
    }
    found
}

/// Targets of inline Markdown links `[text](target)` that are relative paths (no scheme, not
/// an anchor), without their `#fragment`.
fn relative_links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(close) = after.find(')') else { break };
        let target = after[..close].trim();
        let target = target.split_whitespace().next().unwrap_or_default();
        let path = target.split('#').next().unwrap_or_default();
        if !path.is_empty() && !path.contains("://") && !path.starts_with("mailto:") {
            found.push(path.to_owned());
        }
        rest = &after[close..];
    }
    found
}

/// `(document, path)` for every path a document names that does not exist, once each.
fn missing(root: &Path) -> BTreeSet<(String, String)> {
    let mut missing = BTreeSet::new();
    for doc in documents(root) {
        let text = fs::read_to_string(&doc).unwrap_or_default();
        let name = doc.strip_prefix(root).unwrap_or(&doc).display().to_string();
        for path in repo_paths(&text) {
            if !root.join(&path).exists() {
                missing.insert((name.clone(), path));
            }
        }
        if doc.extension().is_some_and(|e| e == "md") {
            let dir = doc.parent().unwrap_or(root);
            for link in relative_links(&text) {
                if !dir.join(&link).exists() {
                    missing.insert((name.clone(), link));
                }
            }
        }
    }
    missing
}

#[test]
fn every_path_the_docs_mention_exists() {
    let root = repo();
    let docs = documents(&root);
    assert!(
        docs.iter().any(|d| d.ends_with("README.md")),
        "no documents found under {}",
        root.display()
    );
    let missing = missing(&root);
    assert!(
        missing.is_empty(),
        "paths named in the docs that do not exist:\n{}",
        missing
            .iter()
            .map(|(doc, path)| format!("  {doc}: {path}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn paths_are_found_where_a_reader_would_see_them() {
    let text = "Run `scripts/dev`, see docs/deploy.md, (functions/mcp/tools.toml). \
                Not target/debug/deps, .parley/venv-lambda or crates/*/README.md; \
                trailing dots go: tests/lambda/run.";
    assert_eq!(
        repo_paths(text),
        [
            "scripts/dev",
            "docs/deploy.md",
            "functions/mcp/tools.toml",
            "tests/lambda/run"
        ]
    );
    assert_eq!(
        relative_links("[a](docs/x.md#part) [b](https://e.example) [c](#top) [d](../README.md)"),
        ["docs/x.md", "../README.md"]
    );
}
