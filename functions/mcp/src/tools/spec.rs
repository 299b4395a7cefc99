//! The tools file (TOML) parsed into [`ToolSpec`]s: tools are declared, not coded.
//!
//! Everything that can be wrong with a declaration (a bad name, an unknown type, a default
//! outside its bounds, a `:param` the SQL uses but nobody declared) is refused here, at start-up.

use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;
use tokio_postgres::types::Type;

use super::params::{ParamSpec, ParamType, SqlValue};
use super::sql;

/// The shipped tools over the demo data, used when `TOOLS_FILE` is not set.
pub const DEFAULT_TOOLS: &str = include_str!("../../../../domains/feedback/tools.toml");

/// Most rows any tool may return, whatever its file says: a guard against a typo of `max_rows`.
pub const HARD_MAX_ROWS: u64 = 10_000;

/// Server-wide defaults for what a tool declaration leaves out.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `TOOL_MAX_ROWS`
    pub max_rows: u64,
    /// `TOOL_MAX_RESULT_BYTES`
    pub max_bytes: u64,
    /// `TOOL_TIMEOUT_MS`
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_rows: 100,
            max_bytes: 256 * 1024,
            timeout: Duration::from_secs(5),
        }
    }
}

/// One declared tool, ready to publish and run.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub params: Vec<ParamSpec>,
    /// The declared SQL wrapped so Postgres renders each row as JSON text, with placeholders;
    /// the last placeholder is the row limit.
    pub wrapped_sql: String,
    /// Postgres types of the placeholders, in order (the row limit last).
    pub placeholder_types: Vec<Type>,
    /// For each placeholder but the last, the index of its parameter in `params`.
    pub placeholder_params: Vec<usize>,
    pub max_rows: u64,
    pub max_bytes: u64,
    pub timeout: Duration,
    /// An integer parameter the caller uses to ask for fewer rows than `max_rows`.
    pub limit_param: Option<usize>,
    /// Declared to change data: runs in a read-write transaction. Off unless declared.
    pub writes: bool,
    /// A write that may delete or overwrite data (`destructiveHint`), not only add to it.
    /// Always false for a read-only tool; a write's is `true` unless declared otherwise.
    pub destructive: bool,
    /// Calling again with the same arguments has no further effect (`idempotentHint`). Always
    /// true for a read-only tool; a write's is `false` unless declared otherwise.
    pub idempotent: bool,
    /// Plan each call for its values. True when a parameter can be NULL (optional, no
    /// default): such SQL is written `(:x IS NULL OR col = :x)`, and a cached generic plan
    /// cannot use the index a given filter allows. Other tools keep Postgres' plan cache.
    pub custom_plans: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("tools file is not valid TOML: {0}")]
    Toml(String),
    #[error("tools file does not follow the tools format: {0}")]
    Format(String),
    #[error("tool `{tool}`: {problem}")]
    Tool { tool: String, problem: String },
    #[error("tools file declares no tools")]
    Empty,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default, rename = "tool")]
    tools: Vec<RawTool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    // Required, but optional here so a missing one is reported by name and tool, not as a
    // TOML error.
    name: Option<String>,
    title: Option<String>,
    description: Option<String>,
    sql: Option<String>,
    max_rows: Option<u64>,
    max_bytes: Option<u64>,
    timeout_ms: Option<u64>,
    limit_param: Option<String>,
    #[serde(default)]
    writes: bool,
    destructive: Option<bool>,
    idempotent: Option<bool>,
    #[serde(default)]
    params: IndexMap<String, RawParam>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    #[serde(rename = "type")]
    ty: String,
    description: Option<String>,
    #[serde(default)]
    required: bool,
    default: Option<toml::Value>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    minimum: Option<toml::Value>,
    maximum: Option<toml::Value>,
    values: Option<Vec<String>>,
}

