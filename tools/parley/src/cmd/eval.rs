//! `parley eval QUESTIONS.toml` (or `.jsonl`): a team's labelled questions run through its search tool's own
//! SQL (the shipped hybrid, each branch alone, the hybrid reranked when `RERANK` is set),
//! scored by recall@k and MRR@10, with the misses and what came instead. Reads only; exits 0
//! whatever the scores.

use std::fmt::Write as _;
use std::path::PathBuf;

use parley_core::config::Env;
use parley_embed::{EmbedSettings, Embedder};
use parley_tools::tools::ToolSpec;
use serde_json::{Value, json};

use super::{CmdError, Out};
use crate::eval::score::{self, Group, Score, Summary};
use crate::eval::{
    DEPTH, Question, QuestionsError, SearchError, ToolError, branches, questions, search, tool,
};

#[derive(Debug, clap::Args)]
#[command(
    about = "Score a search tool on your own labelled questions: recall@k and MRR@10 for the \
             hybrid search and each branch alone, and the misses",
    long_about = "Score a search tool on your own labelled questions: recall@k and MRR@10 for \
                  the hybrid search and each branch alone (vector only, words only), per split, \
                  kind and part when the file labels them, and the misses with what came \
                  instead. With a reranker configured (RERANK) and declared by the tool, the \
                  hybrid's rows reranked are scored too.\n\nIt runs the tool's own SQL directly on the database in \
                  DATABASE_URL, connected as the tables' owner as `parley ingest` is (so \
                  row-level security does not narrow what is found), in the transaction the \
                  mcp function opens for the tool. Which collections are searched is still \
                  the tool's rule: without --user, what the service token may search (the \
                  public collections); with --user SUB, what that user may read. It embeds each question \
                  with the EMBEDDINGS_* settings. Exits 0 when it ran, whatever the scores; 2 \
                  for a bad questions file, tools file or option; 1 when the database or the \
                  embedder fails. The file format: docs/documents.md, \"Measuring retrieval\"; a \
                  .jsonl file (labelled `parley feedback export` lines): docs/feedback.md."
)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    pub of: Option<Of>,
    /// The questions: `[[question]]` tables with `q` and `pages` (or `documents`), and
    /// optionally `collection`, `filters`, `kind`, `part` and `split`; or a `.jsonl` file, one
    /// JSON object with those fields per line (`parley feedback export`'s, once labelled).
    #[arg(value_name = "QUESTIONS.toml|.jsonl", required = true)]
    pub questions: Option<PathBuf>,
    /// Leave out the questions nobody has labelled yet (no `pages` or `documents`), listing
    /// them on stderr, instead of refusing the file.
    #[arg(long)]
    pub skip_unlabelled: bool,
    #[command(flatten)]
    pub search: SearchAs,
    /// Recall is over the first K results (the tool is asked for max(K, 10) rows).
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::value_parser!(u16).range(1..=100))]
    pub k: u16,
    /// How many misses to print (questions with no answer in the first K); `--json` lists
    /// as many and counts them all.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub misses: usize,
    /// Print one JSON document (overall, per group, per branch, misses) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Only the questions of this split.
    #[arg(long, value_parser = questions::SPLITS)]
    pub split: Option<String>,
}

/// What else `parley eval` scores.
#[derive(Debug, clap::Subcommand)]
pub enum Of {
    /// Score the semantic catalog's tools on labelled questions: recall@k and complete@k for
    /// tables (search_catalog), value hit@5 (find_values), per split.
    Catalog(super::eval_catalog::Args),
}

// Which tool runs, and for whom: shared with `parley search`. No doc comment: a flattened
// group's would stand as the summary of a subcommand that has none of its own.
#[derive(Debug, Clone, clap::Args)]
pub struct SearchAs {
    /// The tools file holding the search tool [default: the TOOLS_FILE setting, else the
    /// documents domain's tools.toml].
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// The search tool.
    #[arg(long, value_name = "NAME", default_value = "search_documents")]
    pub tool: String,
    /// Search as this user (a token's `sub`, as `parley enroll --user` names them): the
    /// collections they are enrolled in and the public ones. Without it, the public ones only.
    #[arg(long, value_name = "SUB")]
    pub user: Option<String>,
}

