//! How a tool is published to clients, as plain data: its name, description, JSON Schemas,
//! behaviour hints and `_meta`. The MCP edge turns a [`Listing`] into its protocol's tool type;
//! nothing here knows a protocol library or a transport.

use serde_json::{Map, Value};

/// One tool as `tools/list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    /// The arguments' JSON Schema (an object schema).
    pub input_schema: Map<String, Value>,
    /// The result's JSON Schema.
    pub output_schema: Map<String, Value>,
    pub hints: Hints,
    /// The tool's `_meta` (the wire contract's keys); empty when it has none.
    pub meta: Map<String, Value>,
}

/// What a client may assume about a call's effects. Every tool acts on the team's own
/// database only, never on an open world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
}
