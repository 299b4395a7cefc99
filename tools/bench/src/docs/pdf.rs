//! Retrieval over the manual printed to PDF against the same pages as HTML: a sample of the
//! labelled questions, their answering pages plus distractor pages, each printed by headless
//! Chromium (with its running header and footer), both forms ingested into their own
//! collection and searched with the shipped `search_documents` SQL.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use parley_embed::Embedder;
use parley_tools::tools::ToolSpec;
use serde_json::json;

use super::arguments;
use super::quality::{self, Question, Score, Summary};
use parley_cli::eval::search;

const HTML: &str = "pdfcmp-html";
const PDF: &str = "pdfcmp-pdf";

/// A PDF result's uri as the HTML page it was printed from (`x.pdf#page=3` → `x.html`), so
/// both forms are scored against the same labels.
pub fn as_html(uri: &str) -> String {
    let uri = uri.split_once("#page=").map_or(uri, |(u, _)| u);
    match uri.strip_suffix(".pdf") {
        Some(stem) => format!("{stem}.html"),
        None => uri.to_owned(),
    }
}

/// The first `sample` questions whose pages all exist, and the pages to ingest: theirs plus
/// `distractors` others spread evenly over the manual (every n-th file name).
fn pick(
    manual: &Path,
    questions: &[Question],
    sample: usize,
    distractors: usize,
) -> anyhow::Result<(Vec<Question>, Vec<String>)> {
    let picked: Vec<Question> = questions
        .iter()
        .filter(|q| q.pages.iter().all(|p| manual.join(p).is_file()))
        .take(sample)
        .cloned()
        .collect();
    let mut pages: BTreeSet<String> = picked.iter().flat_map(|q| q.pages.clone()).collect();
    let mut all: Vec<String> = std::fs::read_dir(manual)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".html") && !pages.contains(n))
        .collect();
    all.sort();
    let step = (all.len() / distractors.max(1)).max(1);
    pages.extend(all.into_iter().step_by(step).take(distractors));
    Ok((picked, pages.into_iter().collect()))
}

/// Prints `page` to `out` with headless Chromium, as "Print to PDF" does.
pub(crate) fn print(chromium: &str, html: &Path, out: &Path) -> anyhow::Result<()> {
    let status = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu"])
        .arg(format!("--print-to-pdf={}", out.display()))
        .arg(html)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| {
            format!("running {chromium} (install it with tests/page/run --deps-only)")
        })?;
    if !status.success() || !out.exists() {
        bail!("{chromium} could not print {}", html.display());
    }
    Ok(())
}

async fn ingest_folder(
    db: &mut tokio_postgres::Client,
    embedder: &Embedder,
    name: &str,
    folder: &Path,
) -> anyhow::Result<u64> {
    db.execute("DELETE FROM parley.collections WHERE name = $1", &[&name])
        .await?;
    let files = parley_ingest::discover(&[folder.to_path_buf()])?;
    let spec = parley_ingest::CollectionSpec {
        name: name.to_owned(),
        title: Some(name.to_owned()),
        description: Some("parley-bench docs --pdf-compare".to_owned()),
        public: Some(true),
    };
    let summary = parley_ingest::ingest(db, embedder, &spec, files, &Default::default()).await?;
    if let Some(s) = summary.skipped.first() {
        bail!("{name}: {} skipped: {}", s.uri, s.reason);
    }
    Ok(summary.chunks)
}

async fn score(
    db: &tokio_postgres::Client,
    spec: &ToolSpec,
    embedder: &Embedder,
    questions: &[Question],
    collection: &str,
) -> anyhow::Result<Summary> {
    let mut scores: Vec<Score> = Vec::new();
    for q in questions {
        let mut args = arguments(q);
        args.insert("collection".into(), json!(collection));
        let embeddings = search::embeddings(spec, &args, embedder).await?;
        let uris = search::uris(
            db,
            spec,
            &spec.wrapped_sql,
            &args,
            &embeddings,
            embedder.model_id(),
            None,
        )
        .await?;
        let uris: Vec<String> = uris.iter().map(|u| as_html(u)).collect();
        scores.push(quality::score(q, &uris));
    }
    Ok(quality::summarise(collection, questions, &scores))
}

/// Runs the comparison and prints it.
#[allow(clippy::too_many_arguments)]
pub async fn compare(
    db: &mut tokio_postgres::Client,
    embedder: &Embedder,
    spec: &ToolSpec,
    manual: &Path,
    questions: &[Question],
    sample: usize,
    distractors: usize,
    chromium: &str,
) -> anyhow::Result<()> {
    let (picked, pages) = pick(manual, questions, sample, distractors)?;
    // Under the system's temporary folder, removed when done (tempfile is not a dependency of
    // the bench).
    let dir = std::env::temp_dir().join(format!("parley-pdfcmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (html_dir, pdf_dir) = (dir.join("html"), dir.join("pdf"));
    std::fs::create_dir_all(&html_dir)?;
    std::fs::create_dir_all(&pdf_dir)?;
    let started = Instant::now();
    for page in &pages {
        let from = manual.join(page);
        std::fs::copy(&from, html_dir.join(page))?;
        let out: PathBuf = pdf_dir.join(page.replace(".html", ".pdf"));
        print(chromium, &from, &out)?;
    }
    eprintln!(
        "printed {} pages to PDF in {:.0} s",
        pages.len(),
        started.elapsed().as_secs_f64()
    );
    let html_chunks = ingest_folder(db, embedder, HTML, &html_dir).await?;
    let pdf_chunks = ingest_folder(db, embedder, PDF, &pdf_dir).await?;
    let html = score(db, spec, embedder, &picked, HTML).await?;
    let pdf = score(db, spec, embedder, &picked, PDF).await?;
    println!(
        "PDF against HTML: {} questions, {} pages ({} answering, the rest distractors)",
        picked.len(),
        pages.len(),
        picked
            .iter()
            .flat_map(|q| q.pages.iter())
            .collect::<BTreeSet<_>>()
            .len()
    );
    std::fs::remove_dir_all(&dir)?;
    println!("form   chunks  recall@5  MRR@10   (hybrid, search_documents)");
    for (name, chunks, s) in [("HTML", html_chunks, &html), ("PDF", pdf_chunks, &pdf)] {
        println!("{name:<6} {chunks:>6}  {:>8.3}  {:>6.3}", s.recall, s.mrr10);
    }
    for (name, s) in [("HTML", &html), ("PDF", &pdf)] {
        println!("  {name:<5} {}", quality::groups_line(&s.by_kind));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pdf_result_is_scored_as_the_html_page_it_was_printed_from() {
        assert_eq!(as_html("sql-createrole.pdf#page=3"), "sql-createrole.html");
        assert_eq!(as_html("sql-createrole.pdf"), "sql-createrole.html");
        assert_eq!(as_html("sql-createrole.html"), "sql-createrole.html");
    }
}
