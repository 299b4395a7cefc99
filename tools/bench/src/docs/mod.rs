//! `parley-bench docs`: documents end to end on this machine. Ingests the whole PostgreSQL
//! manual with the built-in model (docs/s, chunks/s, peak memory), times query embedding,
//! scores retrieval over the labelled questions (hybrid `search_documents` against its two
//! branches alone), times `search_documents` `tools/call` over HTTP at the manual's size and at
//! a synthetic size (1M chunks by default), and the mcp function's cold start with the model.

pub(crate) mod pdf;
mod quality;
mod synthetic;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use parley_cli::eval::{Branch, branches, search};
use parley_embed::{EmbedSettings, Embedder};
use parley_tools::catalog::Catalog;
use parley_tools::output::Limits;
use parley_tools::tools::ToolSpec;
use serde_json::{Map, Value, json};

use crate::mcp_client::{Mcp, http_client, tools_file_setting};
use crate::measure::{self, Stats, ms, percentile};
use crate::server::{Server, free_port, memory};
use crate::setup::{
    Machine, admin_url, command_line, create_database, machine, now_nanos, write_json,
};
use quality::{Question, Score, Summary};

/// The tool measured and scored.
const TOOL: &str = "search_documents";

/// The collection the manual is ingested into (public, so the service token can search it).
const MANUAL: &str = "manual";

/// The targets (issue 24's for embedding and search at 1M chunks: p50 and p99).
const EMBED_TARGET_MS: f64 = 5.0;
const SEARCH_TARGET_MS: f64 = 15.0;
const SEARCH_P99_TARGET_MS: f64 = 60.0;
const COLD_START_TARGET_MS: f64 = 1000.0;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The manual's html folder (Debian's postgresql-doc-15).
    #[arg(long, default_value = "/usr/share/doc/postgresql-doc-15/html")]
    manual: PathBuf,
    /// The built-in model's folder [default: parley_embed::default_model_dir()].
    #[arg(long)]
    model_dir: Option<PathBuf>,
    /// The labelled questions [default: tools/bench/data/manual_questions.toml].
    #[arg(long)]
    questions: Option<PathBuf>,
    /// Keep the manual ingested by an earlier run instead of ingesting it again (no ingestion
    /// figures then).
    #[arg(long)]
    reuse_ingest: bool,
    /// Chunks in the synthetic database for the large-corpus latency (0: skip it). Built once
    /// per size (COPY, then the HNSW index), reused by later runs.
    #[arg(long, default_value_t = 1_000_000)]
    synthetic: u64,
    /// maintenance_work_mem for the synthetic HNSW build (the graph should fit: ~2 GB at 1M).
    #[arg(long, default_value = "3GB")]
    maintenance_work_mem: String,
    /// Measured query embeddings.
    #[arg(long, default_value_t = 200)]
    embed_requests: usize,
    /// Measured search_documents calls per corpus size.
    #[arg(long, default_value_t = 300)]
    requests: usize,
    /// Unmeasured calls first (statement caches, Postgres' buffers, the index's pages).
    #[arg(long, default_value_t = 30)]
    warmup: usize,
    /// Calls in flight for the throughput figure; also the server's pool size.
    #[arg(long, default_value_t = 2)]
    concurrency: usize,
    /// Cold starts measured (process start to the first tools/call answered).
    #[arg(long, default_value_t = 5)]
    cold_starts: usize,
    /// Database for the manual, created (if missing) next to the one in DATABASE_URL; the
    /// synthetic one is this name with `_<chunks>` appended.
    #[arg(long, default_value = "parley_bench_docs")]
    database: String,
    /// The MCP server binary [default: `mcp` beside this executable, i.e. target/release/mcp].
    #[arg(long)]
    mcp_bin: Option<PathBuf>,
    /// RUST_LOG for the server.
    #[arg(long, default_value = "warn")]
    server_log: String,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only time query embedding and print the figures as JSON: how the bench measures it on
    /// one thread, in a child process started with RAYON_NUM_THREADS=1.
    #[arg(long, hide = true)]
    embed_only: bool,
    /// Only compare retrieval over manual pages printed to PDF with the same pages as HTML:
    /// this many labelled questions (their pages, plus --pdf-distractors others), printed by
    /// headless Chromium, ingested into a database named --database with `_pdf` appended
    /// (0: don't).
    #[arg(long, default_value_t = 0)]
    pdf_compare: usize,
    /// Pages ingested besides the answering ones for --pdf-compare, spread over the manual.
    #[arg(long, default_value_t = 40)]
    pdf_distractors: usize,
    /// The Chromium binary for --pdf-compare.
    #[arg(long, default_value = "chromium")]
    chromium: String,
}

