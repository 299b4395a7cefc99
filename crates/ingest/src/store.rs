//! The SQL of ingestion (tables of migrations/0004_documents.sql, written as their owner): the
//! collection created or checked against the embedder, the stored documents' hashes, one
//! document replaced in one transaction with binary `COPY`, pruning, memberships.
//!
//! Embeddings go in binary COPY as pgvector's own binary form (`vector_send`: u16 dimensions,
//! u16 unused, then big-endian f32s), so no float is printed and parsed again.

use std::collections::HashMap;
use std::sync::LazyLock;

use bytes::{BufMut, BytesMut};
use tokio_postgres::types::{IsNull, Kind, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, GenericClient};

use crate::{CollectionSpec, IngestError, Member, pg};

pub(crate) mod extraction;

/// Rows per INSERT of sections or chunks: a statement takes at most 65,535 parameters, and a
/// chunk has 9.
const ROWS_PER_INSERT: usize = 1000;

/// The collection a run writes into.
#[derive(Debug, Clone)]
pub(crate) struct Collection {
    pub id: i64,
}

/// A stored document, as the run compares it with its file.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub content_hash: String,
    pub path: Vec<String>,
    pub metadata: serde_json::Value,
    pub id: i64,
    /// Whether its card is stored (documents ingested before migration 0019 have none).
    pub has_card: bool,
}

/// A document ready to store: everything but its id.
#[derive(Debug, Clone)]
pub(crate) struct NewDocument {
    pub uri: String,
    pub title: String,
    pub path: Vec<String>,
    pub metadata: serde_json::Value,
    pub content_hash: String,
    pub chars: i32,
    pub sections: Vec<crate::Section>,
    pub chunks: Vec<NewChunk>,
    /// What the whole document is about ([`crate::card`]), embedded beside its chunks.
    pub card: String,
    /// Set when the document comes from an S3 object: written only if the claim holds.
    pub claim: Option<Claim>,
}

/// What an ingestion from S3 read, to be recorded in `parley.s3_objects` in the same
/// transaction as what it changes (migration 0016 says why and how the comparison works).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub bucket: String,
    pub key: String,
    /// The document's uri; `None` for a collection's settings object.
    pub uri: Option<String>,
    /// Normalised ([`crate::s3`]); `None` when no event said (a sync, the command line).
    pub sequencer: Option<String>,
    pub version_id: Option<String>,
    pub etag: Option<String>,
    /// The database's clock just before S3 was read.
    pub fetched_at: std::time::SystemTime,
}

/// What a claimed write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    Added,
    Replaced,
    /// Someone read the object from S3 after this run did and recorded it first: nothing
    /// was changed.
    Superseded,
}

/// Records `claim` with `outcome` unless the stored row was read from S3 later than this
/// claim's read; true if recorded. In a transaction, the row stays locked until it ends, so
/// two writers of one key take turns.
pub(crate) async fn claim(
    db: &impl GenericClient,
    collection: &Collection,
    claim: &Claim,
    outcome: &str,
    reason: Option<&str>,
) -> Result<bool, IngestError> {
    let row = db
        .query_typed_opt(
            "INSERT INTO parley.s3_objects AS o
                    (bucket, key, collection_id, uri, sequencer, version_id, etag, fetched_at, outcome, reason)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (bucket, key) DO UPDATE
                SET collection_id = EXCLUDED.collection_id, uri = EXCLUDED.uri,
                    sequencer = greatest(o.sequencer, EXCLUDED.sequencer),
                    version_id = EXCLUDED.version_id, etag = EXCLUDED.etag,
                    fetched_at = EXCLUDED.fetched_at, outcome = EXCLUDED.outcome,
                    reason = EXCLUDED.reason, updated_at = now()
              WHERE o.fetched_at < EXCLUDED.fetched_at
             RETURNING 1",
            &[
                (&claim.bucket, Type::TEXT),
                (&claim.key, Type::TEXT),
                (&collection.id, Type::INT8),
                (&claim.uri, Type::TEXT),
                (&claim.sequencer, Type::TEXT),
                (&claim.version_id, Type::TEXT),
                (&claim.etag, Type::TEXT),
                (&claim.fetched_at, Type::TIMESTAMPTZ),
                (&outcome, Type::TEXT),
                (&reason, Type::TEXT),
            ],
        )
        .await
        .map_err(pg("recording what was read from S3"))?;
    Ok(row.is_some())
}

