//! `parley eval catalog --questions FILE.jsonl`: the catalog's tools scored on labelled
//! questions (`crate::eval::catalog` says how). Each question goes to `search_catalog` and each
//! labelled value to `find_values`, bound and run by the tool engine exactly as the mcp
//! function runs them, against the index `parley catalog index` built. Reads only; exits 0
//! whatever the scores.

use std::path::PathBuf;

use parley_core::config::Env;
use parley_embed::{EmbedSettings, Embedder};
use serde_json::{Map, json};

use super::{CmdError, Out};
use crate::eval::catalog::{self, Outcome, SEARCH_ROWS, VALUE_DEPTH};
use crate::eval::{SearchError, search, tool};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The questions, one JSON object per line: `question` (or `q`), `tables` (schema.table),
    /// and optionally `values` ([{text, table, column, value}]), `split` and `id`; other keys
    /// (a `parley feedback export` line's `feedback`, `pages`) are ignored.
    #[arg(long, value_name = "FILE.jsonl")]
    pub questions: PathBuf,
    /// Leave out the lines nobody has labelled yet (no `tables`), listing them on stderr,
    /// instead of refusing the file.
    #[arg(long)]
    pub skip_unlabelled: bool,
    /// The tools file whose `[catalog]` is scored [default: the TOOLS_FILE setting].
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// Only the questions of this split.
    #[arg(long)]
    pub split: Option<String>,
    /// How many misses of each kind to print.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub misses: usize,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum EvalCatalogError {
    #[error(transparent)]
    Questions(#[from] catalog::QuestionsError),
    #[error(transparent)]
    Tool(#[from] tool::ToolError),
    #[error("no question has split {0:?}")]
    NoneInSplit(String),
    #[error("question {id}: {source}")]
    Search { id: String, source: SearchError },
}

impl EvalCatalogError {
    pub fn is_usage(&self) -> bool {
        match self {
            EvalCatalogError::Questions(catalog::QuestionsError::Read { .. }) => false,
            EvalCatalogError::Search { source, .. } => source.is_usage(),
            _ => true,
        }
    }
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let read =
        catalog::read(&args.questions, args.skip_unlabelled).map_err(EvalCatalogError::from)?;
    super::eval::say_skipped(&args.questions.display().to_string(), &read.skipped);
    let mut questions = read.questions;
    if let Some(split) = &args.split {
        questions.retain(|q| q.split.as_ref() == Some(split));
        if questions.is_empty() {
            return Err(EvalCatalogError::NoneInSplit(split.clone()).into());
        }
    }
    let search_tool = tool::load(args.tools.as_deref(), env, "search_catalog")
        .map_err(EvalCatalogError::from)?
        .spec;
    let values_tool = tool::load(args.tools.as_deref(), env, "find_values")
        .map_err(EvalCatalogError::from)?
        .spec;
    let settings = EmbedSettings::from_env(env).map_err(CmdError::Settings)?;
    crate::db::config_from_env(env)?;
    let embedder = Embedder::from_settings(&settings)?;
    let db = crate::db::connect(env).await?;
    let model = embedder.model_id().to_owned();
    let mut outcomes = Vec::with_capacity(questions.len());
    for (n, q) in questions.into_iter().enumerate() {
        let id = q.id.clone().unwrap_or_else(|| format!("{}", n + 1));
        let failed = |source| EvalCatalogError::Search {
            id: id.clone(),
            source,
        };
        let args = Map::from_iter([
            ("question".to_owned(), json!(q.question)),
            ("limit".to_owned(), json!(SEARCH_ROWS)),
        ]);
        let embeddings = search::embeddings(&search_tool, &args, &embedder)
            .await
            .map_err(failed)?;
        let rows = search::rows(
            &db,
            &search_tool,
            &search_tool.wrapped_sql,
            &args,
            &embeddings,
            &model,
            None,
        )
        .await
        .map_err(failed)?;
        let mut value_hits = Vec::with_capacity(q.values.len());
        for label in &q.values {
            let args = Map::from_iter([
                ("text".to_owned(), json!(label.text)),
                ("limit".to_owned(), json!(VALUE_DEPTH)),
            ]);
            let found = search::rows(
                &db,
                &values_tool,
                &values_tool.wrapped_sql,
                &args,
                &Default::default(),
                &model,
                None,
            )
            .await
            .map_err(failed)?;
            value_hits.push(catalog::value_hit(&found, label));
        }
        outcomes.push(Outcome {
            ranked: catalog::ranked_tables(&rows),
            question: q,
            value_hits,
        });
    }
    if args.json {
        writeln!(out, "{}", catalog::json_report(&outcomes))?;
    } else {
        write!(out, "{}", catalog::text(&outcomes, args.misses))?;
    }
    Ok(())
}
