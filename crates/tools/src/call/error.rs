//! Why a call has no rows, declared tool or ad-hoc SQL alike: [`ToolError`], the tool result a
//! caller can act on (its `Display` is what the model reads), with what the log and the audit
//! may say of it; and [`CallError`], a call that never reached a tool. Turning either into a
//! protocol's answer is the edge's.

use parley_wire::{KeyError, META_APPROVED};

use crate::adhoc::SqlError;
use crate::audit::Outcome;
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

/// Why a call reached no tool, so has no tool result: a protocol error for the edge (MCP's
/// invalid params, -32602), with a message the client can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// No declared or SQL tool has this name.
    #[error("unknown tool `{0}`; call tools/list for the available tools")]
    UnknownTool(String),
    /// The call's `_meta["parley/approved"]` is malformed or another user's: nothing ran.
    #[error("`_meta[\"{META_APPROVED}\"]` {0}; nothing was run")]
    Approval(String),
    /// The runtime is shutting down, the only thing that cancels a call's task.
    #[error("the server is shutting down")]
    ShuttingDown,
}
