//! A verified query as the declared read tool it is served as: `verified_<name>`, its SQL and
//! typed parameters checked exactly as a tools file's `[[tool]]` (`tools::spec`), run under the
//! caller's identity and row-level security like any declared tool. Its listing names the
//! query (`_meta["parley/verified"]`), so a client can say a reply was answered from it.

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
    let mut spec = tools::spec::parse_tools(vec![raw], limits)?.remove(0);
    spec.verified = Some(query.name.clone());
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use indexmap::IndexMap;
    use serde_json::json;

    use super::*;

    fn top_artists() -> VerifiedQuery {
        let mut since = toml::Table::new();
        since.insert("type".into(), "string".into());
        VerifiedQuery {
            name: "top_artists".into(),
            questions: vec!["Who sold best?".into()],
            description: Some("Artists by revenue".into()),
            sql: "SELECT name FROM artist WHERE created >= :since::date".into(),
            params: IndexMap::from([("since".to_owned(), since)]),
        }
    }

    #[test]
    fn the_listing_of_a_verified_query_names_it_for_the_client() {
        let spec = tool_spec(&top_artists(), Some("parley_reader"), Limits::default()).unwrap();
        let listing = tools::describe(&spec);
        assert_eq!(listing.name, "verified_top_artists");
        assert!(listing.hints.read_only);
        assert_eq!(
            listing.meta[parley_wire::META_VERIFIED],
            json!("top_artists")
        );
        assert!(
            listing
                .description
                .starts_with("A query the team verified: Artists by revenue."),
            "{}",
            listing.description
        );
    }
}
