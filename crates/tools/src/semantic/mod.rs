//! The semantic catalog: what a team's tables mean, for the assistant (docs/catalog.md). A
//! catalog file (`file`) says, per table and column, a description, synonyms and whether it is
//! hidden or personal, and names relationships, metrics, verified queries and instructions;
//! `introspect` reads what the database itself says, and `write` drafts a file from that or
//! brings one up to date without touching the team's words. `index` writes the search index
//! in Postgres that the `served` tools (`search_catalog`, `find_values`, verified queries)
//! read.

pub mod file;
pub mod index;
pub mod introspect;
pub mod served;
pub mod verified;
pub mod write;

pub use file::{CatalogFile, CatalogFileError};
pub use introspect::{Bounds, Snapshot};
