//! The tools files a deployment serves (`TOOLS_FILE`), merged into one [`Catalog`]: the declared
//! tools, the prompts, the instructions and the `[sql]` table that turns the ad-hoc SQL tools
//! on; names unique across files, every statement checked against the database at start-up.
//!
//! Submodules: `file` (one file's text → [`ToolsFile`]), `prompt` (`[[prompt]]` →
//! [`PromptSpec`]). It sits above `tools` and `adhoc`, which know nothing of files.

pub mod file;
pub mod prompt;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use deadpool_postgres::Pool;

pub use file::{FileError, ToolsFile};
pub use prompt::PromptSpec;

use crate::adhoc;
use crate::listing::Listing;
use crate::output::Limits;
use crate::tools::{self, ToolSpec};

/// All declared tools and prompts; how each tool is published is built once at start-up.
#[derive(Debug)]
pub struct Catalog {
    specs: Vec<ToolSpec>,
    listed: Vec<Listing>,
    by_name: HashMap<String, usize>,
    prompts: Vec<PromptSpec>,
    instructions: Vec<String>,
    /// The ad-hoc SQL tools, when a file turned them on.
    sql: Option<adhoc::SqlSpec>,
}

/// Why the tools files cannot be served: unreadable, invalid, clashing, or not matching the
/// database.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read tools file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("tools file {path}: {source}")]
    File { path: String, source: FileError },
    #[error("{kind} `{name}` is declared in both {first} and {second}; names must be unique")]
    Duplicate {
        kind: &'static str,
        name: String,
        first: String,
        second: String,
    },
    #[error("the tools files declare no tools")]
    NoTools,
    #[error("[sql] is declared in both {first} and {second}; declare the SQL tools once")]
    SqlTwice { first: String, second: String },
    #[error("tool `{0}` in the tools files has the name of one of the [sql] tools")]
    SqlName(String),
    #[error("tool `{tool}` does not match the database schema: {message}")]
    Schema { tool: String, message: String },
    /// Some tool's role may not do what its statement asks: each fix, with its tools.
    #[error(transparent)]
    Privileges(#[from] tools::privileges::MissingPrivileges),
}

