//! Declared tools: each `[[tool]]` of a tools file checked into a [`ToolSpec`], described for
//! clients ([`describe`], a `Listing` the MCP edge publishes) and run for a caller. Which files,
//! and what else they declare, is the catalog's; one call's pipeline and errors are `call`'s.
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

use parley_wire::{
    META_APPROVAL, META_CITATION, META_CONTEXT, META_IDEMPOTENCY_KEY, META_VERIFIED,
};
use serde_json::{Map, json};

pub use embedding::EmbeddingError;
pub use exec::ExecError;
pub use params::{ArgumentError, CallerError};
pub use spec::{Approval, DeclarationError, ToolSpec};

use crate::listing::{Hints, Listing};
use crate::output::output_schema;

/// How a tool is published in `tools/list`.
pub fn describe(spec: &ToolSpec) -> Listing {
    let mut meta = Map::new();
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
    if let Some(name) = &spec.verified {
        meta.insert(META_VERIFIED.into(), json!(name));
    }
    // Absent unless "always": without it a client decides from `destructiveHint` above.
    if spec.approval == Approval::Always {
        meta.insert(META_APPROVAL.into(), json!("always"));
    }
    Listing {
        name: spec.name.clone(),
        title: spec.title.clone(),
        description: spec.description.clone(),
        input_schema: params::input_schema(&spec.params),
        output_schema: output_schema(),
        hints: Hints {
            read_only: !spec.writes,
            destructive: spec.destructive,
            idempotent: spec.idempotent,
        },
        meta,
    }
}
