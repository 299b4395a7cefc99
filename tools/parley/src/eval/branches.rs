//! The retrieval baselines, derived from the search tool's own SQL so they cannot drift from
//! it: the tool's hybrid query with all but one of its branches emptied. The vector branch is
//! the top-level CTE named `vector`, the lexical (BM25) branch the one named `words`, and, when
//! the tool has them, the pages by card (`pages`) and the pages by BM25 (`page_words`) branches;
//! emptying the others leaves
//! the tool's fusion, relevance threshold, caller filter and output exactly as shipped, fed by
//! the one branch alone.

use std::ops::Range;

#[derive(Debug, thiserror::Error)]
pub enum BranchError {
    #[error(
        "the tool's SQL should have a top-level CTE named `vector` (the vector branch) and one \
         named `words` (the lexical branch); found {0:?}"
    )]
    Missing(Vec<String>),
    #[error("the tool's SQL is not as expected: {0}")]
    Shape(String),
}

fn shape<T>(problem: impl Into<String>) -> Result<T, BranchError> {
    Err(BranchError::Shape(problem.into()))
}

/// One branch of the hybrid query, to keep while the others are emptied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Branch {
    Vector,
    FullText,
    Pages,
    PageWords,
}

impl Branch {
    pub fn name(self) -> &'static str {
        match self {
            Branch::Vector => "vector only",
            Branch::FullText => "words only (BM25)",
            Branch::Pages => "pages only (cards)",
            Branch::PageWords => "pages by words only (BM25)",
        }
    }

    fn cte(self) -> &'static str {
        match self {
            Branch::Vector => "vector",
            Branch::FullText => "words",
            Branch::Pages => "pages",
            Branch::PageWords => "page_words",
        }
    }
}

/// The branches `sql` has: `vector` and `words` always (else an error), `pages` and `page_words`
/// when present.
pub fn present(sql: &str) -> Result<Vec<Branch>, BranchError> {
    let ctes = ctes(sql)?;
    let has = |b: Branch| ctes.iter().any(|c| c.name == b.cte());
    if !(has(Branch::Vector) && has(Branch::FullText)) {
        return Err(BranchError::Missing(
            ctes.iter().map(|c| c.name.clone()).collect(),
        ));
    }
    Ok([
        Branch::Vector,
        Branch::FullText,
        Branch::Pages,
        Branch::PageWords,
    ]
    .into_iter()
    .filter(|b| has(*b))
    .collect())
}

/// A top-level CTE: its name and the byte range of its body (inside the parentheses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cte {
    pub name: String,
    pub body: Range<usize>,
}

/// `sql` (a tool's SQL) with every branch but `keep` replaced by an empty set of the same
/// columns.
pub fn only(sql: &str, keep: Branch) -> Result<String, BranchError> {
    let mut out = sql.to_owned();
    let branches = present(sql)?;
    if !branches.contains(&keep) {
        return shape(format!("the tool's SQL has no `{}` CTE", keep.cte()));
    }
    // From the last CTE back, so the earlier ones' byte ranges stay valid.
    let mut emptied: Vec<Cte> = ctes(sql)?
        .into_iter()
        .filter(|c| branches.iter().any(|b| *b != keep && b.cte() == c.name))
        .collect();
    emptied.sort_by_key(|c| std::cmp::Reverse(c.body.start));
    for cte in emptied {
        let body = &sql[cte.body.clone()];
        out.replace_range(
            cte.body.clone(),
            &format!("SELECT * FROM (\n{body}\n) AS branch_left_out WHERE false"),
        );
    }
    Ok(out)
}

