//! A search tool's SQL run for one question through the tool engine: the values bound as a
//! call binds them (`call::bind`, the embeddings of the arguments the tool embeds and the
//! embedder's model id), the statement (or a variant of it) run in a call's transaction
//! (`exec::read_variant`), and the rows ordered by the call's reranker (`Reranker::order`,
//! with `RERANK`). It returns the rows, or their uris, best first.

use std::collections::HashMap;

use parley_core::config::{ConfigError, Env};
use parley_core::jwt::VerifiedClaims;
use parley_embed::{EmbedError, Embedder};
use parley_tools::call::{self, Bound, Caller};
use parley_tools::rerank::{self, RerankError, RerankSettings, Reranker};
use parley_tools::tools::params::Source;
use parley_tools::tools::spec::Rerank;
use parley_tools::tools::{ToolSpec, embedding, exec};
use serde_json::{Map, Value, json};

use super::Question;

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The question's arguments do not fit the tool's parameters (e.g. a `--k` above its
    /// `limit` maximum): a usage mistake.
    #[error("tool `{tool}` refuses the arguments {arguments}: {problem}")]
    Arguments {
        tool: String,
        arguments: String,
        problem: String,
    },
    #[error("tool `{0}` binds parameters from the caller's token; evaluation cannot make one up")]
    NeedsCaller(String),
    #[error("embedding the question failed: {0}")]
    Embed(#[from] EmbedError),
    /// What Postgres said (`parley_core::db::pg_message`): a refusal of the tool's own, such
    /// as a collection the caller may not read, reads as the model would see it.
    #[error("running the tool's SQL failed: {0}")]
    Database(String),
    #[error("a row of the tool is not JSON: {0}")]
    Row(#[from] serde_json::Error),
}

impl From<tokio_postgres::Error> for SearchError {
    fn from(e: tokio_postgres::Error) -> Self {
        SearchError::Database(parley_core::db::pg_message(&e))
    }
}

impl SearchError {
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            SearchError::Arguments { .. } | SearchError::NeedsCaller(_)
        )
    }
}

/// What a model would send for `question`, asking for `limit` rows: `query`, and `collection`
/// and `filters` from the question when it has them and the tool declares them (a tool
/// without a `filters` parameter is called without the question's filters).
pub fn arguments(spec: &ToolSpec, question: &Question, limit: usize) -> Map<String, Value> {
    call_arguments(
        spec,
        &question.q,
        question.collection.as_deref(),
        question.filters.as_ref(),
        Some(limit),
    )
}

/// What a model would send to look for `query`: with `collection`, `filters` (when the tool
/// declares them) and `limit` when given; a limit left out takes the tool's default.
pub fn call_arguments(
    spec: &ToolSpec,
    query: &str,
    collection: Option<&str>,
    filters: Option<&Map<String, Value>>,
    limit: Option<usize>,
) -> Map<String, Value> {
    let declares = |name: &str| {
        spec.params
            .iter()
            .any(|p| p.name == name && p.source == Source::Argument)
    };
    let mut m = Map::new();
    m.insert("query".into(), json!(query));
    if let Some(limit) = limit {
        m.insert("limit".into(), json!(limit));
    }
    if let Some(c) = collection {
        m.insert("collection".into(), json!(c));
    }
    if let Some(f) = filters.filter(|_| declares("filters")) {
        m.insert("filters".into(), Value::Object(f.clone()));
    }
    m
}

/// The values the tool's parameters take from `args` and the rows they ask for, bound by the
/// engine (`call::bind`) as for a call, or why it refuses them (before anything is embedded
/// or run, so a bad file or option stops at once).
pub fn check_arguments(spec: &ToolSpec, args: &Map<String, Value>) -> Result<Bound, SearchError> {
    if spec
        .params
        .iter()
        .any(|p| matches!(p.source, Source::Caller(_)))
    {
        return Err(SearchError::NeedsCaller(spec.name.clone()));
    }
    // No caller-bound parameter is left, so the service binds as any caller would.
    call::bind(spec, Some(args), &Caller::Service).map_err(|e| SearchError::Arguments {
        tool: spec.name.clone(),
        arguments: Value::Object(args.clone()).to_string(),
        // The parameter's own words, without the tool result's "invalid arguments:".
        problem: match e {
            call::ToolError::Arguments(e) => e.to_string(),
            other => other.to_string(),
        },
    })
}

