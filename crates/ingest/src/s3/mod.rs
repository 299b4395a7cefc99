//! Documents from an S3 bucket (issue 23): a key `<collection>/<path…>` is a document of the
//! collection, `<collection>/_collection.json` its settings. [`apply_event`] brings one key up
//! to date after an S3 event; [`sync`] reconciles a whole prefix (a first load, lost events).
//!
//! Events come at least once and out of order, and several functions may handle one key at
//! once, so an event is only a hint: the object's *current* state is read from S3 and written
//! under a claim (`parley.s3_objects`, migration 0016) that loses to any later read. Older
//! and repeated events are dropped by their sequencer before S3 is read.

mod bucket;
mod key;
mod settings;

use std::collections::BTreeMap;
use std::path::Path;

use parley_embed::Embedder;
use tokio_postgres::Client;

pub use bucket::{Bucket, Downloaded, Fetched, Listed, S3CallError};
pub use key::{Place, S3Url, SETTINGS_OBJECT, decode_event_key, normalise_sequencer, place};
pub use settings::{CollectionSettings, MAX_SETTINGS_BYTES};

use crate::store::{self, Claim, Collection, ObjectState};
use crate::{CollectionSpec, IngestError, IngestOptions, SourceFile, Summary};

/// One object's event, as the ingest function parsed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    pub bucket: String,
    /// Decoded ([`decode_event_key`]).
    pub key: String,
    /// As the event gave it; compared after [`normalise_sequencer`].
    pub sequencer: Option<String>,
    /// The version the event is about: reported, not read (the current version is).
    pub version_id: Option<String>,
    /// `ObjectCreated:Put`, `ObjectRemoved:DeleteMarkerCreated`, ...: logged, not trusted.
    pub name: String,
}

/// What applying an event did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The document was written: added or replaced, with this many chunks.
    Stored { replaced: bool, chunks: u64 },
    /// The object's content is what is stored already.
    Unchanged,
    /// The object is gone; its document was deleted (false: there was none).
    Deleted { existed: bool },
    /// The collection's settings object was applied (or, gone, left the settings as they are).
    Settings,
    /// The event's sequencer is not newer than one already handled: a repeat or an older event.
    Stale,
    /// Another ingestion read the object after this one and recorded it first.
    Superseded,
    /// The key is not something to ingest ([`Place::Ignored`]).
    Ignored(String),
    /// This version was already refused for this reason; not reported again.
    AlreadyRefused(String),
}

/// Why a key could not be ingested.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    /// The object itself is the problem (a corrupt or encrypted file, too big, a key that names
    /// no document, a settings object that does not parse, too slow to embed in time): the
    /// same object will fail the same way, so it is reported and not retried.
    #[error("s3://{bucket}/{key}: {reason}")]
    Refused {
        bucket: String,
        key: String,
        reason: String,
    },
    #[error("s3://{bucket}/{key}: {source}")]
    Call {
        bucket: String,
        key: String,
        #[source]
        source: S3CallError,
    },
    #[error("s3://{bucket}/{key}: {source}")]
    Ingest {
        bucket: String,
        key: String,
        #[source]
        source: IngestError,
    },
    #[error("making a temporary folder for the object: {0}")]
    TempDir(std::io::Error),
}

impl S3Error {
    /// Trying the same object again cannot help: report it (the dead-letter queue) and go on.
    pub fn is_permanent(&self) -> bool {
        match self {
            S3Error::Refused { .. } => true,
            S3Error::Call { source, .. } => !source.transient,
            S3Error::Ingest { source, .. } => matches!(
                source,
                IngestError::Deadline { .. }
                    | IngestError::ModelMismatch { .. }
                    | IngestError::CollectionName(_)
                    | IngestError::Dims(_)
            ),
            S3Error::TempDir(_) => false,
        }
    }

    /// The key the error is about, if one.
    pub fn key(&self) -> Option<&str> {
        match self {
            S3Error::Refused { key, .. }
            | S3Error::Call { key, .. }
            | S3Error::Ingest { key, .. } => Some(key),
            S3Error::TempDir(_) => None,
        }
    }
}

