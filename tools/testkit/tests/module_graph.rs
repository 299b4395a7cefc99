//! The map in ARCHITECTURE.md is the code's shape, checked: each crate's top-level modules in
//! layers, each module importing only from layers below its own (so no cycle can form), and the
//! folders as layers of crates (`crates/` libraries know nothing of domains, functions or tools).
//!
//! Imports are read from the source text (`crate::x` paths and `use crate::{x, ..}` groups,
//! outside comments, string literals and `#[cfg(test)]` modules): no parser crate needed for that.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A workspace member: its folder relative to the repository, and its package name.
struct Member {
    dir: String,
    package: String,
}

fn members(root: &Path) -> Vec<Member> {
    let manifest: toml::Table = read(&root.join("Cargo.toml")).parse().expect("Cargo.toml");
    let list = manifest["workspace"]["members"]
        .as_array()
        .expect("workspace.members");
    list.iter()
        .map(|m| {
            let dir = m.as_str().expect("member path").to_string();
            let own: toml::Table = read(&root.join(&dir).join("Cargo.toml"))
                .parse()
                .expect("member Cargo.toml");
            let package = own["package"]["name"].as_str().expect("name").to_string();
            Member { dir, package }
        })
        .collect()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The folder (`crates`, `domains`, `functions`, `tools`) a member lives in: its layer.
fn folder(dir: &str) -> &str {
    dir.split('/').next().unwrap_or(dir)
}

/// Which folders a folder's crates may depend on (normal and build dependencies; tests may use
/// anything through dev-dependencies).
fn may_depend_on(from: &str, to: &str) -> bool {
    match from {
        "crates" => to == "crates",
        "domains" => to == "crates",
        "functions" => to == "crates",
        "tools" => true,
        _ => false,
    }
}

#[test]
fn crates_depend_only_on_the_layers_below_their_folder() {
    let root = repo();
    let members = members(&root);
    let by_package: BTreeMap<&str, &str> = members
        .iter()
        .map(|m| (m.package.as_str(), m.dir.as_str()))
        .collect();
    let mut wrong = Vec::new();
    for m in &members {
        let own: toml::Table = read(&root.join(&m.dir).join("Cargo.toml")).parse().unwrap();
        for table in ["dependencies", "build-dependencies"] {
            let Some(deps) = own.get(table).and_then(|d| d.as_table()) else {
                continue;
            };
            for name in deps.keys() {
                let Some(dir) = by_package.get(name.as_str()) else {
                    continue;
                };
                if !may_depend_on(folder(&m.dir), folder(dir)) {
                    wrong.push(format!("{} ({}) -> {name} ({dir})", m.package, m.dir));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "crates/ holds libraries that know nothing above them; domains and functions build on \
         crates/ only; tools/ may use anything. These [dependencies] break that:\n  {}",
        wrong.join("\n  ")
    );
}

/// One crate's layers as ARCHITECTURE.md gives them: module name -> layer index (0 = top).
type Layers = BTreeMap<String, usize>;

/// Finds, under each `### \`dir\`` heading of ARCHITECTURE.md, the paragraph starting
/// with `**Layers**`: backticked module names, layers separated by `→`, top first.
fn declared_layers(architecture: &str) -> BTreeMap<String, Layers> {
    let mut out = BTreeMap::new();
    let mut section: Option<String> = None;
    let lines: Vec<&str> = architecture.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(rest) = line.strip_prefix("### `") {
            section = rest
                .split('`')
                .next()
                .map(|s| s.trim_end_matches('/').to_string());
            continue;
        }
        if line.starts_with("## ") {
            section = None;
        }
        let (Some(dir), Some(first)) = (&section, line.strip_prefix("**Layers**")) else {
            continue;
        };
        // The paragraph goes on to the next blank line.
        let rest = std::iter::once(first)
            .chain(
                lines[i + 1..]
                    .iter()
                    .copied()
                    .take_while(|l| !l.trim().is_empty()),
            )
            .collect::<Vec<_>>()
            .join(" ");
        let mut layers = Layers::new();
        for (i, group) in rest.split('→').enumerate() {
            for name in group.split('`').skip(1).step_by(2) {
                layers.insert(name.to_string(), i);
            }
        }
        out.insert(dir.clone(), layers);
    }
    out
}

#[test]
fn every_module_imports_only_from_the_layers_below_it() {
    let root = repo();
    let architecture = read(&root.join("ARCHITECTURE.md"));
    let declared = declared_layers(&architecture);
    let mut problems = Vec::new();
    for m in members(&root) {
        let modules = top_level_modules(&root.join(&m.dir).join("src"));
        if modules.len() < 2 {
            continue;
        }
        let Some(layers) = declared.get(&m.dir) else {
            problems.push(format!(
                "{}: ARCHITECTURE.md has no `**Layers**` line under a `### `{}`` heading \
                 (modules: {})",
                m.dir,
                m.dir,
                modules.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
            continue;
        };
        let listed: BTreeSet<&String> = layers.keys().collect();
        let actual: BTreeSet<&String> = modules.keys().collect();
        for missing in actual.difference(&listed) {
            problems.push(format!(
                "{}: module `{missing}` is not in its layers",
                m.dir
            ));
        }
        for extra in listed.difference(&actual) {
            problems.push(format!(
                "{}: layers name `{extra}`, which is no module",
                m.dir
            ));
        }
        for (module, files) in &modules {
            let Some(&from) = layers.get(module) else {
                continue;
            };
            for file in files {
                for (line, to) in imports(&read(file)) {
                    let Some(&target) = layers.get(&to) else {
                        continue;
                    };
                    if to != *module && target <= from {
                        let rel = file.strip_prefix(&root).unwrap_or(file);
                        problems.push(format!(
                            "{}:{line}: `{module}` imports `{to}`, {}",
                            rel.display(),
                            if target == from {
                                "which is in the same layer"
                            } else {
                                "which is in a layer above it"
                            }
                        ));
                    }
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the module graph must only point down, as ARCHITECTURE.md's `**Layers**` lines say \
         (move the shared piece into a lower module, or fix the map):\n  {}",
        problems.join("\n  ")
    );
}

/// A crate's top-level modules (`src/x.rs`, `src/x/`) and the non-test files in each.
fn top_level_modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    let Ok(entries) = fs::read_dir(src) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        if name == "lib" || name == "main" || name == "bin" {
            continue;
        }
        if path.is_dir() {
            let mut files = Vec::new();
            collect_rs(&path, &mut files);
            out.entry(name.to_string()).or_default().extend(files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.entry(name.to_string()).or_default().push(path.clone());
        }
    }
    out
}

fn collect_rs(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
            into.push(path);
        }
    }
}

/// A file its parent declares as `#[cfg(test)] mod name;`.
fn is_test_file(path: &Path) -> bool {
    let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
        return false;
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let parents = [dir.join("mod.rs"), dir.with_extension("rs")];
    parents.iter().any(|p| {
        fs::read_to_string(p).is_ok_and(|text| {
            let needle = format!("mod {stem};");
            text.lines().collect::<Vec<_>>().windows(2).any(|w| {
                w[1].trim().ends_with(&needle) && w[0].trim() == "#[cfg(test)]"
                    || w[1].trim() == format!("#[cfg(test)] {needle}")
            })
        })
    })
}

/// `(line, module)` for each `crate::module` this source names outside comments, strings and
/// `#[cfg(test)] mod x { .. }` blocks.
fn imports(source: &str) -> Vec<(usize, String)> {
    let code = without_tests(&code_only(source));
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(found) = code[at..].find("crate::") {
        let start = at + found;
        at = start + "crate::".len();
        let before = start.checked_sub(1).map(|i| bytes[i]);
        if before.is_some_and(|b| b == b'$' || b == b'_' || b.is_ascii_alphanumeric()) {
            continue;
        }
        let line = code[..start].matches('\n').count() + 1;
        let rest = &code[at..];
        if let Some(group) = rest.strip_prefix('{') {
            for name in group_heads(group) {
                out.push((line, name));
            }
        } else {
            out.push((line, ident(rest)));
        }
    }
    out
}

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The first name of each item of a `{a, b::{c, d}, e as f}` group (its text after the `{`).
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut expecting = true;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => expecting = true,
            c if expecting && depth == 0 && (c.is_ascii_alphabetic() || c == '_') => {
                heads.push(ident(&group[i..]));
                expecting = false;
            }
            _ => {}
        }
    }
    heads
}

/// The source with comments, string and char literals blanked (newlines kept for line numbers).
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&chars, i) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            i += hashes + 2;
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while i < chars.len() && !chars[i..].starts_with(&close) {
                out.push(blank(chars[i]));
                i += 1;
            }
            i += close.len();
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                if let Some(&ch) = chars.get(i) {
                    out.push(blank(ch));
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' && next == Some('\\') {
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_ascii_alphanumeric() || chars[i - 1] == '_')
}

