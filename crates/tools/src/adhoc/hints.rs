//! Repair hints: when a statement names a table or column that does not exist (SQLSTATE 42P01,
//! 42703), the nearest names the SQL role can see are added to Postgres' message. They are read
//! on the role's own pool, in a transaction of their own, so privileges hold by construction;
//! a lookup that fails leaves the message as it was, never a different error.

use std::collections::HashSet;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::types::Type;

use super::lexer::{self, Tok};
use super::run::{self, PgFailure, Session, Statement};

/// Most catalog names one lookup reads and ranks: it bounds the rows sent and the ranking's
/// work on a catalog of any size. Past that a schema is too wide for a nearest name to be much
/// help, and the columns of the statement's own tables are read first.
pub const MAX_HINT_NAMES: usize = 20_000;

/// Most names one hint suggests: more reads as a list to choose from, not a correction.
pub const MAX_SUGGESTIONS: usize = 3;

/// Least Jaro-Winkler similarity (0 to 1, lower-cased) a name needs to be suggested: `nmae`
/// and `name` score 0.93, `cust_name` and `customer_name` 0.89, `salary` and `sales` 0.79,
/// `nowhere_at_all` and `regions` 0.45. Below this a suggestion is more often a distraction
/// than a fix.
const THRESHOLD: f64 = 0.8;

/// Added, for ordering only, to the score of a column of a table the statement names, or of a
/// table in the schema it was written with: those come first among near-equals.
const NAMED_TABLE_BONUS: f64 = 0.05;

/// Longest a lookup may run: a hint is worth little time, and the failed call has already
/// used some of the caller's.
const LOOKUP_TIMEOUT: Duration = Duration::from_millis(1000);

/// What a failed statement named that does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// `schema.name` or `name`.
    Table {
        schema: Option<String>,
        name: String,
    },
    /// `qualifier.name` or `name`; `tables`: the names the statement uses that may be its
    /// tables (for `alias.name`, the table the alias stands for), whose columns come first.
    Column {
        qualifier: Option<String>,
        name: String,
        tables: Vec<String>,
    },
}

/// A table, or a column of one, that the SQL role may read in the allowed schemas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub schema: String,
    pub table: String,
    /// `None` for the table itself.
    pub column: Option<String>,
}

/// `failure` with the nearest names the role can see added to its message, when it reports a
/// table or column `sql` names that does not exist; untouched otherwise, and when the lookup
/// fails or finds nothing close.
pub async fn add(
    pool: &Pool,
    session: &Session<'_>,
    sql: &str,
    hidden: &[String],
    failure: &mut PgFailure,
) {
    let Some(missing) = missing(failure, sql) else {
        return;
    };
    let candidates = match candidates(pool, session, &missing).await {
        Ok(c) => visible(c, hidden),
        Err(e) => {
            tracing::warn!(error = %e, "no repair hint: the catalog lookup failed");
            return;
        }
    };
    let names = suggest(&missing, &candidates);
    if !names.is_empty() {
        failure.message = with_hint(&failure.message, &names);
    }
}

/// `message; did you mean `a`, `b`?`
fn with_hint(message: &str, names: &[String]) -> String {
    let names: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    format!("{message}; did you mean {}?", names.join(", "))
}