/// The embeddings of the string arguments the tool embeds (`from = "embedding.<argument>"`),
/// by argument name; an argument not given is left out and bound as NULL.
pub async fn embeddings(
    spec: &ToolSpec,
    args: &Map<String, Value>,
    embedder: &Embedder,
) -> Result<HashMap<String, Vec<f32>>, SearchError> {
    let mut out = HashMap::new();
    for param in &spec.params {
        if let Source::Embedding(argument) = &param.source
            && !out.contains_key(argument)
            && let Some(text) = args.get(argument).and_then(Value::as_str)
        {
            out.insert(argument.clone(), embedder.embed_one(text).await?);
        }
    }
    Ok(out)
}

/// Runs `sql` (the tool's `wrapped_sql`, or a branch of it wrapped the same way) on `db` with
/// the values the server binds for `args`, and returns the rows' `uri`s. `begin_sql` takes
/// the tool's role and settings as the server does. Without `user` (a subject) it reads what
/// the service token may read (`parley.searchable_collections`: the public collections); with
/// one, `parley.caller` carries that subject alone (no groups), as for a signed-in user.
pub async fn uris(
    db: &tokio_postgres::Client,
    spec: &ToolSpec,
    sql: &str,
    args: &Map<String, Value>,
    embeddings: &HashMap<String, Vec<f32>>,
    model: &str,
    user: Option<&str>,
) -> Result<Vec<String>, SearchError> {
    Ok(uris_of(
        &rows(db, spec, sql, args, embeddings, model, user).await?,
    ))
}