/// Parses a whole tools file.
pub fn parse(text: &str, limits: Limits) -> Result<Vec<ToolSpec>, SpecError> {
    // Syntax first, so "not valid TOML" is only said of text that is not.
    text.parse::<toml::Table>()
        .map_err(|e| SpecError::Toml(e.to_string()))?;
    let raw: RawFile = toml::from_str(text).map_err(|e| SpecError::Format(e.to_string()))?;
    if raw.tools.is_empty() {
        return Err(SpecError::Empty);
    }
    let mut tools: Vec<ToolSpec> = Vec::with_capacity(raw.tools.len());
    for (i, t) in raw.tools.into_iter().enumerate() {
        let Some(name) = t.name.clone() else {
            return Err(SpecError::Tool {
                tool: format!("number {}", i + 1),
                problem: "needs a name (every [[tool]] needs name, description and sql)".into(),
            });
        };
        let spec = tool(t, limits).map_err(|problem| SpecError::Tool {
            tool: name.clone(),
            problem,
        })?;
        if tools.iter().any(|other| other.name == spec.name) {
            return Err(SpecError::Tool {
                tool: name,
                problem: "is declared twice".into(),
            });
        }
        tools.push(spec);
    }
    Ok(tools)
}

fn tool(raw: RawTool, limits: Limits) -> Result<ToolSpec, String> {
    let name = raw.name.unwrap_or_default();
    // The name must be acceptable to every LLM API a client may forward it to.
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err("name must be 1-64 characters of A-Z, a-z, 0-9, _ or -".into());
    }
    let description = raw.description.unwrap_or_default();
    if description.trim().is_empty() {
        return Err("needs a description: it is what tells a model when to use the tool".into());
    }
    let Some(sql) = raw.sql else {
        return Err("needs sql: the statement the tool runs".into());
    };
    let params = raw
        .params
        .into_iter()
        .map(|(name, p)| param(name.clone(), p).map_err(|e| format!("parameter `{name}`: {e}")))
        .collect::<Result<Vec<_>, _>>()?;

    let declared = sql.trim().trim_end_matches(';').trim_end();
    if declared.is_empty() {
        return Err("sql is empty".into());
    }
    // The statement stands inside a WITH clause, where Postgres accepts a change of rows only
    // with RETURNING; its own message would name that internal clause.
    if let Some(verb) = sql::changes_rows_without_returning(declared) {
        return Err(format!(
            "sql changes rows ({verb}) without RETURNING; a tool returns rows, so end the \
             statement with RETURNING and the columns to report (e.g. RETURNING id)"
        ));
    }
    let rewritten = sql::rewrite(declared);
    let mut placeholder_params = Vec::with_capacity(rewritten.names.len());
    for used in &rewritten.names {
        let index = params
            .iter()
            .position(|p| &p.name == used)
            .ok_or_else(|| format!("sql uses :{used}, which is not a declared parameter"))?;
        placeholder_params.push(index);
    }
    // The limit parameter may go unused: the wrapper applies it.
    if let Some(unused) = params.iter().find(|p| {
        !rewritten.names.contains(&p.name) && raw.limit_param.as_deref() != Some(p.name.as_str())
    }) {
        return Err(format!(
            "parameter `{}` is declared but the sql never uses :{}",
            unused.name, unused.name
        ));
    }
    let mut placeholder_types: Vec<Type> = placeholder_params
        .iter()
        .map(|&i| params[i].ty.pg_type())
        .collect();
    placeholder_types.push(Type::INT8);
    // A CTE rather than a subquery: Postgres inlines it for plain SELECTs, and it is the only
    // place a declared `writes` tool's INSERT/UPDATE ... RETURNING may stand.
    let wrapped_sql = format!(
        "WITH tool_rows AS (\n{}\n) SELECT row_to_json(tool_rows)::text FROM tool_rows LIMIT ${}",
        rewritten.sql,
        placeholder_types.len()
    );

    let max_rows = raw.max_rows.unwrap_or(limits.max_rows);
    if !(1..=HARD_MAX_ROWS).contains(&max_rows) {
        return Err(format!("max_rows must be between 1 and {HARD_MAX_ROWS}"));
    }
    let max_bytes = raw.max_bytes.unwrap_or(limits.max_bytes);
    if max_bytes < 1024 {
        return Err("max_bytes must be at least 1024".into());
    }
    let timeout = match raw.timeout_ms {
        Some(0) => return Err("timeout_ms must be positive".into()),
        Some(ms) => Duration::from_millis(ms),
        None => limits.timeout,
    };
    let limit_param = match raw.limit_param {
        None => None,
        Some(name) => {
            let i = params
                .iter()
                .position(|p| p.name == name)
                .ok_or_else(|| format!("limit_param `{name}` is not a declared parameter"))?;
            if !matches!(params[i].ty, ParamType::Integer { .. }) {
                return Err(format!("limit_param `{name}` must be an integer parameter"));
            }
            Some(i)
        }
    };
    let (destructive, idempotent) = effects(raw.writes, raw.destructive, raw.idempotent)?;
    let custom_plans = params.iter().any(|p| !p.required && p.default.is_none());
    Ok(ToolSpec {
        custom_plans,
        name,
        title: raw.title,
        description: description.trim().to_owned(),
        params,
        wrapped_sql,
        placeholder_types,
        placeholder_params,
        max_rows,
        max_bytes,
        timeout,
        limit_param,
        writes: raw.writes,
        destructive,
        idempotent,
    })
}

