//! Which search tool `parley eval` and `parley search` run, and from which tools files: the one
//! given, else those of the `TOOLS_FILE` setting, else the documents domain's, loaded and
//! checked as the mcp function loads them, so both run the very tool the function serves.

use std::path::{Path, PathBuf};

use parley_core::config::Env;
use parley_tools::catalog::{Catalog, CatalogError};
use parley_tools::output::Limits;
use parley_tools::tools::ToolSpec;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    Tools(CatalogError),
    #[error("{files} has no tool named `{tool}` (pass the search tool with --tool NAME)")]
    NoTool { files: String, tool: String },
}

/// A tool and the files it was found in, as a person reads them.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub spec: ToolSpec,
    /// The tools files, comma-separated.
    pub files: String,
}

/// The tool `name` of `file`, or of the files `TOOLS_FILE` lists, or of the documents domain's
/// tools file. Every mistake in a file, or a tool it lacks, is a [`ToolError`].
pub fn load(file: Option<&Path>, env: &Env, name: &str) -> Result<Loaded, ToolError> {
    let paths: Vec<PathBuf> = match file {
        Some(p) => vec![p.to_owned()],
        None if env.is_set("TOOLS_FILE") => env
            .list("TOOLS_FILE")
            .into_iter()
            .map(PathBuf::from)
            .collect(),
        None => vec![parley_domain_documents::tools_path()],
    };
    let files = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let catalog = Catalog::load(&paths, Limits::default()).map_err(ToolError::Tools)?;
    let spec = catalog
        .get(name)
        .cloned()
        .ok_or_else(|| ToolError::NoTool {
            files: files.clone(),
            tool: name.to_owned(),
        })?;
    Ok(Loaded { spec, files })
}