/// What `parley.s3_objects` holds for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectState {
    pub sequencer: Option<String>,
    pub version_id: Option<String>,
    pub etag: Option<String>,
    pub outcome: String,
    pub reason: Option<String>,
    pub fetched_at: std::time::SystemTime,
}

pub(crate) async fn object_state(
    db: &impl GenericClient,
    bucket: &str,
    key: &str,
) -> Result<Option<ObjectState>, IngestError> {
    let row = db
        .query_typed_opt(
            "SELECT sequencer, version_id, etag, outcome, reason, fetched_at
               FROM parley.s3_objects WHERE bucket = $1 AND key = $2",
            &[(&bucket, Type::TEXT), (&key, Type::TEXT)],
        )
        .await
        .map_err(pg("reading what was last read of an S3 object"))?;
    Ok(row.map(|r| ObjectState {
        sequencer: r.get(0),
        version_id: r.get(1),
        etag: r.get(2),
        outcome: r.get(3),
        reason: r.get(4),
        fetched_at: r.get(5),
    }))
}

/// Every recorded key of `bucket` under `prefix`, with its state (for a sync).
pub(crate) async fn object_states(
    db: &impl GenericClient,
    bucket: &str,
    prefix: &str,
) -> Result<HashMap<String, ObjectState>, IngestError> {
    let rows = db
        .query_typed(
            "SELECT key, sequencer, version_id, etag, outcome, reason, fetched_at
               FROM parley.s3_objects WHERE bucket = $1 AND starts_with(key, $2)",
            &[(&bucket, Type::TEXT), (&prefix, Type::TEXT)],
        )
        .await
        .map_err(pg("reading what was last read of the prefix's S3 objects"))?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.get(0),
                ObjectState {
                    sequencer: r.get(1),
                    version_id: r.get(2),
                    etag: r.get(3),
                    outcome: r.get(4),
                    reason: r.get(5),
                    fetched_at: r.get(6),
                },
            )
        })
        .collect())
}

/// The database's clock: when an S3 read starts, compared across every ingest function.
pub(crate) async fn clock(db: &impl GenericClient) -> Result<std::time::SystemTime, IngestError> {
    Ok(db
        .query_typed_one("SELECT clock_timestamp()", &[])
        .await
        .map_err(pg("reading the database's clock"))?
        .get(0))
}

/// Deletes the claimed object's document, in one transaction with its claim. `None` when the
/// claim lost (see [`claim`]); else whether a document was deleted.
pub(crate) async fn delete_claimed(
    db: &mut Client,
    collection: &Collection,
    claimed: &Claim,
) -> Result<Option<bool>, IngestError> {
    let tx = db
        .transaction()
        .await
        .map_err(pg("starting a deletion's transaction"))?;
    if !claim(&tx, collection, claimed, "deleted", None).await? {
        return Ok(None);
    }
    let deleted = match &claimed.uri {
        Some(uri) => {
            tx.execute_typed(
                "DELETE FROM parley.documents WHERE collection_id = $1 AND uri = $2",
                &[(&collection.id, Type::INT8), (uri, Type::TEXT)],
            )
            .await
            .map_err(pg("deleting a document whose object was deleted"))?
                > 0
        }
        None => false,
    };
    tx.commit().await.map_err(pg("committing a deletion"))?;
    Ok(Some(deleted))
}

/// Applies a collection's settings object, in one transaction with its claim: the given
/// fields replace the stored ones, and `readers`, when given, becomes the whole list of
/// members. `false` when the claim lost.
pub(crate) async fn apply_settings(
    db: &mut Client,
    collection: &Collection,
    claimed: &Claim,
    settings: &crate::CollectionSettings,
) -> Result<bool, IngestError> {
    let tx = db
        .transaction()
        .await
        .map_err(pg("starting the settings' transaction"))?;
    if !claim(&tx, collection, claimed, "settings", None).await? {
        return Ok(false);
    }
    tx.execute_typed(
        "UPDATE parley.collections
            SET title = coalesce($2, title), description = coalesce($3, description),
                public = coalesce($4, public), updated_at = now()
          WHERE id = $1",
        &[
            (&collection.id, Type::INT8),
            (&settings.title, Type::TEXT),
            (&settings.description, Type::TEXT),
            (&settings.public, Type::BOOL),
        ],
    )
    .await
    .map_err(pg("updating the collection from its settings object"))?;
    if let Some(readers) = &settings.readers {
        tx.execute_typed(
            "DELETE FROM parley.memberships WHERE collection_id = $1",
            &[(&collection.id, Type::INT8)],
        )
        .await
        .map_err(pg("replacing the collection's readers"))?;
        let name: String = tx
            .query_typed_one(
                "SELECT name FROM parley.collections WHERE id = $1",
                &[(&collection.id, Type::INT8)],
            )
            .await
            .map_err(pg("reading the collection's name"))?
            .get(0);
        enroll(&tx, &name, readers, false).await?;
    }
    tx.commit().await.map_err(pg("committing the settings"))?;
    Ok(true)
}