/// The code without `#[cfg(test)] mod name { .. }` blocks (newlines kept).
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        let is_block = trimmed.starts_with("mod ")
            && trimmed
                .find(['{', ';'])
                .is_some_and(|i| trimmed.as_bytes()[i] == b'{');
        if !is_block {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        }
        let open =
            at + "#[cfg(test)]".len() + (after.len() - trimmed.len()) + trimmed.find('{').unwrap();
        let mut depth = 0;
        let mut end = rest.len();
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.extend(rest[at..end].chars().filter(|&c| c == '\n'));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_import_reader_sees_paths_and_groups_but_not_comments_strings_or_tests() {
    let source = r##"
use crate::config::Limits;
use crate::{audit::{self, Marker}, tools};
// use crate::commented;
/* crate::blocked */
const S: &str = "crate::quoted";
const R: &str = r#"crate::raw"#;
macro_rules! m { () => { $crate::macro_path } }
fn f<'a>(x: &'a str) -> char { let _ = crate::server::run(x); '{' }
#[cfg(test)]
mod tests {
    use crate::only_in_tests;
}
"##;
    let found: Vec<(usize, String)> = imports(source);
    assert_eq!(
        found,
        vec![
            (2, "config".to_string()),
            (3, "audit".to_string()),
            (3, "tools".to_string()),
            (9, "server".to_string()),
        ]
    );
}

