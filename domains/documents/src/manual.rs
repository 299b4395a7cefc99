//! The PostgreSQL manual's structure, read from the HTML that Debian's `postgresql-doc-15`
//! ships: its parts become collections (courses), and every page gets its part and its
//! structure path (the part / chapter / section titles above it). Reads only the pages' heads and navigation
//! headers; extracting and chunking the text is parley-ingest's job.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use scraper::{Html, Selector};

/// Where Debian's `postgresql-doc-15` package installs the manual's HTML.
pub const DEFAULT_MANUAL_DIR: &str = "/usr/share/doc/postgresql-doc-15/html";

/// One collection per part of the manual: (the part's page, collection name, description).
/// The manual's preface is read with the tutorial (it is the course's introduction).
pub const PARTS: [(&str, &str, &str); 8] = [
    (
        "tutorial.html",
        "pg-tutorial",
        "A first course: what PostgreSQL is, installing it, creating a database, SQL basics \
         (tables, queries, joins, aggregates, updates) and advanced features (views, foreign \
         keys, transactions, window functions, inheritance).",
    ),
    (
        "sql.html",
        "pg-sql",
        "The SQL language as PostgreSQL speaks it: syntax, data definition and manipulation, \
         queries, data types, functions and operators, type conversion, indexes, full text \
         search, concurrency control (MVCC, isolation, locking), performance tips and parallel \
         query.",
    ),
    (
        "admin.html",
        "pg-admin",
        "Running a server: installation, setup, configuration parameters, client \
         authentication, roles, databases, localization, vacuum and other maintenance, backup \
         and restore, replication and high availability, monitoring, the write-ahead log, \
         logical replication, JIT and regression tests.",
    ),
    (
        "client-interfaces.html",
        "pg-client",
        "Client programming: libpq (the C library), large objects, ECPG (embedded SQL in C) and \
         the information schema.",
    ),
    (
        "server-programming.html",
        "pg-server",
        "Extending the server: user-defined functions, types, operators and aggregates, \
         triggers, event triggers, the rule system, procedural languages (PL/pgSQL, PL/Tcl, \
         PL/Perl, PL/Python), SPI, background workers, logical decoding and archive modules.",
    ),
    (
        "reference.html",
        "pg-reference",
        "Reference pages: every SQL command (SELECT, CREATE TABLE, SET TRANSACTION, ...), the \
         client applications (psql, pg_dump, ...) and the server applications (initdb, \
         pg_ctl, ...).",
    ),
    (
        "internals.html",
        "pg-internals",
        "How PostgreSQL works inside: the system catalogs and views, the wire protocol, coding \
         conventions, writing procedural language handlers, foreign data wrappers, table and \
         index access methods, the index types (B-tree, GiST, SP-GiST, GIN, BRIN, hash), \
         physical storage and planner statistics.",
    ),
    (
        "appendixes.html",
        "pg-appendixes",
        "Appendixes: error codes, date/time support, SQL key words and conformance, release \
         notes, the additional supplied modules (contrib) and programs, limits, acronyms, the \
         glossary, the bibliography and the legal notice.",
    ),
];

/// Pages that belong to no part and are left out, because they hold no prose: the book's
/// title page (a table of contents) and its index (a list of every term with links), which
/// would match almost any full-text query.
pub const LEFT_OUT: [&str; 2] = ["index.html", "bookindex.html"];

/// Back matter outside the parts that is read with the appendixes: the bibliography and the
/// legal notice (the PostgreSQL licence).
const BACK_MATTER: [&str; 2] = ["biblio.html", "legalnotice.html"];

/// The preface's page; it and the pages under it join the tutorial.
const PREFACE: &str = "preface.html";

/// The manual, as collections of pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manual {
    /// The book's title, e.g. "PostgreSQL 15.20 Documentation".
    pub title: String,
    /// In [`PARTS`]' order.
    pub parts: Vec<Part>,
    /// HTML files placed in no part ([`LEFT_OUT`]), sorted.
    pub left_out: Vec<String>,
}

