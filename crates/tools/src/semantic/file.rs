//! A catalog file's text parsed and checked (docs/catalog.md): per table and column a
//! description, synonyms, `hidden` and `pii`; relationships; metrics; verified queries;
//! instructions. What `parley catalog init` and `refresh` read from the database sits under
//! each entry's `db` key and is theirs to rewrite; every other key is the team's.

use indexmap::IndexMap;
use serde::Deserialize;

/// Everything one catalog file says, checked for shape: names unique and qualified, every
/// column under a table, every relationship naming `schema.table(column, ...)` on both sides.
/// Whether those tables and columns exist is `parley catalog check`'s business.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CatalogFile {
    /// The schemas the catalog describes, as `init` was given them (`refresh` reads these).
    pub schemas: Vec<String>,
    pub instructions: Vec<Instruction>,
    pub tables: Vec<Table>,
    pub relationships: Vec<Relationship>,
    pub metrics: Vec<Metric>,
    pub verified_queries: Vec<VerifiedQuery>,
}

/// A business rule the model is told ("fiscal years start in April").
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Instruction {
    /// Short, for search results; the text's first words when not given.
    pub name: Option<String>,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// `schema.table`, as Postgres names it (unquoted, case kept).
    pub name: String,
    pub description: Option<String>,
    #[serde(default)]
    pub synonyms: Vec<String>,
    /// Left out of everything the model sees (search, values).
    #[serde(default)]
    pub hidden: bool,
    #[serde(default, rename = "column")]
    pub columns: Vec<Column>,
    /// What the database says, written by `init` and `refresh`.
    #[serde(default)]
    pub db: TableFacts,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableFacts {
    /// `table`, `view`, `materialized view`, `foreign table`.
    pub kind: Option<String>,
    /// The planner's estimate (`reltuples`) when `init` or `refresh` last ran.
    pub rows: Option<i64>,
    /// `COMMENT ON TABLE`.
    pub comment: Option<String>,
    #[serde(default)]
    pub primary_key: Vec<String>,
    /// The database no longer has it; `refresh` kept the entry for what the team wrote.
    #[serde(default)]
    pub gone: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Column {
    pub name: String,
    pub description: Option<String>,
    #[serde(default)]
    pub synonyms: Vec<String>,
    #[serde(default)]
    pub hidden: bool,
    /// Personal data: described and searched by name, never sampled or value-indexed.
    #[serde(default)]
    pub pii: bool,
    #[serde(default)]
    pub db: ColumnFacts,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnFacts {
    /// `format_type`: `integer`, `character varying(40)`, `numeric(10,2)`...
    #[serde(rename = "type")]
    pub ty: Option<String>,
    #[serde(default)]
    pub nullable: bool,
    /// `COMMENT ON COLUMN`.
    pub comment: Option<String>,
    /// Every distinct value of a low-cardinality text column (bounded, see `introspect`).
    #[serde(default)]
    pub values: Vec<String>,
    /// Smallest and largest value of a date, time or number column, as text.
    pub min: Option<String>,
    pub max: Option<String>,
    /// The database no longer has it; `refresh` kept the entry for what the team wrote.
    #[serde(default)]
    pub gone: bool,
}

/// How two tables join: `from` columns equal `to` columns, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Relationship {
    pub from: ColumnsRef,
    pub to: ColumnsRef,
    pub description: Option<String>,
    /// A foreign key's name when the database declares it (refresh keeps these in step);
    /// `None` for one the team declared.
    pub foreign_key: Option<String>,
}

/// `schema.table(column, ...)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ColumnsRef {
    pub table: String,
    pub columns: Vec<String>,
}

impl std::fmt::Display for ColumnsRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.table, self.columns.join(", "))
    }
}

impl Relationship {
    /// The join condition, as SQL: `a.x = b.y AND ...` with the tables' full names.
    pub fn condition(&self) -> String {
        self.from
            .columns
            .iter()
            .zip(&self.to.columns)
            .map(|(f, t)| format!("{}.{f} = {}.{t}", self.from.table, self.to.table))
            .collect::<Vec<_>>()
            .join(" AND ")
    }
}

/// A named SQL expression over one table ("revenue" = `sum(unit_price * quantity)`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metric {
    pub name: String,
    pub table: String,
    pub sql: String,
    pub description: Option<String>,
    #[serde(default)]
    pub synonyms: Vec<String>,
}