/// The declared SQL inside `ToolSpec::wrapped_sql` (`[/* parley tool=... */ ]WITH tool_rows
/// AS (<sql>) SELECT ...`), with the wrapper's prefix (the tool's comment included) and suffix,
/// so a changed SQL can be wrapped the same way.
pub fn unwrap(wrapped: &str) -> Result<(&str, &str, &str), BranchError> {
    const PREFIX: &str = "WITH tool_rows AS (\n";
    const SUFFIX: &str = "\n) SELECT row_to_json(tool_rows)::text FROM tool_rows LIMIT $";
    let Some(inner_end) = wrapped.rfind(SUFFIX) else {
        return shape("ToolSpec::wrapped_sql no longer ends as expected");
    };
    // The comment naming the tool to a DBA (issue 12) comes first when there is one.
    let comment_end = match wrapped.strip_prefix("/*") {
        Some(rest) => match rest.find("*/ ") {
            Some(i) => 2 + i + "*/ ".len(),
            None => {
                return shape("ToolSpec::wrapped_sql's leading comment does not end as expected");
            }
        },
        None => 0,
    };
    if !wrapped[comment_end..].starts_with(PREFIX) {
        return shape("ToolSpec::wrapped_sql no longer starts as expected");
    }
    let inner_start = comment_end + PREFIX.len();
    Ok((
        &wrapped[..inner_start],
        &wrapped[inner_start..inner_end],
        &wrapped[inner_end..],
    ))
}

/// The top-level CTEs of a statement starting `WITH [RECURSIVE]`.
pub fn ctes(sql: &str) -> Result<Vec<Cte>, BranchError> {
    let tokens = tokens(sql);
    let word = |i: usize, w: &str| {
        tokens
            .get(i)
            .is_some_and(|t| sql[t.clone()].eq_ignore_ascii_case(w))
    };
    let is = |i: usize, s: &str| tokens.get(i).is_some_and(|t| &sql[t.clone()] == s);
    // The token after the parenthesis opened at token `i` closes.
    let close = |i: usize| -> Result<usize, BranchError> {
        let mut depth = 0usize;
        for (j, t) in tokens.iter().enumerate().skip(i) {
            match &sql[t.clone()] {
                "(" => depth += 1,
                ")" => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(j);
                    }
                }
                _ => {}
            }
        }
        shape("unbalanced parentheses")
    };
    let mut i = 0;
    if !word(i, "with") {
        return shape("it does not start with WITH (its branches should be CTEs)");
    }
    i += 1;
    if word(i, "recursive") {
        i += 1;
    }
    let mut out = Vec::new();
    loop {
        let Some(name) = tokens.get(i) else {
            return shape("it ends inside WITH");
        };
        let name = sql[name.clone()].trim_matches('"').to_owned();
        i += 1;
        if is(i, "(") {
            i = close(i)? + 1;
        }
        if !word(i, "as") {
            return shape(format!("expected AS after the CTE name {name}"));
        }
        i += 1;
        if word(i, "not") {
            i += 1;
        }
        if word(i, "materialized") {
            i += 1;
        }
        if !is(i, "(") {
            return shape(format!("expected ( after {name} AS"));
        }
        let end = close(i)?;
        out.push(Cte {
            name,
            body: tokens[i].end..tokens[end].start,
        });
        i = end + 1;
        if !is(i, ",") {
            return Ok(out);
        }
        i += 1;
    }
}

