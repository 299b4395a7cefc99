//! Parley's tool engine: the tools files (`[[tool]]`, `[[prompt]]`, `[sql]`) checked at
//! start-up, and one pipeline for a call (arguments, caller, settings, statement, reset, audit)
//! that the mcp function serves over MCP and `parley eval`, the bench and the tests call
//! directly. It knows no transport: no HTTP, no MCP library, no authentication; its callers
//! verify who is asking and hand it a [`call::Caller`].
//!
//! Modules, each importing only those after it: `call` (one call's pipeline: [`call::Engine`],
//! [`call::bind`], the errors a caller sees), `catalog` (the tools files merged and checked
//! against the database), `semantic` (the semantic catalog: what a team's tables mean,
//! docs/catalog.md), `tools` (declared tools: spec, parameters, execution, privileges),
//! `adhoc` (the ad-hoc SQL tools), `rerank` (the optional reranker), `audit` (the audit trail),
//! `output` (the result envelope and its limits), `listing` (how a tool is published).

pub mod adhoc;
pub mod audit;
pub mod call;
pub mod catalog;
pub mod listing;
pub mod output;
pub mod rerank;
pub mod semantic;
pub mod tools;
