//! What an MCP client sees of a call, declared tool or ad-hoc SQL alike: [`to_call_result`] is
//! the one place the engine's outcome becomes an MCP tool result, and [`to_error`] the one
//! place a call that reached no tool becomes a JSON-RPC error.

use parley_tools::call::{CallError, ToolError};
use parley_tools::output::ToolOutput;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

/// Rows as structured content plus the same JSON as text, or a tool error (`isError: true`)
/// the model can act on.
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

/// An unknown tool or a refused approval is the spec's invalid params (-32602); a call cut by
/// the runtime shutting down is an internal error.
pub fn to_error(error: CallError) -> ErrorData {
    match error {
        CallError::ShuttingDown => ErrorData::internal_error(error.to_string(), None),
        CallError::UnknownTool(_) | CallError::Approval(_) => {
            ErrorData::invalid_params(error.to_string(), None)
        }
    }
}