/// One part of the manual: a collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// The collection's name, e.g. "pg-tutorial".
    pub collection: &'static str,
    /// The part's name without its number, as the table of contents gives it, e.g. "Tutorial".
    pub name: String,
    /// What the course covers.
    pub description: &'static str,
    /// Its pages in reading order (the manual's Next links).
    pub pages: Vec<Page>,
}

/// One HTML page of the manual.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The file name, relative to the manual's directory, e.g. "sql-set-transaction.html".
    pub uri: String,
    /// The page's title, e.g. "SET TRANSACTION".
    pub title: String,
    /// Where it sits: the titles of the pages above it, from its part down to its parent, e.g.
    /// ["Part VI. Reference", "SQL Commands"] (empty for a part's own page). Like the
    /// directories of an ingested file's uri, it leaves out the page itself, whose title is
    /// [`Page::title`].
    pub path: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManualError {
    #[error(
        "the PostgreSQL manual is not in {} (no index.html); install it with \
         `apt-get install postgresql-doc-15`, or give its html directory with --manual DIR",
        dir.display()
    )]
    Missing { dir: PathBuf },
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}/index.html lists no parts; is this the PostgreSQL manual's html directory?",
        dir.display()
    )]
    NoParts { dir: PathBuf },
    #[error("the manual has a part this loader does not know: {href} ({title})")]
    UnknownPart { href: String, title: String },
    #[error("the manual has no part {href}, which this loader expects")]
    MissingPart { href: &'static str },
    #[error("{uri} belongs to no part of the manual (its Up links lead to {top})")]
    Orphan { uri: String, top: String },
}

/// What one page's head and navigation header say.
#[derive(Debug)]
struct Head {
    title: String,
    up: Option<String>,
    next: Option<String>,
}

/// Fails, saying how to install the manual, when `dir` has no index.html.
pub fn check_dir(dir: &Path) -> Result<(), ManualError> {
    if dir.join("index.html").is_file() {
        Ok(())
    } else {
        Err(ManualError::Missing {
            dir: dir.to_owned(),
        })
    }
}

/// Reads the manual in `dir`: the parts from index.html's table of contents, then each page's
/// title and Up link (its place in the tree) and Next link (the reading order).
pub fn read(dir: &Path) -> Result<Manual, ManualError> {
    check_dir(dir)?;
    let index_path = dir.join("index.html");
    let index = std::fs::read_to_string(&index_path).map_err(|source| ManualError::Read {
        path: index_path.clone(),
        source,
    })?;
    let (title, toc_parts) = parse_index(&index);
    if toc_parts.is_empty() {
        return Err(ManualError::NoParts {
            dir: dir.to_owned(),
        });
    }

    let mut heads = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|source| ManualError::Read {
        path: dir.to_owned(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| ManualError::Read {
            path: dir.to_owned(),
            source,
        })?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !name.ends_with(".html") {
            continue;
        }
        let path = entry.path();
        let bytes = std::fs::read(&path).map_err(|source| ManualError::Read { path, source })?;
        heads.insert(name, parse_head(&String::from_utf8_lossy(&bytes)));
    }
    assemble(title, &toc_parts, &heads)
}

/// The book's title and its parts (href, title such as "I. Tutorial") from index.html.
fn parse_index(html: &str) -> (String, Vec<(String, String)>) {
    let doc = Html::parse_document(html);
    let title = doc
        .select(&selector("title"))
        .next()
        .map(|t| clean(&t.text().collect::<String>()))
        .unwrap_or_default();
    let parts = doc
        .select(&selector("div.toc span.part > a"))
        .filter_map(|a| {
            let href = a.value().attr("href")?;
            Some((href.to_owned(), clean(&a.text().collect::<String>())))
        })
        .collect();
    (title, parts)
}

/// A page's title and Up and Next links. Only the part before the content is parsed: the
/// title and links sit in `<head>` and the navigation header, and parsing the first few
/// kilobytes of each page instead of all 18 MB keeps reading the structure well under a second.
fn parse_head(html: &str) -> Head {
    let end = html
        .find("class=\"navheader\"")
        .and_then(|start| html[start..].find("</div>").map(|end| start + end + 6))
        .unwrap_or(html.len());
    let doc = Html::parse_document(&html[..end]);
    let link = |key: &str| {
        doc.select(&selector(&format!("a[accesskey=\"{key}\"]")))
            .next()
            .and_then(|a| a.value().attr("href"))
            .map(|href| href.split('#').next().unwrap_or(href).to_owned())
            .filter(|href| !href.is_empty())
    };
    Head {
        title: doc
            .select(&selector("title"))
            .next()
            .map(|t| clean(&t.text().collect::<String>()))
            .unwrap_or_default(),
        up: link("u"),
        next: link("n"),
    }
}