/// What `failure` says is missing. The name is read from the statement at the error's
/// position (as Postgres' parser reads names, whatever language its messages are in), and
/// kept only if the message quotes it; else it is the message's first quoted name.
pub fn missing(failure: &PgFailure, sql: &str) -> Option<Missing> {
    let is_table = match failure.code.as_str() {
        "42P01" => true,
        "42703" => false,
        _ => return None,
    };
    let at = failure
        .position
        .map(|p| names_at(sql, p))
        .unwrap_or_default();
    // Read where Postgres points, a name must be the one the message names: "missing
    // FROM-clause entry for table "r"" shares 42P01 and points at `r.col`, an alias never
    // declared, not a table to look for.
    // A table is named whole (`schema.table`), a column by its last part (`alias.col`).
    let named = if is_table {
        failure.message.contains(&at.join("."))
    } else {
        at.last()
            .is_some_and(|n| failure.message.contains(n.as_str()))
    };
    let mut parts = if at.is_empty() {
        quoted(&failure.message)?
            .split('.')
            .map(str::to_owned)
            .collect()
    } else if named {
        at
    } else {
        return None;
    };
    let name = parts.pop().filter(|n| !n.is_empty())?;
    let qualifier = parts.pop();
    Some(if is_table {
        Missing::Table {
            schema: qualifier,
            name,
        }
    } else {
        let tables = named_tables(sql, qualifier.as_deref());
        Missing::Column {
            qualifier,
            name,
            tables,
        }
    })
}

/// The dotted name (`a`, `a.b`, `a.b.c`) starting at the 1-based character `position`.
fn names_at(sql: &str, position: usize) -> Vec<String> {
    let Some((start, _)) = sql.char_indices().nth(position.saturating_sub(1)) else {
        return Vec::new();
    };
    // Lexed from a token's start, the rest reads as it does in the whole statement.
    let Ok(tokens) = lexer::tokens(&sql[start..]) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    let mut tokens = tokens.into_iter();
    while let Some(Tok::Ident { name, .. }) = tokens.next() {
        names.push(name);
        if names.len() == 4 || tokens.next() != Some(Tok::Dot) {
            break;
        }
    }
    names
}

/// The first `"..."` in `message`.
fn quoted(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once('"')?;
    let (name, _) = rest.split_once('"')?;
    Some(name)
}

/// The names in `sql` that may be its tables: for a column written `qualifier.name`, the
/// qualifier and any name written just before it (`sales s`, `sales AS s`), so an alias leads
/// to its table; for an unqualified one, every name in the statement. Reading the FROM
/// clause properly would need Postgres' parser; a name too many costs nothing here.
fn named_tables(sql: &str, qualifier: Option<&str>) -> Vec<String> {
    let Ok(tokens) = lexer::tokens(sql) else {
        return Vec::new();
    };
    let names: Vec<&str> = tokens
        .iter()
        .map(|t| match t {
            Tok::Ident { name, .. } => name.as_str(),
            _ => "",
        })
        .collect();
    let mut tables: Vec<String> = match qualifier {
        None => names
            .iter()
            .filter(|n| !n.is_empty())
            .map(|n| n.to_string())
            .collect(),
        Some(q) => {
            let mut tables = vec![q.to_owned()];
            for (i, name) in names.iter().enumerate() {
                if *name != q || i == 0 {
                    continue;
                }
                let before = if names[i - 1].eq_ignore_ascii_case("as") && i >= 2 {
                    names[i - 2]
                } else {
                    names[i - 1]
                };
                if !before.is_empty() {
                    tables.push(before.to_owned());
                }
            }
            tables
        }
    };
    let mut seen = HashSet::new();
    tables.retain(|t| seen.insert(t.clone()));
    tables
}

/// `candidates` without the tables and columns a served catalog hides (`schema.table`,
/// `schema.table.column`, as Postgres names them).
fn visible(mut candidates: Vec<Candidate>, hidden: &[String]) -> Vec<Candidate> {
    if hidden.is_empty() {
        return candidates;
    }
    candidates.retain(|c| {
        let table = format!("{}.{}", c.schema, c.table);
        !hidden.contains(&table)
            && !c
                .column
                .as_ref()
                .is_some_and(|col| hidden.contains(&format!("{table}.{col}")))
    });
    candidates
}