impl SearchAs {
    /// The tool, loaded and checked as the mcp function loads it.
    pub fn load(&self, env: &Env) -> Result<tool::Loaded, ToolError> {
        tool::load(self.tools.as_deref(), env, &self.tool)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Questions(#[from] QuestionsError),
    #[error(transparent)]
    Tool(#[from] ToolError),
    #[error("tool `{0}` has no `collection` parameter, but a question names a collection")]
    NoCollection(String),
    #[error("no question in {file} has split {split:?}")]
    NoneInSplit { file: String, split: String },
    #[error("question {n} ({q:?}): {source}")]
    Search {
        n: usize,
        q: String,
        source: SearchError,
    },
}

impl EvalError {
    /// A mistake in the questions file, the tools file or the options, as opposed to a
    /// database or embedder that failed.
    pub fn is_usage(&self) -> bool {
        match self {
            EvalError::Questions(QuestionsError::Read { .. }) => false,
            EvalError::Search { source, .. } => source.is_usage(),
            _ => true,
        }
    }
}

/// One question's results under every method, best first.
struct Ran {
    /// Per method, in the order of `Report::methods`.
    uris: Vec<Vec<String>>,
    scores: Vec<Score>,
}

struct Report {
    file: String,
    tools: String,
    tool: String,
    model: String,
    /// `--user`: whose collections were searched; `None`, the service token's.
    user: Option<String>,
    k: usize,
    questions: Vec<Question>,
    /// The hybrid (the tool as shipped) first, then each branch alone.
    methods: Vec<Summary>,
    /// Why the branches could not be compared, when they could not.
    no_branches: Option<String>,
    /// The last method is the hybrid reranked (`RERANK` set and the tool declares `rerank`).
    reranked: bool,
    runs: Vec<Ran>,
    misses: usize,
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let questions_file = match (args.of, args.questions) {
        (Some(Of::Catalog(of)), _) => return super::eval_catalog::run(of, env, out).await,
        (None, Some(file)) => file,
        // clap requires one of the two.
        (None, None) => {
            return Err(CmdError::Usage(
                "QUESTIONS.toml (or .jsonl) is required".into(),
            ));
        }
    };
    let read =
        questions::read_file(&questions_file, args.skip_unlabelled).map_err(EvalError::from)?;
    let file = questions_file.display().to_string();
    say_skipped(&file, &read.skipped);
    let mut all = read.questions;
    if let Some(split) = &args.split {
        all.retain(|q| q.split.as_ref() == Some(split));
        if all.is_empty() {
            return Err(EvalError::NoneInSplit {
                file,
                split: split.clone(),
            }
            .into());
        }
    }
    let tool::Loaded { spec, files: tools } = args.search.load(env).map_err(EvalError::from)?;
    let spec = &spec;
    if all.iter().any(|q| q.collection.is_some())
        && !spec.params.iter().any(|p| p.name == "collection")
    {
        return Err(EvalError::NoCollection(spec.name.clone()).into());
    }
    let k = usize::from(args.k);
    let limit = k.max(DEPTH);
    let failed = |n: usize, q: &Question| {
        let q = q.q.clone();
        move |source: SearchError| EvalError::Search {
            n: n + 1,
            q,
            source,
        }
    };
    for (n, q) in all.iter().enumerate() {
        search::check_arguments(spec, &search::arguments(spec, q, limit)).map_err(failed(n, q))?;
    }
    if all.iter().any(|q| q.filters.is_some()) && !spec.params.iter().any(|p| p.name == "filters") {
        eprintln!(
            "warning: tool `{}` declares no `filters` parameter; the questions' filters are not applied",
            spec.name
        );
    }
    let settings = EmbedSettings::from_env(env).map_err(CmdError::Settings)?;
    // Usage mistakes in DATABASE_URL surface before the model takes its second to load.
    crate::db::config_from_env(env)?;
    let embedder = Embedder::from_settings(&settings)?;
    let db = crate::db::connect(env).await?;

    let (variants, no_branches) = match branch_variants(spec) {
        Ok(v) => (v, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    // A tool without the two branches is not a hybrid: it is scored under its own name.
    let shipped = match no_branches {
        None => format!("hybrid ({})", spec.name),
        Some(_) => spec.name.clone(),
    };
    let mut sqls = vec![(shipped, spec.wrapped_sql.clone())];
    sqls.extend(variants);
    // The hybrid's rows reranked as the mcp function would, when a reranker is configured.
    let reranker = search::reranker(spec, env)
        .await
        .map_err(CmdError::Settings)?;
    let mut names: Vec<String> = sqls.iter().map(|(name, _)| name.clone()).collect();
    if reranker.is_some() {
        names.push(format!(
            "reranked ({})",
            env.get("RERANK").unwrap_or_default()
        ));
    }
    let mut rerank_failures = 0;

    let mut runs = Vec::with_capacity(all.len());
    for (n, q) in all.iter().enumerate() {
        let call = search::arguments(spec, q, limit);
        let embeddings = search::embeddings(spec, &call, &embedder)
            .await
            .map_err(failed(n, q))?;
        let mut ran = Ran {
            uris: Vec::new(),
            scores: Vec::new(),
        };
        for (_, sql) in &sqls {
            let uris = search::uris(
                &db,
                spec,
                sql,
                &call,
                &embeddings,
                embedder.model_id(),
                args.search.user.as_deref(),
            )
            .await
            .map_err(failed(n, q))?;
            ran.scores.push(score::score(&q.pages, &uris, k));
            ran.uris.push(uris);
        }
        if let Some((reranker, declared)) = &reranker {
            let (rows, rerank_error) = search::as_served(
                &db,
                spec,
                &call,
                &embeddings,
                embedder.model_id(),
                args.search.user.as_deref(),
                Some((reranker, declared)),
            )
            .await
            .map_err(failed(n, q))?;
            // As the tool does: the hybrid's order, counted and said below.
            if let Some(e) = rerank_error {
                rerank_failures += 1;
                eprintln!(
                    "warning: question {}: reranking failed ({e}); hybrid order kept",
                    n + 1
                );
            }
            let uris = search::uris_of(&rows);
            ran.scores.push(score::score(&q.pages, &uris, k));
            ran.uris.push(uris);
        }
        runs.push(ran);
    }
    if rerank_failures > 0 {
        eprintln!(
            "warning: reranking failed for {rerank_failures} of {} questions; their \
             \"reranked\" results are the hybrid's",
            all.len()
        );
    }
    let methods = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let scores: Vec<Score> = runs.iter().map(|r| r.scores[i]).collect();
            score::summarise(name, &all, &scores)
        })
        .collect();
    let report = Report {
        file,
        tools,
        tool: spec.name.clone(),
        model: embedder.model_id().to_owned(),
        user: args.search.user.clone(),
        k,
        questions: all,
        methods,
        no_branches,
        reranked: reranker.is_some(),
        runs,
        misses: args.misses,
    };
    if args.json {
        writeln!(out, "{:#}", report.json())?;
    } else {
        out.write_all(report.text().as_bytes())?;
    }
    Ok(())
}

/// Tells stderr which questions `--skip-unlabelled` left out (the report itself stays as it
/// is, so `--json` still parses).
pub(super) fn say_skipped(file: &str, skipped: &[usize]) {
    if skipped.is_empty() {
        return;
    }
    let places: Vec<String> = skipped.iter().map(usize::to_string).collect();
    eprintln!(
        "skipped {} unlabelled question{} of {file} (at {})",
        skipped.len(),
        if skipped.len() == 1 { "" } else { "s" },
        places.join(", ")
    );
}

/// Each branch alone, named, as SQL wrapped like the tool's: the hybrid with the other branches
/// emptied (see [`branches::only`]).
fn branch_variants(spec: &ToolSpec) -> Result<Vec<(String, String)>, branches::BranchError> {
    let (prefix, inner, suffix) = branches::unwrap(&spec.wrapped_sql)?;
    branches::present(inner)?
        .into_iter()
        .map(|b| {
            let sql = branches::only(inner, b)?;
            Ok((b.name().to_owned(), format!("{prefix}{sql}{suffix}")))
        })
        .collect()
}

impl Report {
    /// The questions whose hybrid results have no answer in the first k, in file order.
    fn missed(&self) -> impl Iterator<Item = (&Question, &Ran)> {
        self.questions
            .iter()
            .zip(&self.runs)
            .filter(|(_, r)| r.scores[0].recall == 0.0)
    }

    fn text(&self) -> String {
        let k = self.k;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{} questions from {}; tool {} in {}; embedded with {}; searching as {}\n",
            self.questions.len(),
            self.file,
            self.tool,
            self.tools,
            self.model,
            self.user
                .as_deref()
                .map_or("the service token (public collections)".to_owned(), |u| {
                    format!("user {u}")
                })
        );
        let width = self
            .methods
            .iter()
            .map(|m| m.method.len())
            .max()
            .unwrap_or(0);
        let _ = writeln!(
            s,
            "{:<width$}  {:>9}  {:>7}",
            "method",
            format!("recall@{k}"),
            "MRR@10"
        );
        for m in &self.methods {
            let _ = writeln!(
                s,
                "{:<width$}  {:>9.3}  {:>7.3}",
                m.method, m.recall, m.mrr10
            );
        }
        if let Some(why) = &self.no_branches {
            let _ = writeln!(s, "(branches not compared: {why})");
        }
        let labelled = self.methods.first().is_some_and(|m| {
            !(m.by_split.is_empty() && m.by_kind.is_empty() && m.by_part.is_empty())
        });
        if labelled {
            let _ = writeln!(s, "\nper split, kind and part (recall@{k} / MRR@10):");
            for m in &self.methods {
                for groups in [&m.by_split, &m.by_kind, &m.by_part] {
                    if !groups.is_empty() {
                        let line = score::groups_line(groups);
                        let _ = writeln!(s, "  {:<width$}  {line}", m.method);
                    }
                }
            }
        }
        let missed: Vec<_> = self.missed().collect();
        let _ = writeln!(
            s,
            "\nmisses: {} of {} questions have no answer in the first {k} of {} as shipped{}",
            missed.len(),
            self.questions.len(),
            self.tool,
            if missed.len() > self.misses {
                format!("; the first {} follow", self.misses)
            } else {
                String::new()
            }
        );
        for (q, ran) in missed.iter().take(self.misses) {
            let _ = writeln!(s, "  {:?}", q.q);
            let _ = writeln!(s, "    expected:     {}", q.pages.join(", "));
            let came = &ran.uris[0];
            let _ = writeln!(
                s,
                "    came instead: {}",
                if came.is_empty() {
                    "nothing".to_owned()
                } else {
                    came.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
                }
            );
        }
        s
    }

    fn json(&self) -> Value {
        let groups = |m: &Summary| {
            let list = |g: &[Group]| {
                g.iter()
                    .map(|g| {
                        json!({ "name": g.name, "questions": g.questions,
                                     "recall": g.recall, "mrr_at_10": g.mrr10 })
                    })
                    .collect::<Vec<_>>()
            };
            json!({ "split": list(&m.by_split), "kind": list(&m.by_kind), "part": list(&m.by_part) })
        };
        let method = |m: &Summary| {
            json!({ "method": m.method, "recall": m.recall, "mrr_at_10": m.mrr10,
                    "groups": groups(m) })
        };
        let hybrid = &self.methods[0];
        json!({
            "questions": self.questions.len(),
            "file": self.file,
            "tool": self.tool,
            "tools_file": self.tools,
            "model": self.model,
            "user": self.user,
            "k": self.k,
            "overall": { "method": hybrid.method, "recall": hybrid.recall, "mrr_at_10": hybrid.mrr10 },
            "groups": groups(hybrid),
            "branches": self.methods[1..self.methods.len() - usize::from(self.reranked)]
                .iter()
                .map(method)
                .collect::<Vec<_>>(),
            "reranked": self.methods.last().filter(|_| self.reranked).map(method),
            "branches_not_compared": self.no_branches,
            "missed": self.missed().count(),
            "misses": self.missed().take(self.misses).map(|(q, ran)| json!({
                "q": q.q,
                "expected": q.pages,
                "came_instead": ran.uris[0].iter().take(3).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}
