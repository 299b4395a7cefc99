//! The ingest function: each S3 event record of the documents bucket brings one key up to
//! date (`parley_ingest::s3::apply_event`). A refused object (corrupt, too big, too slow to
//! embed in time, or one an earlier invocation died extracting: the library records each
//! extraction before it starts) goes to the dead-letter queue and the invocation succeeds, so
//! it is not retried; anything else (the database, S3 itself, an extraction another invocation
//! may still be running) fails the invocation for Lambda to retry. Deployed, it connects as a
//! login in `parley_ingest_writer` (migration 0025), which may write the documents tables and
//! nothing else: no chat tables, no audit, no DDL.

pub mod dead_letter;
pub mod event;
pub mod settings;

use std::time::{Duration, Instant};

use parley_core::config::Env;
use parley_core::db::DbConfig;
use parley_embed::{EmbedSettings, Embedder};
use parley_ingest::IngestOptions;
use parley_ingest::s3::{Bucket, ObjectEvent, Outcome, S3Error, apply_event};
use serde_json::{Value, json};
use tokio::sync::Mutex;

pub use dead_letter::{DeadLetter, Refusal};
pub use settings::Settings;

/// What every invocation of an instance shares, built at cold start.
pub struct Ingest {
    settings: Settings,
    db_config: DbConfig,
    embedder: Embedder,
    s3: Bucket,
    dead_letter: Option<DeadLetter>,
    /// One connection per instance (an instance handles one event at a time), opened on first
    /// use and again after it breaks.
    db: Mutex<Option<tokio_postgres::Client>>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Secrets(#[from] parley_core::secrets::SecretsError),
    #[error(transparent)]
    Config(#[from] parley_core::config::ConfigError),
    #[error("the embedding model: {0}")]
    Embed(#[from] parley_embed::EmbedError),
}

/// Why an invocation failed (Lambda retries it; after its retries the event goes to the
/// function's own dead-letter queue).
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    #[error("connecting to the database: {0}")]
    Database(String),
    #[error(transparent)]
    Object(#[from] S3Error),
    #[error(transparent)]
    DeadLetter(#[from] dead_letter::SendError),
    #[error("s3://{bucket}/{key} refused, and no INGEST_DLQ_URL to report it to: {reason}")]
    Unreported {
        bucket: String,
        key: String,
        reason: String,
    },
}

impl Ingest {
    /// Reads the secrets and settings, loads the model; the database is connected on first use.
    pub async fn start(base: Env) -> Result<Ingest, StartupError> {
        let (env, _) = parley_core::secrets::load(&base).await?;
        let settings = Settings::from_env(&env)?;
        let db_config = DbConfig::from_env(&env)?.named("parley-ingest");
        let embedder = Embedder::from_settings(&EmbedSettings::from_env(&env)?)?;
        let s3 = Bucket::from_env(&env).await;
        let dead_letter = match &settings.dead_letter_url {
            Some(url) => Some(DeadLetter::new(&env, url.clone()).await),
            None => None,
        };
        Ok(Ingest {
            settings,
            db_config,
            embedder,
            s3,
            dead_letter,
            db: Mutex::new(None),
        })
    }

    /// One invocation: every record applied in turn. Answers what each record did.
    pub async fn handle(&self, payload: Value, time_left: Duration) -> Result<Value, HandleError> {
        let deadline = Instant::now() + time_left.saturating_sub(self.settings.time_margin);
        let events = match event::parse(&payload) {
            Ok(events) => events,
            Err(reason) => {
                tracing::error!(%reason, "refused an event that is not an S3 notification");
                let refusal = Refusal {
                    bucket: String::new(),
                    key: String::new(),
                    version_id: None,
                    sequencer: None,
                    event: String::new(),
                    reason,
                };
                self.refuse(refusal).await?;
                return Ok(json!({"records": []}));
            }
        };
        let mut guard = self.db.lock().await;
        let mut answers = Vec::with_capacity(events.len());
        let mut failure = None;
        for event in events {
            let db = self.connection(&mut guard).await?;
            let options = IngestOptions {
                deadline: Some(deadline),
                ..self.settings.options.clone()
            };
            let applied = match &self.settings.bucket {
                Some(ours) if *ours != event.bucket => Err(S3Error::Refused {
                    bucket: event.bucket.clone(),
                    key: event.key.clone(),
                    reason: format!("not the documents bucket ({ours}, DOCUMENTS_BUCKET)"),
                }),
                _ => apply_event(db, &self.embedder, &self.s3, &event, &options).await,
            };
            match applied {
                Ok(outcome) => {
                    tracing::info!(bucket = %event.bucket, key = %event.key, event = %event.name, ?outcome, "applied");
                    answers.push(json!({"key": event.key, "outcome": describe(&outcome)}));
                }
                Err(e) if e.is_permanent() => {
                    tracing::warn!(bucket = %event.bucket, key = %event.key, error = %e, "refused");
                    self.refuse(refusal(&event, &e)).await?;
                    answers.push(
                        json!({"key": event.key, "outcome": "refused", "reason": e.to_string()}),
                    );
                }
                Err(e) => {
                    tracing::error!(bucket = %event.bucket, key = %event.key, error = %e, "failed; Lambda retries the event");
                    if db.is_closed() {
                        *guard = None;
                    }
                    // The other records still run: a retry of the whole event finds them done.
                    failure.get_or_insert(e);
                }
            }
        }
        match failure {
            Some(e) => Err(e.into()),
            None => Ok(json!({ "records": answers })),
        }
    }

    async fn connection<'a>(
        &self,
        slot: &'a mut Option<tokio_postgres::Client>,
    ) -> Result<&'a mut tokio_postgres::Client, HandleError> {
        if slot.as_ref().is_none_or(tokio_postgres::Client::is_closed) {
            let client = parley_core::db::connect(&self.db_config)
                .await
                .map_err(|e| HandleError::Database(e.to_string()))?;
            *slot = Some(client);
        }
        Ok(slot.as_mut().expect("just connected"))
    }

    async fn refuse(&self, refusal: Refusal) -> Result<(), HandleError> {
        match &self.dead_letter {
            Some(dl) => Ok(dl.send(&refusal).await?),
            None => Err(HandleError::Unreported {
                bucket: refusal.bucket,
                key: refusal.key,
                reason: refusal.reason,
            }),
        }
    }
}

fn refusal(event: &ObjectEvent, e: &S3Error) -> Refusal {
    let reason = match e {
        S3Error::Refused { reason, .. } => reason.clone(),
        S3Error::Ingest { source, .. } => source.to_string(),
        S3Error::Call { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    Refusal {
        bucket: event.bucket.clone(),
        key: event.key.clone(),
        version_id: event.version_id.clone(),
        sequencer: event.sequencer.clone(),
        event: event.name.clone(),
        reason,
    }
}

/// An outcome as one word for the answer and the logs' readers.
fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Stored {
            replaced: false,
            chunks,
        } => format!("added ({chunks} chunks)"),
        Outcome::Stored {
            replaced: true,
            chunks,
        } => format!("replaced ({chunks} chunks)"),
        Outcome::Unchanged => "unchanged".into(),
        Outcome::Deleted { existed: true } => "deleted".into(),
        Outcome::Deleted { existed: false } => "already absent".into(),
        Outcome::Settings => "settings applied".into(),
        Outcome::Stale => "stale (an older or repeated event)".into(),
        Outcome::Superseded => "superseded (a newer read was recorded first)".into(),
        Outcome::Ignored(why) => format!("ignored: {why}"),
        Outcome::AlreadyRefused(why) => format!("already refused: {why}"),
    }
}
