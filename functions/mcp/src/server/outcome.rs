//! What a caller sees of a call, declared tool or ad-hoc SQL alike: [`ToolError`] gathers why a
//! call produced no rows, and [`to_call_result`] is the one place an outcome becomes an MCP
//! tool result. It sits above `tools` and `adhoc`, whose errors it maps.

use parley_wire::KeyError;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use crate::adhoc::SqlError;
use crate::audit::Outcome;
use crate::output::ToolOutput;
use crate::tools::{ArgumentError, CallerError, EmbeddingError, ExecError};

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
    Sql(#[from] SqlError),
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
            ToolError::Sql(SqlError::Postgres(f)) => {
                format!("the statement failed (SQLSTATE {})", f.code)
            }
            ToolError::Sql(SqlError::NotFound(_)) => {
                "named a table or schema the SQL tools cannot see".into()
            }
            ToolError::Sql(e) => e.to_string(),
        }
    }

    /// How the audit classes this failure.
    pub fn outcome(&self) -> Outcome {
        match self {
            ToolError::Arguments(_) | ToolError::Caller(_) | ToolError::Key(_) => Outcome::Refused,
            ToolError::Exec(ExecError::Timeout { .. }) => Outcome::Timeout,
            ToolError::Exec(
                ExecError::ReadOnly | ExecError::PermissionDenied | ExecError::Raised(_),
            ) => Outcome::Refused,
            ToolError::Sql(SqlError::Timeout { .. }) => Outcome::Timeout,
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
