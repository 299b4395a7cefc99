//! The catalog's search index in Postgres (migration 0026): what `search_catalog` and
//! `find_values` read. `entries` turns a catalog file into the texts searched (one per table,
//! column, relationship, metric, verified query and instruction); `write` replaces the whole
//! index in one transaction with those entries, their embeddings, and the distinct values of
//! the catalog's text columns read from the live database (bounded per column).
//!
//! Hidden tables and columns are left out of everything; `pii` columns keep their entry (what
//! the column means) but never have their values indexed. Values are read as the index's
//! writer, so tables with row-level security on are not value-indexed at all: their rows are
//! not everyone's to see. Who may see which entry is decided when the question is asked
//! (0026's functions check the reader's privileges), so a grant or revoke needs no new index.

use tokio_postgres::Transaction;
use tokio_postgres::types::Type;

use super::file::{CatalogFile, Table};

/// How much of each text column `write` puts in the value index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueBounds {
    /// Distinct values kept per column.
    pub per_column: i64,
    /// Longer values are free text, not something a person names: left out.
    pub max_chars: i32,
    /// Rows read per column to find them.
    pub scan_rows: i64,
}

impl Default for ValueBounds {
    fn default() -> Self {
        ValueBounds {
            per_column: 10_000,
            max_chars: 100,
            scan_rows: 1_000_000,
        }
    }
}

/// One searchable entry, as 0026's `parley.catalog_entries` stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub kind: &'static str,
    /// `(schema, table)` the entry belongs to.
    pub table: Option<(String, String)>,
    pub column: Option<String>,
    /// A relationship's other table.
    pub related: Option<(String, String)>,
    pub name: String,
    pub description: Option<String>,
    pub sql: Option<String>,
    pub join_on: Option<String>,
    /// The text searched, by words and by meaning.
    pub body: String,
}

/// What one `write` put in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Indexed {
    pub entries: usize,
    pub value_columns: usize,
    pub values: i64,
}

/// `schema.table` split at its first dot; a name without one is in no schema we know.
fn split(name: &str) -> Option<(String, String)> {
    name.split_once('.')
        .map(|(s, t)| (s.to_owned(), t.to_owned()))
}

