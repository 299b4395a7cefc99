//! What a catalog adds to a server: a tools file's `[catalog]` table (which catalog file, and
//! whose privileges decide what it shows), and the tools it publishes: `search_catalog`,
//! `find_values`, and one `verified_<name>` per verified query. The first two are declared
//! read tools like any other (the engine binds, embeds, runs and audits them); their SQL calls
//! migration 0026's functions with the reader role fixed here, never taken from a call.

use serde::Deserialize;

use super::file::CatalogFile;
use super::verified;
use crate::output::Limits;
use crate::tools::spec::is_role_name;
use crate::tools::{self, DeclarationError, ToolSpec};

/// The role whose privileges decide what the catalog shows when `[catalog]` names none: the
/// group the ad-hoc SQL tools' login belongs to (migration 0007).
pub const DEFAULT_READER: &str = crate::adhoc::role::READER_GROUP;

/// Guidance for models, added to the server's instructions when a catalog is served.
pub const INSTRUCTIONS: &str = "\
Before writing SQL about the team's data: call search_catalog with the question to learn which \
tables and columns answer it, how they join (rows of kind `relationship` give the join \
condition), which metrics the team defined and which rules apply (kind `instruction`); call \
find_values for every name, place or other literal the question mentions, to learn how it is \
spelled in the rows and in which column; when a verified_* tool answers the question, call it \
rather than writing SQL, and say the answer comes from that verified query; otherwise write \
SQL with the tables, columns, joins and values found.";

/// Added to `run_sql`'s description when a catalog is served.
pub const RUN_SQL_NOTE: &str = "\
Before writing SQL, call search_catalog with the question (tables, columns, joins, metrics, \
rules) and find_values for each name or literal it mentions (the stored spelling); prefer a \
verified_* tool that answers the question.";

/// `[catalog]` of a tools file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogSpec {
    /// The catalog file, relative to the tools file (or an `s3://` URI).
    pub file: String,
    /// The role whose privileges filter every answer.
    pub reader: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCatalog {
    file: Option<String>,
    reader: Option<String>,
}

/// `[catalog]` checked; the error names the key.
pub fn parse(raw: RawCatalog) -> Result<CatalogSpec, String> {
    let file = raw
        .file
        .filter(|f| !f.trim().is_empty())
        .ok_or("`file` is required: the catalog file (e.g. file = \"catalog.toml\")")?;
    let reader = raw.reader.unwrap_or_else(|| DEFAULT_READER.to_owned());
    if !is_role_name(&reader) {
        return Err(format!(
            "`reader` = `{reader}` must be a lower-case SQL identifier (a-z, 0-9, _, at most 63 \
             characters, not starting with a digit)"
        ));
    }
    Ok(CatalogSpec { file, reader })
}

/// The tools a catalog publishes: `search_catalog`, `find_values` and its verified queries.
pub fn tool_specs(
    spec: &CatalogSpec,
    file: &CatalogFile,
    limits: Limits,
) -> Result<Vec<ToolSpec>, DeclarationError> {
    // The reader was checked to be a plain identifier, so it is a safe literal.
    let text = BUILT_IN.replace("{reader}", &spec.reader);
    let raw: RawTools = toml::from_str(&text).map_err(|e| DeclarationError {
        tool: "search_catalog".into(),
        problem: e.to_string(),
    })?;
    let mut specs = tools::spec::parse_tools(raw.tool, limits)?;
    for q in &file.verified_queries {
        specs.push(verified::tool_spec(q, None, limits)?);
    }
    Ok(specs)
}

#[derive(Deserialize)]
struct RawTools {
    tool: Vec<tools::spec::RawTool>,
}

/// The two search tools, as a tools file would declare them.
const BUILT_IN: &str = r#"
[[tool]]
name = "search_catalog"
title = "Search the data catalog"
description = """
Find what the team's database holds for a question: the tables and columns that answer it, \
how they join, the team's metrics, verified queries and rules. Pass the user's question (or \
the part of it about data) as `question`. Returns rows, best first: kind (table, column, \
relationship, metric, verified_query, instruction), table (schema-qualified), column, name, \
description, sql (a metric's expression, a verified query's statement), join (a relationship's \
join condition, e.g. a.x = b.y), related_table (a relationship's other table) and score. After \
the ranked rows come the relationships that join the tables found (directly or through one \
table between them). Only what the assistant's SQL may read is shown."""
max_rows = 60
limit_param = "limit"
sql = """
SELECT kind, "table", "column", name, description, sql, "join", related_table, score
  FROM parley.search_catalog(:question, :question_embedding, '{reader}'::name, :limit::integer)
"""

[tool.params.question]
type = "string"
required = true
min_length = 1
max_length = 1000
description = "The question, or the part of it about data, in the user's words or rewritten to stand alone."

[tool.params.question_embedding]
from = "embedding.question"

[tool.params.limit]
type = "integer"
minimum = 1
maximum = 50
default = 15
description = "Most ranked rows to return (join paths come after them)."

[[tool]]
name = "find_values"
title = "Find values in the data"
description = """
Look up how a name, place, code or other literal is spelled in the database's rows, and in \
which table and column it is stored, before filtering on it in SQL. Matching is loose: case, \
accents, punctuation, spacing, typos and initials ("sao paulo" finds "São Paulo", "ACDC" \
finds "AC/DC"). Returns rows, best first: table, column, value (exactly as stored: use it in \
the SQL as is) and score (1 is the same text up to case, accents and punctuation). Narrow it \
with `table` (schema.table or table) and `column`. No rows: nothing close is stored in a \
column the assistant may read."""
max_rows = 50
limit_param = "limit"
sql = """
SELECT "table", "column", value, score
  FROM parley.find_values(:text, :table, :column, '{reader}'::name, :limit::integer)
"""

[tool.params.text]
type = "string"
required = true
min_length = 1
max_length = 200
description = "The literal as the user wrote it, e.g. a name, a city, a product."

[tool.params.table]
type = "string"
min_length = 1
max_length = 130
description = "Only this table's columns: schema.table, or a table name."

[tool.params.column]
type = "string"
min_length = 1
max_length = 63
description = "Only columns of this name."

[tool.params.limit]
type = "integer"
minimum = 1
maximum = 50
default = 10
description = "Most values to return."
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawCatalog {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn the_reader_defaults_to_the_sql_reader_group_and_must_be_an_identifier() {
        let spec = parse(raw("file = \"c.toml\"")).unwrap();
        assert_eq!(spec.reader, "parley_sql_reader");
        assert!(parse(raw("reader = \"x\"")).unwrap_err().contains("`file`"));
        let bad = parse(raw("file = \"c.toml\"\nreader = \"x'; drop\"")).unwrap_err();
        assert!(bad.contains("lower-case SQL identifier"), "{bad}");
    }

    #[test]
    fn the_built_in_tools_declare_and_bind_the_reader() {
        let spec = parse(raw("file = \"c.toml\"\nreader = \"team_reader\"")).unwrap();
        let specs = tool_specs(&spec, &CatalogFile::default(), Limits::default()).unwrap();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["search_catalog", "find_values"]);
        assert!(
            specs
                .iter()
                .all(|s| s.wrapped_sql.contains("'team_reader'"))
        );
    }
}