/// Each row's `uri`, in order.
pub fn uris_of(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|row| row["uri"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// [`uris`], the whole rows: bound by the engine (`call::bind`) and run as a call runs
/// (`exec::read_variant`).
pub async fn rows(
    db: &tokio_postgres::Client,
    spec: &ToolSpec,
    sql: &str,
    args: &Map<String, Value>,
    embeddings: &HashMap<String, Vec<f32>>,
    model: &str,
    user: Option<&str>,
) -> Result<Vec<Value>, SearchError> {
    let Bound {
        mut values,
        row_limit,
    } = check_arguments(spec, args)?;
    // The question's embeddings, computed once for every variant of the SQL, bound as the
    // engine binds a call's own.
    embedding::fill(
        &spec.params,
        &mut values,
        |argument| embeddings.get(argument).cloned(),
        model,
    );
    // A signed-in user's subject alone (no groups).
    let user = user.map(|sub| VerifiedClaims {
        subject: sub.to_owned(),
        claims: Map::from_iter([("sub".to_owned(), json!(sub))]),
    });
    exec::read_variant(db, spec, sql, &values, user.as_ref(), row_limit)
        .await?
        .iter()
        .map(|row| Ok(serde_json::from_str(row)?))
        .collect()
}

/// The reranker the mcp function would apply to `spec`'s rows: `RERANK` is set and the tool
/// declares `rerank`. `None` otherwise, as the function runs such a tool unreranked.
pub async fn reranker<'a>(
    spec: &'a ToolSpec,
    env: &Env,
) -> Result<Option<(Reranker, &'a Rerank)>, ConfigError> {
    Ok(match (RerankSettings::from_env(env)?, &spec.rerank) {
        (Some(settings), Some(declared)) => Some((Reranker::new(settings, env).await, declared)),
        _ => None,
    })
}

/// The rows the mcp function answers a call with: [`rows`] of the tool's own SQL, reranked
/// when `reranker` is given (see [`reranker`]) as the function reranks them: fetched as deep as
/// the function would (within the tool's `max_rows`, which bounds the limit argument here),
/// reordered, cut to the call's limit. A reranker that fails leaves the SQL's order, as in the
/// function; why is returned beside the rows.
pub async fn as_served(
    db: &tokio_postgres::Client,
    spec: &ToolSpec,
    args: &Map<String, Value>,
    embeddings: &HashMap<String, Vec<f32>>,
    model: &str,
    user: Option<&str>,
    reranker: Option<(&Reranker, &Rerank)>,
) -> Result<(Vec<Value>, Option<RerankError>), SearchError> {
    let Some((reranker, declared)) = reranker else {
        let rows = rows(db, spec, &spec.wrapped_sql, args, embeddings, model, user).await?;
        return Ok((rows, None));
    };
    let limit = check_arguments(spec, args)?.row_limit;
    let depth = rerank::fetch_depth(declared.depth, limit).min(spec.max_rows);
    let mut deep = args.clone();
    if let Some(i) = spec.limit_param {
        deep.insert(spec.params[i].name.clone(), json!(depth));
    }
    let rows = rows(db, spec, &spec.wrapped_sql, &deep, embeddings, model, user).await?;
    let texts: Vec<String> = rows
        .iter()
        .map(|row| {
            row.as_object()
                .map(|row| rerank::text_in(row, &declared.text))
                .unwrap_or_default()
        })
        .collect();
    let query = deep
        .get(&spec.params[declared.query].name)
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (order, failed) = reranker.order(query, &texts).await;
    let kept = order
        .iter()
        .take(usize::try_from(limit).unwrap_or(usize::MAX))
        .map(|&i| rows[i].clone())
        .collect();
    Ok((kept, failed))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use parley_tools::catalog::Catalog;
    use parley_tools::output::Limits;

    use super::*;

    /// `search` with a `filters` parameter (a string here: only that it is declared matters)
    /// and `plain` without one.
    fn tools() -> (tempfile::TempDir, Catalog) {
        let dir = tempfile::tempdir().unwrap();
        let path: PathBuf = dir.path().join("tools.toml");
        let tool = |name: &str, extra: &str| {
            let filter = if extra.is_empty() {
                ""
            } else {
                " WHERE :filters IS NOT NULL"
            };
            format!(
                "[[tool]]\nname = \"{name}\"\ndescription = \"d\"\nlimit_param = \"limit\"\n\
                 sql = \"SELECT :query AS uri{filter} LIMIT :limit\"\n\
                 [tool.params.query]\ntype = \"string\"\nrequired = true\n\
                 [tool.params.limit]\ntype = \"integer\"\n{extra}"
            )
        };
        let text = format!(
            "{}\n{}",
            tool("search", "[tool.params.filters]\ntype = \"string\"\n"),
            tool("plain", "")
        );
        std::fs::write(&path, text).unwrap();
        let catalog = Catalog::load(&[path], Limits::default()).unwrap();
        (dir, catalog)
    }

    fn question() -> Question {
        Question {
            q: "What changed?".into(),
            pages: vec!["a.md".into()],
            collection: Some("policies".into()),
            filters: Some(Map::from_iter([("department".into(), json!("finance"))])),
            kind: None,
            part: None,
            split: None,
        }
    }

    #[test]
    fn filters_reach_only_a_tool_that_declares_them() {
        let (_dir, catalog) = tools();
        let with = arguments(catalog.get("search").unwrap(), &question(), 10);
        assert_eq!(
            Value::Object(with),
            json!({ "query": "What changed?", "limit": 10, "collection": "policies",
                    "filters": { "department": "finance" } })
        );
        let without = arguments(catalog.get("plain").unwrap(), &question(), 10);
        assert!(!without.contains_key("filters"), "{without:?}");
    }

    #[test]
    fn arguments_the_tool_refuses_are_a_usage_mistake() {
        let (_dir, catalog) = tools();
        let plain = catalog.get("plain").unwrap();
        // `plain` has no `collection` parameter.
        let err = check_arguments(plain, &arguments(plain, &question(), 10)).unwrap_err();
        assert!(err.is_usage(), "{err}");
        assert!(err.to_string().contains("collection"), "{err}");
        let mut q = question();
        q.collection = None;
        assert!(check_arguments(plain, &arguments(plain, &q, 10)).is_ok());
    }
}