/// The collection's documents under `uri_prefix` that came from `bucket` and whose keys were
/// not listed, deleted when no one read their object since `listed_at` (an object created
/// after the listing is not pruned). Returns how many.
pub(crate) async fn prune_objects(
    db: &impl GenericClient,
    collection: &Collection,
    bucket: &str,
    uri_prefix: &str,
    listed: &[String],
    listed_at: std::time::SystemTime,
) -> Result<u64, IngestError> {
    let rows = db
        .query_typed(
            "WITH gone AS (
                 UPDATE parley.s3_objects o
                    SET outcome = 'deleted', version_id = NULL, etag = NULL, reason = NULL,
                        fetched_at = $5, updated_at = now()
                  WHERE o.collection_id = $1 AND o.bucket = $2 AND o.uri IS NOT NULL
                    AND starts_with(o.uri, $3) AND o.key <> ALL ($4)
                    AND o.fetched_at < $5 AND o.outcome <> 'deleted'
                 RETURNING o.uri)
             DELETE FROM parley.documents d USING gone
              WHERE d.collection_id = $1 AND d.uri = gone.uri
             RETURNING d.id",
            &[
                (&collection.id, Type::INT8),
                (&bucket, Type::TEXT),
                (&uri_prefix, Type::TEXT),
                (&listed, Type::TEXT_ARRAY),
                (&listed_at, Type::TIMESTAMPTZ),
            ],
        )
        .await
        .map_err(pg("pruning documents whose objects are gone"))?;
    Ok(rows.len() as u64)
}

#[derive(Debug, Clone)]
pub(crate) struct NewChunk {
    pub section: i32,
    pub position: i32,
    pub heading: Vec<String>,
    pub text: String,
    pub context: String,
    /// The page it starts on (PDF).
    pub page: Option<i32>,
}

pub(crate) async fn check_schema(db: &Client) -> Result<(), IngestError> {
    let row = db
        .query_typed_one("SELECT to_regclass('parley.chunks') IS NOT NULL", &[])
        .await
        .map_err(pg("checking for the documents tables"))?;
    if row.get::<_, bool>(0) {
        Ok(())
    } else {
        Err(IngestError::NotMigrated)
    }
}

/// Creates the collection with the embedder's model, or checks an existing one was embedded by
/// the same model; the spec's given fields replace the stored ones.
pub(crate) async fn ensure_collection(
    db: &Client,
    spec: &CollectionSpec,
    model: &str,
    dims: usize,
) -> Result<Collection, IngestError> {
    crate::check_collection_name(&spec.name)?;
    if !(1..=2000).contains(&dims) {
        return Err(IngestError::Dims(dims));
    }
    let dims_i32 = dims as i32;
    db.execute_typed(
        "INSERT INTO parley.collections (name, title, description, public, embedding_model, embedding_dims)
         VALUES ($1, coalesce($2, $1), $3, coalesce($4, false), $5, $6)
         ON CONFLICT (name) DO NOTHING",
        &[
            (&spec.name, Type::TEXT),
            (&spec.title, Type::TEXT),
            (&spec.description, Type::TEXT),
            (&spec.public, Type::BOOL),
            (&model, Type::TEXT),
            (&dims_i32, Type::INT4),
        ],
    )
    .await
    .map_err(pg("creating the collection"))?;
    let row = db
        .query_typed_one(
            "SELECT id, embedding_model, embedding_dims FROM parley.collections WHERE name = $1",
            &[(&spec.name, Type::TEXT)],
        )
        .await
        .map_err(pg("reading the collection"))?;
    let (id, stored, stored_dims): (i64, String, i32) = (row.get(0), row.get(1), row.get(2));
    if stored != model || stored_dims != dims_i32 {
        return Err(IngestError::ModelMismatch {
            collection: spec.name.clone(),
            stored,
            configured: model.to_owned(),
        });
    }
    if spec.title.is_some() || spec.description.is_some() || spec.public.is_some() {
        db.execute_typed(
            "UPDATE parley.collections
                SET title = coalesce($2, title), description = coalesce($3, description),
                    public = coalesce($4, public), updated_at = now()
              WHERE id = $1",
            &[
                (&id, Type::INT8),
                (&spec.title, Type::TEXT),
                (&spec.description, Type::TEXT),
                (&spec.public, Type::BOOL),
            ],
        )
        .await
        .map_err(pg("updating the collection"))?;
    }
    ensure_index(db, dims).await?;
    Ok(Collection { id })
}