/// Byte ranges of words, parentheses, commas and other punctuation; strings, quoted names and
/// comments are single tokens (or skipped), so their contents never count as structure.
fn tokens(sql: &str) -> Vec<Range<usize>> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                i += 1;
            }
            i += 2;
            continue;
        }
        if c == b'\'' || c == b'"' {
            i += 1;
            while i < b.len() {
                if b[i] == c {
                    if b.get(i + 1) == Some(&c) {
                        i += 2;
                        continue;
                    }
                    break;
                }
                i += 1;
            }
            i = (i + 1).min(b.len());
        } else if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                i += 1;
            }
        } else {
            i += 1;
        }
        out.push(start..i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "WITH scope AS (SELECT parley.searchable_collections($2, $3) AS ids),
vector AS MATERIALIZED (
  SELECT c.id, row_number() OVER (ORDER BY c.embedding::vector(384) <=> $4::vector(384)) AS r
  FROM parley.chunks c, scope WHERE c.collection_id = ANY (scope.ids) -- a ( in a comment
  ORDER BY c.embedding::vector(384) <=> $4::vector(384) LIMIT 40
),
words (id, r) AS (
  SELECT c.id, row_number() OVER (ORDER BY ts_rank_cd(c.tsv, q) DESC)
  FROM parley.chunks c, websearch_to_tsquery('english', $1) q WHERE c.tsv @@ q AND ')' <> '('
)
SELECT id, sum(1.0 / (60 + r)) AS score FROM (SELECT * FROM vector UNION ALL SELECT * FROM words) f
GROUP BY id ORDER BY score DESC";

    #[test]
    fn finds_top_level_ctes_past_comments_strings_and_column_lists() {
        let names: Vec<String> = ctes(HYBRID).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["scope", "vector", "words"]);
    }

    #[test]
    fn vector_only_empties_the_full_text_branch_and_keeps_the_rest() {
        let sql = only(HYBRID, Branch::Vector).unwrap();
        let fts = &ctes(&sql).unwrap()[2];
        assert!(sql[fts.body.clone()].starts_with("SELECT * FROM (\n"));
        assert!(sql[fts.body.clone()].ends_with(") AS branch_left_out WHERE false"));
        let vec = &ctes(&sql).unwrap()[1];
        assert_eq!(
            &sql[vec.body.clone()],
            &HYBRID[ctes(HYBRID).unwrap()[1].body.clone()]
        );
        assert!(sql.ends_with("GROUP BY id ORDER BY score DESC"));
    }

    #[test]
    fn full_text_only_empties_the_vector_branch() {
        let sql = only(HYBRID, Branch::FullText).unwrap();
        let vec = &ctes(&sql).unwrap()[1];
        assert!(sql[vec.body.clone()].ends_with("WHERE false"));
        assert!(!sql[ctes(&sql).unwrap()[2].body.clone()].ends_with("WHERE false"));
    }

    #[test]
    fn sql_without_both_branches_is_refused() {
        let err = only("WITH a AS (SELECT 1) SELECT * FROM a", Branch::Vector).unwrap_err();
        assert!(err.to_string().contains("found [\"a\"]"), "{err}");
        assert!(only("SELECT 1", Branch::Vector).is_err());
    }

    #[test]
    fn the_shipped_search_documents_has_all_four_branches() {
        let catalog = parley_tools::catalog::Catalog::load(
            &[parley_domain_documents::tools_path()],
            parley_tools::output::Limits::default(),
        )
        .unwrap();
        let spec = catalog.get("search_documents").unwrap();
        let (_, inner, _) = unwrap(&spec.wrapped_sql).unwrap();
        assert_eq!(
            present(inner).unwrap(),
            [
                Branch::Vector,
                Branch::FullText,
                Branch::Pages,
                Branch::PageWords
            ]
        );
        let vector = only(inner, Branch::Vector).unwrap();
        let text = only(inner, Branch::FullText).unwrap();
        let pages = only(inner, Branch::Pages).unwrap();
        let page_words = only(inner, Branch::PageWords).unwrap();
        assert_ne!(vector, text);
        // Each keeps its own branch whole and empties the other three.
        let kept = |sql: &str, b: Branch| {
            let cte = ctes(sql).unwrap().into_iter().find(|c| c.name == b.cte());
            !sql[cte.unwrap().body].ends_with("WHERE false")
        };
        assert!(
            kept(&vector, Branch::Vector)
                && vector.contains("FROM parley.chunks c\n    WHERE vector_dims")
        );
        assert!(kept(&text, Branch::FullText));
        assert!(
            kept(&pages, Branch::Pages) && pages.contains("WHERE vector_dims(d.card_embedding)")
        );
        assert!(kept(&page_words, Branch::PageWords));
        for sql in [&vector, &text, &pages, &page_words] {
            assert_eq!(sql.matches("WHERE false").count(), 3);
        }
    }

    #[test]
    fn unwraps_the_row_wrapper() {
        let wrapped = "WITH tool_rows AS (\nSELECT 1\n) SELECT row_to_json(tool_rows)::text \
                       FROM tool_rows LIMIT $3";
        let (p, inner, s) = unwrap(wrapped).unwrap();
        assert_eq!(inner, "SELECT 1");
        assert_eq!(format!("{p}{inner}{s}"), wrapped);
        // As the tools file's loader builds it since issue 12: the tool's name in a comment.
        let commented = format!("/* parley tool=t */ {wrapped}");
        let (p, inner, s) = unwrap(&commented).unwrap();
        assert_eq!(inner, "SELECT 1");
        assert_eq!(p, "/* parley tool=t */ WITH tool_rows AS (\n");
        assert_eq!(format!("{p}{inner}{s}"), commented);
    }
}
