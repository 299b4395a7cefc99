//! `parley search QUERY`: a search tool (the documents domain's `search_documents` unless
//! `--tool` names another) run from the shell as the mcp function runs it for a caller: the
//! same SQL and bound values, the query embedded with the `EMBEDDINGS_*` model, reranked when
//! `RERANK` is set and the tool declares it. It reads; it never writes. The run itself is
//! `eval::search`'s, shared with `parley eval`, so there is one copy of how a call is bound.

use parley_core::config::Env;
use parley_embed::{EmbedSettings, Embedder};
use serde_json::Value;

use super::eval::SearchAs;
use super::table::{aligned, cut, one_line};
use super::{CmdError, Out};
use crate::eval::{SearchError, search};

#[derive(Debug, clap::Args)]
#[command(
    about = "Search documents from the shell as the mcp function's search tool does, for the \
             public collections or as a user (embeds the query with EMBEDDINGS_*)",
    long_about = "Search documents from the shell, as the mcp function's search tool answers a \
                  caller: the same SQL (meaning and words together), the query embedded with \
                  the EMBEDDINGS_* settings, reranked when RERANK is set. Without --user it \
                  searches what the service token may (the public collections); with --user \
                  SUB, what that user may read. Prints the passages best first as a table \
                  (score, collection, uri, heading, the snippet on one line), or with --json \
                  each row whole, as the tool returns it. Reads DATABASE_URL as the tables' \
                  owner, as `parley ingest` does; reads only."
)]
pub struct Args {
    /// What to look for, as a person would ask it.
    #[arg(value_name = "QUERY")]
    pub query: String,
    /// Search only this collection [default: every collection the caller may search].
    #[arg(long, value_name = "NAME")]
    pub collection: Option<String>,
    /// Most passages to return [default: the tool's own, 8 for search_documents].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub limit: Option<u16>,
    #[command(flatten)]
    pub search: SearchAs,
    /// One JSON object per line, each row as the tool returns it, for `jq`.
    #[arg(long)]
    pub json: bool,
}

/// The widest a heading or snippet cell gets in the table; `--json` has them whole.
const HEADING_CHARS: usize = 40;
const SNIPPET_CHARS: usize = 80;

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let loaded = args.search.load(env)?;
    let spec = &loaded.spec;
    let call = search::call_arguments(
        spec,
        &args.query,
        args.collection.as_deref(),
        None,
        args.limit.map(usize::from),
    );
    // A query or limit the tool refuses stops here, before the model takes its second to load.
    search::check_arguments(spec, &call)?;
    let settings = EmbedSettings::from_env(env).map_err(CmdError::Settings)?;
    crate::db::config_from_env(env)?;
    let embedder = Embedder::from_settings(&settings)?;
    let db = crate::db::connect(env).await?;
    let embeddings = search::embeddings(spec, &call, &embedder).await?;
    let user = args.search.user.as_deref();
    let model = embedder.model_id();
    let reranker = search::reranker(spec, env)
        .await
        .map_err(CmdError::Settings)?;
    let reranker = reranker.as_ref().map(|(r, declared)| (r, *declared));
    let (rows, rerank_error) =
        search::as_served(&db, spec, &call, &embeddings, model, user, reranker)
            .await
            .map_err(|e| with_user_hint(e, user))?;
    if let Some(e) = rerank_error {
        eprintln!("warning: reranking failed ({e}); the search's own order is kept");
    }
    if args.json {
        for row in &rows {
            writeln!(out, "{row}")?;
        }
    } else if rows.is_empty() {
        writeln!(out, "nothing found for {:?}", args.query)?;
    } else {
        out.write_all(table(&rows).as_bytes())?;
    }
    Ok(())
}

/// The tool's own refusals (`RAISE EXCEPTION`, SQLSTATE P0001) speak of tokens and signing
/// in; from the shell, the way to search as someone is `--user`.
fn with_user_hint(e: SearchError, user: Option<&str>) -> SearchError {
    match e {
        SearchError::Database(why) if user.is_none() && why.contains("P0001") => {
            SearchError::Database(format!(
                "{why} [without --user, `parley search` searches as the service token: the \
                 public collections only]"
            ))
        }
        e => e,
    }
}

/// The rows as a person reads them, best first, one line each.
fn table(rows: &[Value]) -> String {
    let header = ["#", "score", "collection", "uri", "heading", "snippet"];
    let lines: Vec<Vec<String>> = std::iter::once(header.map(str::to_owned).to_vec())
        .chain(rows.iter().enumerate().map(|(n, row)| {
            vec![
                (n + 1).to_string(),
                cell(&row["score"]),
                cell(&row["collection"]),
                cell(&row["uri"]),
                cut(&cell(&row["heading"]), HEADING_CHARS),
                cut(&cell(&row["snippet"]), SNIPPET_CHARS),
            ]
        }))
        .collect();
    aligned(&lines, &[true, true, false, false, false, false])
}

/// A column's value on one line: text as it is (control characters as spaces), nothing for a
/// column the tool does not return.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => one_line(s),
        other => one_line(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_table_puts_each_passage_on_one_line_best_first() {
        let rows = [
            json!({"chunk_id": 7, "collection": "handbook", "uri": "leave.md",
                   "heading": "Leave › Annual leave", "score": 0.03279,
                   "snippet": "New staff get 25 days\nof paid annual leave a year, plus public holidays. After five years of service it rises to 28 days."}),
            json!({"collection": "handbook", "uri": "pay.md", "heading": null,
                   "score": 0.0161, "snippet": "Paid monthly."}),
        ];
        assert_eq!(
            table(&rows),
            "\
#    score  collection  uri       heading               snippet
1  0.03279  handbook    leave.md  Leave › Annual leave  New staff get 25 days of paid annual leave a year, plus public holidays. After …
2   0.0161  handbook    pay.md                          Paid monthly.
"
        );
    }
}
