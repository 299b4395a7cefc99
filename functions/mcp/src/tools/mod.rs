//! Declared tools: the catalog loaded from the tools file, how each tool is published to MCP
//! clients, and the one place that turns a call's outcome into an MCP tool result.
//!
//! Submodules: `spec` (file → [`ToolSpec`]), `sql` (named parameters), `params` (argument
//! checking and JSON Schema), `embedding` (the values the server computes: embeddings and the
//! model id), `idempotency` (the key of an exactly-once write), `exec` (running against
//! Postgres).

pub mod embedding;
pub mod exec;
pub mod idempotency;
pub mod params;
pub mod spec;
pub mod sql;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use deadpool_postgres::Pool;
use rmcp::model::{
    CallToolResult, ContentBlock, JsonObject, Prompt, PromptArgument, Tool, ToolAnnotations,
};
use serde_json::{Value, json};

pub use embedding::EmbeddingError;
pub use exec::{ExecError, ToolOutput, Truncation};
pub use idempotency::{IdempotencyKey, KeyError};
pub use params::{ArgumentError, CallerError};
pub use spec::{Citation, Limits, PromptSpec, SpecError, ToolSpec, ToolsFile};

/// Tool `_meta` key: UI context key -> the parameter that resolves it.
pub const META_CONTEXT: &str = "parley/context";
/// Tool `_meta` key: which output columns make a citable source (see [`spec::Citation`]).
pub const META_CITATION: &str = "parley/citation";
/// Tool `_meta` key, `true` on writes: a call carrying an idempotency key is recorded and a
/// repeat of it replayed (the key itself travels in the call's `_meta`, see [`idempotency`]).
pub const META_IDEMPOTENCY: &str = idempotency::META_KEY;

