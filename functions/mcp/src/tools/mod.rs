//! Declared tools: each `[[tool]]` of a tools file checked into a [`ToolSpec`], published to
//! MCP clients ([`describe`]) and run for a caller. Which files, and what else they declare, is
//! the catalog's; what a caller sees of a call is the server's.
//!
//! Submodules: `spec` (`[[tool]]` → [`ToolSpec`]), `sql` (named parameters), `params` (argument
//! checking and JSON Schema), `embedding` (the values the server computes: embeddings and the
//! model id), `idempotency` (the key of an exactly-once write), `exec` (running against
//! Postgres).

pub mod embedding;
pub mod exec;
pub mod idempotency;
pub mod params;
pub mod spec;
pub mod sql;

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::json;

pub use embedding::EmbeddingError;
pub use exec::ExecError;
pub use idempotency::{IdempotencyKey, KeyError};
pub use params::{ArgumentError, CallerError};
pub use spec::{Citation, DeclarationError, ToolSpec};

use crate::output::output_schema;

/// Tool `_meta` key: UI context key -> the parameter that resolves it.
pub const META_CONTEXT: &str = "parley/context";
/// Tool `_meta` key: which output columns make a citable source (see [`spec::Citation`]).
pub const META_CITATION: &str = "parley/citation";
/// Tool `_meta` key, `true` on writes: a call carrying an idempotency key is recorded and a
/// repeat of it replayed (the key itself travels in the call's `_meta`, see [`idempotency`]).
pub const META_IDEMPOTENCY: &str = idempotency::META_KEY;

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
