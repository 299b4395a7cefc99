//! The demo domains, as tests serve them: their crates, and their tools files' absolute paths
//! for `TOOLS_FILE`. [`crate::TestDb::with_demo_data`] loads every one of them.

pub use parley_domain_feedback as feedback;
pub use parley_domain_tasks as tasks;

/// domains/feedback/tools.toml in this checkout.
pub const FEEDBACK_TOOLS: &str = feedback::TOOLS_PATH;

/// domains/tasks/tools.toml in this checkout.
pub const TASKS_TOOLS: &str = tasks::TOOLS_PATH;

/// A `TOOLS_FILE` value serving every demo domain (the paths, comma-separated).
pub fn all_tools() -> String {
    format!("{FEEDBACK_TOOLS},{TASKS_TOOLS}")
}
