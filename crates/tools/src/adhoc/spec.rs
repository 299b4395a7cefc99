//! The `[sql]` table of a tools file: which ad-hoc SQL tools are on, over which schemas, and
//! their limits. Parsed and checked here, at start-up, so the tools only ever see valid
//! settings.

use std::time::Duration;

use serde::Deserialize;

use crate::output::{HARD_MAX_ROWS, Limits};

/// Largest `max_statement_bytes` a file may set: a query a person could still read.
pub const HARD_MAX_STATEMENT_BYTES: u64 = 1024 * 1024;
/// Statement size when the file does not say.
pub const DEFAULT_MAX_STATEMENT_BYTES: u64 = 16 * 1024;
/// Most sample rows `describe_table` may show.
pub const HARD_MAX_SAMPLE_ROWS: u32 = 20;

/// One of the ad-hoc SQL tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    RunSql,
    ListTables,
    DescribeTable,
    ExplainSql,
}

impl Kind {
    pub const ALL: [Kind; 4] = [
        Kind::RunSql,
        Kind::ListTables,
        Kind::DescribeTable,
        Kind::ExplainSql,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::RunSql => "run_sql",
            Kind::ListTables => "list_tables",
            Kind::DescribeTable => "describe_table",
            Kind::ExplainSql => "explain_sql",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// The ad-hoc SQL tools as a deployment declared them.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlSpec {
    /// The schemas the tools see, in `search_path` order; lower-case identifiers.
    pub schemas: Vec<String>,
    pub tools: Vec<Kind>,
    pub max_rows: u64,
    pub max_bytes: u64,
    pub timeout: Duration,
    pub max_statement_bytes: u64,
    /// Rows `describe_table` shows of a table; 0 shows none.
    pub sample_rows: u32,
    /// What the deployment wants models to know about its data, added to `run_sql`'s
    /// description (e.g. "amounts are in pence").
    pub notes: Option<String>,
    /// Tables (`schema.table`) and columns (`schema.table.column`) a served catalog hides:
    /// never offered as a repair hint.
    pub hidden: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSql {
    schemas: Option<Vec<String>>,
    tools: Option<Vec<String>>,
    max_rows: Option<u64>,
    max_bytes: Option<u64>,
    timeout_ms: Option<u64>,
    max_statement_bytes: Option<u64>,
    #[serde(default)]
    sample_rows: u32,
    notes: Option<String>,
}

/// `[sql]` checked; the error says which key is wrong and why.
pub fn parse(raw: RawSql, limits: Limits) -> Result<SqlSpec, String> {
    let schemas = raw.schemas.unwrap_or_default();
    if schemas.is_empty() {
        return Err(
            "`schemas` must name at least one schema the SQL tools may read, e.g. \
             schemas = [\"analytics\"]"
                .into(),
        );
    }
    for schema in &schemas {
        if !is_identifier(schema) {
            return Err(format!(
                "schema `{schema}` must be a lower-case SQL identifier (letters, digits, _)"
            ));
        }
        if schema.starts_with("pg_") || schema == "information_schema" {
            return Err(format!(
                "schema `{schema}` is a system schema; name the schemas of your own tables"
            ));
        }
    }
    let mut tools = Vec::new();
    match raw.tools {
        None => tools.extend(Kind::ALL),
        Some(names) => {
            for name in names {
                let kind = Kind::from_name(&name).ok_or_else(|| {
                    format!(
                        "`tools` names `{name}`; the SQL tools are run_sql, list_tables, \
                         describe_table and explain_sql"
                    )
                })?;
                if !tools.contains(&kind) {
                    tools.push(kind);
                }
            }
        }
    }
    if tools.is_empty() {
        return Err("`tools` is empty; leave `[sql]` out to turn the SQL tools off".into());
    }
    let max_rows = raw.max_rows.unwrap_or(limits.max_rows);
    if !(1..=HARD_MAX_ROWS).contains(&max_rows) {
        return Err(format!("max_rows must be between 1 and {HARD_MAX_ROWS}"));
    }
    let max_bytes = raw.max_bytes.unwrap_or(limits.max_bytes);
    if !(1024..=16 * 1024 * 1024).contains(&max_bytes) {
        return Err("max_bytes must be between 1024 and 16777216".into());
    }
    let timeout = match raw.timeout_ms {
        None => limits.timeout,
        Some(ms @ 10..=300_000) => Duration::from_millis(ms),
        Some(_) => return Err("timeout_ms must be between 10 and 300000".into()),
    };
    let max_statement_bytes = raw
        .max_statement_bytes
        .unwrap_or(DEFAULT_MAX_STATEMENT_BYTES);
    if !(64..=HARD_MAX_STATEMENT_BYTES).contains(&max_statement_bytes) {
        return Err(format!(
            "max_statement_bytes must be between 64 and {HARD_MAX_STATEMENT_BYTES}"
        ));
    }
    if raw.sample_rows > HARD_MAX_SAMPLE_ROWS {
        return Err(format!(
            "sample_rows must be at most {HARD_MAX_SAMPLE_ROWS}"
        ));
    }
    Ok(SqlSpec {
        schemas,
        tools,
        max_rows,
        max_bytes,
        timeout,
        max_statement_bytes,
        sample_rows: raw.sample_rows,
        notes: raw
            .notes
            .map(|n| n.trim().to_owned())
            .filter(|n| !n.is_empty()),
        hidden: Vec::new(),
    })
}

/// An unquoted lower-case SQL identifier, so quoting it names exactly that schema.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name.len() <= 63
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawSql {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn all_four_tools_are_on_by_default_with_the_server_limits() {
        let spec = parse(raw("schemas = [\"analytics\"]"), Limits::default()).unwrap();
        assert_eq!(spec.tools, Kind::ALL);
        assert_eq!(spec.max_rows, Limits::default().max_rows);
        assert_eq!(spec.max_statement_bytes, DEFAULT_MAX_STATEMENT_BYTES);
        assert_eq!(spec.sample_rows, 0);
    }

    #[test]
    fn a_file_may_pick_tools() {
        let spec = parse(
            raw("schemas = [\"a\"]\ntools = [\"list_tables\", \"run_sql\"]"),
            Limits::default(),
        )
        .unwrap();
        assert_eq!(spec.tools, [Kind::ListTables, Kind::RunSql]);
    }

    #[test]
    fn mistakes_name_the_key() {
        for (text, needle) in [
            ("schemas = []", "schemas"),
            ("tools = [\"run_sql\"]", "schemas"),
            ("schemas = [\"Public\"]", "lower-case"),
            ("schemas = [\"a;b\"]", "lower-case"),
            ("schemas = [\"pg_catalog\"]", "system schema"),
            ("schemas = [\"a\"]\ntools = [\"drop_table\"]", "drop_table"),
            ("schemas = [\"a\"]\ntools = []", "turn the SQL tools off"),
            ("schemas = [\"a\"]\nmax_rows = 0", "max_rows"),
            ("schemas = [\"a\"]\ntimeout_ms = 1", "timeout_ms"),
            ("schemas = [\"a\"]\nsample_rows = 500", "sample_rows"),
            (
                "schemas = [\"a\"]\nmax_statement_bytes = 10",
                "max_statement_bytes",
            ),
        ] {
            let e = parse(raw(text), Limits::default()).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(toml::from_str::<RawSql>("schemas = [\"a\"]\nrole = \"x\"").is_err());
    }
}