#[test]
fn layers_lines_are_read_under_their_crate_heading() {
    let doc = "### `functions/mcp` (package `parley-mcp`)\n\
               text\n\
               **Layers** (top to bottom): `server` → `tools`,\n\
               `adhoc` → `output`\n\
               \n\
               `not_a_layer`\n\
               ## Next\n\
               **Layers**: `ignored`\n";
    let layers = declared_layers(doc);
    let mcp = &layers["functions/mcp"];
    assert_eq!(mcp["server"], 0);
    assert_eq!(mcp["tools"], 1);
    assert_eq!(mcp["adhoc"], 1);
    assert_eq!(mcp["output"], 2);
    assert!(!mcp.contains_key("not_a_layer"));
    assert_eq!(layers.len(), 1);
}

/// Names in backticks that read like a sentence (`a_keyed_write_sent_twice_...`): the tests
/// ARCHITECTURE.md's invariants say they are checked by.
fn named_tests(architecture: &str) -> BTreeSet<String> {
    architecture
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|token| {
            token.matches('_').count() >= 4
                && token
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .map(str::to_string)
        .collect()
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() && !name.starts_with('.') && name != "target" && name != "node_modules" {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn every_test_the_map_names_as_a_check_exists() {
    let root = repo();
    let wanted = named_tests(&read(&root.join("ARCHITECTURE.md")));
    assert!(
        wanted.len() >= 20,
        "the invariants name {} tests; the reader found too few to be reading them",
        wanted.len()
    );
    let mut files = Vec::new();
    for top in ["crates", "domains", "functions", "tools"] {
        rust_files(&root.join(top), &mut files);
    }
    let defined: BTreeSet<String> = files
        .iter()
        .flat_map(|f| {
            let text = read(f);
            text.split("fn ").skip(1).map(ident).collect::<Vec<_>>()
        })
        .collect();
    let missing: Vec<&String> = wanted.difference(&defined).collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md says these tests check its invariants, but no test has the name \
         (renamed or gone? fix the map):\n  {}",
        missing
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n  ")
    );
}

/// `word` in `line` as a whole path or identifier: not inside a longer name.
fn has_word(line: &str, word: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        // A path prefix such as `params::` goes on into a name of its own.
        !before.is_some_and(is_ident) && (word.ends_with("::") || !after.is_some_and(is_ident))
    })
}

