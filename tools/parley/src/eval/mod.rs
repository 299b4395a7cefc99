//! Retrieval evaluation a team runs on its own corpus (`parley eval`, and `parley-bench docs`
//! over the manual): a labelled questions file, the tool's SQL run directly for each question
//! and with one branch emptied, and the scores. `parley search` runs the same tool the same
//! way for one query. It reads the database; it never writes to it.

pub mod branches;
pub mod catalog;
pub mod questions;
pub mod score;
pub mod search;
pub mod tool;

pub use branches::{Branch, BranchError};
pub use questions::{Question, QuestionsError};
pub use score::{Group, Score, Summary};
pub use search::SearchError;
pub use tool::ToolError;

/// Rows a search is asked for at least: enough for MRR@10.
pub const DEPTH: usize = 10;