fn assemble(
    title: String,
    toc_parts: &[(String, String)],
    heads: &BTreeMap<String, Head>,
) -> Result<Manual, ManualError> {
    for (href, title) in toc_parts {
        if !PARTS.iter().any(|(h, _, _)| h == href) {
            return Err(ManualError::UnknownPart {
                href: href.clone(),
                title: title.clone(),
            });
        }
    }
    let mut parts = Vec::with_capacity(PARTS.len());
    let mut index_of = HashMap::new();
    for (href, collection, description) in PARTS {
        let Some((_, toc_title)) = toc_parts.iter().find(|(h, _)| h == href) else {
            return Err(ManualError::MissingPart { href });
        };
        index_of.insert(href, parts.len());
        parts.push(Part {
            collection,
            name: unnumbered(toc_title),
            description,
            pages: Vec::new(),
        });
    }

    let mut left_out = Vec::new();
    for uri in reading_order(heads) {
        if LEFT_OUT.contains(&uri.as_str()) {
            left_out.push(uri);
            continue;
        }
        // Up links from the page to the top, the page first.
        let mut chain = vec![uri.clone()];
        while let Some(up) = heads[chain.last().expect("not empty")].up.clone() {
            if up == "index.html" || chain.contains(&up) || !heads.contains_key(&up) {
                break;
            }
            chain.push(up);
        }
        let top = chain.last().expect("not empty").as_str();
        let part = if let Some(&i) = index_of.get(top) {
            i
        } else if top == PREFACE {
            index_of["tutorial.html"]
        } else if BACK_MATTER.contains(&top) {
            index_of["appendixes.html"]
        } else {
            return Err(ManualError::Orphan {
                uri,
                top: top.to_owned(),
            });
        };
        let path = chain[1..]
            .iter()
            .rev()
            .map(|u| heads[u].title.clone())
            .collect();
        parts[part].pages.push(Page {
            title: heads[&uri].title.clone(),
            uri,
            path,
        });
    }
    left_out.sort();
    Ok(Manual {
        title,
        parts,
        left_out,
    })
}

/// Every page once: those on the chain of Next links from index.html in that order, then any
/// the chain misses, by name.
fn reading_order(heads: &BTreeMap<String, Head>) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut order = Vec::with_capacity(heads.len());
    let mut at = heads
        .contains_key("index.html")
        .then(|| "index.html".to_owned());
    while let Some(uri) = at {
        if !seen.insert(uri.clone()) {
            break;
        }
        at = heads[&uri].next.clone().filter(|n| heads.contains_key(n));
        order.push(uri);
    }
    order.extend(heads.keys().filter(|u| !seen.contains(*u)).cloned());
    order
}

/// "I. Tutorial" → "Tutorial".
fn unnumbered(title: &str) -> String {
    match title.split_once(". ") {
        Some((number, rest)) if number.chars().all(|c| "IVXLC".contains(c)) => rest.to_owned(),
        _ => title.to_owned(),
    }
}

