//! The demo domains, as tests serve them: their crates, and their tools files' absolute paths
//! for `TOOLS_FILE`. [`crate::TestDb::with_demo_data`] loads feedback and tasks;
//! [`crate::TestDb::with_documents`] loads a slice of the manual (documents).

pub use parley_domain_documents as documents;
pub use parley_domain_feedback as feedback;
pub use parley_domain_tasks as tasks;

/// domains/feedback/tools.toml in this checkout.
pub const FEEDBACK_TOOLS: &str = feedback::TOOLS_PATH;

/// domains/tasks/tools.toml in this checkout.
pub const TASKS_TOOLS: &str = tasks::TOOLS_PATH;

/// domains/documents/tools.toml in this checkout. Its search embeds the query, so an mcp
/// function serving it loads the embedding model at start-up (`EMBEDDINGS_MODEL_DIR`).
pub const DOCUMENTS_TOOLS: &str = documents::TOOLS_PATH;

/// A `TOOLS_FILE` value serving the feedback and tasks domains (the paths, comma-separated);
/// not documents, whose tools need the embedding model ([`DOCUMENTS_TOOLS`]).
pub fn all_tools() -> String {
    format!("{FEEDBACK_TOOLS},{TASKS_TOOLS}")
}