/// Ingestion of the whole manual.
struct Ingested {
    documents: u64,
    skipped: usize,
    chunks: u64,
    elapsed: Duration,
    /// The bench process's peak resident memory after ingesting (it has done nothing heavier
    /// before), and before, in KiB.
    peak_kib: u64,
    before_kib: u64,
}

/// `search_documents` latency at one corpus size.
struct Latency {
    chunks: u64,
    serial: Stats,
    concurrent: Stats,
    /// The server's peak resident memory (KiB) after the calls.
    server_peak_kib: u64,
    loaded: Option<synthetic::Loaded>,
}

struct Report {
    command: String,
    machine: Machine,
    pg_version: String,
    model: String,
    ingested: Option<Ingested>,
    embed: Stats,
    /// The same with candle on one thread (a child process with RAYON_NUM_THREADS=1).
    embed_one_thread: Stats,
    quality: Vec<Summary>,
    questions: usize,
    hybrid_mismatches: usize,
    latencies: Vec<Latency>,
    cold_starts: Vec<Duration>,
    concurrency: usize,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let command = command_line();
    let concurrency = args.concurrency.max(1);
    let questions_path = args
        .questions
        .clone()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(quality::QUESTIONS));
    let questions = quality::questions(&questions_path)?;
    if !args.manual.is_dir() {
        bail!(
            "{} is not a folder: install Debian's postgresql-doc-15 or pass --manual DIR",
            args.manual.display()
        );
    }
    let model_dir = args
        .model_dir
        .clone()
        .unwrap_or_else(parley_embed::default_model_dir);
    let bin = match &args.mcp_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .context("locating this executable")?
            .with_file_name("mcp"),
    };
    let tools_files = [parley_domain_documents::tools_path()];
    let catalog = Catalog::load(&tools_files, Limits::default())
        .context("loading the documents domain's tools")?;
    let spec = catalog
        .get(TOOL)
        .with_context(|| format!("the documents domain has no {TOOL}"))?;

    let started = Instant::now();
    let embedder = Embedder::from_settings(&EmbedSettings::built_in(model_dir.clone()))
        .with_context(|| format!("loading the built-in model from {}", model_dir.display()))?;
    if args.embed_only {
        let stats = embed_latency(&embedder, &questions, args.embed_requests).await?;
        println!("{}", stats.to_json());
        return Ok(());
    }
    eprintln!(
        "model {} loaded in {:.0} ms",
        embedder.model_id(),
        ms(started.elapsed())
    );
    // Only now: timing query embedding alone (`--embed-only`) needs no database.
    let admin_url = admin_url()?;
    if args.pdf_compare > 0 {
        let name = format!("{}_pdf", args.database);
        let (_, mut db) = create_database(&admin_url, &name).await?;
        println!("{command}");
        return pdf::compare(
            &mut db,
            &embedder,
            spec,
            &args.manual,
            &questions,
            args.pdf_compare,
            args.pdf_distractors,
            &args.chromium,
        )
        .await;
    }
    let model = embedder.model_id().to_owned();
    let (manual_url, mut db) = create_database(&admin_url, &args.database).await?;
    let pg_version: String = db.query_one("SHOW server_version", &[]).await?.get(0);

    let ingested = if args.reuse_ingest {
        None
    } else {
        Some(ingest_manual(&mut db, &embedder, &args).await?)
    };
    let manual_chunks = chunk_count(&db).await?;
    if manual_chunks == 0 {
        bail!("the bench database has no chunks; run without --reuse-ingest");
    }

    let embed = embed_latency(&embedder, &questions, args.embed_requests).await?;
    let embed_one_thread = embed_on_one_thread(&questions_path, &model_dir, &args)?;
    eprintln!(
        "query embedding: p50 {:.2} ms, p99 {:.2} ms; on one thread p50 {:.2} ms, p99 {:.2} ms",
        ms(embed.p50),
        ms(embed.p99),
        ms(embed_one_thread.p50),
        ms(embed_one_thread.p99)
    );

    let run_id = format!("{:x}-{}", std::process::id(), now_nanos());
    let token = format!("bench-{run_id}");
    let env = |database_url: &str| {
        vec![
            ("DATABASE_URL", database_url.to_owned()),
            ("MCP_AUTH_TOKEN", token.clone()),
            ("TOOLS_FILE", tools_file_setting(&tools_files)),
            ("EMBEDDINGS", "builtin".to_owned()),
            ("EMBEDDINGS_MODEL_DIR", model_dir.display().to_string()),
            ("RUST_LOG", args.server_log.clone()),
            ("DB_POOL_MAX_SIZE", concurrency.to_string()),
        ]
    };
    let http = http_client(&token, concurrency)?;

    let cold_starts =
        cold_starts(&bin, &env(&manual_url), &http, &questions, args.cold_starts).await?;

    let server = Server::start(&bin, &env(&manual_url)).await?;
    let (quality, hybrid_mismatches) =
        score_all(&http, &server.base, spec, &db, &embedder, &questions).await?;
    let mut latencies =
        vec![search_latency(&http, &server, &questions, &args, manual_chunks, None).await?];
    drop(server);

    if args.synthetic > 0 {
        let sources = synthetic::sources(&db).await?;
        let cards = synthetic::cards(&db).await?;
        let name = format!("{}_{}", args.database, args.synthetic);
        let (url, mut big) = create_database(&admin_url, &name).await?;
        let loaded = synthetic::ensure(
            &mut big,
            args.synthetic,
            &model,
            &sources,
            &cards,
            &args.maintenance_work_mem,
        )
        .await?;
        drop((sources, cards));
        let chunks = chunk_count(&big).await?;
        let server = Server::start(&bin, &env(&url)).await?;
        latencies.push(search_latency(&http, &server, &questions, &args, chunks, loaded).await?);
    }

    let report = Report {
        command,
        machine: machine(),
        pg_version,
        model,
        ingested,
        embed,
        embed_one_thread,
        quality,
        questions: questions.len(),
        hybrid_mismatches,
        latencies,
        cold_starts,
        concurrency,
    };
    print!("{}", report.text());
    if let Some(path) = &args.json {
        write_json(path, &report.json())?;
    }
    Ok(())
}