/// Text with runs of whitespace (the manual's line breaks and double spaces) made one space.
fn clean(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn selector(css: &str) -> Selector {
    Selector::parse(css).expect("a valid selector")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manual() -> Option<Manual> {
        let dir = Path::new(DEFAULT_MANUAL_DIR);
        if !dir.join("index.html").is_file() {
            eprintln!("skipped: the manual is not installed (apt-get install postgresql-doc-15)");
            return None;
        }
        Some(read(dir).expect("the manual reads"))
    }

    fn page<'a>(manual: &'a Manual, uri: &str) -> (&'a Part, &'a Page) {
        manual
            .parts
            .iter()
            .find_map(|part| {
                part.pages
                    .iter()
                    .find(|p| p.uri == uri)
                    .map(|page| (part, page))
            })
            .unwrap_or_else(|| panic!("{uri} is in no part"))
    }

    #[test]
    fn every_page_of_the_real_manual_lands_in_one_part() {
        let Some(manual) = manual() else { return };
        let counts: Vec<(&str, usize)> = manual
            .parts
            .iter()
            .map(|p| (p.collection, p.pages.len()))
            .collect();
        // postgresql-doc-15 (15.20): 1,169 HTML pages; the preface's 6 join the tutorial's 24,
        // the bibliography and legal notice the appendixes' 138.
        assert_eq!(
            counts,
            [
                ("pg-tutorial", 30),
                ("pg-sql", 138),
                ("pg-admin", 130),
                ("pg-client", 132),
                ("pg-server", 165),
                ("pg-reference", 220),
                ("pg-internals", 212),
                ("pg-appendixes", 140),
            ]
        );
        assert_eq!(manual.left_out, ["bookindex.html", "index.html"]);
        let mut uris: Vec<&str> = manual
            .parts
            .iter()
            .flat_map(|p| p.pages.iter().map(|p| p.uri.as_str()))
            .collect();
        let all = uris.len();
        uris.sort_unstable();
        uris.dedup();
        assert_eq!(uris.len(), all, "a page in two parts");
    }

    #[test]
    fn parts_are_named_from_the_table_of_contents() {
        let Some(manual) = manual() else { return };
        let names: Vec<&str> = manual.parts.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Tutorial",
                "The SQL Language",
                "Server Administration",
                "Client Interfaces",
                "Server Programming",
                "Reference",
                "Internals",
                "Appendixes"
            ]
        );
        assert!(
            manual.title.starts_with("PostgreSQL 15"),
            "{}",
            manual.title
        );
    }

    #[test]
    fn a_page_path_runs_from_its_part_down_to_the_page() {
        let Some(manual) = manual() else { return };
        let (part, set_transaction) = page(&manual, "sql-set-transaction.html");
        assert_eq!(part.collection, "pg-reference");
        assert_eq!(set_transaction.title, "SET TRANSACTION");
        assert_eq!(set_transaction.path, ["Part VI. Reference", "SQL Commands"]);
        let (part, isolation) = page(&manual, "transaction-iso.html");
        assert_eq!(part.collection, "pg-sql");
        assert_eq!(
            isolation.path,
            [
                "Part II. The SQL Language",
                "Chapter 13. Concurrency Control"
            ]
        );
        assert_eq!(isolation.title, "13.2. Transaction Isolation");
        let (part, whatis) = page(&manual, "intro-whatis.html");
        assert_eq!(part.collection, "pg-tutorial");
        assert_eq!(whatis.path, ["Preface"]);
        assert_eq!(whatis.title, "1. What Is PostgreSQL?");
        let (part, licence) = page(&manual, "legalnotice.html");
        assert_eq!(part.collection, "pg-appendixes");
        assert!(licence.path.is_empty());
        let (_, part_page) = page(&manual, "sql.html");
        assert!(part_page.path.is_empty());
    }

    #[test]
    fn pages_keep_the_manual_reading_order() {
        let Some(manual) = manual() else { return };
        let tutorial: Vec<&str> = manual.parts[0]
            .pages
            .iter()
            .take(3)
            .map(|p| p.uri.as_str())
            .collect();
        assert_eq!(
            tutorial,
            ["preface.html", "intro-whatis.html", "history.html"]
        );
        assert_eq!(manual.parts[1].pages[0].uri, "sql.html");
    }

    #[test]
    fn a_missing_manual_names_the_package_to_install() {
        let err = read(Path::new("/nonexistent/manual")).unwrap_err();
        assert!(
            err.to_string()
                .contains("apt-get install postgresql-doc-15"),
            "{err}"
        );
    }

    #[test]
    fn part_numbers_are_dropped_from_names() {
        assert_eq!(unnumbered("VIII. Appendixes"), "Appendixes");
        assert_eq!(unnumbered("Preface"), "Preface");
        assert_eq!(unnumbered("A. Title. With dots"), "A. Title. With dots");
    }
}