/// One key, for the errors about it.
#[derive(Clone, Copy)]
struct At<'a> {
    bucket: &'a str,
    key: &'a str,
}

impl At<'_> {
    fn refused(self, reason: String) -> S3Error {
        S3Error::Refused {
            bucket: self.bucket.to_owned(),
            key: self.key.to_owned(),
            reason,
        }
    }

    fn ingest(self, source: IngestError) -> S3Error {
        S3Error::Ingest {
            bucket: self.bucket.to_owned(),
            key: self.key.to_owned(),
            source,
        }
    }

    fn call(self, source: S3CallError) -> S3Error {
        S3Error::Call {
            bucket: self.bucket.to_owned(),
            key: self.key.to_owned(),
            source,
        }
    }
}

/// Brings `event.key` up to date with what the bucket holds now. See the module doc.
pub async fn apply_event(
    db: &mut Client,
    embedder: &Embedder,
    s3: &Bucket,
    event: &ObjectEvent,
    options: &IngestOptions,
) -> Result<Outcome, S3Error> {
    let (bucket, key) = (event.bucket.as_str(), event.key.as_str());
    let at = At { bucket, key };
    let ingest_err = |source| at.ingest(source);
    let refused = |reason| at.refused(reason);
    let place = place(key).map_err(refused)?;
    if let Place::Ignored(why) = place {
        return Ok(Outcome::Ignored(why));
    }
    store::check_schema(db).await.map_err(ingest_err)?;
    let state = store::object_state(&*db, bucket, key)
        .await
        .map_err(ingest_err)?;
    let sequencer = event.sequencer.as_deref().and_then(normalise_sequencer);
    if let (Some(new), Some(old)) = (
        &sequencer,
        state.as_ref().and_then(|s| s.sequencer.as_ref()),
    ) && new <= old
    {
        return Ok(Outcome::Stale);
    }
    let object = Object {
        bucket,
        key,
        sequencer,
        place,
        state,
    };
    apply(db, embedder, s3, object, options).await
}

/// One key to bring up to date, with what is known of it.
struct Object<'a> {
    bucket: &'a str,
    key: &'a str,
    sequencer: Option<String>,
    place: Place,
    state: Option<ObjectState>,
}

