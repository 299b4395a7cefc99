//! `parley ingest`: Markdown, HTML, text, PDF and Word files (directories walked) into a
//! collection of the database in `DATABASE_URL`, embedded with the model the `EMBEDDINGS_*`
//! settings name; or the objects under `s3://bucket/prefix`, each into the collection its key
//! names (as the ingest function does). Incremental: unchanged files are skipped, changed ones
//! replaced, and with `--prune` the collection's documents no longer among the files deleted.
//! A file that cannot be ingested is listed with its reason and the run goes on; it still exits
//! 0 (see docs/settings.md).

use std::path::PathBuf;
use std::time::Duration;

use parley_core::config::Env;
use parley_embed::{EmbedSettings, Embedder};
use parley_ingest::s3::S3Url;
use parley_ingest::{ChunkOptions, CollectionSpec, ExtractLimits, IngestOptions};

use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Files or directories to ingest; directories are walked for .md, .markdown, .html, .htm,
    /// .txt, .text, .pdf and .docx files, each stored under its path relative to the directory.
    /// Or `s3://bucket/prefix`: every object under it, into the collection its key's first
    /// folder names (`<collection>/<path>`), with `_collection.json` applied.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// The collection to ingest files into, created if new (lower-case letters, digits, '_',
    /// '.', '-'). Not with s3:// (the key names it).
    #[arg(long, value_name = "NAME", value_parser = collection_name)]
    pub collection: Option<String>,
    /// The collection's title (default on creation: its name).
    #[arg(long)]
    pub title: Option<String>,
    /// What the collection holds, for people and models choosing where to search.
    #[arg(long)]
    pub description: Option<String>,
    /// Make the collection readable by every caller, not only its members.
    #[arg(long)]
    pub public: bool,
    /// Delete the collection's documents that are not among these files.
    #[arg(long)]
    pub prune: bool,
    /// Metadata for every document of this run, KEY=VALUE (repeatable): keys are 1-64 letters,
    /// digits, '_', '-', '.'; values at most 1000 characters, stored as numbers or
    /// true/false when they read as such, else as text. A Markdown file's front matter wins
    /// on a shared key. search_documents filters on it. Not with s3:// (objects carry
    /// x-amz-meta-*).
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = meta_pair)]
    pub meta: Vec<(String, serde_json::Value)>,
    #[command(flatten)]
    pub limits: Limits,
}

// How big and how deep a file may be before it is skipped (shared with `parley sync`). No doc
// comment: a flattened group's would stand as the summary of a subcommand without its own, as
// it once did for `sync`.
#[derive(Debug, clap::Args)]
pub struct Limits {
    /// Skip files larger than this many bytes.
    #[arg(long, value_name = "BYTES", default_value_t = IngestOptions::default().max_document_bytes)]
    pub max_document_bytes: u64,
    /// Skip HTML files whose elements nest deeper than this.
    #[arg(long, value_name = "N", default_value_t = ExtractLimits::default().max_html_depth as u32,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_html_depth: u32,
    /// Skip a file whose text takes longer than this many milliseconds to extract.
    #[arg(long, value_name = "MS", default_value_t = ExtractLimits::default().max_time.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub extract_timeout_ms: u64,
    /// Skip PDFs with more pages than this.
    #[arg(long, value_name = "N", default_value_t = ExtractLimits::default().max_pdf_pages as u32,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_pdf_pages: u32,
    /// Skip Word files and PDFs whose parts or streams unpack to more than this many bytes.
    #[arg(long, value_name = "BYTES", default_value_t = ExtractLimits::default().max_unpacked_bytes)]
    pub max_unpacked_bytes: u64,
    /// Skip PDFs with a page of more operators and operands than this.
    #[arg(long, value_name = "N", default_value_t = ExtractLimits::default().max_page_tokens as u64,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub max_page_tokens: u64,
    /// Skip PDFs with a page showing more characters than this.
    #[arg(long, value_name = "N", default_value_t = ExtractLimits::default().max_page_chars as u64,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub max_page_chars: u64,
    /// Skip a file whose text makes more chunks than this.
    #[arg(long, value_name = "N", default_value_t = ChunkOptions::default().max_chunks as u64,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub max_chunks: u64,
}

/// The defaults the options have, for code that builds [`Limits`] without parsing a command
/// line (tests, the bench).
impl Default for Limits {
    fn default() -> Self {
        let extract = ExtractLimits::default();
        Limits {
            max_document_bytes: IngestOptions::default().max_document_bytes,
            max_html_depth: extract.max_html_depth as u32,
            extract_timeout_ms: extract.max_time.as_millis() as u64,
            max_pdf_pages: extract.max_pdf_pages as u32,
            max_unpacked_bytes: extract.max_unpacked_bytes,
            max_page_tokens: extract.max_page_tokens as u64,
            max_page_chars: extract.max_page_chars as u64,
            max_chunks: ChunkOptions::default().max_chunks as u64,
        }
    }
}

