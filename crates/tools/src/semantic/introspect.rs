//! What the live database says about the tables of some schemas, read with no model: tables
//! and views, their columns, types, keys, foreign keys, comments and row estimates, the
//! smallest and largest value of date and number columns, and every distinct value of
//! low-cardinality text columns. `parley catalog init` writes it as a draft; `refresh` updates
//! a catalog's `db` keys from it.
//!
//! Only what the connected role may read is read (`has_column_privilege`), so a draft made as
//! the SQL reader role describes what that role can query. Every scan of a table's rows is
//! bounded ([`Bounds`]): a catalog of a large database is drafted in minutes, not hours.

use tokio_postgres::Client;
use tokio_postgres::types::Type;

use super::file::{Column, ColumnFacts, ColumnsRef, Relationship, Table, TableFacts};

/// How far `init` reads into the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// A text column with at most this many distinct values has them all listed (default 25).
    pub max_values: usize,
    /// Values longer than this are not listed: a low-cardinality column of long texts is
    /// prose, not a code (default 60 characters).
    pub max_value_chars: usize,
    /// Rows read per column for its distinct values and its range (default 100,000); a column
    /// with more rows is judged on its first ones, and its range is left out.
    pub max_scan_rows: i64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            max_values: 25,
            max_value_chars: 60,
            max_scan_rows: 100_000,
        }
    }
}

/// The tables of `schemas` as the database describes them, and the foreign keys among them.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub tables: Vec<Table>,
    pub foreign_keys: Vec<Relationship>,
}

/// Tables and views of `$1` the role may read, with their facts and readable columns.
const TABLES: &str = "SELECT n.nspname || '.' || c.relname, \
    CASE c.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' \
                   WHEN 'f' THEN 'foreign table' ELSE 'table' END, \
    CASE WHEN c.relkind IN ('r', 'p', 'm') AND c.reltuples >= 0 THEN c.reltuples::bigint END, \
    pg_catalog.obj_description(c.oid, 'pg_class'), \
    coalesce((SELECT array_agg(a.attname::text ORDER BY array_position(k.conkey, a.attnum)) \
              FROM pg_catalog.pg_constraint k \
              JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = ANY (k.conkey) \
              WHERE k.conrelid = c.oid AND k.contype = 'p'), '{}'), \
    c.oid::bigint \
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE n.nspname = ANY ($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition \
  AND pg_catalog.has_any_column_privilege(c.oid, 'SELECT') \
ORDER BY pg_catalog.array_position($1, n.nspname::text), c.relname";

/// The readable columns of table `$1` (an oid), with what kind of values they hold.
const COLUMNS: &str = "SELECT a.attname::text, pg_catalog.format_type(a.atttypid, a.atttypmod), \
    NOT a.attnotnull, pg_catalog.col_description(a.attrelid, a.attnum), \
    t.typcategory::text \
FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
WHERE a.attrelid = $1::bigint::oid AND a.attnum > 0 AND NOT a.attisdropped \
  AND pg_catalog.has_column_privilege(a.attrelid, a.attnum, 'SELECT') \
ORDER BY a.attnum";

/// Foreign keys between readable tables of `$1`: (name, from table, from columns, to table,
/// to columns).
const FOREIGN_KEYS: &str = "SELECT k.conname::text, \
    fn.nspname || '.' || fc.relname, \
    (SELECT array_agg(a.attname::text ORDER BY i) FROM unnest(k.conkey) WITH ORDINALITY u(n, i) \
       JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n), \
    tn.nspname || '.' || tc.relname, \
    (SELECT array_agg(a.attname::text ORDER BY i) FROM unnest(k.confkey) WITH ORDINALITY u(n, i) \
       JOIN pg_catalog.pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n) \
FROM pg_catalog.pg_constraint k \
JOIN pg_catalog.pg_class fc ON fc.oid = k.conrelid \
JOIN pg_catalog.pg_namespace fn ON fn.oid = fc.relnamespace \
JOIN pg_catalog.pg_class tc ON tc.oid = k.confrelid \
JOIN pg_catalog.pg_namespace tn ON tn.oid = tc.relnamespace \
WHERE k.contype = 'f' AND fn.nspname = ANY ($1) AND tn.nspname = ANY ($1) \
  AND pg_catalog.has_any_column_privilege(fc.oid, 'SELECT') \
  AND pg_catalog.has_any_column_privilege(tc.oid, 'SELECT') \
ORDER BY 2, 1";

