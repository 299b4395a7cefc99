//! Declared tools: each `[[tool]]` of a tools file checked into a [`ToolSpec`], published to
//! MCP clients ([`describe`]) and run for a caller. Which files, and what else they declare, is
//! the catalog's; what a caller sees of a call is the server's.
//!
//! Submodules: `spec` (`[[tool]]` → [`ToolSpec`]), `sql` (named parameters), `params` (argument
//! checking and JSON Schema), `embedding` (the values the server computes: embeddings and the
//! model id), `exec` (running against Postgres), `privileges` (whether each tool's role may do
//! what its statement asks, with the `GRANT` that fixes it). The `_meta` keys, the citation and the
//! idempotency key are the wire contract with the chat (`parley_wire`).

pub mod embedding;
pub mod exec;
pub mod params;
pub mod privileges;
pub mod spec;
pub mod sql;

use std::sync::Arc;

use parley_wire::{META_APPROVAL, META_CITATION, META_CONTEXT, META_IDEMPOTENCY_KEY};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::json;

pub use embedding::EmbeddingError;
pub use exec::ExecError;
pub use params::{ArgumentError, CallerError};
pub use spec::{Approval, DeclarationError, ToolSpec};

use crate::output::output_schema;

/// How a tool is published in `tools/list`.
pub fn describe(spec: &ToolSpec) -> Tool {
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
    // Every write records a call's key (see `exec`) and replays a repeat.
    if spec.writes {
        meta.insert(META_IDEMPOTENCY_KEY.into(), json!(true));
    }
    if let Some(citation) = &spec.citation {
        meta.insert(META_CITATION.into(), json!(citation));
    }
    // Absent unless "always": without it a client decides from `destructiveHint` above.
    if spec.approval == Approval::Always {
        meta.insert(META_APPROVAL.into(), json!("always"));
    }
    if !meta.is_empty() {
        tool.meta = Some(meta.into());
    }
    tool
}