impl Limits {
    pub fn options(&self, prune: bool) -> IngestOptions {
        IngestOptions {
            prune,
            max_document_bytes: self.max_document_bytes,
            extract: ExtractLimits {
                max_html_depth: self.max_html_depth as usize,
                max_time: Duration::from_millis(self.extract_timeout_ms),
                max_pdf_pages: self.max_pdf_pages as usize,
                max_unpacked_bytes: self.max_unpacked_bytes,
                max_page_tokens: self.max_page_tokens as usize,
                max_page_chars: self.max_page_chars as usize,
            },
            chunk: ChunkOptions {
                max_chunks: self.max_chunks as usize,
                ..ChunkOptions::default()
            },
            progress: true,
            deadline: None,
            metadata: serde_json::Map::new(),
        }
    }
}

/// Refused before connecting (exit 2), naming the pair and the rule.
fn meta_pair(raw: &str) -> Result<(String, serde_json::Value), String> {
    parley_ingest::metadata::parse_pair(raw).map_err(|e| e.to_string())
}

/// Refused before connecting, with the rule, rather than by the table's CHECK.
fn collection_name(raw: &str) -> Result<String, String> {
    parley_ingest::check_collection_name(raw)
        .map(|()| raw.to_owned())
        .map_err(|e| e.to_string())
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let urls: Vec<Option<Result<S3Url, String>>> = args
        .paths
        .iter()
        .map(|p| S3Url::parse(&p.to_string_lossy()))
        .collect();
    if urls.iter().any(Option::is_some) {
        if urls.iter().any(Option::is_none) {
            return Err(CmdError::Usage(
                "give either s3:// URLs or local paths, not both".into(),
            ));
        }
        if args.collection.is_some() {
            return Err(CmdError::Usage(
                "--collection is for local files: under s3:// each key's first folder names its collection (<collection>/<path>)".into(),
            ));
        }
        if args.title.is_some() || args.description.is_some() || args.public {
            return Err(CmdError::Usage(
                "--title, --description and --public are for local files: under s3:// a collection's <collection>/_collection.json sets them".into(),
            ));
        }
        if !args.meta.is_empty() {
            return Err(CmdError::Usage(
                "--meta is for local files: an S3 object's user metadata (x-amz-meta-*) becomes its document's".into(),
            ));
        }
        let urls = urls
            .into_iter()
            .flatten()
            .collect::<Result<Vec<_>, _>>()
            .map_err(CmdError::Usage)?;
        let options = args.limits.options(args.prune);
        for url in &urls {
            super::sync::from_s3(url, &options, env, out).await?;
        }
        return Ok(());
    }
    let Some(collection) = args.collection else {
        return Err(CmdError::Usage(
            "--collection NAME is required for local files".into(),
        ));
    };
    let found = parley_ingest::discover_all(&args.paths)?;
    let settings = EmbedSettings::from_env(env).map_err(CmdError::Settings)?;
    // Usage mistakes in DATABASE_URL surface before the model takes its second to load.
    crate::db::config_from_env(env)?;
    let embedder = Embedder::from_settings(&settings)?;
    let mut client = crate::db::connect(env).await?;
    let spec = CollectionSpec {
        name: collection,
        title: args.title,
        description: args.description,
        public: args.public.then_some(true),
    };
    let options = IngestOptions {
        // Repeated keys: the last one given wins.
        metadata: args.meta.into_iter().collect(),
        ..args.limits.options(args.prune)
    };
    let total = found.files.len();
    let summary =
        parley_ingest::ingest(&mut client, &embedder, &spec, found.files, &options).await?;
    for s in &summary.skipped {
        writeln!(out, "skipped {}: {}", s.uri, s.reason)?;
    }
    let ignored = match found.ignored {
        0 => String::new(),
        n => format!("; {n} files of other types ignored"),
    };
    writeln!(
        out,
        "{} ({}): {summary}{ignored}",
        spec.name,
        embedder.model_id()
    )?;
    // On stderr too, so a run whose output goes to a file still says so where it was started.
    if !summary.skipped.is_empty() {
        eprintln!(
            "warning: {} of {} files skipped (listed above with why); the others were ingested",
            summary.skipped.len(),
            total,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cmd::{Cli, Command};

    #[test]
    fn limits_by_default_are_the_options_defaults() {
        let Command::Ingest(args) = Cli::parse_from(["parley", "ingest", "docs"]).command else {
            panic!("not ingest");
        };
        assert_eq!(
            format!("{:?}", args.limits),
            format!("{:?}", Limits::default())
        );
    }
}
