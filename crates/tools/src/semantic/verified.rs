//! A verified query as the declared read tool it is served as: `verified_<name>`, its SQL and
//! typed parameters checked exactly as a tools file's `[[tool]]` (`tools::spec`), run under the
//! caller's identity and row-level security like any declared tool.

use crate::output::Limits;
use crate::tools::{self, DeclarationError, ToolSpec};

use super::file::VerifiedQuery;

/// What a verified query's tool is called: the prefix says to the model (and the turn's
/// sources say to the person) that the team vouches for its SQL.
pub const PREFIX: &str = "verified_";

/// `query` as a read-only tool running as `role` (the SQL reader role, when there is one).
pub fn tool_spec(
    query: &VerifiedQuery,
    role: Option<&str>,
    limits: Limits,
) -> Result<ToolSpec, DeclarationError> {
    let mut description = String::from("A query the team verified");
    if let Some(d) = query
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
    {
        description.push_str(": ");
        description.push_str(d.trim());
    }
    description.push_str(". It answers questions like: ");
    description.push_str(&query.questions.join(" / "));
    let mut raw = toml::Table::new();
    raw.insert("name".into(), format!("{PREFIX}{}", query.name).into());
    raw.insert("description".into(), description.into());
    raw.insert("sql".into(), query.sql.clone().into());
    if let Some(role) = role {
        raw.insert("role".into(), role.into());
    }
    let params: toml::Table = query
        .params
        .iter()
        .map(|(name, p)| (name.clone(), toml::Value::Table(p.clone())))
        .collect();
    raw.insert("params".into(), params.into());
    let raw: tools::spec::RawTool =
        toml::Value::Table(raw)
            .try_into()
            .map_err(|e: toml::de::Error| DeclarationError {
                tool: format!("{PREFIX}{}", query.name),
                problem: e.message().to_owned(),
            })?;
    Ok(tools::spec::parse_tools(vec![raw], limits)?.remove(0))
}