async fn chunk_count(db: &tokio_postgres::Client) -> anyhow::Result<u64> {
    let n: i64 = db
        .query_one("SELECT count(*) FROM parley.chunks", &[])
        .await?
        .get(0);
    Ok(u64::try_from(n)?)
}

/// Ingests the manual afresh (its collection deleted first, so nothing is skipped as
/// unchanged) with `parley_ingest::ingest`, what `parley ingest` runs.
async fn ingest_manual(
    db: &mut tokio_postgres::Client,
    embedder: &Embedder,
    args: &Args,
) -> anyhow::Result<Ingested> {
    db.execute("DELETE FROM parley.collections WHERE name = $1", &[&MANUAL])
        .await?;
    let files = parley_ingest::discover(std::slice::from_ref(&args.manual))
        .with_context(|| format!("reading {}", args.manual.display()))?;
    eprintln!(
        "ingesting {} files of {}...",
        files.len(),
        args.manual.display()
    );
    let (_, before_kib) = memory("/proc/self/status")?;
    let collection = parley_ingest::CollectionSpec {
        name: MANUAL.to_owned(),
        title: Some("PostgreSQL 15 manual".to_owned()),
        description: Some("The whole manual, for parley-bench docs".to_owned()),
        public: Some(true),
    };
    let options = parley_ingest::IngestOptions {
        progress: true,
        ..Default::default()
    };
    let started = Instant::now();
    let summary = parley_ingest::ingest(db, embedder, &collection, files, &options)
        .await
        .context("ingesting the manual")?;
    let elapsed = started.elapsed();
    let (_, peak_kib) = memory("/proc/self/status")?;
    db.batch_execute("ANALYZE parley.chunks, parley.documents")
        .await?;
    let ingested = Ingested {
        documents: summary.added + summary.replaced,
        skipped: summary.skipped.len(),
        chunks: summary.chunks,
        elapsed,
        peak_kib,
        before_kib,
    };
    eprintln!(
        "ingested {} documents, {} chunks in {:.1} s ({} skipped)",
        ingested.documents,
        ingested.chunks,
        elapsed.as_secs_f64(),
        ingested.skipped
    );
    Ok(ingested)
}

