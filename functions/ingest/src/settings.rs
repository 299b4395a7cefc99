//! The ingest function's settings (docs/settings.md, "Ingest function"): where refused objects
//! go, and the limits one object is held to. Read once at cold start; a bad value stops the
//! start with the setting's name.

use std::time::Duration;

use parley_core::config::{ConfigError, Env};
use parley_ingest::{ChunkOptions, ExtractLimits, IngestOptions};

/// The largest object ingested by default: 100 MiB, well inside the default 2 GiB of /tmp and
/// far above any text document; a PDF of a few thousand pages fits.
const DEFAULT_MAX_OBJECT_BYTES: u64 = 100 * 1024 * 1024;

/// Kept back from the invocation's time for what follows the embedding (the document's
/// transaction, the answer): 15 s.
const DEFAULT_TIME_MARGIN: Duration = Duration::from_secs(15);

#[derive(Debug, Clone)]
pub struct Settings {
    /// `INGEST_DLQ_URL`: the SQS queue refused objects are sent to. Unset: a refusal fails the
    /// invocation, and Lambda's own retries and dead-letter queue take it.
    pub dead_letter_url: Option<String>,
    /// `DOCUMENTS_BUCKET`: when set, events from any other bucket are refused.
    pub bucket: Option<String>,
    /// `INGEST_TIME_MARGIN_MS`.
    pub time_margin: Duration,
    /// `INGEST_MAX_OBJECT_BYTES` and the extraction limits.
    pub options: IngestOptions,
}

impl Settings {
    pub fn from_env(env: &Env) -> Result<Settings, ConfigError> {
        let defaults = ExtractLimits::default();
        let dead_letter_url = env
            .get("INGEST_DLQ_URL")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        if let Some(url) = &dead_letter_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            return Err(ConfigError::new(
                "INGEST_DLQ_URL",
                "must be the queue's URL (https://sqs.<region>.amazonaws.com/<account>/<name>)",
            ));
        }
        Ok(Settings {
            dead_letter_url,
            bucket: env
                .get("DOCUMENTS_BUCKET")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            time_margin: env.millis("INGEST_TIME_MARGIN_MS", DEFAULT_TIME_MARGIN, 0..=600_000)?,
            options: IngestOptions {
                prune: false,
                max_document_bytes: env.limit(
                    "INGEST_MAX_OBJECT_BYTES",
                    DEFAULT_MAX_OBJECT_BYTES,
                    1..=10 * 1024 * 1024 * 1024,
                )?,
                extract: ExtractLimits {
                    max_html_depth: env.limit(
                        "INGEST_MAX_HTML_DEPTH",
                        defaults.max_html_depth as u64,
                        1..=100_000,
                    )? as usize,
                    max_time: env.millis(
                        "INGEST_EXTRACT_TIMEOUT_MS",
                        defaults.max_time,
                        1..=900_000,
                    )?,
                    max_pdf_pages: env.limit(
                        "INGEST_MAX_PDF_PAGES",
                        defaults.max_pdf_pages as u64,
                        1..=1_000_000,
                    )? as usize,
                    max_unpacked_bytes: env.limit(
                        "INGEST_MAX_UNPACKED_BYTES",
                        defaults.max_unpacked_bytes,
                        1..=u64::MAX,
                    )?,
                    max_page_tokens: env.limit(
                        "INGEST_MAX_PAGE_TOKENS",
                        defaults.max_page_tokens as u64,
                        1..=100_000_000,
                    )? as usize,
                    max_page_chars: env.limit(
                        "INGEST_MAX_PAGE_CHARS",
                        defaults.max_page_chars as u64,
                        1..=100_000_000,
                    )? as usize,
                },
                chunk: ChunkOptions {
                    max_chunks: env.limit(
                        "INGEST_MAX_CHUNKS",
                        ChunkOptions::default().max_chunks as u64,
                        1..=10_000_000,
                    )? as usize,
                    ..ChunkOptions::default()
                },
                progress: false,
                deadline: None,
                // S3 objects carry their own (x-amz-meta-*), stored by `parley_ingest::s3`.
                metadata: Default::default(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_apply_and_a_bad_value_names_its_setting() {
        let s = Settings::from_env(&Env::default()).unwrap();
        assert_eq!(s.dead_letter_url, None);
        assert_eq!(s.options.max_document_bytes, DEFAULT_MAX_OBJECT_BYTES);
        assert_eq!(s.time_margin, Duration::from_secs(15));
        assert_eq!(s.options.chunk.max_chunks, 5000);
        let fewer = Env::from_pairs([("INGEST_MAX_CHUNKS", "200")]);
        assert_eq!(
            Settings::from_env(&fewer).unwrap().options.chunk.max_chunks,
            200
        );
        let bad = Env::from_pairs([("INGEST_MAX_OBJECT_BYTES", "0")]);
        assert!(
            Settings::from_env(&bad)
                .unwrap_err()
                .to_string()
                .contains("INGEST_MAX_OBJECT_BYTES")
        );
        let bad = Env::from_pairs([("INGEST_DLQ_URL", "my-queue")]);
        assert!(
            Settings::from_env(&bad)
                .unwrap_err()
                .to_string()
                .contains("INGEST_DLQ_URL")
        );
    }
}
