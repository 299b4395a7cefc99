//! A tools file's `[[tool]]` tables parsed into [`ToolSpec`]s: tools are declared, not coded.
//!
//! Everything that can be wrong with a declaration (a bad name, an unknown type, a default
//! outside its bounds, a `:param` the SQL uses but nobody declared, a write without a role) is
//! refused here, at start-up, naming the tool and the field. The rest of the file (prompts,
//! instructions, `[sql]`) is the catalog's (`catalog::file`).

use std::time::Duration;

use indexmap::IndexMap;
use parley_wire::Citation;
use serde::Deserialize;
use tokio_postgres::types::Type;

use super::params::{ParamSpec, ParamType, Source, SqlValue};
use super::sql;
use crate::output::{HARD_MAX_ROWS, Limits};

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
    /// Whether every call waits for the user's approval (tool `_meta` `parley/approval`).
    pub approval: Approval,
    /// Plan each call for its values. True when a parameter can be NULL (optional, no
    /// default): such SQL is written `(:x IS NULL OR col = :x)`, and a cached generic plan
    /// cannot use the index a given filter allows. Other tools keep Postgres' plan cache.
    pub custom_plans: bool,
    /// The role the tool's transaction runs as (`parley.begin_call` takes it, as `SET LOCAL
    /// ROLE` would): a lower-case SQL identifier. Required for writes, so no write runs as the
    /// login role.
    pub role: Option<String>,
    /// Appended to the timeout message: how to narrow this tool's query.
    pub timeout_hint: Option<String>,
    /// UI context key -> the parameter that resolves it (tool `_meta` `parley/context`).
    pub context: IndexMap<String, String>,
    /// Settings for the tool's transaction as `(name, value)`, made with `parley.begin_call`
    /// (`exec`); each names a different setting, so order is moot.
    pub settings: Vec<(String, String)>,
    /// Which output columns make a source the chat can cite (tool `_meta` `parley/citation`).
    pub citation: Option<Citation>,
    /// The verified query the tool serves (tool `_meta` `parley/verified`): set by
    /// `semantic::verified` only, never by a tools file, so only the catalog's queries claim it.
    pub verified: Option<String>,
    /// The statement's rows as columns (placeholders as in [`ToolSpec::wrapped_sql`]),
    /// prepared at start-up to check its columns: each name once (a row becomes one JSON
    /// object), and every column a citation names.
    pub columns_sql: String,
    /// For a write: [`ToolSpec::wrapped_sql`] that also records its rows in
    /// `parley.idempotency` under a key, in the same statement. Its placeholders are
    /// [`ToolSpec::placeholder_types`] followed by the tool's name and the key (both text).
    pub keyed_sql: Option<String>,
    /// `rerank = { query, text, depth }`: when the server has a reranker (`RERANK`), the rows
    /// are fetched `depth` deep, reordered by it and cut to the caller's limit.
    pub rerank: Option<Rerank>,
}

/// How a tool's rows are reranked (see `crate::rerank`).
#[derive(Debug, Clone)]
pub struct Rerank {
    /// The string argument holding what the caller looks for, as an index into `params`.
    pub query: usize,
    /// The output column holding each row's text.
    pub text: String,
    /// How many rows are fetched and reranked (the caller's limit when that is larger).
    pub depth: u64,
}

/// `rerank` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRerank {
    query: String,
    text: String,
    depth: u64,
}

/// When a client that asks users before acting (Parley's chat) makes a call of the tool wait
/// for the user's approval (`approval` in the tools file; issue 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Approval {
    /// `"never"` or absent: the client decides from the annotations, so a `destructive` tool
    /// still waits. The tools file cannot waive that; only the client's deployment can.
    #[default]
    Annotations,
    /// `"always"`: every call waits, whatever the annotations say (a tool that sends an
    /// e-mail or spends money changes nothing in the database, yet cannot be taken back).
    Always,
}

/// What is wrong with one `[[tool]]`, naming the tool.
#[derive(Debug, thiserror::Error)]
#[error("tool `{tool}`: {problem}")]
pub struct DeclarationError {
    pub tool: String,
    pub problem: String,
}

/// One `[[tool]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTool {
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
    /// Any TOML value, so a wrong one is refused by name and value, not as a TOML type error.
    approval: Option<toml::Value>,
    role: Option<String>,
    timeout_hint: Option<String>,
    #[serde(default)]
    context: IndexMap<String, String>,
    #[serde(default)]
    settings: IndexMap<String, toml::Value>,
    citation: Option<Citation>,
    rerank: Option<RawRerank>,
    #[serde(default)]
    params: IndexMap<String, RawParam>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    #[serde(rename = "type")]
    ty: Option<String>,
    /// `caller.sub` or `caller.claims.<name>`: bound from the caller, not the arguments.
    from: Option<String>,
    description: Option<String>,
    // Optional here so `required = false` beside `from` is refused like `required = true`.
    required: Option<bool>,
    /// The audit stores only a hash of this argument.
    #[serde(default)]
    sensitive: bool,
    max_items: Option<u64>,
    default: Option<toml::Value>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    minimum: Option<toml::Value>,
    maximum: Option<toml::Value>,
    values: Option<Vec<String>>,
}