async fn apply(
    db: &mut Client,
    embedder: &Embedder,
    s3: &Bucket,
    object: Object<'_>,
    options: &IngestOptions,
) -> Result<Outcome, S3Error> {
    let Object {
        bucket,
        key,
        sequencer,
        place,
        state,
    } = object;
    let at = At { bucket, key };
    let ingest_err = |source| at.ingest(source);
    let refused = |reason| at.refused(reason);
    let (collection, uri) = match &place {
        Place::Document { collection, uri } => (collection.as_str(), Some(uri.clone())),
        Place::Settings { collection } => (collection.as_str(), None),
        Place::Ignored(why) => return Ok(Outcome::Ignored(why.clone())),
    };
    let fetched_at = store::clock(&*db).await.map_err(ingest_err)?;
    let dir = tempfile::Builder::new()
        .prefix("parley-s3-")
        .tempdir()
        .map_err(S3Error::TempDir)?;
    let rel = uri.as_deref().unwrap_or(SETTINGS_OBJECT);
    let limit = match &place {
        Place::Settings { .. } => MAX_SETTINGS_BYTES as u64,
        _ => options.max_document_bytes,
    };
    let fetched = s3
        .fetch(bucket, key, dir.path(), rel, limit)
        .await
        .map_err(|source| at.call(source))?;
    let claim = |version_id: Option<String>, etag: Option<String>| Claim {
        bucket: bucket.to_owned(),
        key: key.to_owned(),
        uri: uri.clone(),
        sequencer: sequencer.clone(),
        version_id,
        etag,
        fetched_at,
    };
    let object = match fetched {
        Fetched::TooBig { size } => {
            return Err(refused(format!(
                "larger than the limit of {limit} bytes ({size} bytes)"
            )));
        }
        Fetched::Missing => {
            // Nothing to delete from a collection that does not exist.
            let Some(coll) = store::find_collection(&*db, collection)
                .await
                .map_err(ingest_err)?
            else {
                return Ok(Outcome::Deleted { existed: false });
            };
            return Ok(
                match store::delete_claimed(db, &coll, &claim(None, None))
                    .await
                    .map_err(ingest_err)?
                {
                    None => Outcome::Superseded,
                    Some(_) if uri.is_none() => Outcome::Settings,
                    Some(existed) => Outcome::Deleted { existed },
                },
            );
        }
        Fetched::Object(o) => o,
    };
    if let Some(s) = &state
        && s.version_id == object.version_id
        && s.etag == object.etag
    {
        match s.outcome.as_str() {
            "stored" | "unchanged" | "settings" => {
                // Still claimed, so the sequencer is recorded and a later event is compared
                // with this one.
                let coll = store::find_collection(&*db, collection)
                    .await
                    .map_err(ingest_err)?;
                if let Some(coll) = coll {
                    let outcome = if s.outcome == "settings" {
                        "settings"
                    } else {
                        "unchanged"
                    };
                    let won = store::claim(
                        &*db,
                        &coll,
                        &claim(object.version_id, object.etag),
                        outcome,
                        None,
                    )
                    .await
                    .map_err(ingest_err)?;
                    return Ok(if won {
                        Outcome::Unchanged
                    } else {
                        Outcome::Superseded
                    });
                }
            }
            "skipped" => {
                return Ok(Outcome::AlreadyRefused(
                    s.reason.clone().unwrap_or_default(),
                ));
            }
            _ => {}
        }
    }
    let coll = store::ensure_collection(
        db,
        &CollectionSpec::named(collection),
        embedder.model_id(),
        embedder.dims(),
    )
    .await
    .map_err(ingest_err)?;
    let claimed = claim(object.version_id.clone(), object.etag.clone());
    match &place {
        Place::Settings { .. } => {
            let bytes = tokio::fs::read(&object.path)
                .await
                .map_err(S3Error::TempDir)?;
            let settings = match CollectionSettings::parse(&bytes) {
                Ok(s) => s,
                Err(reason) => {
                    store::claim(&*db, &coll, &claimed, "skipped", Some(&reason))
                        .await
                        .map_err(ingest_err)?;
                    return Err(refused(reason));
                }
            };
            let won = store::apply_settings(db, &coll, &claimed, &settings)
                .await
                .map_err(ingest_err)?;
            Ok(if won {
                Outcome::Settings
            } else {
                Outcome::Superseded
            })
        }
        _ => {
            let file = source_file(dir.path(), &object, bucket, key);
            let summary = crate::run::ingest_sources(
                db,
                embedder,
                coll,
                vec![(file, Some(claimed))],
                options,
            )
            .await
            .map_err(ingest_err)?;
            outcome_of(summary).map_err(refused)
        }
    }
}

/// The downloaded object as the file pipeline takes it: its uri is its path under `dir`, and
/// its user metadata plus where it came from become the document's metadata.
fn source_file(dir: &Path, object: &Downloaded, bucket: &str, key: &str) -> SourceFile {
    let mut metadata: serde_json::Map<String, serde_json::Value> = object
        .metadata
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    metadata.insert(
        "source".into(),
        serde_json::Value::String(format!("s3://{bucket}/{key}")),
    );
    SourceFile {
        root: dir.to_path_buf(),
        path: object.path.clone(),
        structure: None,
        metadata: serde_json::Value::Object(metadata),
    }
}

/// One file's summary as an outcome, or the reason it was skipped.
fn outcome_of(summary: Summary) -> Result<Outcome, String> {
    if let Some(s) = summary.skipped.into_iter().next() {
        return Err(s.reason);
    }
    Ok(if summary.superseded > 0 {
        Outcome::Superseded
    } else if summary.unchanged > 0 {
        Outcome::Unchanged
    } else {
        Outcome::Stored {
            replaced: summary.replaced > 0,
            chunks: summary.chunks,
        }
    })
}

