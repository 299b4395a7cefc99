//! `parley-bench embed`: the built-in model's ingestion throughput, alone. Embeds a fixed,
//! evenly spread slice of the PostgreSQL manual's chunks, as `parley ingest` makes and embeds
//! them (calls of 64 texts), and prints chunks/s per round; no database involved.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use parley_embed::{EmbedSettings, Embedder};
use parley_ingest::{IngestOptions, chunk_sections, extract};

use crate::setup::{command_line, machine};

/// Texts per `Embedder::embed` call in `parley ingest` (crates/ingest's `EMBED_BATCH`): a
/// flush embeds at least this many, a document's chunks at a time.
const INGEST_CALL: usize = 64;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The manual's html folder (Debian's postgresql-doc-15).
    #[arg(long, default_value = "/usr/share/doc/postgresql-doc-15/html")]
    manual: PathBuf,
    /// The built-in model's folder [default: parley_embed::default_model_dir()].
    #[arg(long)]
    model_dir: Option<PathBuf>,
    /// Chunks embedded per round, taken at an even stride over the whole manual.
    #[arg(long, default_value_t = 512)]
    chunks: usize,
    /// Texts per `embed` call (what ingestion passes: 64).
    #[arg(long, default_value_t = INGEST_CALL)]
    call: usize,
    /// Texts per forward pass [default: `EMBEDDINGS_BATCH`'s default].
    #[arg(long)]
    pass: Option<usize>,
    /// Measured rounds, after one unmeasured call.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Write the slice's vectors here (little-endian f32, one after another), to compare
    /// another build's with --compare.
    #[arg(long)]
    save: Option<PathBuf>,
    /// Compare the slice's vectors with a file --save wrote: prints the lowest cosine.
    #[arg(long)]
    compare: Option<PathBuf>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    println!("{}", command_line());
    let texts = manual_slice(&args.manual, args.chunks)?;
    let chars: usize = texts.iter().map(|t| t.chars().count()).sum();
    let model_dir = args
        .model_dir
        .clone()
        .unwrap_or_else(parley_embed::default_model_dir);
    let mut settings = EmbedSettings::built_in(model_dir.clone());
    if let Some(pass) = args.pass {
        settings.batch = pass.max(1);
    }
    let embedder = Embedder::from_settings(&settings)
        .with_context(|| format!("loading the built-in model from {}", model_dir.display()))?;
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    println!("{}", machine().line("other processes may"));
    println!(
        "{} chunks of the manual ({:.0} chars each on average), calls of {}, passes of {}, {} threads",
        texts.len(),
        chars as f64 / texts.len().max(1) as f64,
        args.call,
        settings.batch,
        threads
    );
    let call = args.call.max(1);
    embedder.embed(&texts[..call.min(texts.len())]).await?;
    let mut vectors = Vec::new();
    let mut rates = Vec::new();
    for round in 1..=args.rounds.max(1) {
        let started = Instant::now();
        let cpu_before = cpu_seconds()?;
        vectors.clear();
        for slice in texts.chunks(call) {
            vectors.extend(embedder.embed(slice).await?);
        }
        let elapsed = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds()? - cpu_before;
        let rate = texts.len() as f64 / elapsed;
        println!(
            "round {round}: {elapsed:.1} s, {rate:.1} chunks/s; {cpu:.1} CPU s, {:.1} chunks per CPU second",
            texts.len() as f64 / cpu.max(1e-9)
        );
        rates.push(rate);
    }
    rates.sort_by(f64::total_cmp);
    println!(
        "chunks/s: best {:.1}, worst {:.1}",
        rates[rates.len() - 1],
        rates[0]
    );
    if let Some(path) = &args.save {
        let bytes: Vec<u8> = vectors
            .iter()
            .flatten()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.compare {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let dims = embedder.dims();
        if bytes.len() != vectors.len() * dims * 4 {
            bail!(
                "{} holds {} bytes, not {} vectors of {dims}",
                path.display(),
                bytes.len(),
                vectors.len()
            );
        }
        let saved: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let lowest = vectors
            .iter()
            .zip(saved.chunks_exact(dims))
            .map(|(a, b)| cosine(a, b))
            .fold(f64::MAX, f64::min);
        println!("lowest cosine to {}: {lowest:.6}", path.display());
    }
    Ok(())
}

/// User and system CPU time of this process so far (all threads), from /proc/self/stat: on a
/// machine shared with other work it varies less than the wall clock.
fn cpu_seconds() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    // Fields 14 and 15 (utime, stime), counted after the command name's closing parenthesis.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .with_context(|| format!("/proc/self/stat has no field {}", i + 3))?
            .parse::<f64>()?)
    };
    // The kernel reports in USER_HZ, 100 on Linux.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// Every manual page extracted and chunked with ingestion's defaults, each chunk as ingestion
/// embeds it ("Title › Heading", a blank line, the text), then `n` of them at an even stride.
fn manual_slice(manual: &std::path::Path, n: usize) -> anyhow::Result<Vec<String>> {
    if !manual.is_dir() {
        bail!(
            "{} is not a folder: install Debian's postgresql-doc-15 or pass --manual DIR",
            manual.display()
        );
    }
    let options = IngestOptions::default();
    let mut all = Vec::new();
    for file in parley_ingest::discover(&[manual.to_path_buf()])? {
        let (Ok(bytes), Some(format)) = (std::fs::read(&file.path), file.format()) else {
            continue;
        };
        let stem = file
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let Ok(extracted) = extract(&bytes, format, &stem, &options.extract) else {
            continue;
        };
        for chunk in chunk_sections(&extracted.sections, &options.chunk) {
            all.push(format!(
                "{}\n\n{}",
                parley_ingest::context(&extracted.title, &chunk.heading),
                chunk.text
            ));
        }
    }
    if all.is_empty() {
        bail!("no chunks in {}", manual.display());
    }
    let stride = (all.len() / n.max(1)).max(1);
    Ok(all.into_iter().step_by(stride).take(n).collect())
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b)).max(f64::MIN_POSITIVE)
}