/// All declared tools and prompts, with their MCP descriptions built once at start-up.
#[derive(Debug)]
pub struct Catalog {
    specs: Vec<ToolSpec>,
    listed: Vec<Tool>,
    by_name: HashMap<String, usize>,
    prompts: Vec<PromptSpec>,
    listed_prompts: Vec<Prompt>,
    instructions: Vec<String>,
    /// The ad-hoc SQL tools, when a file turned them on.
    sql: Option<crate::adhoc::SqlSpec>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read tools file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("tools file {path}: {source}")]
    Spec { path: String, source: SpecError },
    #[error("{kind} `{name}` is declared in both {first} and {second}; names must be unique")]
    Duplicate {
        kind: &'static str,
        name: String,
        first: String,
        second: String,
    },
    #[error("the tools files declare no tools")]
    NoTools,
    #[error("[sql] is declared in both {first} and {second}; declare the SQL tools once")]
    SqlTwice { first: String, second: String },
    #[error("tool `{0}` in the tools files has the name of one of the [sql] tools")]
    SqlName(String),
    #[error(
        "[sql] needs SQL_DATABASE_URL: the URL of the login role the SQL tools run as (see docs/sql.md)"
    )]
    SqlUrlMissing,
    #[error(transparent)]
    UnsafeSqlRole(#[from] crate::adhoc::role::UnsafeRole),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditUnwritable),
    #[error("tool `{tool}` does not match the database schema: {message}")]
    Schema { tool: String, message: String },
    #[error("the tools embed text, and the embedder cannot be loaded: {0}")]
    Embedder(#[source] parley_embed::EmbedError),
}

impl Catalog {
    /// The tools files at `paths` (`TOOLS_FILE`), merged: names unique across them.
    pub fn load(paths: &[PathBuf], limits: Limits) -> Result<Self, CatalogError> {
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            files.push((path.display().to_string(), read(path, limits)?));
        }
        Self::merge(files)
    }

    /// Files already parsed, each with the name errors call it by.
    pub fn merge(files: Vec<(String, ToolsFile)>) -> Result<Self, CatalogError> {
        let mut specs: Vec<ToolSpec> = Vec::new();
        let mut prompts: Vec<PromptSpec> = Vec::new();
        let mut instructions = Vec::new();
        let mut origin: HashMap<(&'static str, String), String> = HashMap::new();
        let mut sql: Option<(String, crate::adhoc::SqlSpec)> = None;
        for (path, file) in files {
            if let Some(spec) = file.sql {
                if let Some((first, _)) = &sql {
                    return Err(CatalogError::SqlTwice {
                        first: first.clone(),
                        second: path,
                    });
                }
                sql = Some((path.clone(), spec));
            }
            let names = file
                .tools
                .iter()
                .map(|t| ("tool", t.name.clone()))
                .chain(file.prompts.iter().map(|p| ("prompt", p.name.clone())));
            for (kind, name) in names {
                if let Some(first) = origin.insert((kind, name.clone()), path.clone()) {
                    return Err(CatalogError::Duplicate {
                        kind,
                        name,
                        first,
                        second: path,
                    });
                }
            }
            instructions.extend(file.instructions);
            specs.extend(file.tools);
            prompts.extend(file.prompts);
        }
        if specs.is_empty() && sql.is_none() {
            return Err(CatalogError::NoTools);
        }
        if sql.is_some()
            && let Some(clash) = specs
                .iter()
                .find(|t| crate::adhoc::Kind::from_name(&t.name).is_some())
        {
            return Err(CatalogError::SqlName(clash.name.clone()));
        }
        let mut catalog = Self::new(specs);
        catalog.sql = sql.map(|(_, spec)| spec);
        catalog.listed_prompts = prompts.iter().map(describe_prompt).collect();
        catalog.prompts = prompts;
        catalog.instructions = instructions;
        Ok(catalog)
    }

    /// Tools alone: no prompts, no instructions.
    pub fn new(specs: Vec<ToolSpec>) -> Self {
        let listed = specs.iter().map(describe).collect();
        let by_name = specs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        Self {
            specs,
            listed,
            by_name,
            prompts: Vec::new(),
            listed_prompts: Vec::new(),
            instructions: Vec::new(),
            sql: None,
        }
    }

    /// The `[sql]` settings, when some file turned the ad-hoc SQL tools on.
    pub fn sql(&self) -> Option<&crate::adhoc::SqlSpec> {
        self.sql.as_ref()
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.by_name.get(name).map(|&i| &self.specs[i])
    }

    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// Some tool takes an embedding or the embedder's model id: start-up loads the embedder.
    pub fn needs_embedder(&self) -> bool {
        embedding::needed_by(&self.specs)
    }

    pub fn listed(&self) -> &[Tool] {
        &self.listed
    }

    pub fn prompt(&self, name: &str) -> Option<&PromptSpec> {
        self.prompts.iter().find(|p| p.name == name)
    }

    pub fn listed_prompts(&self) -> &[Prompt] {
        &self.listed_prompts
    }

    /// Each file's top-level `instructions`, in file order.
    pub fn instructions(&self) -> &[String] {
        &self.instructions
    }

    /// Prepares every declared statement, so a tool that does not fit the schema fails the
    /// deploy rather than the first model that calls it. `Ok(false)` when the database could
    /// not be reached: start anyway and recover once it is back.
    pub async fn check_against(&self, pool: &Pool) -> Result<bool, CatalogError> {
        let client = match pool.get().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %parley_core::db::DbError::from(e), "database unreachable at start-up; tool statements not checked yet");
                return Ok(false);
            }
        };
        for tool in &self.specs {
            let mut statements = vec![(tool.wrapped_sql.as_str(), tool.placeholder_types.clone())];
            if let Some(keyed) = &tool.keyed_sql {
                statements.push((keyed.as_str(), exec::keyed_types(tool)));
            }
            for (sql, types) in statements {
                if !check_statement(&client, tool, sql, &types).await? {
                    return Ok(false);
                }
            }
            if !check_settings(&client, tool).await? || !check_citation(&client, tool).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A tools file read and parsed; errors name the file.
fn read(path: &Path, limits: Limits) -> Result<ToolsFile, CatalogError> {
    let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
        path: path.display().to_string(),
        source,
    })?;
    spec::parse(&text, limits).map_err(|source| CatalogError::Spec {
        path: path.display().to_string(),
        source,
    })
}

/// Prepares one statement of `tool`: `Err(Schema)` when it does not fit the database,
/// `Ok(false)` when the connection was lost on the way.
async fn check_statement(
    client: &deadpool_postgres::Object,
    tool: &ToolSpec,
    sql: &str,
    types: &[tokio_postgres::types::Type],
) -> Result<bool, CatalogError> {
    match client.prepare_typed_cached(sql, types).await {
        Ok(_) => Ok(true),
        Err(e) if parley_core::db::is_connection_error(&e) => {
            tracing::warn!(error = %parley_core::db::pg_message(&e), "database connection lost while checking tools");
            Ok(false)
        }
        Err(e) => Err(CatalogError::Schema {
            tool: tool.name.clone(),
            message: parley_core::db::pg_message(&e),
        }),
    }
}