/// What a [`sync`] did, per collection.
#[derive(Debug, Default)]
pub struct SyncSummary {
    /// Each collection's own run summary (added, replaced, unchanged, deleted by pruning,
    /// skipped with why, superseded).
    pub collections: BTreeMap<String, Summary>,
    /// Settings objects applied.
    pub settings: u64,
    /// Keys left alone, with why (folders, hidden files, other formats).
    pub ignored: Vec<(String, String)>,
    /// Keys that cannot be documents, with why.
    pub refused: Vec<(String, String)>,
}

/// Objects downloaded before their chunks are embedded together: enough to fill the model's
/// batches with small files, few enough that /tmp holds them (each at most
/// `max_document_bytes`).
const SYNC_GROUP: usize = 16;

/// Reconciles `url`'s prefix with its collections: every object whose content differs from
/// what is stored is ingested (unchanged ones are recognised by their ETag, not downloaded),
/// settings objects applied, and with `prune` the documents whose objects are gone deleted
/// (not those whose objects appeared after the listing). Safe to run while events arrive: it
/// writes under the same claims as the ingest function.
pub async fn sync(
    db: &mut Client,
    embedder: &Embedder,
    s3: &Bucket,
    url: &S3Url,
    options: &IngestOptions,
    prune: bool,
) -> Result<SyncSummary, S3Error> {
    let bucket = url.bucket.as_str();
    let at = At {
        bucket,
        key: &url.prefix,
    };
    let prefix_err = |source| at.ingest(source);
    store::check_schema(db).await.map_err(prefix_err)?;
    let listed_at = store::clock(&*db).await.map_err(prefix_err)?;
    let listing = s3
        .list(bucket, &url.prefix)
        .await
        .map_err(|source| at.call(source))?;
    let states = store::object_states(&*db, bucket, &url.prefix)
        .await
        .map_err(prefix_err)?;

    let mut summary = SyncSummary::default();
    let mut by_collection: BTreeMap<String, Vec<(Listed, Place)>> = BTreeMap::new();
    for listed in listing {
        match place(&listed.key) {
            Err(reason) => summary.refused.push((listed.key, reason)),
            Ok(Place::Ignored(why)) => summary.ignored.push((listed.key, why)),
            Ok(p) => {
                let name = match &p {
                    Place::Document { collection, .. } | Place::Settings { collection } => {
                        collection.clone()
                    }
                    Place::Ignored(_) => unreachable!("matched above"),
                };
                by_collection.entry(name).or_default().push((listed, p));
            }
        }
    }
    // Collections with recorded objects but none listed: all their objects are gone.
    if prune {
        for key in states.keys() {
            if let Ok(Place::Document { collection, .. }) = place(key) {
                by_collection.entry(collection).or_default();
            }
        }
    }

    for (name, objects) in by_collection {
        let folder = format!("{name}/");
        let coll_err = |source| {
            At {
                bucket,
                key: &folder,
            }
            .ingest(source)
        };
        let existing = store::find_collection(&*db, &name)
            .await
            .map_err(coll_err)?;
        let coll = match existing {
            Some(c) => c,
            None if objects.is_empty() => continue,
            None => store::ensure_collection(
                db,
                &CollectionSpec::named(&name),
                embedder.model_id(),
                embedder.dims(),
            )
            .await
            .map_err(coll_err)?,
        };
        let mut run = Summary::default();
        let keys: Vec<String> = objects.iter().map(|(l, _)| l.key.clone()).collect();
        let mut pending: Vec<(Listed, Place)> = Vec::new();
        for (listed, p) in objects {
            let state = states.get(&listed.key);
            let same = state.is_some_and(|s| s.etag.is_some() && s.etag == listed.etag);
            match (
                &p,
                same.then(|| state.map(|s| s.outcome.as_str())).flatten(),
            ) {
                // Settings are not documents: an unchanged one is not counted.
                (Place::Settings { .. }, Some("settings")) => {}
                (_, Some("stored" | "unchanged")) => run.unchanged += 1,
                (_, Some("skipped")) => run.skipped.push(crate::Skipped {
                    uri: listed.key.clone(),
                    reason: state.and_then(|s| s.reason.clone()).unwrap_or_default(),
                }),
                (Place::Settings { .. }, _) => {
                    let object = Object {
                        bucket,
                        key: &listed.key,
                        sequencer: None,
                        place: p.clone(),
                        state: state.cloned(),
                    };
                    match apply(db, embedder, s3, object, options).await {
                        Ok(Outcome::Settings) => summary.settings += 1,
                        Ok(_) => {}
                        Err(e) if e.is_permanent() => run.skipped.push(crate::Skipped {
                            uri: listed.key.clone(),
                            reason: refusal(&e),
                        }),
                        Err(e) => return Err(e),
                    }
                }
                _ => pending.push((listed, p)),
            }
        }
        for group in pending.chunks(SYNC_GROUP) {
            ingest_group(db, embedder, s3, bucket, &coll, group, options, &mut run).await?;
        }
        if prune {
            let uri_prefix = match url.within_collection() {
                Some((c, rest)) if c == name => rest,
                _ => "",
            };
            run.deleted += store::prune_objects(&*db, &coll, bucket, uri_prefix, &keys, listed_at)
                .await
                .map_err(coll_err)?;
        }
        if run.added + run.replaced + run.deleted > 0 {
            store::touch(&*db, &coll).await.map_err(coll_err)?;
        }
        summary.collections.insert(name, run);
    }
    Ok(summary)
}

