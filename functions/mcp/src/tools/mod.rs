//! Declared tools: the catalog loaded from the tools file, how each tool is published to MCP
//! clients, and the one place that turns a call's outcome into an MCP tool result.
//!
//! Submodules: `spec` (file → [`ToolSpec`]), `sql` (named parameters), `params` (argument
//! checking and JSON Schema), `exec` (running against Postgres).

pub mod exec;
pub mod params;
pub mod spec;
pub mod sql;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use deadpool_postgres::Pool;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

pub use exec::{ExecError, ToolOutput, Truncation};
pub use params::ArgumentError;
pub use spec::{Limits, SpecError, ToolSpec};

/// All declared tools, with their MCP descriptions built once at start-up.
#[derive(Debug)]
pub struct Catalog {
    specs: Vec<ToolSpec>,
    listed: Vec<Tool>,
    by_name: HashMap<String, usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read tools file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("tool `{tool}` does not match the database schema: {message}")]
    Schema { tool: String, message: String },
}

impl Catalog {
    /// The tools file at `path`, or the shipped one.
    pub fn load(path: Option<&Path>, limits: Limits) -> Result<Self, CatalogError> {
        let text = match path {
            Some(p) => std::fs::read_to_string(p).map_err(|source| CatalogError::Read {
                path: p.display().to_string(),
                source,
            })?,
            None => spec::DEFAULT_TOOLS.to_owned(),
        };
        Ok(Self::new(spec::parse(&text, limits)?))
    }

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
        }
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.by_name.get(name).map(|&i| &self.specs[i])
    }

    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    pub fn listed(&self) -> &[Tool] {
        &self.listed
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
            if let Err(e) = client
                .prepare_typed_cached(&tool.wrapped_sql, &tool.placeholder_types)
                .await
            {
                if parley_core::db::is_connection_error(&e) {
                    tracing::warn!(error = %parley_core::db::pg_message(&e), "database connection lost while checking tools");
                    return Ok(false);
                }
                return Err(CatalogError::Schema {
                    tool: tool.name.clone(),
                    message: parley_core::db::pg_message(&e),
                });
            }
        }
        Ok(true)
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
    tool
}

/// Every tool returns the same envelope; its rows are described by the tool's description.
fn output_schema() -> JsonObject {
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
    Exec(#[from] ExecError),
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
            ToolError::Exec(e) => e.to_string(),
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