/// The `[[tool]]` tables of one file, each checked; names unique within the file.
pub fn parse_tools(raw: Vec<RawTool>, limits: Limits) -> Result<Vec<ToolSpec>, DeclarationError> {
    let mut tools: Vec<ToolSpec> = Vec::with_capacity(raw.len());
    for (i, t) in raw.into_iter().enumerate() {
        let Some(name) = t.name.clone() else {
            return Err(DeclarationError {
                tool: format!("number {}", i + 1),
                problem: "needs a name (every [[tool]] needs name, description and sql)".into(),
            });
        };
        let spec = tool(t, limits).map_err(|problem| DeclarationError {
            tool: name.clone(),
            problem,
        })?;
        if tools.iter().any(|other| other.name == spec.name) {
            return Err(DeclarationError {
                tool: name,
                problem: "is declared twice".into(),
            });
        }
        tools.push(spec);
    }
    Ok(tools)
}

/// Tool and prompt names: acceptable to every LLM API a client may forward them to.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Parameter and prompt argument names: they appear in SQL (`:name`) and templates.
pub fn valid_param_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn tool(raw: RawTool, limits: Limits) -> Result<ToolSpec, String> {
    let name = raw.name.unwrap_or_default();
    if !valid_name(&name) {
        return Err("name must be 1-64 characters of A-Z, a-z, 0-9, _ or -".into());
    }
    let description = raw.description.unwrap_or_default();
    if description.trim().is_empty() {
        return Err("needs a description: it is what tells a model when to use the tool".into());
    }
    let Some(sql) = raw.sql else {
        return Err("needs sql: the statement the tool runs".into());
    };
    let mut params = raw
        .params
        .into_iter()
        .map(|(name, p)| param(name.clone(), p).map_err(|e| format!("parameter `{name}`: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let embedded = embedding_sources(&mut params)?;

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
    // So may a text that is only embedded.
    if let Some(unused) = params.iter().find(|p| {
        !rewritten.names.contains(&p.name)
            && raw.limit_param.as_deref() != Some(p.name.as_str())
            && !embedded.contains(&p.name)
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
    // The comment names the tool to a DBA in pg_stat_activity and pg_stat_statements. The
    // request id is not in it: the statement is prepared once per connection and reused (see
    // `exec::begin_sql`), so it travels in `application_name` instead.
    let wrapped_sql = format!(
        "/* parley tool={name} */ WITH tool_rows AS (\n{}\n) SELECT row_to_json(tool_rows)::text FROM tool_rows LIMIT ${}",
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
    let approval = approval(raw.approval.as_ref())?;
    let custom_plans = params.iter().any(|p| !p.required && p.default.is_none());
    let role = match raw.role {
        Some(role) if !is_role_name(&role) => {
            return Err(format!(
                "role `{role}` must be a lower-case SQL identifier (a-z, 0-9, _, at most 63 \
                 characters, not starting with a digit)"
            ));
        }
        None if raw.writes => {
            return Err(
                "writes = true needs a role: the database role the write runs as \
                 (SET LOCAL ROLE), one that may change only what this tool needs"
                    .into(),
            );
        }
        role => role,
    };
    let timeout_hint = raw
        .timeout_hint
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty());
    for (key, param) in &raw.context {
        if key.trim().is_empty() {
            return Err("context keys must not be empty".into());
        }
        if !params
            .iter()
            .any(|p| &p.name == param && p.source == Source::Argument)
        {
            return Err(format!(
                "context `{key}` names `{param}`, which is not a parameter taken as an argument"
            ));
        }
    }
    let settings = raw
        .settings
        .iter()
        .map(|(name, value)| setting(name, value))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(citation) = &raw.citation {
        for (key, column) in citation.columns() {
            if !is_column_name(column) {
                return Err(format!(
                    "citation `{key}` = \"{column}\" must be an output column's name \
                     (letters, digits and _, not starting with a digit)"
                ));
            }
        }
    }
    let rerank = raw
        .rerank
        .map(|r| rerank(r, &params, raw.writes))
        .transpose()?;
    let columns_sql = format!(
        "WITH tool_rows AS (\n{}\n) SELECT * FROM tool_rows LIMIT ${}",
        rewritten.sql,
        placeholder_types.len()
    );
    // The same rows as `wrapped_sql`, numbered so their order survives the array they are
    // recorded in; the INSERT runs whether or not the outer SELECT reads it.
    let keyed_sql = raw.writes.then(|| {
        let n = placeholder_types.len();
        format!(
            "/* parley tool={name} */ WITH tool_rows AS (\n{}\n),\n\
             limited AS (SELECT row_to_json(tool_rows)::text AS row, row_number() OVER () AS n \
             FROM tool_rows LIMIT ${n}),\n\
             remembered AS (INSERT INTO parley.idempotency (caller, tool, key, rows) \
             SELECT coalesce(parley.caller_sub(), ''), ${}, ${}, \
             coalesce(array_agg(row ORDER BY n), '{{}}') FROM limited)\n\
             SELECT row FROM limited ORDER BY n",
            rewritten.sql,
            n + 1,
            n + 2
        )
    });
    Ok(ToolSpec {
        role,
        timeout_hint,
        context: raw.context,
        settings,
        citation: raw.citation,
        verified: None,
        columns_sql,
        keyed_sql,
        rerank,
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
        approval,
    })
}

/// `approval = "always" | "never"`; absent is `"never"`.
fn approval(value: Option<&toml::Value>) -> Result<Approval, String> {
    match value {
        None => Ok(Approval::Annotations),
        Some(toml::Value::String(s)) if s == "always" => Ok(Approval::Always),
        Some(toml::Value::String(s)) if s == "never" => Ok(Approval::Annotations),
        Some(other) => Err(format!(
            "approval = {other} is not \"always\" (every call waits for the user's approval) or \
             \"never\" (the default: the client decides from the annotations)"
        )),
    }
}

/// Checks that each `from = "embedding.<argument>"` names a string argument, and makes the
/// embedding as nullable as its text. Returns the names of the texts embedded.
fn embedding_sources(params: &mut [ParamSpec]) -> Result<Vec<String>, String> {
    let mut embedded = Vec::new();
    for i in 0..params.len() {
        let Source::Embedding(text) = &params[i].source else {
            continue;
        };
        let Some(source) = params.iter().find(|p| &p.name == text) else {
            return Err(format!(
                "parameter `{}`: from = \"embedding.{text}\" names no declared parameter",
                params[i].name
            ));
        };
        if source.source != Source::Argument || !matches!(source.ty, ParamType::String { .. }) {
            return Err(format!(
                "parameter `{}`: from = \"embedding.{text}\" must name a string parameter \
                 taken as an argument",
                params[i].name
            ));
        }
        let never_null = source.required || source.default.is_some();
        embedded.push(text.clone());
        params[i].required = never_null;
    }
    Ok(embedded)
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

/// A role name `SET LOCAL ROLE "name"` reaches exactly as written: Postgres folds unquoted
/// names to lower case, so a lower-case identifier means the same quoted or not. Setting
/// names are made of the same identifiers.
pub(crate) fn is_role_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Settings a tool may not change: who the transaction runs as and what it may do are the
/// engine's (`role`, `writes`, `timeout_ms`), and `parley.*` carries the verified caller.
const RESERVED_SETTINGS: [&str; 3] = ["role", "session_authorization", "statement_timeout"];
const RESERVED_SETTING_PREFIXES: [&str; 3] = ["parley.", "transaction_", "default_transaction_"];

/// One `[tool.settings]` entry as the `(name, value)` that `set_config` takes: the name a
/// (possibly dotted) lower-case identifier, the value as text.
fn setting(name: &str, value: &toml::Value) -> Result<(String, String), String> {
    let well_formed = match name.split_once('.') {
        Some((prefix, rest)) => is_role_name(prefix) && is_role_name(rest),
        None => is_role_name(name),
    };
    if !well_formed {
        return Err(format!(
            "setting `{name}` must be a lower-case setting name such as work_mem or \
             hnsw.ef_search"
        ));
    }
    if RESERVED_SETTINGS.contains(&name)
        || RESERVED_SETTING_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
    {
        let instead = match name {
            "statement_timeout" => " (use timeout_ms)",
            "role" | "session_authorization" => " (use role)",
            _ => "",
        };
        return Err(format!(
            "setting `{name}` cannot be set by a tool{instead}: who the transaction runs as, \
             what it may do and how long it may take are the engine's"
        ));
    }
    let text = match value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Integer(n) => n.to_string(),
        toml::Value::Float(n) => n.to_string(),
        toml::Value::Boolean(b) => b.to_string(),
        _ => {
            return Err(format!(
                "setting `{name}` must be a string, number or boolean"
            ));
        }
    };
    if text.contains('\0') {
        return Err(format!("setting `{name}` must not contain NUL characters"));
    }
    Ok((name.to_owned(), text))
}

/// An output column's name as `row_to_json` writes it for an unquoted alias.
/// Most rows a tool may have reranked: each is one text in one request to the reranker, and
/// Cohere's and Voyage's APIs take at most 1000 documents per request.
pub const MAX_RERANK_DEPTH: u64 = 1000;

fn rerank(raw: RawRerank, params: &[ParamSpec], writes: bool) -> Result<Rerank, String> {
    if writes {
        return Err("rerank applies to a read-only tool's rows, not a write's".into());
    }
    let query = params
        .iter()
        .position(|p| {
            p.name == raw.query
                && p.source == Source::Argument
                && matches!(p.ty, ParamType::String { .. })
        })
        .ok_or_else(|| {
            format!(
                "rerank query `{}` must be a string parameter taken as an argument",
                raw.query
            )
        })?;
    if !is_column_name(&raw.text) {
        return Err(format!(
            "rerank text = \"{}\" must be an output column's name \
             (letters, digits and _, not starting with a digit)",
            raw.text
        ));
    }
    if !(1..=MAX_RERANK_DEPTH).contains(&raw.depth) {
        return Err(format!(
            "rerank depth must be between 1 and {MAX_RERANK_DEPTH}"
        ));
    }
    Ok(Rerank {
        query,
        text: raw.text,
        depth: raw.depth,
    })
}

fn is_column_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn param(name: String, raw: RawParam) -> Result<ParamSpec, String> {
    if !valid_param_name(&name) {
        return Err("names are letters, digits and _".into());
    }
    let source = match &raw.from {
        None => Source::Argument,
        Some(from) => {
            let source = Source::parse(from).ok_or_else(|| {
                format!(
                    "from = \"{from}\" is not caller.sub, caller.claims.<claim name>, \
                     embedding.<argument> or embedder.model"
                )
            })?;
            let whence = match source {
                Source::Caller(_) => "comes from the caller's token",
                _ => "is computed by the server",
            };
            for (given, key) in [
                (raw.sensitive, "sensitive"),
                (raw.required.is_some(), "required"),
                (raw.default.is_some(), "default"),
                (raw.description.is_some(), "description"),
            ] {
                if given {
                    return Err(format!(
                        "`{key}` cannot be given with `from`: the value {whence}, and the \
                         parameter is not published to clients"
                    ));
                }
            }
            source
        }
    };
    let ty_name = match (&raw.ty, &source) {
        (Some(_), Source::Embedding(_)) => {
            return Err(
                "an embedding takes no `type`: it is bound as float4[]; cast it in \
                        the sql, e.g. :query_embedding::vector(384)"
                    .into(),
            );
        }
        (Some(ty), Source::EmbedderModel) if ty != "string" => {
            return Err("embedder.model is a string".into());
        }
        (Some(ty), _) => ty.as_str(),
        (None, Source::Embedding(_)) => "vector",
        (None, Source::Caller(_) | Source::EmbedderModel) => "string",
        (None, Source::Argument) => {
            return Err(
                "needs a type (string, integer, number, boolean, date, timestamp, \
                 enum, string_array, object), or `from` to take it from the caller"
                    .into(),
            );
        }
    };
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
    let ty = match ty_name {
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
        "string_array" => ParamType::StringArray {
            max_items: raw.max_items,
            min_length: raw.min_length,
            max_length: raw.max_length,
        },
        "object" => ParamType::Object,
        // Only for `from = "embedding.<argument>"` (a declared `type` was refused above).
        "vector" if matches!(source, Source::Embedding(_)) => ParamType::Vector,
        other => {
            return Err(format!(
                "unknown type `{other}` (string, integer, number, boolean, date, timestamp, \
                 enum, string_array, object)"
            ));
        }
    };
    if raw.max_items.is_some() && !matches!(ty, ParamType::StringArray { .. }) {
        return Err(format!("max_items is for a string_array, not a {ty_name}"));
    }
    if matches!(ty, ParamType::StringArray { .. }) && source != Source::Argument {
        return Err("a string_array cannot come from the caller".into());
    }
    if matches!(ty, ParamType::Object) && source != Source::Argument {
        return Err("an object cannot come from the caller".into());
    }
    if matches!(ty, ParamType::Vector) && raw.max_items.is_some() {
        return Err("max_items is for a string_array, not an embedding".into());
    }
    let bounds_used = raw.min_length.is_some()
        || raw.max_length.is_some()
        || raw.minimum.is_some()
        || raw.maximum.is_some();
    let bounds_fit = match ty {
        ParamType::String { .. } | ParamType::StringArray { .. } => {
            raw.minimum.is_none() && raw.maximum.is_none()
        }
        ParamType::Integer { .. } | ParamType::Number { .. } => {
            raw.min_length.is_none() && raw.max_length.is_none()
        }
        _ => !bounds_used,
    };
    if !bounds_fit {
        return Err(format!("bounds given that a {ty_name} cannot have"));
    }
    let required = raw.required.unwrap_or(false);
    if required && raw.default.is_some() {
        return Err("cannot be both required and have a default".into());
    }
    let mut spec = ParamSpec {
        name,
        description: raw.description.map(|d| d.trim().to_owned()),
        ty,
        // A caller-bound value is never NULL: without it the call is refused. An embedding is
        // NULL when its text is (see `embedding_sources`).
        required: required || source != Source::Argument,
        default: None,
        sensitive: raw.sensitive,
        source,
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
    use crate::tools::params::CallerField;

    /// The feedback demo's tools file, as deployments of the demo serve it.
    const FEEDBACK_TOOLS: &str = include_str!("../../../../domains/feedback/tools.toml");

    /// The `[[tool]]` tables of a tools file's text, its other tables ignored.
    fn parse_tools_text(text: &str) -> Result<Vec<ToolSpec>, String> {
        #[derive(Deserialize)]
        struct Tools {
            #[serde(default, rename = "tool")]
            tools: Vec<RawTool>,
        }
        let raw: Tools = toml::from_str(text).map_err(|e| e.to_string())?;
        parse_tools(raw.tools, Limits::default()).map_err(|e| e.to_string())
    }

    fn parse_one(text: &str) -> Result<ToolSpec, String> {
        parse_tools_text(text).map(|mut tools| tools.remove(0))
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
            "/* parley tool=by_code */ WITH tool_rows AS (\nSELECT * FROM lads WHERE code = $1\n) SELECT row_to_json(tool_rows)::text FROM tool_rows LIMIT $2"
        );
        assert_eq!(t.placeholder_types, vec![Type::TEXT, Type::INT8]);
        assert_eq!(t.max_rows, 100);
        assert!(!t.custom_plans, "a required parameter is never NULL");
    }

    #[test]
    fn tools_with_nullable_filters_are_planned_per_call() {
        let tools = parse_tools_text(FEEDBACK_TOOLS).unwrap();
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
        let err = parse_tools_text(&format!(
            "{one}[[tool]]\ndescription = \"d\"\nsql = \"SELECT 1\"\n"
        ))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool `number 2`: needs a name (every [[tool]] needs name, description and sql)"
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
                "[[tool]]\nname = \"t\"\ndescription = \"d\"\nwrites = true\nrole = \"w\"\nsql = \"{sql}\"\n[tool.params.id]\ntype = \"integer\"\nrequired = true\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(err.contains("without RETURNING"), "{sql}: {err}");
            assert!(!err.contains("tool_rows"), "{err}");
        }
        let ok = "UPDATE feedback SET status = 'closed' WHERE id = :id RETURNING id";
        parse_one(&format!(
            "[[tool]]\nname = \"t\"\ndescription = \"d\"\nwrites = true\nrole = \"w\"\nsql = \"{ok}\"\n[tool.params.id]\ntype = \"integer\"\nrequired = true\n"
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
        assert_eq!(effects_of("role = \"w\"\nwrites = true"), Ok((true, false)));
        assert_eq!(
            effects_of("role = \"w\"\nwrites = true\ndestructive = false"),
            Ok((false, false))
        );
        assert_eq!(
            effects_of("role = \"w\"\nwrites = true\nidempotent = true"),
            Ok((true, true))
        );
        assert_eq!(
            effects_of("role = \"w\"\nwrites = true\ndestructive = false\nidempotent = true"),
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
    fn approval_is_always_or_never_and_anything_else_is_refused_naming_the_value() {
        let approval_of = |keys: &str| {
            parse_one(&format!(
                "[[tool]]\nname = \"t\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n{keys}\n"
            ))
            .map(|t| t.approval)
        };
        assert_eq!(approval_of(""), Ok(Approval::Annotations));
        assert_eq!(
            approval_of("approval = \"never\""),
            Ok(Approval::Annotations)
        );
        assert_eq!(approval_of("approval = \"always\""), Ok(Approval::Always));
        for (bad, shown) in [
            ("\"sometimes\"", "\"sometimes\""),
            ("\"Always\"", "\"Always\""),
            ("true", "true"),
        ] {
            let err = approval_of(&format!("approval = {bad}")).unwrap_err();
            assert!(
                err.starts_with(&format!("tool `t`: approval = {shown} is not \"always\"")),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn tool_names_must_suit_llm_apis() {
        let err = parse_one("[[tool]]\nname = \"a b\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n")
            .unwrap_err();
        assert!(err.to_string().contains("name must be"));
    }

    const WRITE: &str = "[[tool]]\nname = \"add\"\ndescription = \"d\"\nwrites = true\n";

    fn error_of(text: &str) -> String {
        parse_one(text).unwrap_err().to_string()
    }

    #[test]
    fn a_write_needs_a_role_and_a_role_must_be_a_lower_case_identifier() {
        let sql = "sql = \"INSERT INTO t (a) VALUES (1) RETURNING a\"\n";
        let err = error_of(&format!("{WRITE}{sql}"));
        assert!(
            err.starts_with("tool `add`: writes = true needs a role"),
            "{err}"
        );
        for bad in ["Writer", "w; DROP TABLE t", "1w", "w\"x", ""] {
            let err = error_of(&format!(
                "{WRITE}{sql}role = \"{}\"\n",
                bad.replace('"', "\\\"")
            ));
            assert!(
                err.contains("must be a lower-case SQL identifier"),
                "{bad}: {err}"
            );
        }
        let t = parse_one(&format!("{WRITE}{sql}role = \"tasks_writer\"\n")).unwrap();
        assert_eq!(t.role.as_deref(), Some("tasks_writer"));
        let read = "[[tool]]\nname = \"r\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n";
        assert_eq!(
            parse_one(read).unwrap().role,
            None,
            "a read may leave it out"
        );
    }

    #[test]
    fn a_write_gets_a_keyed_statement_that_records_its_rows() {
        let t = parse_one(&format!(
            "{WRITE}role = \"w\"\nsql = \"INSERT INTO t (a) VALUES (:a) RETURNING a\"\n\
             [tool.params.a]\ntype = \"string\"\nrequired = true\n"
        ))
        .unwrap();
        let keyed = t.keyed_sql.unwrap();
        assert!(
            keyed.contains("*/ WITH tool_rows AS (\nINSERT INTO t (a) VALUES ($1) RETURNING a\n)"),
            "{keyed}"
        );
        assert!(keyed.contains("FROM tool_rows LIMIT $2"), "{keyed}");
        assert!(
            keyed.contains("INSERT INTO parley.idempotency (caller, tool, key, rows) SELECT coalesce(parley.caller_sub(), ''), $3, $4,"),
            "{keyed}"
        );
        let read = "[[tool]]\nname = \"r\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n";
        assert_eq!(parse_one(read).unwrap().keyed_sql, None);
    }

    #[test]
    fn caller_bound_parameters_take_no_argument_fields_and_default_to_string() {
        let tool = |param: &str| {
            format!(
                "[[tool]]\nname = \"mine\"\ndescription = \"d\"\n\
                 sql = \"SELECT * FROM t WHERE owner = :owner\"\n[tool.params.owner]\n{param}\n"
            )
        };
        let t = parse_one(&tool("from = \"caller.sub\"")).unwrap();
        assert_eq!(t.params[0].source, Source::Caller(CallerField::Sub));
        assert!(t.params[0].required && !t.custom_plans, "never NULL");
        let t = parse_one(&tool("from = \"caller.claims.org_id\"\ntype = \"integer\"")).unwrap();
        assert_eq!(
            t.params[0].source,
            Source::Caller(CallerField::Claim("org_id".into()))
        );
        assert_eq!(t.placeholder_types[0], Type::INT8);
        for (extra, field) in [
            ("required = true", "required"),
            ("required = false", "required"),
            ("default = \"x\"", "default"),
            ("description = \"x\"", "description"),
        ] {
            let err = error_of(&tool(&format!("from = \"caller.sub\"\n{extra}")));
            assert!(
                err.starts_with(&format!(
                    "tool `mine`: parameter `owner`: `{field}` cannot be given with `from`"
                )),
                "{extra}: {err}"
            );
        }
        for bad in ["caller", "caller.claims.", "user.sub", "caller.claims.a b"] {
            let err = error_of(&tool(&format!("from = \"{bad}\"")));
            assert!(
                err.contains("is not caller.sub, caller.claims.<claim name>, embedding.<argument> or embedder.model"),
                "{bad}: {err}"
            );
        }
        let err = error_of(&tool("description = \"x\""));
        assert!(err.contains("parameter `owner`: needs a type"), "{err}");
    }

    #[test]
    fn objects_bind_as_jsonb_and_take_no_bounds_nor_a_caller() {
        let t = parse_one(
            "[[tool]]\nname = \"filtered\"\ndescription = \"d\"\nsql = \"SELECT :f\"\n\
             [tool.params.f]\ntype = \"object\"\ndefault = { year = 2024 }\n",
        )
        .unwrap();
        assert_eq!(t.placeholder_types[0], Type::JSONB);
        assert_eq!(t.params[0].ty, ParamType::Object);
        assert_eq!(
            t.params[0].default,
            Some(SqlValue::Json(serde_json::json!({"year": 2024})))
        );
        let err = error_of(
            "[[tool]]\nname = \"t\"\ndescription = \"d\"\nsql = \"SELECT :f\"\n\
             [tool.params.f]\ntype = \"object\"\nmax_length = 3\n",
        );
        assert_eq!(
            err,
            "tool `t`: parameter `f`: bounds given that a object cannot have"
        );
        let err = error_of(
            "[[tool]]\nname = \"t\"\ndescription = \"d\"\nsql = \"SELECT :f\"\n\
             [tool.params.f]\ntype = \"object\"\nfrom = \"caller.claims.f\"\n",
        );
        assert_eq!(
            err,
            "tool `t`: parameter `f`: an object cannot come from the caller"
        );
    }

    #[test]
    fn string_arrays_bind_as_text_arrays_with_item_bounds() {
        let t = parse_one(
            "[[tool]]\nname = \"tagged\"\ndescription = \"d\"\nsql = \"SELECT :tags\"\n\
             [tool.params.tags]\ntype = \"string_array\"\nmax_items = 3\nmax_length = 10\n",
        )
        .unwrap();
        assert_eq!(t.placeholder_types[0], Type::TEXT_ARRAY);
        assert_eq!(
            t.params[0].ty,
            ParamType::StringArray {
                max_items: Some(3),
                min_length: None,
                max_length: Some(10)
            }
        );
        let err = error_of(
            "[[tool]]\nname = \"t\"\ndescription = \"d\"\nsql = \"SELECT :n\"\n\
             [tool.params.n]\ntype = \"string\"\nmax_items = 3\n",
        );
        assert_eq!(
            err,
            "tool `t`: parameter `n`: max_items is for a string_array, not a string"
        );
    }

    #[test]
    fn context_and_timeout_hint_are_read_and_context_names_an_argument() {
        let base = "[[tool]]\nname = \"find\"\ndescription = \"d\"\nsql = \"SELECT :ref\"\n\
                    [tool.params.ref]\ntype = \"string\"\n";
        let t = parse_one(&base.replace(
            "sql =",
            "timeout_hint = \" a date range \"\ncontext = { district = \"ref\" }\nsql =",
        ))
        .unwrap();
        assert_eq!(t.timeout_hint.as_deref(), Some("a date range"));
        assert_eq!(t.context.get("district").map(String::as_str), Some("ref"));
        let err = error_of(&base.replace("sql =", "context = { district = \"nope\" }\nsql ="));
        assert_eq!(
            err,
            "tool `find`: context `district` names `nope`, which is not a parameter taken as an argument"
        );
    }

    fn reranked(rerank: &str) -> String {
        format!(
            "[[tool]]\nname = \"s\"\ndescription = \"d\"\nsql = \"SELECT :q AS body, :n AS n\"\n\
             rerank = {{ {rerank} }}\n[tool.params.q]\ntype = \"string\"\nrequired = true\n\
             [tool.params.n]\ntype = \"integer\"\nrequired = true\n"
        )
    }

    #[test]
    fn rerank_names_a_string_argument_an_output_column_and_a_bounded_depth() {
        let t = parse_one(&reranked("query = \"q\", text = \"body\", depth = 30")).unwrap();
        let r = t.rerank.unwrap();
        assert_eq!(
            (t.params[r.query].name.as_str(), r.text.as_str(), r.depth),
            ("q", "body", 30)
        );
        for (bad, problem) in [
            (
                "query = \"n\", text = \"body\", depth = 30",
                "rerank query `n` must be a string parameter taken as an argument",
            ),
            (
                "query = \"missing\", text = \"body\", depth = 30",
                "rerank query `missing` must be a string parameter",
            ),
            (
                "query = \"q\", text = \"t.body\", depth = 30",
                "rerank text = \"t.body\" must be an output column's name",
            ),
            (
                "query = \"q\", text = \"body\", depth = 0",
                "rerank depth must be between 1 and 1000",
            ),
            (
                "query = \"q\", text = \"body\", depth = 1001",
                "rerank depth must be between 1 and 1000",
            ),
        ] {
            let err = error_of(&reranked(bad));
            assert!(
                err.starts_with(&format!("tool `s`: {problem}")),
                "{bad}: {err}"
            );
        }
    }

    const SEARCH: &str = "[[tool]]\nname = \"search\"\ndescription = \"d\"\n\
                          sql = \"SELECT 1 AS id, 'a' AS title\"\n";

    #[test]
    fn settings_become_names_and_values_as_text() {
        let t = parse_one(&format!(
            "{SEARCH}settings = {{ \"hnsw.ef_search\" = \"100\", work_mem = 8192, \
             enable_seqscan = false, application_name = \"it's a \\\\ test\" }}\n"
        ))
        .unwrap();
        assert_eq!(
            t.settings,
            [
                ("application_name", "it's a \\ test"),
                ("enable_seqscan", "false"),
                ("hnsw.ef_search", "100"),
                ("work_mem", "8192"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert!(parse_one(SEARCH).unwrap().settings.is_empty());
    }

    #[test]
    fn settings_the_engine_owns_or_badly_named_are_refused() {
        for name in [
            "role",
            "session_authorization",
            "statement_timeout",
            "parley.caller",
            "transaction_read_only",
            "default_transaction_read_only",
        ] {
            let err = error_of(&format!("{SEARCH}settings = {{ \"{name}\" = \"x\" }}\n"));
            assert!(err.contains("cannot be set by a tool"), "{name}: {err}");
        }
        let err = error_of(&format!("{SEARCH}settings = {{ statement_timeout = 1 }}\n"));
        assert!(err.contains("(use timeout_ms)"), "{err}");
        for name in ["Work_mem", "a.b.c", "x; DROP TABLE t", "1x", ".x", ""] {
            let err = error_of(&format!("{SEARCH}settings = {{ \"{name}\" = \"x\" }}\n"));
            assert!(
                err.contains("must be a lower-case setting name"),
                "{name}: {err}"
            );
        }
        let err = error_of(&format!("{SEARCH}settings = {{ work_mem = [1] }}\n"));
        assert!(err.contains("must be a string, number or boolean"), "{err}");
    }

    #[test]
    fn a_citation_names_output_columns_and_needs_an_id() {
        let t = parse_one(&format!(
            "{SEARCH}citation = {{ id = \"id\", title = \"title\" }}\n"
        ))
        .unwrap();
        let citation = t.citation.unwrap();
        assert_eq!(
            serde_json::to_value(&citation).unwrap(),
            serde_json::json!({"id": "id", "title": "title"})
        );
        let err = error_of(&format!("{SEARCH}citation = {{ title = \"title\" }}\n"));
        assert!(err.contains("id"), "{err}");
        let err = error_of(&format!(
            "{SEARCH}citation = {{ id = \"id\", url = \"u\" }}\n"
        ));
        assert!(err.contains("url"), "{err}");
        let err = error_of(&format!(
            "{SEARCH}citation = {{ id = \"id\", title = \"t.title\" }}\n"
        ));
        assert!(
            err.contains("citation `title` = \"t.title\" must be an output column's name"),
            "{err}"
        );
    }

    const EMBEDDING_SEARCH: &str = "[[tool]]\nname = \"near\"\ndescription = \"d\"\n\
        sql = \"SELECT id FROM t WHERE m = :model ORDER BY e::vector(384) <=> :q::vector(384)\"\n\
        [tool.params.query]\ntype = \"string\"\nrequired = true\n\
        [tool.params.model]\nfrom = \"embedder.model\"\n";

    #[test]
    fn an_embedding_binds_as_float4_array_and_its_text_may_go_unused_in_the_sql() {
        let t = parse_one(&format!(
            "{EMBEDDING_SEARCH}[tool.params.q]\nfrom = \"embedding.query\"\n"
        ))
        .unwrap();
        assert_eq!(
            t.placeholder_types,
            [Type::TEXT, Type::FLOAT4_ARRAY, Type::INT8]
        );
        let q = t.params.iter().find(|p| p.name == "q").unwrap();
        assert_eq!(q.source, Source::Embedding("query".into()));
        assert!(
            q.required,
            "the text is required, so its embedding is never NULL"
        );
        assert!(!t.custom_plans);
        let model = t.params.iter().find(|p| p.name == "model").unwrap();
        assert_eq!(model.source, Source::EmbedderModel);
        assert_eq!(model.ty.pg_type(), Type::TEXT);
        let schema = super::super::params::input_schema(&t.params);
        assert_eq!(
            schema["properties"],
            serde_json::json!({"query": {"type": "string"}}),
            "only the text is published"
        );
    }

    #[test]
    fn an_embedding_must_name_a_string_argument_and_take_no_type() {
        let with = |q: &str| error_of(&format!("{EMBEDDING_SEARCH}[tool.params.q]\n{q}\n"));
        assert!(
            with("from = \"embedding.nope\"").contains("names no declared parameter"),
            "{}",
            with("from = \"embedding.nope\"")
        );
        let err = with("from = \"embedding.model\"");
        assert!(
            err.contains("must name a string parameter taken as an argument"),
            "{err}"
        );
        let err = with("from = \"embedding.query\"\ntype = \"string\"");
        assert!(err.contains("an embedding takes no `type`"), "{err}");
        let err = with("from = \"embedding.query\"\nrequired = true");
        assert!(err.contains("is computed by the server"), "{err}");
        let err = with("type = \"vector\"");
        assert!(err.contains("unknown type `vector`"), "{err}");
    }
}