/// Migration 0004 indexes 384-dimension vectors (all-MiniLM-L6-v2); a model of another length
/// gets its own partial HNSW index of the same shape, so its searches are indexed too. Made by
/// migration 0025's function, which runs as the tables' owner: CREATE INDEX needs the owner,
/// and the ingest function's login is not.
async fn ensure_index(db: &Client, dims: usize) -> Result<(), IngestError> {
    if dims == 384 {
        return Ok(());
    }
    let dims = dims as i32;
    db.execute_typed(
        "SELECT parley.ensure_embedding_index($1)",
        &[(&dims, Type::INT4)],
    )
    .await
    .map_err(pg("creating the HNSW index for this model's length"))?;
    Ok(())
}

/// The collection by name, if it exists.
pub(crate) async fn find_collection(
    db: &impl GenericClient,
    name: &str,
) -> Result<Option<Collection>, IngestError> {
    Ok(db
        .query_typed_opt(
            "SELECT id FROM parley.collections WHERE name = $1",
            &[(&name, Type::TEXT)],
        )
        .await
        .map_err(pg("finding the collection"))?
        .map(|r| Collection { id: r.get(0) }))
}

/// The collection's documents among `uris`, by uri.
pub(crate) async fn stored(
    db: &Client,
    collection: &Collection,
    uris: &[String],
) -> Result<HashMap<String, Stored>, IngestError> {
    // Only the run's own: an S3 event ingests one object into a collection that may hold
    // hundreds of thousands.
    let rows = db
        .query_typed(
            "SELECT uri, content_hash, path, metadata, id, card_embedding IS NOT NULL
               FROM parley.documents
              WHERE collection_id = $1 AND uri = ANY ($2)",
            &[(&collection.id, Type::INT8), (&uris, Type::TEXT_ARRAY)],
        )
        .await
        .map_err(pg("reading the collection's documents"))?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.get(0),
                Stored {
                    content_hash: r.get(1),
                    path: r.get(2),
                    metadata: r.get(3),
                    id: r.get(4),
                    has_card: r.get(5),
                },
            )
        })
        .collect())
}

/// An unchanged document whose place in the corpus or metadata changed: updated in place.
pub(crate) async fn update_place(
    db: &Client,
    id: i64,
    path: &[String],
    metadata: &serde_json::Value,
) -> Result<(), IngestError> {
    db.execute_typed(
        "UPDATE parley.documents SET path = $2, metadata = $3 WHERE id = $1",
        &[
            (&id, Type::INT8),
            (&path, Type::TEXT_ARRAY),
            (metadata, Type::JSONB),
        ],
    )
    .await
    .map_err(pg("updating a document's path and metadata"))?;
    Ok(())
}

/// pgvector's `vector` type, for [`Vector`] values. An extension type has no fixed oid, and
/// none is needed: binary `COPY` sends no type oids, and a statement's parameter of oid 0 is
/// "unspecified", which the server resolves from the statement's own `$n::vector`. Looking the
/// oid up would cost a round trip per run (or leave tokio-postgres' named type-info statement
/// on the session, as `prepare` did).
fn vector() -> Type {
    static VECTOR: LazyLock<Type> =
        LazyLock::new(|| Type::new("vector".into(), 0, Kind::Simple, "public".into()));
    VECTOR.clone()
}

