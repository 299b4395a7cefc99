//! The feedback demo domain: the 331 local authority districts of England and Wales and public
//! feedback about them. Its schema, its tools file and its data generator, applied together by
//! `parley demo-data --domain feedback` (the schema, then [`load_data`], in one transaction);
//! nothing here is part of Parley's own schema.

mod data;

use std::path::PathBuf;

pub use data::{
    FeedbackRow, FeedbackRows, Lad, LoadError, LoadOptions, LoadSummary, lads, load_data,
};

/// The domain's tables, functions and grants; idempotent (see schema.sql).
pub const SCHEMA: &str = include_str!("../schema.sql");

/// The domain's tools file, as served by the mcp function (`TOOLS_FILE`).
pub const TOOLS: &str = include_str!("../tools.toml");

/// The absolute path of the tools file in this checkout, for tests and `scripts/dev`.
pub const TOOLS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools.toml");

/// [`TOOLS_PATH`] as a path.
pub fn tools_path() -> PathBuf {
    PathBuf::from(TOOLS_PATH)
}
