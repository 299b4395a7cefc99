//! One tools file's text parsed: its `[[tool]]`s (checked by `tools::spec`), its `[[prompt]]`s,
//! its `instructions` and its `[sql]` table (checked by `adhoc::spec`). Errors name the table
//! and the field; the catalog adds the file's path.

use serde::Deserialize;

use super::prompt::{self, PromptSpec};
use crate::adhoc;
use crate::output::Limits;
use crate::semantic::served::{self, CatalogSpec};
use crate::tools::{self, DeclarationError, ToolSpec};

/// Everything one tools file declares.
#[derive(Debug, Clone, Default)]
pub struct ToolsFile {
    /// Guidance for models about this file's tools (the server's instructions include it).
    pub instructions: Option<String>,
    pub tools: Vec<ToolSpec>,
    pub prompts: Vec<PromptSpec>,
    /// `[sql]`: the ad-hoc SQL tools this file turns on.
    pub sql: Option<adhoc::SqlSpec>,
    /// `[catalog]`: the semantic catalog whose tools the server adds (`semantic::served`).
    pub catalog: Option<CatalogSpec>,
    /// What that catalog hides (`schema.table`, `schema.table.column`): kept out of the SQL
    /// tools' repair hints too.
    pub hidden: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("tools file is not valid TOML: {0}")]
    Toml(String),
    #[error("tools file does not follow the tools format: {0}")]
    Format(String),
    #[error(transparent)]
    Tool(#[from] DeclarationError),
    #[error("prompt `{prompt}`: {problem}")]
    Prompt { prompt: String, problem: String },
    #[error("[sql]: {0}")]
    Sql(String),
    #[error("[catalog]: {0}")]
    Catalog(String),
    #[error("tools file declares no tools, no prompts and no [sql]")]
    Empty,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    instructions: Option<String>,
    /// The ad-hoc SQL tools, off unless present (see `crate::adhoc`).
    sql: Option<adhoc::spec::RawSql>,
    /// The semantic catalog (see `crate::semantic::served`).
    catalog: Option<served::RawCatalog>,
    #[serde(default, rename = "tool")]
    tools: Vec<tools::spec::RawTool>,
    #[serde(default, rename = "prompt")]
    prompts: Vec<prompt::RawPrompt>,
}