/// Replaces one document in one transaction: the old row (its sections and chunks by cascade)
/// deleted, the new one inserted, its sections and chunks copied in. A reader sees the old
/// document or the new one. With a claim, the claim is recorded first in the same transaction,
/// and a lost claim changes nothing.
pub(crate) async fn write_document(
    db: &mut Client,
    collection: &Collection,
    doc: &NewDocument,
    embeddings: &[Vec<f32>],
    card_embedding: &[f32],
) -> Result<Written, IngestError> {
    let tx = db
        .transaction()
        .await
        .map_err(pg("starting a document's transaction"))?;
    // First, so the claim's row lock is held until the document is in.
    if let Some(c) = &doc.claim
        && !claim(&tx, collection, c, "stored", None).await?
    {
        return Ok(Written::Superseded);
    }
    let replaced = tx
        .execute_typed(
            "DELETE FROM parley.documents WHERE collection_id = $1 AND uri = $2",
            &[(&collection.id, Type::INT8), (&doc.uri, Type::TEXT)],
        )
        .await
        .map_err(pg("deleting a document's old version"))?
        > 0;
    let metadata = if doc.metadata.is_null() {
        &serde_json::Value::Object(Default::default())
    } else {
        &doc.metadata
    };
    let id: i64 = tx
        .query_typed_one(
            "INSERT INTO parley.documents
                    (collection_id, uri, title, path, metadata, content_hash, chars, card, card_embedding)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::vector) RETURNING id",
            &[
                (&collection.id, Type::INT8),
                (&doc.uri, Type::TEXT),
                (&doc.title, Type::TEXT),
                (&doc.path, Type::TEXT_ARRAY),
                (metadata, Type::JSONB),
                (&doc.content_hash, Type::TEXT),
                (&doc.chars, Type::INT4),
                (&doc.card, Type::TEXT),
                (&Vector(card_embedding), vector()),
            ],
        )
        .await
        .map_err(pg("inserting a document"))?
        .get(0);

    // INSERT, not COPY: COPY FROM is refused on a table with row-level security to all but
    // its owner, and the ingest function's login is not the owner (migration 0025). Several
    // rows per statement, so the chunks' statement triggers run once per batch.
    let ords: Vec<i32> = (0..doc.sections.len() as i32).collect();
    for (sections, ords) in doc
        .sections
        .chunks(ROWS_PER_INSERT)
        .zip(ords.chunks(ROWS_PER_INSERT))
    {
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> = Vec::with_capacity(5 * sections.len());
        let mut rows = Vec::with_capacity(sections.len());
        for (s, ord) in sections.iter().zip(ords) {
            let n = params.len();
            rows.push(format!(
                "(${}, ${}, ${}, ${}, ${})",
                n + 1,
                n + 2,
                n + 3,
                n + 4,
                n + 5
            ));
            params.extend([
                (&id as &(dyn ToSql + Sync), Type::INT8),
                (&collection.id, Type::INT8),
                (ord, Type::INT4),
                (&s.heading, Type::TEXT_ARRAY),
                (&s.text, Type::TEXT),
            ]);
        }
        tx.execute_typed(
            &format!(
                "INSERT INTO parley.sections (document_id, collection_id, ord, heading, text) VALUES {}",
                rows.join(", ")
            ),
            &params,
        )
        .await
        .map_err(pg("inserting sections"))?;
    }
    let vectors: Vec<Vector<'_>> = embeddings.iter().map(|e| Vector(e)).collect();
    for (chunks, vectors) in doc
        .chunks
        .chunks(ROWS_PER_INSERT)
        .zip(vectors.chunks(ROWS_PER_INSERT))
    {
        let mut params: Vec<(&(dyn ToSql + Sync), Type)> = Vec::with_capacity(9 * chunks.len());
        let mut rows = Vec::with_capacity(chunks.len());
        for (c, v) in chunks.iter().zip(vectors) {
            let n = params.len();
            rows.push(format!(
                "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}::vector)",
                n + 1,
                n + 2,
                n + 3,
                n + 4,
                n + 5,
                n + 6,
                n + 7,
                n + 8,
                n + 9
            ));
            params.extend([
                (&id as &(dyn ToSql + Sync), Type::INT8),
                (&collection.id, Type::INT8),
                (&c.section, Type::INT4),
                (&c.position, Type::INT4),
                (&c.heading, Type::TEXT_ARRAY),
                (&c.text, Type::TEXT),
                (&c.context, Type::TEXT),
                (&c.page, Type::INT4),
                (v, vector()),
            ]);
        }
        tx.execute_typed(
            &format!(
                "INSERT INTO parley.chunks
                        (document_id, collection_id, section, position, heading, text, context, page, embedding)
                 VALUES {}",
                rows.join(", ")
            ),
            &params,
        )
        .await
        .map_err(pg("inserting chunks"))?;
    }
    tx.commit().await.map_err(pg("committing a document"))?;
    Ok(if replaced {
        Written::Replaced
    } else {
        Written::Added
    })
}