/// Downloads a group of a collection's objects and ingests them in one run (their chunks
/// embedded together), each under its claim; adds what happened to `run`.
#[allow(clippy::too_many_arguments)]
async fn ingest_group(
    db: &mut Client,
    embedder: &Embedder,
    s3: &Bucket,
    bucket: &str,
    coll: &Collection,
    group: &[(Listed, Place)],
    options: &IngestOptions,
    run: &mut Summary,
) -> Result<(), S3Error> {
    let dir = tempfile::Builder::new()
        .prefix("parley-s3-")
        .tempdir()
        .map_err(S3Error::TempDir)?;
    let mut sources = Vec::new();
    let mut missing = Vec::new();
    for (listed, p) in group {
        let Place::Document { uri, .. } = p else {
            continue;
        };
        let key = listed.key.as_str();
        let at = At { bucket, key };
        let fetched_at = store::clock(&*db).await.map_err(|e| at.ingest(e))?;
        let fetched = s3
            .fetch(bucket, key, dir.path(), uri, options.max_document_bytes)
            .await
            .map_err(|e| at.call(e))?;
        let claim = |version_id, etag| Claim {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            uri: Some(uri.clone()),
            sequencer: None,
            version_id,
            etag,
            fetched_at,
        };
        match fetched {
            Fetched::Object(o) => {
                let claimed = claim(o.version_id.clone(), o.etag.clone());
                sources.push((source_file(dir.path(), &o, bucket, key), Some(claimed)));
            }
            Fetched::TooBig { size } => run.skipped.push(crate::Skipped {
                uri: key.to_owned(),
                reason: format!(
                    "larger than the limit of {} bytes ({size} bytes)",
                    options.max_document_bytes
                ),
            }),
            // Deleted since the listing: its event deletes it, or a pruning sync.
            Fetched::Missing => missing.push(claim(None, None)),
        }
    }
    for claimed in missing {
        let at = At {
            bucket,
            key: &claimed.key,
        };
        if let Some(true) = store::delete_claimed(db, coll, &claimed)
            .await
            .map_err(|e| at.ingest(e))?
        {
            run.deleted += 1;
        }
    }
    if sources.is_empty() {
        return Ok(());
    }
    let first = group.first().map_or("", |(l, _)| l.key.as_str());
    let part = crate::run::ingest_sources(db, embedder, coll.clone(), sources, options)
        .await
        .map_err(|e| At { bucket, key: first }.ingest(e))?;
    run.added += part.added;
    run.replaced += part.replaced;
    run.unchanged += part.unchanged;
    run.superseded += part.superseded;
    run.chunks += part.chunks;
    run.elapsed += part.elapsed;
    run.skipped.extend(part.skipped);
    Ok(())
}

/// The reason of a permanent error, without the `s3://` prefix the error's own text repeats.
fn refusal(e: &S3Error) -> String {
    match e {
        S3Error::Refused { reason, .. } => reason.clone(),
        other => other.to_string(),
    }
}