impl Catalog {
    /// The tools files at `paths` (`TOOLS_FILE`), merged: names unique across them.
    pub fn load(paths: &[PathBuf], limits: Limits) -> Result<Self, CatalogError> {
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            files.push((path.display().to_string(), read(path, limits)?));
        }
        Self::merge(files)
    }

    /// Files already parsed, each with the name errors call it by.
    pub fn merge(files: Vec<(String, ToolsFile)>) -> Result<Self, CatalogError> {
        let mut specs: Vec<ToolSpec> = Vec::new();
        let mut prompts: Vec<PromptSpec> = Vec::new();
        let mut instructions = Vec::new();
        let mut origin: HashMap<(&'static str, String), String> = HashMap::new();
        let mut sql: Option<(String, adhoc::SqlSpec)> = None;
        let mut semantic = false;
        let mut hidden: Vec<String> = Vec::new();
        for (path, file) in files {
            semantic |= file.catalog.is_some();
            hidden.extend(file.hidden.iter().cloned());
            if let Some(spec) = file.sql {
                if let Some((first, _)) = &sql {
                    return Err(CatalogError::SqlTwice {
                        first: first.clone(),
                        second: path,
                    });
                }
                sql = Some((path.clone(), spec));
            }
            let names = file
                .tools
                .iter()
                .map(|t| ("tool", t.name.clone()))
                .chain(file.prompts.iter().map(|p| ("prompt", p.name.clone())));
            for (kind, name) in names {
                if let Some(first) = origin.insert((kind, name.clone()), path.clone()) {
                    return Err(CatalogError::Duplicate {
                        kind,
                        name,
                        first,
                        second: path,
                    });
                }
            }
            instructions.extend(file.instructions);
            specs.extend(file.tools);
            prompts.extend(file.prompts);
        }
        if specs.is_empty() && sql.is_none() {
            return Err(CatalogError::NoTools);
        }
        if sql.is_some()
            && let Some(clash) = specs
                .iter()
                .find(|t| adhoc::Kind::from_name(&t.name).is_some())
        {
            return Err(CatalogError::SqlName(clash.name.clone()));
        }
        let mut catalog = Self::new(specs);
        catalog.sql = sql.map(|(_, mut spec)| {
            // run_sql's description sends the model to the catalog first.
            spec.hidden = hidden;
            if semantic {
                spec.notes = Some(match spec.notes.take() {
                    Some(own) => format!("{own}\n\n{}", crate::semantic::served::RUN_SQL_NOTE),
                    None => crate::semantic::served::RUN_SQL_NOTE.to_owned(),
                });
            }
            spec
        });
        catalog.prompts = prompts;
        catalog.instructions = instructions;
        Ok(catalog)
    }

    /// Tools alone: no prompts, no instructions.
    pub fn new(specs: Vec<ToolSpec>) -> Self {
        let listed = specs.iter().map(tools::describe).collect();
        let by_name = specs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        Self {
            specs,
            listed,
            by_name,
            prompts: Vec::new(),
            instructions: Vec::new(),
            sql: None,
        }
    }

    /// The `[sql]` settings, when some file turned the ad-hoc SQL tools on.
    pub fn sql(&self) -> Option<&adhoc::SqlSpec> {
        self.sql.as_ref()
    }

    pub fn get(&self, name: &str) -> Option<&ToolSpec> {
        self.by_name.get(name).map(|&i| &self.specs[i])
    }

    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// Some tool takes an embedding or the embedder's model id: start-up loads the embedder.
    pub fn needs_embedder(&self) -> bool {
        tools::embedding::needed_by(&self.specs)
    }

    /// How each declared tool is published, in declaration order.
    pub fn listed(&self) -> &[Listing] {
        &self.listed
    }

    pub fn prompt(&self, name: &str) -> Option<&PromptSpec> {
        self.prompts.iter().find(|p| p.name == name)
    }

    /// The declared prompts, in declaration order.
    pub fn prompts(&self) -> &[PromptSpec] {
        &self.prompts
    }

    /// Each file's top-level `instructions`, in file order.
    pub fn instructions(&self) -> &[String] {
        &self.instructions
    }

    /// Prepares every declared statement, so a tool that does not fit the schema fails the
    /// deploy rather than the first model that calls it; then plans each as the role a call
    /// runs it as, so a role that may not do what its statement asks fails it too, naming
    /// the grant (`tools::privileges`). `Ok(false)` when the database could not be reached:
    /// start anyway and recover once it is back.
    ///
    /// In transactions rolled back: each statement is prepared and closed inside them (a
    /// statement closes when dropped, before the next message), so nothing named outlives it
    /// on a server connection a pooler hands on.
    pub async fn check_against(&self, pool: &Pool) -> Result<bool, CatalogError> {
        let client = match pool.get().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %parley_core::db::DbError::from(e), "database unreachable at start-up; tool statements not checked yet");
                return Ok(false);
            }
        };
        if let Err(e) = client.batch_execute("BEGIN READ ONLY").await {
            connection_lost(&e);
            return Ok(false);
        }
        let checked = self.check_each(&client).await;
        let _ = client.batch_execute("ROLLBACK").await;
        if !checked? {
            return Ok(false);
        }
        self.check_privileges(&client).await
    }

    /// Every tool's privileges, all problems at once, in a transaction of their own: a
    /// statement's locks show which relations it touches, so none may linger from the
    /// schema check.
    async fn check_privileges(
        &self,
        client: &deadpool_postgres::Object,
    ) -> Result<bool, CatalogError> {
        let started = std::time::Instant::now();
        if let Err(e) = client.batch_execute("BEGIN READ ONLY").await {
            connection_lost(&e);
            return Ok(false);
        }
        let found = tools::privileges::check_all(client, &self.specs).await;
        let _ = client.batch_execute("ROLLBACK").await;
        match found {
            Ok(None) => {
                tracing::info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "tool roles' privileges checked"
                );
                Ok(true)
            }
            Ok(Some(missing)) => Err(CatalogError::Privileges(missing)),
            Err(e) if parley_core::db::is_connection_error(&e) => {
                connection_lost(&e);
                Ok(false)
            }
            // The check's own queries failed: not the tools' fault, so not a reason to refuse
            // them; a call refused for a privilege logs its fix (`privileges::log_refusal`).
            Err(e) => {
                tracing::warn!(error = %parley_core::db::pg_message(&e), "could not check the tool roles' privileges");
                Ok(true)
            }
        }
    }

    async fn check_each(&self, client: &deadpool_postgres::Object) -> Result<bool, CatalogError> {
        for tool in &self.specs {
            let mut refused = false;
            for (sql, types) in tools::exec::statements(tool) {
                match check_statement(client, tool, sql, &types).await? {
                    Prepared::Yes => {}
                    Prepared::Lost => return Ok(false),
                    Prepared::Refused => {
                        refused = true;
                        break;
                    }
                }
            }
            if refused {
                // The failed statement aborted the transaction; the other tools go on in a
                // new one, so every tool's problems are found in this one start-up.
                if let Err(e) = client.batch_execute("ROLLBACK; BEGIN READ ONLY").await {
                    connection_lost(&e);
                    return Ok(false);
                }
                continue;
            }
            if !check_settings(client, tool).await? || !check_columns(client, tool).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// A tools file read and parsed; errors name the file.
/// Adds a catalog's tools and guidance to the tools file that names it (`catalog_text` is the
/// catalog file's text). A tool of the file with one of their names is refused by the merge,
/// as any name declared twice.
pub fn serve_catalog(
    tools_file: &mut file::ToolsFile,
    catalog_text: &str,
    limits: Limits,
) -> Result<(), FileError> {
    use crate::semantic::served::{INSTRUCTIONS, tool_specs};
    let Some(spec) = &tools_file.catalog else {
        return Ok(());
    };
    let catalog = crate::semantic::file::parse(catalog_text)
        .map_err(|e| FileError::Catalog(format!("{}: {e}", spec.file)))?;
    let added = tool_specs(spec, &catalog, limits)?;
    if let Some(clash) = tools_file
        .tools
        .iter()
        .find(|t| added.iter().any(|a| a.name == t.name))
    {
        return Err(FileError::Catalog(format!(
            "tool `{}` has the name of a tool the catalog adds",
            clash.name
        )));
    }
    tools_file.tools.extend(added);
    tools_file.hidden = catalog
        .tables
        .iter()
        .flat_map(|t| {
            let columns = t
                .columns
                .iter()
                .filter(|c| c.hidden)
                .map(|c| format!("{}.{}", t.name, c.name));
            t.hidden.then(|| t.name.clone()).into_iter().chain(columns)
        })
        .collect();
    let guidance = match tools_file.instructions.take() {
        Some(own) => format!("{own}\n\n{INSTRUCTIONS}"),
        None => INSTRUCTIONS.to_owned(),
    };
    tools_file.instructions = Some(guidance);
    Ok(())
}

fn read(path: &Path, limits: Limits) -> Result<ToolsFile, CatalogError> {
    let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let named = |source| CatalogError::File {
        path: path.display().to_string(),
        source,
    };
    let mut parsed = file::parse(&text, limits).map_err(named)?;
    // A `[catalog]` file is found beside the tools file (docs/catalog.md).
    if let Some(spec) = &parsed.catalog {
        let at = path.parent().unwrap_or(Path::new("")).join(&spec.file);
        let catalog_text = std::fs::read_to_string(&at).map_err(|source| CatalogError::Read {
            path: at.display().to_string(),
            source,
        })?;
        serve_catalog(&mut parsed, &catalog_text, limits).map_err(named)?;
    }
    Ok(parsed)
}

/// How preparing one statement went, when it did not show a schema mismatch.
enum Prepared {
    Yes,
    /// The connection was lost on the way.
    Lost,
    /// The login lacks a privilege parsing checks (a schema's USAGE): the privileges check
    /// that follows names the grant, beside every other tool's.
    Refused,
}

/// Prepares one statement of `tool`: `Err(Schema)` when it does not fit the database.
async fn check_statement(
    client: &deadpool_postgres::Object,
    tool: &ToolSpec,
    sql: &str,
    types: &[tokio_postgres::types::Type],
) -> Result<Prepared, CatalogError> {
    match client.prepare_typed(sql, types).await {
        Ok(_) => Ok(Prepared::Yes),
        Err(e) if parley_core::db::is_connection_error(&e) => {
            connection_lost(&e);
            Ok(Prepared::Lost)
        }
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE) => {
            Ok(Prepared::Refused)
        }
        Err(e) => Err(CatalogError::Schema {
            tool: tool.name.clone(),
            message: parley_core::db::pg_message(&e),
        }),
    }
}

/// Applies the tool's `[tool.settings]` in a savepoint rolled back at once, so an unknown
/// setting or a value it does not take stops start-up, not the first call.
async fn check_settings(
    client: &deadpool_postgres::Object,
    tool: &ToolSpec,
) -> Result<bool, CatalogError> {
    if tool.settings.is_empty() {
        return Ok(true);
    }
    let settings: Vec<&str> = tool
        .settings
        .iter()
        .flat_map(|(name, value)| [name.as_str(), value.as_str()])
        .collect();
    let outcome = async {
        client.batch_execute("SAVEPOINT settings").await?;
        client
            .execute_typed(
                "SELECT parley.set_local($1)",
                &[(&settings, tokio_postgres::types::Type::TEXT_ARRAY)],
            )
            .await?;
        client.batch_execute("ROLLBACK TO SAVEPOINT settings").await
    }
    .await;
    match outcome {
        Ok(()) => Ok(true),
        Err(e) if parley_core::db::is_connection_error(&e) => {
            connection_lost(&e);
            Ok(false)
        }
        Err(e) => {
            // The failed SET left the transaction aborted; check_against rolls it back.
            Err(CatalogError::Schema {
                tool: tool.name.clone(),
                message: format!("[tool.settings]: {}", parley_core::db::pg_message(&e)),
            })
        }
    }
}

/// The columns a statement returns: each name once, since `row_to_json` would give a row
/// two values under one key (which JSON parsers keep one of); and a citation must name
/// columns the statement returns: a misspelt one would give the chat sources without titles,
/// not an error.
async fn check_columns(
    client: &deadpool_postgres::Object,
    tool: &ToolSpec,
) -> Result<bool, CatalogError> {
    // Prepared, never run, and not cached: only its description is wanted.
    let statement = match client
        .prepare_typed(&tool.columns_sql, &tool.placeholder_types)
        .await
    {
        Ok(statement) => statement,
        Err(e) if parley_core::db::is_connection_error(&e) => return Ok(false),
        Err(e) => {
            return Err(CatalogError::Schema {
                tool: tool.name.clone(),
                message: parley_core::db::pg_message(&e),
            });
        }
    };
    let returned: Vec<&str> = statement.columns().iter().map(|c| c.name()).collect();
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = returned.iter().find(|name| !seen.insert(**name)) {
        return Err(CatalogError::Schema {
            tool: tool.name.clone(),
            message: format!(
                "the statement returns two columns named `{twice}`; name each one (`AS`), as \
                 each row is one JSON object and a key holds one value"
            ),
        });
    }
    if let Some(rerank) = &tool.rerank
        && !returned.contains(&rerank.text.as_str())
    {
        return Err(CatalogError::Schema {
            tool: tool.name.clone(),
            message: format!(
                "rerank text names the column `{}`, which the statement does not return \
                 (it returns {})",
                rerank.text,
                returned.join(", ")
            ),
        });
    }
    let Some(citation) = &tool.citation else {
        return Ok(true);
    };
    match citation
        .columns()
        .find(|(_, column)| !returned.contains(column))
    {
        None => Ok(true),
        Some((key, column)) => Err(CatalogError::Schema {
            tool: tool.name.clone(),
            message: format!(
                "citation `{key}` names the column `{column}`, which the statement does not \
                 return (it returns {})",
                returned.join(", ")
            ),
        }),
    }
}

/// The log line of a check that lost its database connection (start-up goes on without it).
fn connection_lost(e: &tokio_postgres::Error) {
    tracing::warn!(error = %parley_core::db::pg_message(e), "database connection lost while checking tools");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_served_catalog_adds_its_tools_and_hides_its_hidden_names_from_the_sql_hints() {
        let mut file = file::parse(
            "[sql]\nschemas = [\"s\"]\n[catalog]\nfile = \"c.toml\"\n",
            Limits::default(),
        )
        .unwrap();
        let catalog = "schemas = [\"s\"]\n\
            [[table]]\nname = \"s.internal\"\nhidden = true\n\
            [[table]]\nname = \"s.customer\"\n\
            [[table.column]]\nname = \"card_number\"\nhidden = true\n\
            [[table.column]]\nname = \"name\"\n";
        serve_catalog(&mut file, catalog, Limits::default()).unwrap();
        let merged = Catalog::merge(vec![("tools.toml".into(), file)]).unwrap();
        let names: Vec<&str> = merged.specs().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["search_catalog", "find_values"]);
        let sql = merged.sql().unwrap();
        assert_eq!(sql.hidden, ["s.internal", "s.customer.card_number"]);
        assert!(
            sql.notes
                .as_deref()
                .unwrap()
                .contains("call search_catalog")
        );
    }
}