/// A database name as words: `invoice_line` and `InvoiceLine` are "invoice line", `playerID`
/// "player ID", so they match what people type and what the model reads.
pub fn words(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    let mut prev: Option<char> = None;
    for c in name.chars() {
        if c == '_' || c == '-' || c == '.' {
            out.push(' ');
        } else {
            if let Some(p) = prev
                && c.is_uppercase()
                && (p.is_lowercase() || p.is_ascii_digit())
            {
                out.push(' ');
            }
            out.push(c);
        }
        prev = Some(c);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn sentence(out: &mut String, text: Option<&str>) {
    if let Some(text) = text.map(str::trim).filter(|t| !t.is_empty()) {
        out.push_str(". ");
        out.push_str(text);
    }
}

fn visible_table(t: &Table) -> bool {
    !t.hidden && !t.db.gone
}

/// The catalog's entries: what the model may learn of the database, nothing hidden or gone.
pub fn entries(file: &CatalogFile) -> Vec<Entry> {
    let mut out = Vec::new();
    let shown: std::collections::HashSet<&str> = file
        .tables
        .iter()
        .filter(|t| visible_table(t))
        .map(|t| t.name.as_str())
        .collect();
    for table in file.tables.iter().filter(|t| visible_table(t)) {
        let Some((schema, name)) = split(&table.name) else {
            continue;
        };
        let columns: Vec<_> = table
            .columns
            .iter()
            .filter(|c| !c.hidden && !c.db.gone)
            .collect();
        let description = table
            .description
            .clone()
            .or_else(|| table.db.comment.clone());
        let mut body = format!("{} ({})", table.name, words(&name));
        sentence(&mut body, table.description.as_deref());
        sentence(&mut body, table.db.comment.as_deref());
        if !table.synonyms.is_empty() {
            sentence(
                &mut body,
                Some(&format!("Also: {}", table.synonyms.join(", "))),
            );
        }
        let names: Vec<String> = columns.iter().map(|c| words(&c.name)).collect();
        sentence(&mut body, Some(&format!("Columns: {}", names.join(", "))));
        out.push(Entry {
            kind: "table",
            table: Some((schema.clone(), name.clone())),
            column: None,
            related: None,
            name: table.name.clone(),
            description,
            sql: None,
            join_on: None,
            body,
        });
        for column in columns {
            let mut body = format!(
                "{}.{} ({} {})",
                table.name,
                column.name,
                words(&name),
                words(&column.name)
            );
            if let Some(ty) = &column.db.ty {
                body.push(' ');
                body.push_str(ty);
            }
            sentence(&mut body, column.description.as_deref());
            sentence(&mut body, column.db.comment.as_deref());
            if !column.synonyms.is_empty() {
                sentence(
                    &mut body,
                    Some(&format!("Also: {}", column.synonyms.join(", "))),
                );
            }
            if !column.pii && !column.db.values.is_empty() {
                sentence(
                    &mut body,
                    Some(&format!("Values: {}", column.db.values.join(", "))),
                );
            }
            out.push(Entry {
                kind: "column",
                table: Some((schema.clone(), name.clone())),
                column: Some(column.name.clone()),
                related: None,
                name: format!("{}.{}", table.name, column.name),
                description: column
                    .description
                    .clone()
                    .or_else(|| column.db.comment.clone()),
                sql: None,
                join_on: None,
                body,
            });
        }
    }
    for r in &file.relationships {
        if !shown.contains(r.from.table.as_str()) || !shown.contains(r.to.table.as_str()) {
            continue;
        }
        let (Some(from), Some(to)) = (split(&r.from.table), split(&r.to.table)) else {
            continue;
        };
        let name = format!("{} -> {}", r.from, r.to);
        let mut body = format!("{name}: {} joins {}", words(&from.1), words(&to.1));
        sentence(&mut body, r.description.as_deref());
        out.push(Entry {
            kind: "relationship",
            table: Some(from),
            column: None,
            related: Some(to),
            name,
            description: r.description.clone(),
            sql: None,
            join_on: Some(r.condition()),
            body,
        });
    }
    for m in &file.metrics {
        if !shown.contains(m.table.as_str()) {
            continue;
        }
        let mut body = format!("{} ({}) on {}", m.name, words(&m.name), m.table);
        sentence(&mut body, m.description.as_deref());
        if !m.synonyms.is_empty() {
            sentence(&mut body, Some(&format!("Also: {}", m.synonyms.join(", "))));
        }
        out.push(Entry {
            kind: "metric",
            table: split(&m.table),
            column: None,
            related: None,
            name: m.name.clone(),
            description: m.description.clone(),
            sql: Some(m.sql.clone()),
            join_on: None,
            body,
        });
    }
    for q in &file.verified_queries {
        let mut body = format!("{} ({})", q.name, words(&q.name));
        sentence(&mut body, q.description.as_deref());
        sentence(&mut body, Some(&q.questions.join(" ")));
        out.push(Entry {
            kind: "verified_query",
            table: None,
            column: None,
            related: None,
            name: format!("{}{}", super::verified::PREFIX, q.name),
            description: q.description.clone(),
            sql: Some(q.sql.clone()),
            join_on: None,
            body,
        });
    }
    for (i, ins) in file.instructions.iter().enumerate() {
        let name = ins
            .name
            .clone()
            .unwrap_or_else(|| format!("instruction {}", i + 1));
        out.push(Entry {
            kind: "instruction",
            table: None,
            column: None,
            related: None,
            body: format!("{name}. {}", ins.text),
            name,
            description: Some(ins.text.clone()),
            sql: None,
            join_on: None,
        });
    }
    out
}

/// The text columns whose values go in the index: in a visible table without row-level
/// security, neither hidden nor `pii`, of a string or enum type.
const VALUE_COLUMNS: &str = "\
SELECT n.nspname::text, c.relname::text, a.attname::text
  FROM pg_catalog.pg_attribute a
  JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
 WHERE n.nspname::text || '.' || c.relname::text = ANY ($1)
   AND a.attnum > 0 AND NOT a.attisdropped
   AND t.typcategory IN ('S', 'E')
   AND NOT c.relrowsecurity
 ORDER BY 1, 2, a.attnum";

/// Replaces the whole index with `entries` (and their `embeddings`, one per entry, from
/// `model`) and the values of the catalog's text columns. In `tx`: readers see the old index
/// or the new one, never half of either.
pub async fn write(
    tx: &Transaction<'_>,
    file: &CatalogFile,
    entries: &[Entry],
    embeddings: &[Vec<f32>],
    model: &str,
    bounds: ValueBounds,
) -> Result<Indexed, tokio_postgres::Error> {
    assert_eq!(entries.len(), embeddings.len(), "one embedding per entry");
    tx.batch_execute(
        "TRUNCATE parley.catalog_entries, parley.catalog_postings, parley.catalog_terms, \
         parley.catalog_stats, \
         parley.catalog_value_columns, parley.catalog_values, parley.catalog_value_grams",
    )
    .await?;
    let column = |f: fn(&Entry) -> Option<String>| entries.iter().map(f).collect::<Vec<_>>();
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind).collect();
    let schemas = column(|e| e.table.as_ref().map(|t| t.0.clone()));
    let tables = column(|e| e.table.as_ref().map(|t| t.1.clone()));
    let columns = column(|e| e.column.clone());
    let related_schemas = column(|e| e.related.as_ref().map(|t| t.0.clone()));
    let related_tables = column(|e| e.related.as_ref().map(|t| t.1.clone()));
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    let descriptions = column(|e| e.description.clone());
    let sqls = column(|e| e.sql.clone());
    let joins = column(|e| e.join_on.clone());
    let bodies: Vec<&str> = entries.iter().map(|e| e.body.as_str()).collect();
    let vectors: Vec<String> = embeddings.iter().map(|v| vector_text(v)).collect();
    tx.execute_typed(
        "INSERT INTO parley.catalog_entries (kind, schema_name, table_name, column_name, \
             related_schema, related_table, name, description, sql, join_on, body, tsv, length, \
             embedding) \
         SELECT e.kind, e.s, e.t, e.c, e.rs, e.rt, e.name, e.description, e.sql, e.join_on, \
                e.body, v.tsv, \
                (SELECT coalesce(sum(cardinality(l.positions)), 0) FROM unnest(v.tsv) AS l), \
                e.embedding::vector \
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], \
                       $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[]) \
                AS e(kind, s, t, c, rs, rt, name, description, sql, join_on, body, embedding) \
          CROSS JOIN LATERAL (SELECT to_tsvector('english', e.body) AS tsv) AS v",
        &[
            (&kinds, Type::TEXT_ARRAY),
            (&schemas, Type::TEXT_ARRAY),
            (&tables, Type::TEXT_ARRAY),
            (&columns, Type::TEXT_ARRAY),
            (&related_schemas, Type::TEXT_ARRAY),
            (&related_tables, Type::TEXT_ARRAY),
            (&names, Type::TEXT_ARRAY),
            (&descriptions, Type::TEXT_ARRAY),
            (&sqls, Type::TEXT_ARRAY),
            (&joins, Type::TEXT_ARRAY),
            (&bodies, Type::TEXT_ARRAY),
            (&vectors, Type::TEXT_ARRAY),
        ],
    )
    .await?;
    tx.execute_typed(
        "INSERT INTO parley.catalog_terms (term, df) \
         SELECT l.lexeme, count(*) FROM parley.catalog_entries e, unnest(e.tsv) AS l GROUP BY 1",
        &[],
    )
    .await?;
    tx.execute_typed(
        "INSERT INTO parley.catalog_stats (entries, avg_length, model) \
         SELECT count(*), coalesce(avg(length), 0), $1 FROM parley.catalog_entries",
        &[(&model, Type::TEXT)],
    )
    .await?;
    tx.execute_typed(
        "INSERT INTO parley.catalog_postings (term, impact, entry_id) \
         SELECT l.lexeme, parley.bm25_impact(cardinality(l.positions)::real, e.length, \
                                             s.avg_length), e.id \
           FROM parley.catalog_entries e CROSS JOIN parley.catalog_stats s, unnest(e.tsv) AS l",
        &[],
    )
    .await?;
    let (value_columns, values) = write_values(tx, file, bounds).await?;
    // Fresh statistics, so the first questions are planned for the index as it now is (a
    // million values scanned in full would take as long as the lookup should take in all).
    tx.batch_execute(
        "ANALYZE parley.catalog_entries, parley.catalog_postings, parley.catalog_terms, \
         parley.catalog_value_columns, parley.catalog_values, parley.catalog_value_grams",
    )
    .await?;
    Ok(Indexed {
        entries: entries.len(),
        value_columns,
        values,
    })
}

async fn write_values(
    tx: &Transaction<'_>,
    file: &CatalogFile,
    bounds: ValueBounds,
) -> Result<(usize, i64), tokio_postgres::Error> {
    let tables: Vec<&str> = file
        .tables
        .iter()
        .filter(|t| visible_table(t))
        .map(|t| t.name.as_str())
        .collect();
    let found = tx
        .query_typed(VALUE_COLUMNS, &[(&tables, Type::TEXT_ARRAY)])
        .await?;
    let mut columns = 0;
    let mut values = 0;
    for row in found {
        let (schema, table, name): (String, String, String) = (row.get(0), row.get(1), row.get(2));
        let full = format!("{schema}.{table}");
        let listed = file
            .tables
            .iter()
            .find(|t| t.name == full)
            .and_then(|t| t.columns.iter().find(|c| c.name == name));
        // A column the catalog does not list (added since) is indexed like any other; one it
        // hides or marks personal never is.
        if listed.is_some_and(|c| c.hidden || c.pii) {
            continue;
        }
        let id: i32 = tx
            .query_one(
                "INSERT INTO parley.catalog_value_columns (schema_name, table_name, column_name) \
                 VALUES ($1, $2, $3) RETURNING id",
                &[&schema, &table, &name],
            )
            .await?
            .get(0);
        let ident = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
        let sql = format!(
            "INSERT INTO parley.catalog_values (column_id, value, folded, grams, words, \
                                                initials) \
             SELECT $1, v.value, f.folded, parley.catalog_grams(f.folded), \
                    parley.catalog_words(v.value), parley.catalog_initials(v.value) \
               FROM (SELECT DISTINCT x.value FROM (SELECT {col}::text AS value FROM {sch}.{tab} \
                                                   LIMIT $2) AS x \
                      WHERE x.value IS NOT NULL AND length(x.value) <= $3 \
                      LIMIT $4) AS v \
              CROSS JOIN LATERAL (SELECT parley.catalog_fold(v.value) AS folded) AS f \
              WHERE f.folded <> ''",
            col = ident(&name),
            sch = ident(&schema),
            tab = ident(&table),
        );
        let added = tx
            .execute(
                &sql,
                &[
                    &id,
                    &bounds.scan_rows,
                    &bounds.max_chars,
                    &bounds.per_column,
                ],
            )
            .await?;
        columns += 1;
        values += added as i64;
    }
    tx.execute_typed(
        "INSERT INTO parley.catalog_value_grams (gram, df) \
         SELECT g, count(*) FROM parley.catalog_values v, unnest(v.grams) AS g GROUP BY 1",
        &[],
    )
    .await?;
    Ok((columns, values))
}

/// pgvector's text form of a vector.
fn vector_text(v: &[f32]) -> String {
    let mut s = String::with_capacity(v.len() * 10 + 2);
    s.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&x.to_string());
    }
    s.push(']');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_words() {
        assert_eq!(words("invoice_line"), "invoice line");
        assert_eq!(words("InvoiceLine"), "Invoice Line");
        assert_eq!(words("playerID"), "player ID");
        assert_eq!(words("chinook.media_type"), "chinook media type");
    }

    #[test]
    fn hidden_tables_and_columns_make_no_entries_and_pii_shows_no_values() {
        let file = super::super::file::parse(
            r#"
schemas = ["s"]
[[table]]
name = "s.customer"
description = "People who bought"
[[table.column]]
name = "email"
pii = true
db = { type = "text", values = ["a@x", "b@x"] }
[[table.column]]
name = "secret"
hidden = true
[[table]]
name = "s.internal"
hidden = true
[[relationship]]
from = "s.internal(id)"
to = "s.customer(id)"
"#,
        )
        .unwrap();
        let entries = entries(&file);
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["s.customer", "s.customer.email"]);
        assert!(!entries[1].body.contains("a@x"));
        assert!(entries[0].body.contains("People who bought"));
    }
}
