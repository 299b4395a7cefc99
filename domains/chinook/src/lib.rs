//! The chinook demo domain: the Chinook music store (schema `chinook`, 11 tables, all of its
//! data) beside two unrelated sample databases, Lahman's baseball database (`lahman`, 27
//! tables) and NYC flights 2013 (`nycflights13`, 5 tables), each a sample of at most 1,000 rows
//! a table. A database as large and as bare (no comments) as a real one, for the semantic
//! catalog and ad-hoc SQL; eval/questions.jsonl asks about it. Applied by `parley demo-data
//! --domain chinook`: [`SCHEMA`], then [`load_data`], in one transaction; nothing here is part
//! of Parley's own schema. The data files are made by `domains/chinook/fetch` (see README.md).

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::SinkExt;
use parley_core::db::pg_message;
use tokio_postgres::Transaction;

/// Replaces the three schemas and makes Chinook's tables (see schema.sql). A rerun starts from
/// nothing, so it gives the same tables and rows.
pub const SCHEMA: &str = include_str!("../schema.sql");

/// Chinook's foreign keys and indexes and the three schemas' grants, applied after the data.
pub const KEYS: &str = include_str!("../keys.sql");

/// The data files, in load order: SQL statements and `COPY ... FROM stdin;` blocks in COPY's
/// text format, as psql reads them (domains/chinook/fetch writes them).
pub const DATA: [(&str, &str); 3] = [
    ("chinook", include_str!("../data/chinook.sql")),
    ("lahman", include_str!("../data/lahman.sql")),
    ("nycflights13", include_str!("../data/nycflights13.sql")),
];

/// The domain's schemas, in load order.
pub const SCHEMAS: [&str; 3] = ["chinook", "lahman", "nycflights13"];

/// The labelled questions about Chinook (see eval/README.md).
pub const QUESTIONS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/eval/questions.jsonl");

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaSummary {
    pub schema: &'static str,
    pub tables: u64,
    pub rows: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadSummary {
    /// One entry per schema, in [`SCHEMAS`]' order.
    pub schemas: Vec<SchemaSummary>,
    pub elapsed: Duration,
}

#[derive(Debug, thiserror::Error)]
#[error("{step} failed: {}", pg_message(.source))]
pub struct LoadError {
    step: String,
    #[source]
    source: tokio_postgres::Error,
}

fn pg(step: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> LoadError {
    let step = step.into();
    move |source| LoadError { step, source }
}

/// A piece of a data file.
#[derive(Debug, PartialEq, Eq)]
enum Piece<'a> {
    /// Statements for `batch_execute`.
    Sql(&'a str),
    /// A `COPY <table> (...) FROM stdin;` statement and its data lines, each ending in `\n`.
    Copy {
        statement: &'a str,
        table: &'a str,
        data: &'a str,
    },
}

/// Splits a data file into statements and COPY blocks, as psql reads it.
fn pieces(script: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut sql_start = 0;
    let mut pos = 0;
    while pos < script.len() {
        let end = script[pos..]
            .find('\n')
            .map_or(script.len(), |i| pos + i + 1);
        let line = script[pos..end].trim_end_matches('\n');
        if line.starts_with("COPY ") && line.ends_with(" FROM stdin;") {
            let sql = script[sql_start..pos].trim();
            if !sql.is_empty() {
                out.push(Piece::Sql(sql));
            }
            let table = line["COPY ".len()..]
                .split([' ', '('])
                .next()
                .unwrap_or_default();
            let data_start = end;
            let terminator = script[data_start..]
                .match_indices("\\.\n")
                .map(|(i, _)| data_start + i)
                .find(|&i| i == data_start || script.as_bytes()[i - 1] == b'\n')
                .ok_or_else(|| format!("{table}: COPY data without its \\. line"))?;
            out.push(Piece::Copy {
                statement: line.trim_end_matches(';'),
                table,
                data: &script[data_start..terminator],
            });
            pos = terminator + "\\.\n".len();
            sql_start = pos;
        } else {
            pos = end;
        }
    }
    let sql = script[sql_start..].trim();
    if !sql.is_empty() {
        out.push(Piece::Sql(sql));
    }
    Ok(out)
}

/// Loads the data files and then [`KEYS`] in `tx`, which has applied [`SCHEMA`] (as `parley
/// demo-data` does), and analyzes every table.
pub async fn load_data(tx: &Transaction<'_>) -> Result<LoadSummary, LoadError> {
    let started = Instant::now();
    let mut schemas = Vec::new();
    let mut tables = Vec::new();
    for (schema, script) in DATA {
        let mut summary = SchemaSummary {
            schema,
            tables: 0,
            rows: 0,
        };
        let pieces = pieces(script).unwrap_or_else(|e| panic!("data/{schema}.sql: {e}"));
        for piece in pieces {
            match piece {
                Piece::Sql(sql) => tx
                    .batch_execute(sql)
                    .await
                    .map_err(pg(format!("data/{schema}.sql's statements")))?,
                Piece::Copy {
                    statement,
                    table,
                    data,
                } => {
                    let sink = tx
                        .copy_in(statement)
                        .await
                        .map_err(pg(format!("starting COPY into {table}")))?;
                    let mut sink = std::pin::pin!(sink);
                    sink.send(Bytes::from_static(data.as_bytes()))
                        .await
                        .map_err(pg(format!("COPY into {table}")))?;
                    summary.rows += sink
                        .as_mut()
                        .finish()
                        .await
                        .map_err(pg(format!("finishing COPY into {table}")))?;
                    summary.tables += 1;
                    tables.push(table);
                }
            }
        }
        schemas.push(summary);
    }
    tx.batch_execute(KEYS)
        .await
        .map_err(pg("adding Chinook's keys and the grants"))?;
    tx.batch_execute(&format!("ANALYZE {}", tables.join(", ")))
        .await
        .map_err(pg("analyzing the tables"))?;
    Ok(LoadSummary {
        schemas,
        elapsed: started.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_splits_into_statements_and_copy_blocks() {
        let script = "-- c\nCREATE TABLE s.t (a int);\nCOPY s.t (\"a\") FROM stdin;\n1\n\\N\n\\.\nCOPY s.u (b) FROM stdin;\n\\.\nSELECT 1;\n";
        assert_eq!(
            pieces(script).unwrap(),
            [
                Piece::Sql("-- c\nCREATE TABLE s.t (a int);"),
                Piece::Copy {
                    statement: "COPY s.t (\"a\") FROM stdin",
                    table: "s.t",
                    data: "1\n\\N\n",
                },
                Piece::Copy {
                    statement: "COPY s.u (b) FROM stdin",
                    table: "s.u",
                    data: "",
                },
                Piece::Sql("SELECT 1;"),
            ]
        );
        assert!(pieces("COPY s.t (a) FROM stdin;\n1\n").is_err());
    }

    #[test]
    fn the_data_files_hold_11_chinook_and_32_other_tables() {
        let copies = |script| {
            pieces(script)
                .unwrap()
                .into_iter()
                .filter(|p| matches!(p, Piece::Copy { .. }))
                .count()
        };
        let counts: Vec<usize> = DATA.iter().map(|(_, s)| copies(s)).collect();
        assert_eq!(counts, [11, 27, 5]);
        for (schema, script) in DATA {
            for piece in pieces(script).unwrap() {
                if let Piece::Copy { table, data, .. } = piece {
                    assert!(table.starts_with(&format!("{schema}.")), "{table}");
                    if schema != "chinook" {
                        assert!(data.lines().count() <= 1000, "{table}");
                    }
                }
            }
        }
    }
}