/// `(destructive, idempotent)` for a tool. A write's defaults are MCP's own
/// (`destructiveHint: true`, `idempotentHint: false`): a client that is told nothing assumes
/// the worst, and a delete tool whose author forgot the field still asks for confirmation. A
/// read-only tool changes nothing, so declaring otherwise is a contradiction, not a choice.
fn effects(
    writes: bool,
    destructive: Option<bool>,
    idempotent: Option<bool>,
) -> Result<(bool, bool), String> {
    if writes {
        return Ok((destructive.unwrap_or(true), idempotent.unwrap_or(false)));
    }
    if destructive == Some(true) {
        return Err(
            "destructive = true needs writes = true: a read-only tool changes nothing".into(),
        );
    }
    if idempotent == Some(false) {
        return Err(
            "idempotent = false needs writes = true: a read-only tool can always be called again"
                .into(),
        );
    }
    Ok((false, true))
}

fn param(name: String, raw: RawParam) -> Result<ParamSpec, String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err("names are letters, digits and _".into());
    }
    let int = |v: &Option<toml::Value>, what: &str| -> Result<Option<i64>, String> {
        v.as_ref()
            .map(|v| v.as_integer().ok_or(format!("{what} must be an integer")))
            .transpose()
    };
    let float = |v: &Option<toml::Value>, what: &str| -> Result<Option<f64>, String> {
        v.as_ref()
            .map(|v| {
                v.as_float()
                    .or_else(|| v.as_integer().map(|i| i as f64))
                    .ok_or(format!("{what} must be a number"))
            })
            .transpose()
    };
    let ty = match raw.ty.as_str() {
        "string" => ParamType::String {
            min_length: raw.min_length,
            max_length: raw.max_length,
        },
        "integer" => ParamType::Integer {
            minimum: int(&raw.minimum, "minimum")?,
            maximum: int(&raw.maximum, "maximum")?,
        },
        "number" => ParamType::Number {
            minimum: float(&raw.minimum, "minimum")?,
            maximum: float(&raw.maximum, "maximum")?,
        },
        "boolean" => ParamType::Boolean,
        "date" => ParamType::Date,
        "timestamp" => ParamType::Timestamp,
        "enum" => match raw.values {
            Some(values) if !values.is_empty() => ParamType::Enum { values },
            _ => return Err("an enum needs a non-empty `values` list".into()),
        },
        other => {
            return Err(format!(
                "unknown type `{other}` (string, integer, number, boolean, date, timestamp, enum)"
            ));
        }
    };
    let bounds_used = raw.min_length.is_some()
        || raw.max_length.is_some()
        || raw.minimum.is_some()
        || raw.maximum.is_some();
    let bounds_fit = match ty {
        ParamType::String { .. } => raw.minimum.is_none() && raw.maximum.is_none(),
        ParamType::Integer { .. } | ParamType::Number { .. } => {
            raw.min_length.is_none() && raw.max_length.is_none()
        }
        _ => !bounds_used,
    };
    if !bounds_fit {
        return Err(format!("bounds given that a {} cannot have", raw.ty));
    }
    if raw.required && raw.default.is_some() {
        return Err("cannot be both required and have a default".into());
    }
    let mut spec = ParamSpec {
        name,
        description: raw.description.map(|d| d.trim().to_owned()),
        ty,
        required: raw.required,
        default: None,
    };
    if let Some(default) = raw.default {
        let json = serde_json::to_value(&default).map_err(|e| e.to_string())?;
        let checked = spec
            .parse(Some(&json))
            .map_err(|e| format!("default: {e}"))?;
        if checked != SqlValue::Null {
            spec.default = Some(checked);
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_one(text: &str) -> Result<ToolSpec, SpecError> {
        parse(text, Limits::default()).map(|mut v| v.remove(0))
    }

    #[test]
    fn the_shipped_tools_file_parses() {
        let tools = parse(DEFAULT_TOOLS, Limits::default()).unwrap();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        for expected in [
            "lad_by_ref",
            "list_lads",
            "search_feedback",
            "feedback_stats",
            "get_feedback",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        assert!(tools.iter().all(|t| !t.writes));
    }

    #[test]
    fn sql_is_wrapped_with_json_rows_and_a_row_limit_placeholder() {
        let t = parse_one(
            r#"
            [[tool]]
            name = "by_code"
            description = "Finds a row."
            sql = "SELECT * FROM lads WHERE code = :code;"
            [tool.params.code]
            type = "string"
            required = true
            "#,
        )
        .unwrap();
        assert_eq!(
            t.wrapped_sql,
            "WITH tool_rows AS (\nSELECT * FROM lads WHERE code = $1\n) SELECT row_to_json(tool_rows)::text FROM tool_rows LIMIT $2"
        );
        assert_eq!(t.placeholder_types, vec![Type::TEXT, Type::INT8]);
        assert_eq!(t.max_rows, 100);
        assert!(!t.custom_plans, "a required parameter is never NULL");
    }

    #[test]
    fn tools_with_nullable_filters_are_planned_per_call() {
        let tools = parse(DEFAULT_TOOLS, Limits::default()).unwrap();
        let planned: Vec<_> = tools
            .iter()
            .filter(|t| t.custom_plans)
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(planned, ["list_lads", "search_feedback", "feedback_stats"]);
    }

    #[test]
    fn an_undeclared_parameter_in_the_sql_is_refused() {
        let err = parse_one(
            r#"
            [[tool]]
            name = "t"
            description = "d"
            sql = "SELECT :nope"
            "#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool `t`: sql uses :nope, which is not a declared parameter"
        );
    }

    #[test]
    fn a_default_outside_the_bounds_is_refused() {
        let err = parse_one(
            r#"
            [[tool]]
            name = "t"
            description = "d"
            sql = "SELECT :n"
            [tool.params.n]
            type = "integer"
            minimum = 1
            maximum = 5
            default = 9
            "#,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool `t`: parameter `n`: default: parameter `n` must be at most 5, got 9"
        );
    }

    #[test]
    fn unknown_keys_are_refused_so_typos_do_not_pass_silently() {
        let err = parse_one(
            r#"
            [[tool]]
            name = "t"
            description = "d"
            sql = "SELECT 1"
            max_row = 5
            "#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("max_row"), "{err}");
    }

    #[test]
    fn duplicate_names_are_refused() {
        let one = "[[tool]]\nname = \"t\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n";
        let err = parse(&format!("{one}{one}"), Limits::default()).unwrap_err();
        assert_eq!(err.to_string(), "tool `t`: is declared twice");
    }

    #[test]
    fn a_missing_required_field_names_the_tool_and_the_field() {
        let err = parse_one("[[tool]]\nname = \"t\"\nsql = \"SELECT 1\"\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool `t`: needs a description: it is what tells a model when to use the tool"
        );
        let err = parse_one("[[tool]]\nname = \"t\"\ndescription = \"d\"\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool `t`: needs sql: the statement the tool runs"
        );
        let one = "[[tool]]\nname = \"a\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n";
        let err = parse(
            &format!("{one}[[tool]]\ndescription = \"d\"\nsql = \"SELECT 1\"\n"),
            Limits::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool `number 2`: needs a name (every [[tool]] needs name, description and sql)"
        );
    }

    #[test]
    fn only_text_that_is_not_toml_is_called_invalid_toml() {
        let err = parse_one("[[tool]\nname = ").unwrap_err();
        assert!(
            err.to_string().starts_with("tools file is not valid TOML"),
            "{err}"
        );
        let err = parse_one("[[tool]]\nname = 5\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("tools file does not follow the tools format"),
            "{err}"
        );
    }

    #[test]
    fn a_write_without_returning_is_refused_in_the_authors_terms() {
        for sql in [
            "UPDATE feedback SET status = 'closed' WHERE id = :id",
            "WITH x AS (SELECT 1) DELETE FROM feedback WHERE id = :id",
            "insert into feedback (title) values (:id)",
        ] {
            let err = parse_one(&format!(
                "[[tool]]\nname = \"t\"\ndescription = \"d\"\nwrites = true\nsql = \"{sql}\"\n[tool.params.id]\ntype = \"integer\"\nrequired = true\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(err.contains("without RETURNING"), "{sql}: {err}");
            assert!(!err.contains("tool_rows"), "{err}");
        }
        let ok = "UPDATE feedback SET status = 'closed' WHERE id = :id RETURNING id";
        parse_one(&format!(
            "[[tool]]\nname = \"t\"\ndescription = \"d\"\nwrites = true\nsql = \"{ok}\"\n[tool.params.id]\ntype = \"integer\"\nrequired = true\n"
        ))
        .unwrap();
    }

    fn effects_of(keys: &str) -> Result<(bool, bool), String> {
        let text =
            format!("[[tool]]\nname = \"t\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n{keys}\n");
        parse_one(&text)
            .map(|t| (t.destructive, t.idempotent))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_read_only_tool_is_idempotent_and_not_destructive() {
        assert_eq!(effects_of(""), Ok((false, true)));
        assert_eq!(
            effects_of("destructive = false\nidempotent = true"),
            Ok((false, true)),
            "saying what is already true is allowed"
        );
    }

    #[test]
    fn a_write_is_destructive_and_not_idempotent_unless_declared_otherwise() {
        assert_eq!(effects_of("writes = true"), Ok((true, false)));
        assert_eq!(
            effects_of("writes = true\ndestructive = false"),
            Ok((false, false))
        );
        assert_eq!(
            effects_of("writes = true\nidempotent = true"),
            Ok((true, true))
        );
        assert_eq!(
            effects_of("writes = true\ndestructive = false\nidempotent = true"),
            Ok((false, true))
        );
    }

    #[test]
    fn effects_a_read_only_tool_cannot_have_are_refused_naming_tool_and_field() {
        assert_eq!(
            effects_of("destructive = true"),
            Err(
                "tool `t`: destructive = true needs writes = true: a read-only tool changes \
                 nothing"
                    .into()
            )
        );
        assert_eq!(
            effects_of("idempotent = false"),
            Err(
                "tool `t`: idempotent = false needs writes = true: a read-only tool can always \
                 be called again"
                    .into()
            )
        );
        let err = effects_of("destructive = \"yes\"").unwrap_err();
        assert!(err.contains("destructive"), "{err}");
    }

    #[test]
    fn tool_names_must_suit_llm_apis() {
        let err = parse_one("[[tool]]\nname = \"a b\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n")
            .unwrap_err();
        assert!(err.to_string().contains("name must be"));
    }
}