/// Applies the tool's `[tool.settings]` in a transaction rolled back at once, so an unknown
/// setting or a value it does not take stops start-up, not the first call.
async fn check_settings(
    client: &deadpool_postgres::Object,
    tool: &ToolSpec,
) -> Result<bool, CatalogError> {
    if tool.settings.is_empty() {
        return Ok(true);
    }
    let sets = tool.settings.join("; ");
    let outcome = client
        .batch_execute(&format!("BEGIN READ ONLY; {sets}; ROLLBACK"))
        .await;
    match outcome {
        Ok(()) => Ok(true),
        Err(e) if parley_core::db::is_connection_error(&e) => {
            tracing::warn!(error = %parley_core::db::pg_message(&e), "database connection lost while checking tools");
            Ok(false)
        }
        Err(e) => {
            // The failed SET left the transaction open and aborted.
            let _ = client.batch_execute("ROLLBACK").await;
            Err(CatalogError::Schema {
                tool: tool.name.clone(),
                message: format!("[tool.settings]: {}", parley_core::db::pg_message(&e)),
            })
        }
    }
}

/// A citation must name columns the statement returns: a misspelt one would give the chat
/// sources without titles, not an error.
async fn check_citation(
    client: &deadpool_postgres::Object,
    tool: &ToolSpec,
) -> Result<bool, CatalogError> {
    let (Some(citation), Some(sql)) = (&tool.citation, &tool.columns_sql) else {
        return Ok(true);
    };
    // Prepared, never run, and not cached: only its description is wanted.
    let statement = match client.prepare_typed(sql, &tool.placeholder_types).await {
        Ok(statement) => statement,
        Err(e) if parley_core::db::is_connection_error(&e) => return Ok(false),
        Err(e) => {
            return Err(CatalogError::Schema {
                tool: tool.name.clone(),
                message: parley_core::db::pg_message(&e),
            });
        }
    };
    let returned: Vec<&str> = statement.columns().iter().map(|c| c.name()).collect();
    match citation
        .columns()
        .find(|(_, column)| !returned.contains(column))
    {
        None => Ok(true),
        Some((key, column)) => Err(CatalogError::Schema {
            tool: tool.name.clone(),
            message: format!(
                "citation `{key}` names the column `{column}`, which the statement does not \
                 return (it returns {})",
                returned.join(", ")
            ),
        }),
    }
}

/// How a tool is published in `tools/list`.
fn describe(spec: &ToolSpec) -> Tool {
    let mut tool = Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(params::input_schema(&spec.params)),
    )
    .with_raw_output_schema(Arc::new(output_schema()))
    .with_annotations(
        ToolAnnotations::new()
            .read_only(!spec.writes)
            .destructive(spec.destructive)
            .idempotent(spec.idempotent)
            .open_world(false),
    );
    if let Some(title) = &spec.title {
        tool = tool.with_title(title.clone());
    }
    let mut meta = JsonObject::new();
    if !spec.context.is_empty() {
        meta.insert(META_CONTEXT.into(), json!(spec.context));
    }
    if spec.writes {
        meta.insert(META_IDEMPOTENCY.into(), json!(true));
    }
    if let Some(citation) = &spec.citation {
        meta.insert(META_CITATION.into(), json!(citation));
    }
    if !meta.is_empty() {
        tool.meta = Some(meta.into());
    }
    tool
}

/// How a prompt is published in `prompts/list`.
fn describe_prompt(spec: &PromptSpec) -> Prompt {
    let arguments = spec
        .arguments
        .iter()
        .map(|a| {
            let mut argument = PromptArgument::new(a.name.clone()).with_required(a.required);
            if let Some(d) = &a.description {
                argument = argument.with_description(d.clone());
            }
            argument
        })
        .collect::<Vec<_>>();
    let mut prompt = Prompt::new(
        spec.name.clone(),
        spec.description.clone(),
        (!arguments.is_empty()).then_some(arguments),
    );
    if let Some(title) = &spec.title {
        prompt = prompt.with_title(title.clone());
    }
    prompt
}