/// Parses a whole tools file.
pub fn parse(text: &str, limits: Limits) -> Result<ToolsFile, FileError> {
    // Syntax first, so "not valid TOML" is only said of text that is not.
    text.parse::<toml::Table>()
        .map_err(|e| FileError::Toml(e.to_string()))?;
    let raw: RawFile = toml::from_str(text).map_err(|e| FileError::Format(e.to_string()))?;
    if raw.tools.is_empty() && raw.prompts.is_empty() && raw.sql.is_none() && raw.catalog.is_none()
    {
        return Err(FileError::Empty);
    }
    let sql = raw
        .sql
        .map(|sql| adhoc::spec::parse(sql, limits))
        .transpose()
        .map_err(FileError::Sql)?;
    let catalog = raw
        .catalog
        .map(served::parse)
        .transpose()
        .map_err(FileError::Catalog)?;
    let instructions = raw
        .instructions
        .map(|i| i.trim().to_owned())
        .filter(|i| !i.is_empty());
    let mut prompts: Vec<PromptSpec> = Vec::with_capacity(raw.prompts.len());
    for (i, p) in raw.prompts.into_iter().enumerate() {
        let name = p
            .name
            .clone()
            .unwrap_or_else(|| format!("number {}", i + 1));
        let spec = prompt::parse(p).map_err(|problem| FileError::Prompt {
            prompt: name.clone(),
            problem,
        })?;
        if prompts.iter().any(|other| other.name == spec.name) {
            return Err(FileError::Prompt {
                prompt: name,
                problem: "is declared twice".into(),
            });
        }
        prompts.push(spec);
    }
    let tools = tools::spec::parse_tools(raw.tools, limits)?;
    if let Some(clash) = tools
        .iter()
        .find(|t| adhoc::Kind::from_name(&t.name).is_some())
        .filter(|_| sql.is_some())
    {
        return Err(FileError::Tool(DeclarationError {
            tool: clash.name.clone(),
            problem: "has the name of one of the [sql] tools".into(),
        }));
    }
    Ok(ToolsFile {
        instructions,
        tools,
        prompts,
        sql,
        catalog,
        hidden: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use indexmap::IndexMap;

    use super::*;

    /// The feedback demo's tools file, as deployments of the demo serve it.
    const FEEDBACK_TOOLS: &str = include_str!("../../../../domains/feedback/tools.toml");

    fn parse_text(text: &str) -> Result<ToolsFile, FileError> {
        parse(text, Limits::default())
    }

    #[test]
    fn the_feedback_tools_file_parses() {
        let tools = parse(FEEDBACK_TOOLS, Limits::default()).unwrap().tools;
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        for expected in [
            "lad_by_ref",
            "list_lads",
            "search_feedback",
            "feedback_stats",
            "get_feedback",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        assert!(tools.iter().all(|t| !t.writes));
    }

    #[test]
    fn duplicate_names_are_refused() {
        let one = "[[tool]]\nname = \"t\"\ndescription = \"d\"\nsql = \"SELECT 1\"\n";
        let err = parse(&format!("{one}{one}"), Limits::default()).unwrap_err();
        assert_eq!(err.to_string(), "tool `t`: is declared twice");
        let prompt = "[[prompt]]\nname = \"p\"\ntext = \"hi\"\n";
        let err = parse(&format!("{one}{prompt}{prompt}"), Limits::default()).unwrap_err();
        assert_eq!(err.to_string(), "prompt `p`: is declared twice");
    }

    #[test]
    fn only_text_that_is_not_toml_is_called_invalid_toml() {
        let err = parse_text("[[tool]\nname = ").unwrap_err();
        assert!(
            err.to_string().starts_with("tools file is not valid TOML"),
            "{err}"
        );
        let err = parse_text("[[tool]]\nname = 5\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("tools file does not follow the tools format"),
            "{err}"
        );
    }

    #[test]
    fn instructions_and_prompts_are_read_with_their_arguments() {
        let file = parse(
            "instructions = \"\"\"\n  Use the tools.\n\"\"\"\n\
             [[prompt]]\nname = \"overdue\"\ntitle = \"Overdue\"\ndescription = \"My overdue tasks\"\n\
             text = \"Which tasks are overdue{{tag}}?\"\n\
             [prompt.arguments.tag]\ndescription = \"a tag\"\n",
            Limits::default(),
        )
        .unwrap();
        assert_eq!(file.instructions.as_deref(), Some("Use the tools."));
        assert!(file.tools.is_empty());
        let p = &file.prompts[0];
        assert_eq!(p.arguments[0].name, "tag");
        assert!(!p.arguments[0].required);
        let mut args = IndexMap::new();
        assert_eq!(p.render(&args), "Which tasks are overdue?");
        args.insert("tag".to_owned(), " tagged home".to_owned());
        assert_eq!(p.render(&args), "Which tasks are overdue tagged home?");
    }

    #[test]
    fn prompt_templates_and_arguments_must_match() {
        let err = parse(
            "[[prompt]]\nname = \"p\"\ntext = \"a {{x}}\"\n",
            Limits::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "prompt `p`: text uses {{x}}, which is not a declared argument"
        );
        let err = parse(
            "[[prompt]]\nname = \"p\"\ntext = \"a\"\n[prompt.arguments.x]\n",
            Limits::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "prompt `p`: argument `x` is declared but the text never uses {{x}}"
        );
        let err = parse("[[prompt]]\nname = \"p\"\n", Limits::default()).unwrap_err();
        assert!(
            err.to_string().starts_with("prompt `p`: needs text"),
            "{err}"
        );
        let err = parse("instructions = \"x\"\n", Limits::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tools file declares no tools, no prompts and no [sql]"
        );
    }
}
