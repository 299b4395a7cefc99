//! Retrieval evaluation a team runs on its own corpus (`parley eval`, and `parley-bench docs`
//! over the manual): a labelled questions file, the tool's SQL run directly for each question
//! and with one branch emptied, and the scores. It reads the database; it never writes to it.

pub mod branches;
pub mod questions;
pub mod score;
pub mod search;

pub use branches::{Branch, BranchError};
pub use questions::{Question, QuestionsError};
pub use score::{Group, Score, Summary};
pub use search::SearchError;

/// Rows a search is asked for at least: enough for MRR@10.
pub const DEPTH: usize = 10;
