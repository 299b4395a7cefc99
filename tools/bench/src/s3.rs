//! `parley-bench s3`: one ingest instance's throughput on PDFs from S3, the number the time and
//! cost of a large load are worked out from. Manual pages printed to PDF by headless Chromium
//! go into a bucket of a local moto server; each object's event is then applied in turn, as one
//! instance of the ingest function handles them (download, extract, chunk, embed, store).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use parley_embed::{EmbedSettings, Embedder};
use parley_ingest::IngestOptions;
use parley_ingest::s3::{Bucket, ObjectEvent, Outcome, apply_event};
use parley_testkit::Moto;

use crate::measure::{ms, percentile};
use crate::setup::{admin_url, create_database, machine};

const BUCKET: &str = "parley-bench-documents";
const COLLECTION: &str = "manual";

/// Lambda's price per GB-second on arm64 (us-east-1, 2025) and the ingest function's default
/// memory (`IngestMemorySize`, 3538 MB: two vCPUs).
const PRICE_PER_GB_SECOND: f64 = 0.000_013_333_4;
const FUNCTION_GB: f64 = 3538.0 / 1024.0;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manual pages to print and load (every n-th page of the manual, so long and short ones).
    #[arg(long, default_value_t = 60)]
    pages: usize,
    /// The manual's html folder (Debian's postgresql-doc-15).
    #[arg(long, default_value = "/usr/share/doc/postgresql-doc-15/html")]
    manual: PathBuf,
    #[arg(long, default_value = "chromium")]
    chromium: String,
    /// Database, created next to DATABASE_URL's and emptied of the bench's collection first.
    #[arg(long, default_value = "parley_bench_s3")]
    database: String,
    /// The built-in model's directory (default: scripts/model's).
    #[arg(long)]
    model_dir: Option<PathBuf>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    if !args.manual.is_dir() {
        bail!(
            "{} is not a folder: install Debian's postgresql-doc-15 or pass --manual DIR",
            args.manual.display()
        );
    }
    let admin_url = admin_url()?;
    let (_, mut db) = create_database(&admin_url, &args.database).await?;
    db.execute(
        "DELETE FROM parley.collections WHERE name = $1",
        &[&COLLECTION],
    )
    .await
    .context("emptying the bench's collection")?;
    let model_dir = args
        .model_dir
        .clone()
        .unwrap_or_else(parley_embed::default_model_dir);
    let embedder = Embedder::from_settings(&EmbedSettings::built_in(model_dir.clone()))
        .with_context(|| format!("loading the built-in model from {}", model_dir.display()))?;

    let mut pages: Vec<String> = std::fs::read_dir(&args.manual)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".html"))
        .collect();
    pages.sort();
    let step = (pages.len() / args.pages.max(1)).max(1);
    let pages: Vec<String> = pages.into_iter().step_by(step).take(args.pages).collect();

    let dir = std::env::temp_dir().join(format!("parley-bench-s3-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let started = Instant::now();
    let mut pdfs = Vec::new();
    for page in &pages {
        let out = dir.join(page.replace(".html", ".pdf"));
        crate::docs::pdf::print(&args.chromium, &args.manual.join(page), &out)?;
        pdfs.push(out);
    }
    eprintln!(
        "printed {} pages to PDF in {:.0} s",
        pdfs.len(),
        started.elapsed().as_secs_f64()
    );

    let moto = Moto::start();
    let objects = moto.versioned_bucket(BUCKET).await;
    let bucket = Bucket::from_env(&parley_core::config::Env::from_pairs(moto.env())).await;
    let mut bytes = 0u64;
    for pdf in &pdfs {
        let body = std::fs::read(pdf)?;
        bytes += body.len() as u64;
        let name = pdf.file_name().unwrap_or_default().to_string_lossy();
        objects.put(&format!("{COLLECTION}/{name}"), body).await;
    }
    std::fs::remove_dir_all(&dir)?;

    let options = IngestOptions::default();
    let mut times = Vec::with_capacity(pdfs.len());
    let mut chunks = 0u64;
    let started = Instant::now();
    for (i, pdf) in pdfs.iter().enumerate() {
        let name = pdf.file_name().unwrap_or_default().to_string_lossy();
        let event = ObjectEvent {
            bucket: BUCKET.into(),
            key: format!("{COLLECTION}/{name}"),
            sequencer: Some(format!("{:016X}", i + 1)),
            version_id: None,
            name: "ObjectCreated:Put".into(),
        };
        let one = Instant::now();
        match apply_event(&mut db, &embedder, &bucket, &event, &options).await {
            Ok(Outcome::Stored { chunks: n, .. }) => chunks += n,
            Ok(other) => bail!("{}: {other:?}", event.key),
            Err(e) => bail!("{e}"),
        }
        times.push(one.elapsed());
    }
    let total = started.elapsed();
    // A document's last page with text is its page count (the manual's pages all have text).
    let pdf_pages: i64 = db
        .query_one(
            "SELECT coalesce(sum(last), 0)::int8 FROM (
                 SELECT max(k.page) AS last FROM parley.chunks k
                   JOIN parley.documents d ON d.id = k.document_id
                   JOIN parley.collections c ON c.id = d.collection_id
                  WHERE c.name = $1 GROUP BY d.id) p",
            &[&COLLECTION],
        )
        .await?
        .get(0);
    times.sort();
    let secs = total.as_secs_f64();
    let pages_per_sec = pdf_pages as f64 / secs;
    println!("{}", machine().line("Postgres and moto"));
    println!(
        "one instance, {} PDF objects ({:.1} MB, {} pages printed by Chromium from manual pages), applied in turn:",
        pdfs.len(),
        bytes as f64 / 1e6,
        pdf_pages
    );
    println!(
        "  {secs:.1} s: {pages_per_sec:.2} pages/s, {:.1} chunks/s ({:.1} chunks a page); per object p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms",
        chunks as f64 / secs,
        chunks as f64 / pdf_pages.max(1) as f64,
        ms(percentile(&times, 50.0)),
        ms(percentile(&times, 90.0)),
        ms(*times.last().unwrap_or(&Duration::ZERO)),
    );
    println!(
        "100,000 pages at this rate per instance (Lambda time and cost at {FUNCTION_GB:.3} GB, ${PRICE_PER_GB_SECOND}/GB-s):"
    );
    let instance_secs = 100_000.0 / pages_per_sec;
    let cost = instance_secs * FUNCTION_GB * PRICE_PER_GB_SECOND;
    for c in [1.0, 10.0, 50.0, 100.0] {
        println!(
            "  concurrency {c:>3}: {:>6.1} min wall clock (plus the largest file's own time), {:.1} instance-hours, ${cost:.2}",
            instance_secs / c / 60.0,
            instance_secs / 3600.0,
        );
    }
    Ok(())
}