/// The tables, or the columns, the role may read in the allowed schemas: at most
/// [`MAX_HINT_NAMES`], the columns of the statement's own tables first.
async fn candidates(
    pool: &Pool,
    session: &Session<'_>,
    missing: &Missing,
) -> Result<Vec<Candidate>, run::SqlError> {
    let session = Session {
        schemas: session.schemas,
        timeout: session.timeout.min(LOOKUP_TIMEOUT),
        marker: session.marker,
    };
    let schemas = session.schemas.to_vec();
    let (query, tables) = match missing {
        Missing::Table { .. } => (TABLE_NAMES, None),
        Missing::Column { tables, .. } => (COLUMN_NAMES, Some(tables.clone())),
    };
    let mut params = vec![(&schemas as _, Type::TEXT_ARRAY)];
    if let Some(tables) = &tables {
        params.push((tables as _, Type::TEXT_ARRAY));
    }
    let statement = Statement {
        text: format!(
            "{} {query} LIMIT {MAX_HINT_NAMES}",
            session.marker.comment()
        ),
        params,
        original: "",
        offset: 0,
    };
    let rows = run::texts(pool, &session, &statement).await?;
    Ok(rows
        .iter()
        .filter_map(|row| serde_json::from_str::<Vec<String>>(row).ok())
        .filter_map(|mut parts| {
            let column = (parts.len() == 3).then(|| parts.pop()).flatten();
            let table = parts.pop()?;
            let schema = parts.pop()?;
            Some(Candidate {
                schema,
                table,
                column,
            })
        })
        .collect())
}

/// Tables and views of the schemas `$1` the role may read.
const TABLE_NAMES: &str = "SELECT pg_catalog.json_build_array(n.nspname, c.relname)::text \
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition \
  AND pg_catalog.has_schema_privilege(n.oid, 'USAGE') \
  AND pg_catalog.has_any_column_privilege(c.oid, 'SELECT') \
ORDER BY pg_catalog.array_position($1, n.nspname::text), c.relname";

/// Columns the role may read of the tables and views of the schemas `$1`, those of the
/// tables named `$2` first.
const COLUMN_NAMES: &str = "SELECT pg_catalog.json_build_array(n.nspname, c.relname, a.attname)::text \
FROM pg_catalog.pg_attribute a \
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition \
  AND a.attnum > 0 AND NOT a.attisdropped \
  AND pg_catalog.has_schema_privilege(n.oid, 'USAGE') \
  AND pg_catalog.has_column_privilege(c.oid, a.attnum, 'SELECT') \
ORDER BY c.relname::text = ANY($2) DESC, pg_catalog.array_position($1, n.nspname::text), \
  c.relname, a.attnum";

