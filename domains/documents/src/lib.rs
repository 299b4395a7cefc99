//! The documents demo domain: the PostgreSQL manual as courses. Its tools file (hybrid search,
//! reading a document, listing collections, all limited to what the caller may read by
//! Parley's own schema, migration 0004) and the loader that turns the manual's parts into
//! collections with demo enrollments. It has no schema of its own.

mod load;
pub mod manual;

use std::path::PathBuf;

pub use load::{ENROLLMENTS, LoadError, LoadSummary, ManualOptions, Principal, load};
pub use manual::{DEFAULT_MANUAL_DIR, Manual, ManualError, Page, Part};

/// The domain's tools file, as served by the mcp function (`TOOLS_FILE`).
pub const TOOLS: &str = include_str!("../tools.toml");

/// The absolute path of the tools file in this checkout, for tests and `scripts/dev`.
pub const TOOLS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools.toml");

/// [`TOOLS_PATH`] as a path.
pub fn tools_path() -> PathBuf {
    PathBuf::from(TOOLS_PATH)
}