/// Every tool returns the same envelope (the SQL tools' `run_sql` and `list_tables` too); its
/// rows are described by the tool's description.
pub(crate) fn output_schema() -> JsonObject {
    let schema = json!({
        "type": "object",
        "properties": {
            "rows": {"type": "array", "items": {"type": "object"}},
            "row_count": {"type": "integer", "minimum": 0},
            "truncated": {"type": "boolean"},
            "truncated_reason": {"type": "string", "enum": ["max_rows", "max_bytes"]},
            "note": {"type": "string"}
        },
        "required": ["rows", "row_count", "truncated"]
    });
    match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// Why a known tool's call did not produce rows.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("invalid arguments: {0}")]
    Arguments(#[from] ArgumentError),
    #[error(transparent)]
    Caller(#[from] CallerError),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Embedding(#[from] EmbeddingError),
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// An ad-hoc SQL tool's failure (`crate::adhoc`).
    #[error(transparent)]
    Sql(#[from] crate::adhoc::SqlError),
}

impl ToolError {
    /// What the log may say: the kind of failure and, for arguments, the parameter's name, but
    /// never a value the caller sent.
    pub fn log_kind(&self) -> String {
        match self {
            ToolError::Arguments(ArgumentError::Missing(name)) => {
                format!("missing argument `{name}`")
            }
            ToolError::Arguments(ArgumentError::Unknown { name, .. }) => {
                format!("unknown argument `{name}`")
            }
            ToolError::Arguments(ArgumentError::Invalid { name, .. }) => {
                format!("invalid argument `{name}`")
            }
            ToolError::Arguments(ArgumentError::FromCaller(name)) => {
                format!("caller-bound parameter `{name}` passed as an argument")
            }
            ToolError::Arguments(ArgumentError::Computed(name)) => {
                format!("server-computed parameter `{name}` passed as an argument")
            }
            // Tool and claim names only: never a claim's value.
            ToolError::Caller(CallerError::BadClaim { tool, claim, .. }) => {
                format!("`{tool}` cannot use the caller's `{claim}` claim")
            }
            ToolError::Caller(e) => e.to_string(),
            ToolError::Key(e) => e.to_string(),
            // The model's or the endpoint's complaint, never the text.
            ToolError::Embedding(EmbeddingError::Failed(e)) => format!("embedding failed: {e}"),
            ToolError::Embedding(e) => e.to_string(),
            // The SQL's own message may quote what the caller sent.
            ToolError::Exec(ExecError::Raised(_)) => "the tool's SQL refused the call".into(),
            ToolError::Exec(e) => e.to_string(),
            // Postgres' message may quote the statement; its SQLSTATE says enough.
            ToolError::Sql(crate::adhoc::SqlError::Postgres(f)) => {
                format!("the statement failed (SQLSTATE {})", f.code)
            }
            ToolError::Sql(crate::adhoc::SqlError::NotFound(_)) => {
                "named a table or schema the SQL tools cannot see".into()
            }
            ToolError::Sql(e) => e.to_string(),
        }
    }

    /// How the audit classes this failure.
    pub fn outcome(&self) -> crate::audit::Outcome {
        use crate::audit::Outcome;
        match self {
            ToolError::Arguments(_) | ToolError::Caller(_) | ToolError::Key(_) => Outcome::Refused,
            ToolError::Exec(ExecError::Timeout { .. }) => Outcome::Timeout,
            ToolError::Exec(
                ExecError::ReadOnly | ExecError::PermissionDenied | ExecError::Raised(_),
            ) => Outcome::Refused,
            ToolError::Sql(crate::adhoc::SqlError::Timeout { .. }) => Outcome::Timeout,
            ToolError::Sql(e) if e.is_refusal() => Outcome::Refused,
            ToolError::Embedding(_) | ToolError::Exec(_) | ToolError::Sql(_) => Outcome::ToolError,
        }
    }
}

/// The one place a call's outcome becomes what MCP clients see: rows as structured content
/// plus the same JSON as text, or a tool error (`isError: true`) the model can act on.
pub fn to_call_result(outcome: Result<ToolOutput, ToolError>) -> CallToolResult {
    match outcome {
        Ok(out) => {
            let structured = serde_json::from_str::<Value>(&out.json).unwrap_or(Value::Null);
            let mut result = CallToolResult::success(vec![ContentBlock::text(out.json)]);
            result.structured_content = Some(structured);
            result
        }
        Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
    }
}