/// The nearest of `candidates` to `missing`, best first, each as it would be written in SQL:
/// `schema.table` for a table, `table.column` for a column. At most [`MAX_SUGGESTIONS`], none
/// below [`THRESHOLD`]. A catalog that hides names removes them from `candidates` first: what
/// is not offered here is never suggested.
pub fn suggest(missing: &Missing, candidates: &[Candidate]) -> Vec<String> {
    let mut scored: Vec<(f64, String)> = candidates
        .iter()
        .filter_map(|c| {
            let (score, bonus, name) = match (missing, &c.column) {
                // Names are compared without their qualifiers: `public.` shared by every
                // table of a schema would make them all look near.
                (Missing::Table { schema, name }, None) => {
                    let bonus = if schema.as_ref() == Some(&c.schema) {
                        NAMED_TABLE_BONUS
                    } else {
                        0.0
                    };
                    let written = format!("{}.{}", sql_name(&c.schema), sql_name(&c.table));
                    (similarity(name, &c.table), bonus, written)
                }
                (Missing::Column { name, tables, .. }, Some(column)) => {
                    // `customer_email` for `customer.email`; the qualifier only says which
                    // table's columns come first (`tables`).
                    let qualified = format!("{}.{column}", c.table);
                    let score = similarity(name, column).max(similarity(name, &qualified));
                    let bonus = if tables.contains(&c.table) {
                        NAMED_TABLE_BONUS
                    } else {
                        0.0
                    };
                    (
                        score,
                        bonus,
                        format!("{}.{}", sql_name(&c.table), sql_name(column)),
                    )
                }
                _ => return None,
            };
            (score >= THRESHOLD).then_some((score + bonus, name))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut seen = HashSet::new();
    scored
        .into_iter()
        .map(|(_, name)| name)
        .filter(|name| seen.insert(name.clone()))
        .take(MAX_SUGGESTIONS)
        .collect()
}

/// Jaro-Winkler over lower-cased names: a typo, a transposition or a dropped letter keeps a
/// name near, and a shared prefix (`cust_` and `customer_`) counts for more than a shared end.
fn similarity(written: &str, name: &str) -> f64 {
    strsim::jaro_winkler(&written.to_lowercase(), &name.to_lowercase())
}

/// `name` as SQL must write it: as is when Postgres would fold it to itself, else quoted.
fn sql_name(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '$');
    if plain {
        name.to_owned()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: &str, message: &str, position: Option<usize>) -> PgFailure {
        PgFailure {
            code: code.into(),
            message: message.into(),
            detail: None,
            hint: None,
            position,
            line_column: None,
        }
    }

    #[test]
    fn what_a_catalog_hides_is_never_suggested() {
        let mut candidates = vec![table("s", "customer"), table("s", "internal")];
        candidates.push(Candidate {
            schema: "s".into(),
            table: "customer".into(),
            column: Some("card_number".into()),
        });
        candidates.push(Candidate {
            schema: "s".into(),
            table: "customer".into(),
            column: Some("card_name".into()),
        });
        let hidden = vec!["s.internal".to_owned(), "s.customer.card_number".to_owned()];
        let kept = visible(candidates, &hidden);
        let names: Vec<String> = kept
            .iter()
            .map(|c| {
                format!(
                    "{}.{}.{}",
                    c.schema,
                    c.table,
                    c.column.as_deref().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(names, ["s.customer.", "s.customer.card_name"]);
        let column = Missing::Column {
            name: "card_numbr".into(),
            qualifier: None,
            tables: Vec::new(),
        };
        assert_eq!(suggest(&column, &kept), ["customer.card_name"]);
    }

    fn table(schema: &str, table: &str) -> Candidate {
        Candidate {
            schema: schema.into(),
            table: table.into(),
            column: None,
        }
    }

    fn columns(table: &str, names: &[&str]) -> Vec<Candidate> {
        names
            .iter()
            .map(|c| Candidate {
                schema: "public".into(),
                table: table.into(),
                column: Some((*c).into()),
            })
            .collect()
    }

    fn column(name: &str, qualifier: Option<&str>, tables: &[&str]) -> Missing {
        Missing::Column {
            qualifier: qualifier.map(Into::into),
            name: name.into(),
            tables: tables.iter().map(|t| (*t).into()).collect(),
        }
    }

    fn catalog() -> Vec<Candidate> {
        let mut all = columns(
            "customer",
            &[
                "customer_id",
                "first_name",
                "last_name",
                "email",
                "customer_name",
            ],
        );
        all.extend(columns(
            "invoice",
            &["invoice_id", "customer_id", "total", "billing_city"],
        ));
        all.extend(columns("regions", &["id", "name"]));
        all
    }

    #[test]
    fn a_misspelt_column_gets_the_nearest_columns_as_table_dot_column() {
        let hint = suggest(&column("cust_name", None, &["customer"]), &catalog());
        assert_eq!(hint[0], "customer.customer_name", "{hint:?}");
        assert!(hint.len() <= MAX_SUGGESTIONS);
        assert_eq!(
            suggest(&column("nmae", None, &[]), &catalog()),
            ["regions.name"]
        );
        assert_eq!(
            suggest(&column("totl", None, &[]), &catalog()),
            ["invoice.total"]
        );
    }

    #[test]
    fn a_column_matches_table_dot_column_and_an_alias_by_its_last_part() {
        assert_eq!(
            suggest(&column("customer_email", None, &[]), &catalog())[0],
            "customer.email"
        );
        assert_eq!(
            suggest(&column("emial", Some("c"), &["c", "customer"]), &catalog()),
            ["customer.email"]
        );
    }

    #[test]
    fn columns_of_the_statements_tables_come_first() {
        let near = suggest(&column("customer_ids", None, &["invoice"]), &catalog());
        assert_eq!(near[0], "invoice.customer_id", "{near:?}");
        let near = suggest(&column("customer_ids", None, &["customer"]), &catalog());
        assert_eq!(near[0], "customer.customer_id", "{near:?}");
    }

    #[test]
    fn nothing_close_gets_no_hint_and_at_most_three_are_suggested() {
        assert!(suggest(&column("xyzzy", None, &[]), &catalog()).is_empty());
        let missing = Missing::Table {
            schema: None,
            name: "nowhere".into(),
        };
        let tables = [table("public", "regions"), table("public", "sales")];
        assert!(suggest(&missing, &tables).is_empty());
        let many: Vec<Candidate> = (0..10)
            .map(|i| table("public", &format!("sale{i}")))
            .collect();
        let missing = Missing::Table {
            schema: None,
            name: "sale".into(),
        };
        assert_eq!(suggest(&missing, &many).len(), MAX_SUGGESTIONS);
    }

    #[test]
    fn a_table_is_suggested_schema_qualified_and_quoted_when_it_must_be() {
        let tables = [
            table("analytics", "sales"),
            table("analytics", "regions"),
            table("public", "Invoices"),
        ];
        let missing = |schema: Option<&str>, name: &str| Missing::Table {
            schema: schema.map(Into::into),
            name: name.into(),
        };
        assert_eq!(
            suggest(&missing(None, "sale"), &tables),
            ["analytics.sales"]
        );
        assert_eq!(
            suggest(&missing(Some("public"), "sales"), &tables),
            ["analytics.sales"]
        );
        assert_eq!(
            suggest(&missing(None, "invoices"), &tables),
            ["public.\"Invoices\""]
        );
        // A table is never offered for a column, nor a column for a table.
        assert!(suggest(&column("sales", None, &[]), &tables).is_empty());
    }

    #[test]
    fn the_missing_name_is_read_at_the_errors_position() {
        let sql = "SELECT id,\n       r.Nmae FROM analytics.regions r";
        let f = failure("42703", "column r.nmae does not exist", Some(19));
        assert_eq!(
            missing(&f, sql),
            Some(column("nmae", Some("r"), &["r", "regions"]))
        );
        let sql = "SELECT * FROM analytics.nowhere";
        let f = failure(
            "42P01",
            "relation \"analytics.nowhere\" does not exist",
            Some(15),
        );
        assert_eq!(
            missing(&f, sql),
            Some(Missing::Table {
                schema: Some("analytics".into()),
                name: "nowhere".into()
            })
        );
        // Without a position, the message's quoted name.
        let f = failure("42703", "column \"cust_name\" does not exist", None);
        assert!(matches!(
            missing(&f, "SELECT cust_name FROM customer"),
            Some(Missing::Column { name, qualifier: None, tables }) if name == "cust_name" && tables.contains(&"customer".to_owned())
        ));
    }

    #[test]
    fn an_undeclared_alias_and_other_errors_get_no_lookup() {
        let sql = "SELECT r.name FROM analytics.regions";
        let f = failure(
            "42P01",
            "missing FROM-clause entry for table \"r\"",
            Some(8),
        );
        assert_eq!(missing(&f, sql), None);
        let f = failure("42601", "syntax error at or near \"FORM\"", Some(10));
        assert_eq!(missing(&f, "SELECT 1 FORM x"), None);
    }

    #[test]
    fn the_hint_follows_postgres_message() {
        assert_eq!(
            with_hint(
                "column \"cust_name\" does not exist",
                &["customer.first_name".into(), "customer.last_name".into()]
            ),
            "column \"cust_name\" does not exist; did you mean `customer.first_name`, \
             `customer.last_name`?"
        );
    }
}