/// Reads the tables of `schemas` (in that order) as the connected role sees them.
pub async fn snapshot(
    db: &Client,
    schemas: &[String],
    bounds: Bounds,
) -> Result<Snapshot, tokio_postgres::Error> {
    let mut tables = Vec::new();
    for row in db
        .query_typed(TABLES, &[(&schemas, Type::TEXT_ARRAY)])
        .await?
    {
        let name: String = row.get(0);
        let oid: i64 = row.get(5);
        let kind: String = row.get(1);
        let mut columns = Vec::new();
        for c in db.query_typed(COLUMNS, &[(&oid, Type::INT8)]).await? {
            let column: String = c.get(0);
            let category: String = c.get(4);
            let mut facts = ColumnFacts {
                ty: Some(c.get(1)),
                nullable: c.get(2),
                comment: c.get(3),
                ..ColumnFacts::default()
            };
            // S: strings; D: dates and times; N: numbers (pg_type.typcategory).
            match category.as_str() {
                "S" => facts.values = distinct_values(db, &name, &column, bounds).await?,
                "D" | "N" if kind != "view" => {
                    (facts.min, facts.max) = range(db, &name, &column, bounds).await?
                }
                _ => {}
            }
            columns.push(Column {
                name: column,
                description: None,
                synonyms: Vec::new(),
                hidden: false,
                pii: false,
                db: facts,
            });
        }
        let rows = match row.get::<_, Option<i64>>(2) {
            Some(rows) => Some(rows),
            None if kind == "table" => counted_rows(db, &name, bounds).await?,
            None => None,
        };
        tables.push(Table {
            name,
            description: None,
            synonyms: Vec::new(),
            hidden: false,
            columns,
            db: TableFacts {
                kind: Some(kind),
                rows,
                comment: row.get(3),
                primary_key: row.get(4),
                gone: false,
            },
        });
    }
    let foreign_keys = db
        .query_typed(FOREIGN_KEYS, &[(&schemas, Type::TEXT_ARRAY)])
        .await?
        .iter()
        .map(|row| Relationship {
            foreign_key: Some(row.get(0)),
            from: ColumnsRef {
                table: row.get(1),
                columns: row.get(2),
            },
            to: ColumnsRef {
                table: row.get(3),
                columns: row.get(4),
            },
            description: None,
        })
        .collect();
    Ok(Snapshot {
        tables,
        foreign_keys,
    })
}

/// `schema.table` and a column as SQL, each part quoted.
fn quoted(table: &str, column: &str) -> (String, String) {
    let ident = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let (schema, name) = table.split_once('.').unwrap_or(("public", table));
    (format!("{}.{}", ident(schema), ident(name)), ident(column))
}

/// Every distinct non-empty value of `column` in its first `max_scan_rows` rows, when they
/// are codes rather than identifiers: at most `max_values` of them, each repeated on average
/// (no more than half as many values as rows holding one), each at most `max_value_chars`
/// long. None otherwise: a column of names, e-mails or ids has as many values as rows.
async fn distinct_values(
    db: &Client,
    table: &str,
    column: &str,
    bounds: Bounds,
) -> Result<Vec<String>, tokio_postgres::Error> {
    let (table, column) = quoted(table, column);
    let sql = format!(
        "WITH s AS (SELECT {column}::text AS v FROM {table} LIMIT $1) \
         SELECT coalesce((SELECT array_agg(v ORDER BY v) FROM \
                  (SELECT DISTINCT v FROM s WHERE v <> '' LIMIT $2) d), '{{}}'), \
                (SELECT count(v) FROM s WHERE v <> '')"
    );
    let limit = i64::try_from(bounds.max_values + 1).unwrap_or(i64::MAX);
    let row = db
        .query_typed_one(
            &sql,
            &[(&bounds.max_scan_rows, Type::INT8), (&limit, Type::INT8)],
        )
        .await?;
    let values: Vec<String> = row.get(0);
    let filled: i64 = row.get(1);
    let repeated = i64::try_from(values.len())
        .unwrap_or(i64::MAX)
        .saturating_mul(2)
        <= filled;
    let fits = values.len() <= bounds.max_values
        && repeated
        && values
            .iter()
            .all(|v| v.chars().count() <= bounds.max_value_chars);
    Ok(if fits { values } else { Vec::new() })
}

/// Rows in `table`, counted up to `max_scan_rows` when the planner has no estimate yet (a
/// table never analyzed); `None` past that.
async fn counted_rows(
    db: &Client,
    table: &str,
    bounds: Bounds,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let (table, _) = quoted(table, "");
    let sql = format!("SELECT count(*) FROM (SELECT FROM {table} LIMIT $1) s");
    let fetched = bounds.max_scan_rows.saturating_add(1);
    let row = db.query_typed_one(&sql, &[(&fetched, Type::INT8)]).await?;
    let counted: i64 = row.get(0);
    Ok((counted <= bounds.max_scan_rows).then_some(counted))
}

/// The smallest and largest value of `column` as text, read from its first `max_scan_rows`
/// rows when the table has no more than that (a range from part of the rows would mislead).
async fn range(
    db: &Client,
    table: &str,
    column: &str,
    bounds: Bounds,
) -> Result<(Option<String>, Option<String>), tokio_postgres::Error> {
    let (table, column) = quoted(table, column);
    let sql = format!(
        "SELECT min(v)::text, max(v)::text, count(*) FROM \
         (SELECT {column} AS v FROM {table} LIMIT $1) s"
    );
    let fetched = bounds.max_scan_rows.saturating_add(1);
    let row = db.query_typed_one(&sql, &[(&fetched, Type::INT8)]).await?;
    let counted: i64 = row.get(2);
    Ok(if counted > bounds.max_scan_rows {
        (None, None)
    } else {
        (row.get(0), row.get(1))
    })
}