/// `file:line: word` for each of `words` that the code of the `.rs` files under `dirs` (outside
/// comments, strings and test modules) names.
fn code_naming(root: &Path, dirs: &[PathBuf], words: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    for dir in dirs {
        rust_files(dir, &mut files);
    }
    files.sort();
    let mut found = Vec::new();
    for file in files {
        let code = without_tests(&code_only(&read(&file)));
        let rel = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (n, line) in code.lines().enumerate() {
            for word in words.iter().filter(|w| has_word(line, w)) {
                found.push(format!("{rel}:{}: {word}", n + 1));
            }
        }
    }
    found
}

/// What belongs to the chat's HTTP edge: the turn core takes narrow dependencies and returns its
/// own result, so the JSON answer, the page's stream and `/v1` all render the same turn.
const EDGE_WORDS: &[&str] = &["axum", "lambda_http", "AppState", "crate::http"];

#[test]
fn the_chats_turn_core_imports_neither_axum_nor_app_state() {
    let root = repo();
    let turn = root.join("functions/chat/src/turn");
    assert!(
        turn.is_dir(),
        "functions/chat/src/turn/ is the chat's core (ARCHITECTURE.md)"
    );
    let found = code_naming(&root, &[turn], EDGE_WORDS);
    assert!(
        found.is_empty(),
        "the chat's turn/ core must not know the HTTP edge (axum, AppState, crate::http); give \
         it what it needs as a narrow argument instead:\n  {}",
        found.join("\n  ")
    );
}

/// The tool engine's binding of a call's arguments and caller to a statement's parameters
/// (`pub(crate)` in parley-tools, so the compiler refuses a call from outside; this names the
/// paths too): everything else calls `parley_tools::call::bind` or the engine's pipeline.
const BINDING_WORDS: &[&str] = &[
    "params::parse_arguments",
    "params::bind_caller",
    "bind_caller",
];

#[test]
fn only_the_tool_engine_binds_parameters() {
    let root = repo();
    assert!(
        root.join("crates/tools/src").is_dir(),
        "crates/tools is the tool engine"
    );
    let mut dirs = Vec::new();
    for m in members(&root) {
        if m.dir != "crates/tools" {
            dirs.push(root.join(&m.dir));
        }
    }
    let found = code_naming(&root, &dirs, BINDING_WORDS);
    assert!(
        found.is_empty(),
        "only crates/tools binds a tool call's arguments and caller; call its pipeline \
         instead:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn a_word_is_found_whole_and_never_inside_a_longer_name() {
    assert!(has_word("use axum::Router;", "axum"));
    assert!(!has_word("let axum_like = 1;", "axum"));
    assert!(has_word("fn f(s: &AppState)", "AppState"));
    assert!(!has_word("use crate::http_client;", "crate::http"));
    assert!(has_word("use crate::http::bodies;", "crate::http"));
    assert!(has_word("let v = params::SqlValue::Null;", "params::"));
    assert!(!has_word("let v = my_params::x;", "params::"));
}
