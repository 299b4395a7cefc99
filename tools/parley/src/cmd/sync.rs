//! `parley sync s3://bucket/prefix`: reconciles the collections under an S3 prefix with the
//! bucket, for a first load or after lost events: changed and new objects ingested, settings
//! objects applied, documents whose objects are gone deleted. `parley ingest s3://...` is the
//! same without the deletions unless `--prune`.

use parley_core::config::Env;
use parley_embed::{EmbedSettings, Embedder};
use parley_ingest::IngestOptions;
use parley_ingest::s3::{Bucket, S3Url};

use super::ingest::Limits;
use super::{CmdError, Out};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// `s3://bucket/prefix`: every key under it is `<collection>/<path>`. Default: the whole
    /// documents bucket, `s3://$DOCUMENTS_BUCKET/` (set in the admin function).
    #[arg(value_name = "S3_URL", value_parser = s3_url)]
    pub url: Option<S3Url>,
    #[command(flatten)]
    pub limits: Limits,
}

fn s3_url(raw: &str) -> Result<S3Url, String> {
    S3Url::parse(raw).unwrap_or_else(|| Err(format!("{raw}: not an s3://bucket/prefix URL")))
}

pub async fn run(args: Args, env: &Env, out: &mut Out) -> Result<(), CmdError> {
    let url = match args.url {
        Some(url) => url,
        None => match env.get("DOCUMENTS_BUCKET").filter(|b| !b.is_empty()) {
            Some(bucket) => s3_url(&format!("s3://{bucket}/")).map_err(CmdError::Usage)?,
            None => {
                return Err(CmdError::Usage(
                    "name the prefix to sync, s3://bucket/prefix (or set DOCUMENTS_BUCKET)".into(),
                ));
            }
        },
    };
    from_s3(&url, &args.limits.options(true), env, out).await
}

/// Ingests `url`'s objects (pruning when `options.prune`), one line per collection.
pub(super) async fn from_s3(
    url: &S3Url,
    options: &IngestOptions,
    env: &Env,
    out: &mut Out,
) -> Result<(), CmdError> {
    let settings = EmbedSettings::from_env(env).map_err(CmdError::Settings)?;
    crate::db::config_from_env(env)?;
    let embedder = Embedder::from_settings(&settings)?;
    let mut client = crate::db::connect(env).await?;
    let bucket = Bucket::from_env(env).await;
    let summary =
        parley_ingest::s3::sync(&mut client, &embedder, &bucket, url, options, options.prune)
            .await?;
    for (key, reason) in &summary.refused {
        writeln!(out, "refused s3://{}/{key}: {reason}", url.bucket)?;
    }
    let mut skipped = summary.refused.len();
    for (name, run) in &summary.collections {
        for s in &run.skipped {
            writeln!(
                out,
                "skipped {name}/{}: {}",
                s.uri.trim_start_matches(&format!("{name}/")),
                s.reason
            )?;
        }
        skipped += run.skipped.len();
        writeln!(out, "{name} ({}): {run}", embedder.model_id())?;
    }
    let ignored = match summary.ignored.len() {
        0 => String::new(),
        n => format!(", {n} other keys ignored (folders, hidden files, other formats)"),
    };
    writeln!(
        out,
        "{url}: {} collections, {} settings objects applied{ignored}",
        summary.collections.len(),
        summary.settings,
    )?;
    if skipped > 0 {
        eprintln!(
            "warning: {skipped} objects skipped or refused (listed above with why); the others were ingested"
        );
    }
    Ok(())
}