/// A query the team trusts: served as a declared read tool of its own (`verified_<name>`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifiedQuery {
    pub name: String,
    /// Questions it answers, as people ask them (searched, shown to the model).
    pub questions: Vec<String>,
    pub description: Option<String>,
    /// With named parameters (`:country`), as a tools file's `sql`.
    pub sql: String,
    /// As a tools file's `[tool.params.<name>]` (type, description, required...).
    #[serde(default)]
    pub params: IndexMap<String, toml::Table>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CatalogFileError {
    #[error("catalog file is not valid TOML: {0}")]
    Toml(String),
    #[error("catalog file does not follow the catalog format: {0}")]
    Format(String),
    #[error("{entry}: {problem}")]
    Entry { entry: String, problem: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    schemas: Vec<String>,
    #[serde(default, rename = "instruction")]
    instructions: Vec<Instruction>,
    #[serde(default, rename = "table")]
    tables: Vec<Table>,
    #[serde(default, rename = "relationship")]
    relationships: Vec<RawRelationship>,
    #[serde(default, rename = "metric")]
    metrics: Vec<Metric>,
    #[serde(default, rename = "verified_query")]
    verified_queries: Vec<VerifiedQuery>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelationship {
    from: String,
    to: String,
    description: Option<String>,
    foreign_key: Option<String>,
}

/// Parses and checks a whole catalog file.
pub fn parse(text: &str) -> Result<CatalogFile, CatalogFileError> {
    text.parse::<toml::Table>()
        .map_err(|e| CatalogFileError::Toml(e.to_string()))?;
    let raw: RawFile = toml::from_str(text).map_err(|e| CatalogFileError::Format(e.to_string()))?;
    let entry = |entry: String, problem: String| CatalogFileError::Entry { entry, problem };

    let mut tables: IndexMap<String, ()> = IndexMap::new();
    for table in &raw.tables {
        let name = format!("table `{}`", table.name);
        qualified(&table.name).map_err(|p| entry(name.clone(), p))?;
        if tables.insert(table.name.clone(), ()).is_some() {
            return Err(entry(name, "is listed twice".into()));
        }
        let mut columns: IndexMap<&str, ()> = IndexMap::new();
        for column in &table.columns {
            if !is_name(&column.name) {
                return Err(entry(
                    name,
                    format!("column `{}` is not a name", column.name),
                ));
            }
            if columns.insert(&column.name, ()).is_some() {
                return Err(entry(
                    name,
                    format!("column `{}` is listed twice", column.name),
                ));
            }
        }
    }
    let relationships = raw
        .relationships
        .into_iter()
        .map(|r| {
            let name = format!("relationship {} -> {}", r.from, r.to);
            let from = columns_ref(&r.from).map_err(|p| entry(name.clone(), p))?;
            let to = columns_ref(&r.to).map_err(|p| entry(name.clone(), p))?;
            if from.columns.len() != to.columns.len() {
                return Err(entry(
                    name,
                    "has a different number of columns on each side".into(),
                ));
            }
            Ok(Relationship {
                from,
                to,
                description: r.description,
                foreign_key: r.foreign_key,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut names: IndexMap<String, ()> = IndexMap::new();
    for metric in &raw.metrics {
        let name = format!("metric `{}`", metric.name);
        if !is_name(&metric.name) {
            return Err(entry(name, "needs a name of letters, digits and _".into()));
        }
        qualified(&metric.table).map_err(|p| entry(name.clone(), p))?;
        if metric.sql.trim().is_empty() {
            return Err(entry(name, "has no sql".into()));
        }
        if names
            .insert(format!("metric {}", metric.name), ())
            .is_some()
        {
            return Err(entry(name, "is declared twice".into()));
        }
    }
    for query in &raw.verified_queries {
        let name = format!("verified query `{}`", query.name);
        if !is_name(&query.name) {
            return Err(entry(name, "needs a name of letters, digits and _".into()));
        }
        if query.questions.iter().all(|q| q.trim().is_empty()) {
            return Err(entry(name, "needs at least one question it answers".into()));
        }
        if names.insert(format!("query {}", query.name), ()).is_some() {
            return Err(entry(name, "is declared twice".into()));
        }
    }
    for (i, instruction) in raw.instructions.iter().enumerate() {
        if instruction.text.trim().is_empty() {
            return Err(entry(
                format!("instruction {}", i + 1),
                "has no text".into(),
            ));
        }
    }
    if let Some(bad) = raw.schemas.iter().find(|s| !is_name(s)) {
        return Err(entry(
            "schemas".into(),
            format!("`{bad}` is not a schema name"),
        ));
    }
    Ok(CatalogFile {
        schemas: raw.schemas,
        instructions: raw.instructions,
        tables: raw.tables,
        relationships,
        metrics: raw.metrics,
        verified_queries: raw.verified_queries,
    })
}

/// A plain SQL name: what `init` writes, and what a team types without quoting.
fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '$')
        && !s.starts_with(|c: char| c.is_ascii_digit() || c == '$')
}

/// `schema.table`, both plain names.
fn qualified(name: &str) -> Result<(), String> {
    match name.split_once('.') {
        Some((schema, table)) if is_name(schema) && is_name(table) => Ok(()),
        _ => Err(format!("`{name}` is not schema.table")),
    }
}

/// `schema.table(a, b)`.
fn columns_ref(text: &str) -> Result<ColumnsRef, String> {
    let bad = || format!("`{text}` is not schema.table(column, ...)");
    let (table, rest) = text.trim().split_once('(').ok_or_else(bad)?;
    let columns = rest.strip_suffix(')').ok_or_else(bad)?;
    let table = table.trim();
    qualified(table).map_err(|_| bad())?;
    let columns: Vec<String> = columns.split(',').map(|c| c.trim().to_owned()).collect();
    if columns.iter().any(|c| !is_name(c)) {
        return Err(bad());
    }
    Ok(ColumnsRef {
        table: table.to_owned(),
        columns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
schemas = ["shop"]

[[instruction]]
text = "Fiscal years start in April."

[[table]]
name = "shop.invoice"
description = "One sale: who bought, when, the total."
synonyms = ["sales", "orders"]
db = { kind = "table", rows = 412, primary_key = ["invoice_id"] }

[[table.column]]
name = "billing_country"
synonyms = ["country"]
db = { type = "character varying(40)", nullable = true, values = ["Brazil", "Canada"] }

[[table.column]]
name = "email"
pii = true

[[relationship]]
from = "shop.invoice(customer_id)"
to = "shop.customer(customer_id)"
foreign_key = "invoice_customer_id_fkey"

[[metric]]
name = "revenue"
table = "shop.invoice"
sql = "sum(total)"

[[verified_query]]
name = "revenue_by_country"
questions = ["What did we sell per country?"]
sql = "SELECT billing_country, sum(total) FROM shop.invoice WHERE invoice_date >= :since GROUP BY 1"
[verified_query.params.since]
type = "string"
"#;

    #[test]
    fn a_catalog_reads_its_entries_and_the_databases_facts() {
        let file = parse(FILE).unwrap();
        assert_eq!(file.tables[0].synonyms, ["sales", "orders"]);
        assert_eq!(file.tables[0].db.rows, Some(412));
        assert_eq!(file.tables[0].columns[0].db.values, ["Brazil", "Canada"]);
        assert!(file.tables[0].columns[1].pii);
        assert_eq!(
            file.relationships[0].condition(),
            "shop.invoice.customer_id = shop.customer.customer_id"
        );
        assert_eq!(
            file.verified_queries[0].params["since"]["type"].as_str(),
            Some("string")
        );
        assert_eq!(file.instructions[0].text, "Fiscal years start in April.");
    }

    #[test]
    fn mistakes_are_named_by_their_entry() {
        let unqualified = FILE.replace("name = \"shop.invoice\"", "name = \"invoice\"");
        assert_eq!(
            parse(&unqualified).unwrap_err().to_string(),
            "table `invoice`: `invoice` is not schema.table"
        );
        let uneven = FILE.replace("shop.customer(customer_id)", "shop.customer(a, b)");
        assert!(
            parse(&uneven)
                .unwrap_err()
                .to_string()
                .ends_with("has a different number of columns on each side")
        );
        let unknown = FILE.replace("pii = true", "pii = true\nsecret = 1");
        assert!(matches!(parse(&unknown), Err(CatalogFileError::Format(_))));
        let no_question = FILE.replace(
            "questions = [\"What did we sell per country?\"]",
            "questions = []",
        );
        assert_eq!(
            parse(&no_question).unwrap_err().to_string(),
            "verified query `revenue_by_country`: needs at least one question it answers"
        );
    }
}