/// The title and sections of documents stored without a card, to make theirs.
pub(crate) async fn card_sources(
    db: &Client,
    ids: &[i64],
) -> Result<Vec<(i64, String, Vec<crate::Section>)>, IngestError> {
    let rows = db
        .query_typed(
            "SELECT d.id, d.title, s.heading, s.text
               FROM parley.documents d LEFT JOIN parley.sections s ON s.document_id = d.id
              WHERE d.id = ANY ($1)
              ORDER BY d.id, s.ord",
            &[(&ids, Type::INT8_ARRAY)],
        )
        .await
        .map_err(pg("reading documents to make their cards"))?;
    let mut out: Vec<(i64, String, Vec<crate::Section>)> = Vec::new();
    for r in rows {
        let id: i64 = r.get(0);
        if out.last().is_none_or(|(last, _, _)| *last != id) {
            out.push((id, r.get(1), Vec::new()));
        }
        let heading: Option<Vec<String>> = r.get(2);
        let text: Option<String> = r.get(3);
        if let (Some(heading), Some(text), Some((_, _, sections))) = (heading, text, out.last_mut())
        {
            sections.push(crate::Section {
                heading,
                text,
                page: None,
            });
        }
    }
    Ok(out)
}

/// Stores a document's card and its embedding.
pub(crate) async fn set_card(
    db: &Client,
    id: i64,
    card: &str,
    embedding: &[f32],
) -> Result<(), IngestError> {
    db.execute_typed(
        "UPDATE parley.documents SET card = $2, card_embedding = $3::vector WHERE id = $1",
        &[
            (&id, Type::INT8),
            (&card, Type::TEXT),
            (&Vector(embedding), vector()),
        ],
    )
    .await
    .map_err(pg("storing a document's card"))?;
    Ok(())
}

/// Deletes the collection's documents whose uris are not in `keep`, in one statement (one
/// transaction). Returns how many.
pub(crate) async fn prune(
    db: &Client,
    collection: &Collection,
    keep: &[String],
) -> Result<u64, IngestError> {
    db.execute_typed(
        "DELETE FROM parley.documents WHERE collection_id = $1 AND uri <> ALL ($2)",
        &[(&collection.id, Type::INT8), (&keep, Type::TEXT_ARRAY)],
    )
    .await
    .map_err(pg("pruning documents not seen in this run"))
}

pub(crate) async fn touch(db: &Client, collection: &Collection) -> Result<(), IngestError> {
    db.execute_typed(
        "UPDATE parley.collections SET updated_at = now() WHERE id = $1",
        &[(&collection.id, Type::INT8)],
    )
    .await
    .map_err(pg("marking the collection updated"))?;
    Ok(())
}

pub(crate) async fn enroll(
    db: &impl GenericClient,
    collection: &str,
    members: &[Member],
    remove: bool,
) -> Result<u64, IngestError> {
    let (kinds, principals): (Vec<&str>, Vec<&str>) = members
        .iter()
        .map(|m| match m {
            Member::User(s) => ("user", s.as_str()),
            Member::Group(g) => ("group", g.as_str()),
        })
        .unzip();
    let found = db
        .query_typed_opt(
            "SELECT id FROM parley.collections WHERE name = $1",
            &[(&collection, Type::TEXT)],
        )
        .await
        .map_err(pg("finding the collection"))?;
    let Some(row) = found else {
        return Err(IngestError::NoCollection {
            collection: collection.to_owned(),
        });
    };
    let id: i64 = row.get(0);
    let sql = if remove {
        "DELETE FROM parley.memberships m USING unnest($2::text[], $3::text[]) AS x (kind, principal)
          WHERE m.collection_id = $1 AND m.kind = x.kind AND m.principal = x.principal"
    } else {
        "INSERT INTO parley.memberships (collection_id, kind, principal)
         SELECT $1, kind, principal FROM unnest($2::text[], $3::text[]) AS x (kind, principal)
         ON CONFLICT DO NOTHING"
    };
    db.execute_typed(
        sql,
        &[
            (&id, Type::INT8),
            (&kinds, Type::TEXT_ARRAY),
            (&principals, Type::TEXT_ARRAY),
        ],
    )
    .await
    .map_err(pg("changing memberships"))
}

/// An embedding, written in pgvector's binary form.
#[derive(Debug)]
struct Vector<'a>(&'a [f32]);

impl ToSql for Vector<'_> {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let dims = u16::try_from(self.0.len())?;
        out.reserve(4 + 4 * self.0.len());
        out.put_u16(dims);
        out.put_u16(0);
        for x in self.0 {
            out.put_f32(*x);
        }
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        ty.name() == "vector"
    }

    to_sql_checked!();
}