/// `embed_one` over the questions, one at a time, as the mcp function embeds a query.
async fn embed_latency(
    embedder: &Embedder,
    questions: &[Question],
    n: usize,
) -> anyhow::Result<Stats> {
    for q in questions.iter().take(10) {
        embedder.embed_one(&q.q).await?;
    }
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let started = Instant::now();
        let v = embedder
            .embed_one(&questions[i % questions.len()].q)
            .await?;
        samples.push(started.elapsed());
        std::hint::black_box(v);
    }
    samples.sort_unstable();
    let total: Duration = samples.iter().sum();
    Ok(Stats {
        n,
        concurrency: 1,
        p50: percentile(&samples, 50.0),
        p99: percentile(&samples, 99.0),
        mean: total / u32::try_from(n.max(1))?,
        rps: n as f64 / total.as_secs_f64().max(1e-9),
        rows_per_call: 0.0,
    })
}

/// [`embed_latency`] in a child process (this executable with `--embed-only`) whose candle uses
/// one thread (`RAYON_NUM_THREADS=1`, read once when candle starts): the target is for
/// one core, and a Lambda function with the default memory gets about one vCPU.
fn embed_on_one_thread(
    questions: &std::path::Path,
    model_dir: &std::path::Path,
    args: &Args,
) -> anyhow::Result<Stats> {
    let exe = std::env::current_exe().context("locating this executable")?;
    // Blocking: nothing else is in flight on the bench's runtime while it runs.
    let output = std::process::Command::new(exe)
        .args(["docs", "--embed-only", "--embed-requests"])
        .arg(args.embed_requests.to_string())
        .arg("--questions")
        .arg(questions)
        .arg("--model-dir")
        .arg(model_dir)
        .arg("--manual")
        .arg(&args.manual)
        .env("RAYON_NUM_THREADS", "1")
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("timing query embedding on one thread")?;
    if !output.status.success() {
        bail!(
            "timing query embedding on one thread failed ({})",
            output.status
        );
    }
    let v: Value = serde_json::from_slice(&output.stdout)
        .context("the one-thread embedding figures are not JSON")?;
    let us = |k: &str| {
        v[k].as_f64()
            .map(|us| Duration::from_secs_f64(us / 1e6))
            .with_context(|| format!("no {k} in {v}"))
    };
    Ok(Stats {
        n: args.embed_requests,
        concurrency: 1,
        p50: us("p50_us")?,
        p99: us("p99_us")?,
        mean: us("mean_us")?,
        rps: v["rps"].as_f64().unwrap_or_default(),
        rows_per_call: 0.0,
    })
}

/// The body of a `tools/call` of `search_documents`.
fn call_body(id: usize, arguments: &Map<String, Value>) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": TOOL, "arguments": arguments } })
    .to_string()
}

fn arguments(q: &Question) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("query".into(), json!(q.q));
    m.insert("limit".into(), json!(quality::DEPTH));
    m
}

/// The rows of a successful `tools/call` answer.
fn rows(answer: &Value) -> anyhow::Result<&Vec<Value>> {
    if let Some(error) = answer.get("error") {
        bail!("JSON-RPC error: {error}");
    }
    let result = answer
        .get("result")
        .with_context(|| format!("no result in {answer}"))?;
    if result.get("isError") != Some(&Value::Bool(false)) {
        bail!("tool error: {}", result["content"][0]["text"]);
    }
    result["structuredContent"]["rows"]
        .as_array()
        .with_context(|| format!("no structuredContent.rows in {result}"))
}

fn uris(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["uri"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Spawns the mcp function `n` times; each time, from the spawn to the first `tools/call` of
/// `search_documents` answered (model loaded, pool connected, query embedded and run). The
/// client retries every 2 ms until the port answers.
async fn cold_starts(
    bin: &std::path::Path,
    env: &[(&str, String)],
    http: &reqwest::Client,
    questions: &[Question],
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let port = free_port()?;
        let started = Instant::now();
        let mut server = Server::spawn_on(bin, port, env)?;
        let url = format!("{}/mcp", server.base);
        let body = call_body(1, &arguments(&questions[i % questions.len()]));
        loop {
            if let Some(status) = server.exited()? {
                bail!("the mcp function exited during start-up ({status})");
            }
            if let Ok((_, answer)) = measure::post_json(http, &url, body.clone()).await {
                rows(&answer).context("the first call after a cold start")?;
                out.push(started.elapsed());
                break;
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!("the mcp function did not answer within 60 s of starting");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        eprintln!("cold start {}: {:.0} ms", i + 1, ms(out[i]));
    }
    Ok(out)
}

/// Scores hybrid (over MCP) and both branches alone (direct) on every question. Also runs the
/// unmodified tool SQL directly and counts questions whose uris differ from the MCP answer:
/// non-zero means the direct path no longer binds what the server binds.
async fn score_all(
    http: &reqwest::Client,
    base: &str,
    spec: &ToolSpec,
    db: &tokio_postgres::Client,
    embedder: &Embedder,
    questions: &[Question],
) -> anyhow::Result<(Vec<Summary>, usize)> {
    let (prefix, inner, suffix) = branches::unwrap(&spec.wrapped_sql)?;
    let wrap = |sql: String| format!("{prefix}{sql}{suffix}");
    // Each branch alone (words, vector, then pages when the tool has them), then the hybrid.
    let mut variants = Vec::new();
    for b in branches::present(inner)? {
        variants.push((b, wrap(branches::only(inner, b)?)));
    }
    variants.sort_by_key(|(b, _)| match b {
        Branch::FullText => 0,
        Branch::Vector => 1,
        Branch::Pages => 2,
        Branch::PageWords => 3,
    });
    let url = format!("{base}/mcp");
    let mut scores: Vec<Vec<Score>> = vec![Vec::new(); variants.len() + 1];
    let mut mismatches = 0;
    for (i, q) in questions.iter().enumerate() {
        let args = arguments(q);
        let (_, answer) = measure::post_json(http, &url, call_body(i + 1, &args)).await?;
        let hybrid = uris(rows(&answer).with_context(|| format!("{:?}", q.q))?);
        let embeddings = search::embeddings(spec, &args, embedder).await?;
        let model = embedder.model_id();
        if search::uris(db, spec, &spec.wrapped_sql, &args, &embeddings, model, None).await?
            != hybrid
        {
            mismatches += 1;
        }
        for (n, (_, sql)) in variants.iter().enumerate() {
            let found = search::uris(db, spec, sql, &args, &embeddings, model, None).await?;
            scores[n].push(quality::score(q, &found));
        }
        scores[variants.len()].push(quality::score(q, &hybrid));
    }
    let names: Vec<&str> = variants
        .iter()
        .map(|(b, _)| b.name())
        .chain(std::iter::once("hybrid (search_documents)"))
        .collect();
    let summaries = names
        .iter()
        .zip(&scores)
        .map(|(name, s)| quality::summarise(name, questions, s))
        .collect::<Vec<_>>();
    for s in &summaries {
        eprintln!(
            "{:<26} recall@5 {:.3}  MRR@10 {:.3}",
            s.method, s.recall, s.mrr10
        );
    }
    Ok((summaries, mismatches))
}

/// `search_documents` over HTTP as a model calls it (the query only), rotating over the
/// questions: one call at a time, then `--concurrency` in flight.
async fn search_latency(
    http: &reqwest::Client,
    server: &Server,
    questions: &[Question],
    args: &Args,
    chunks: u64,
    loaded: Option<synthetic::Loaded>,
) -> anyhow::Result<Latency> {
    let calls: Vec<Map<String, Value>> = questions
        .iter()
        .map(|q| {
            let mut m = Map::new();
            m.insert("query".into(), json!(q.q));
            m
        })
        .collect();
    let driver = Mcp::new(http, &server.base, TOOL, &calls, Vec::new(), None);
    let concurrency = args.concurrency.max(1);
    measure::run(&driver, args.warmup, concurrency, 0)
        .await
        .context("search_documents: warm-up")?;
    let (serial, _) = measure::interleaved(std::slice::from_ref(&driver), args.requests)
        .await
        .context("search_documents: one call at a time")?
        .pop()
        .context("no results")?;
    let concurrent = measure::run(&driver, args.requests, concurrency, args.requests)
        .await
        .with_context(|| format!("search_documents: concurrency {concurrency}"))?;
    let (_, server_peak_kib) = server.memory()?;
    eprintln!(
        "search_documents at {chunks} chunks: p50 {:.2} ms, p99 {:.2} ms, c={concurrency}: {:.0} rps",
        ms(serial.p50),
        ms(serial.p99),
        concurrent.rps
    );
    Ok(Latency {
        chunks,
        serial,
        concurrent,
        server_peak_kib,
        loaded,
    })
}

fn group_json(g: &quality::Group) -> Value {
    json!({ "name": g.name, "questions": g.questions, "recall_at_5": g.recall, "mrr_at_10": g.mrr10 })
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

impl Report {
    fn cold_start_median(&self) -> Option<Duration> {
        let mut v = self.cold_starts.clone();
        v.sort_unstable();
        v.get(v.len().saturating_sub(1) / 2).copied()
    }

    fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\nparley-bench docs: the PostgreSQL 15 manual, {}, Postgres {}",
            self.model, self.pg_version
        );
        let _ = writeln!(out, "{}", self.machine.line("server, Postgres and client"));
        let _ = writeln!(out, "command: {}\n", self.command);
        if let Some(i) = &self.ingested {
            let s = i.elapsed.as_secs_f64();
            let _ = writeln!(
                out,
                "ingestion: {} documents, {} chunks in {:.1} s: {:.1} docs/s, {:.1} chunks/s \
                 ({} skipped); peak RSS {:.0} MiB ({:.0} MiB before)",
                i.documents,
                i.chunks,
                s,
                i.documents as f64 / s,
                i.chunks as f64 / s,
                i.skipped,
                mib(i.peak_kib),
                mib(i.before_kib)
            );
        }
        let (e, one) = (self.embed, self.embed_one_thread);
        let _ = writeln!(
            out,
            "query embedding ({} calls): p50 {:.2} ms, p99 {:.2} ms on every core; on one thread \
             p50 {:.2} ms, p99 {:.2} ms (target < {EMBED_TARGET_MS} ms p50 on one core: {})",
            e.n,
            ms(e.p50),
            ms(e.p99),
            ms(one.p50),
            ms(one.p99),
            verdict(ms(one.p50) < EMBED_TARGET_MS)
        );
        if let Some(median) = self.cold_start_median() {
            let all: Vec<String> = self
                .cold_starts
                .iter()
                .map(|d| format!("{:.0}", ms(*d)))
                .collect();
            let _ = writeln!(
                out,
                "mcp cold start with the model (spawn to first search_documents answered): median \
                 {:.0} ms [{} ms] (target < {COLD_START_TARGET_MS} ms: {})",
                ms(median),
                all.join(", "),
                verdict(ms(median) < COLD_START_TARGET_MS)
            );
        }
        let c = self.concurrency;
        let _ = writeln!(
            out,
            "\n{:<10} {:>9} {:>9} {:>9} {:>8} {:>9} {:>12}",
            "chunks",
            "p50 ms",
            "p99 ms",
            "mean ms",
            "rps c=1",
            format!("rps c={c}"),
            "server peak"
        );
        for l in &self.latencies {
            let _ = writeln!(
                out,
                "{:<10} {:>9.2} {:>9.2} {:>9.2} {:>8.0} {:>9.0} {:>8.0} MiB",
                l.chunks,
                ms(l.serial.p50),
                ms(l.serial.p99),
                ms(l.serial.mean),
                l.serial.rps,
                l.concurrent.rps,
                mib(l.server_peak_kib)
            );
        }
        if let Some(big) = self.latencies.get(1) {
            let _ = writeln!(
                out,
                "search_documents at {} chunks: p50 {:.2} ms, p99 {:.2} ms \
                 (target <= {SEARCH_TARGET_MS} / {SEARCH_P99_TARGET_MS} ms at 1M: {})",
                big.chunks,
                ms(big.serial.p50),
                ms(big.serial.p99),
                if big.chunks >= 1_000_000 {
                    verdict(
                        ms(big.serial.p50) <= SEARCH_TARGET_MS
                            && ms(big.serial.p99) <= SEARCH_P99_TARGET_MS,
                    )
                } else {
                    "not measured at 1M"
                }
            );
            if let Some(l) = &big.loaded {
                let _ = writeln!(
                    out,
                    "synthetic load: COPY with {} BM25 postings {:.0} s, their keys {:.0} s, \
                     HNSW builds {:.0} s, GIN build {:.0} s",
                    l.postings_count,
                    l.copy.as_secs_f64(),
                    l.postings.as_secs_f64(),
                    l.hnsw.as_secs_f64(),
                    l.gin.as_secs_f64()
                );
            }
        }
        let _ = writeln!(
            out,
            "\nretrieval over {} labelled questions (tools/bench/{}):",
            self.questions,
            quality::QUESTIONS
        );
        let _ = writeln!(out, "{:<26} {:>9} {:>7}", "method", "recall@5", "MRR@10");
        for s in &self.quality {
            let _ = writeln!(out, "{:<26} {:>9.3} {:>7.3}", s.method, s.recall, s.mrr10);
        }
        let _ = writeln!(
            out,
            "per split (dev: tuned on; held-out: not), per kind and per part of the manual (recall@5 / MRR@10):"
        );
        for s in &self.quality {
            for groups in [&s.by_split, &s.by_kind, &s.by_part] {
                let line = quality::groups_line(groups);
                let _ = writeln!(out, "  {:<26} {line}", s.method);
            }
        }
        if self.hybrid_mismatches > 0 {
            let _ = writeln!(
                out,
                "WARNING: for {} questions the tool's SQL run directly returned other rows than \
                 the mcp function: the baselines may not bind what the server binds",
                self.hybrid_mismatches
            );
        }
        out
    }

    fn json(&self) -> Value {
        json!({
            "command": self.command,
            "machine": self.machine.to_json(),
            "postgres": self.pg_version,
            "model": self.model,
            "ingestion": self.ingested.as_ref().map(|i| json!({
                "documents": i.documents, "chunks": i.chunks, "skipped": i.skipped,
                "seconds": i.elapsed.as_secs_f64(),
                "docs_per_s": i.documents as f64 / i.elapsed.as_secs_f64(),
                "chunks_per_s": i.chunks as f64 / i.elapsed.as_secs_f64(),
                "peak_rss_kib": i.peak_kib,
            })),
            "query_embedding": self.embed.to_json(),
            "query_embedding_one_thread": self.embed_one_thread.to_json(),
            "cold_start_ms": self.cold_starts.iter().map(|d| ms(*d)).collect::<Vec<_>>(),
            "search_documents": self.latencies.iter().map(|l| json!({
                "chunks": l.chunks, "serial": l.serial.to_json(),
                "concurrent": l.concurrent.to_json(), "server_peak_rss_kib": l.server_peak_kib,
                "synthetic_load_s": l.loaded.as_ref().map(|x| json!({
                    "copy": x.copy.as_secs_f64(), "postings_keys": x.postings.as_secs_f64(),
                    "postings": x.postings_count, "hnsw": x.hnsw.as_secs_f64(),
                    "gin": x.gin.as_secs_f64() })),
            })).collect::<Vec<_>>(),
            "quality": self.quality.iter().map(|s| json!({
                "method": s.method, "recall_at_5": s.recall, "mrr_at_10": s.mrr10,
                "by_split": s.by_split.iter().map(group_json).collect::<Vec<_>>(),
                "by_kind": s.by_kind.iter().map(group_json).collect::<Vec<_>>(),
                "by_part": s.by_part.iter().map(group_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "questions": self.questions,
            "hybrid_direct_mismatches": self.hybrid_mismatches,
        })
    }
}
