//! The SQL of ingestion (tables of migrations/0004_documents.sql, written as their owner): the
//! collection created or checked against the embedder, the stored documents' hashes, one
//! document replaced in one transaction with binary `COPY`, pruning, memberships.
//!
//! Embeddings go in binary COPY as pgvector's own binary form (`vector_send`: u16 dimensions,
//! u16 unused, then big-endian f32s), so no float is printed and parsed again.

use std::collections::HashMap;
use std::pin::pin;

use bytes::{BufMut, BytesMut};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, GenericClient};

use crate::{CollectionSpec, IngestError, Member, pg};

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
        .query_one("SELECT to_regclass('parley.chunks') IS NOT NULL", &[])
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
    db.execute(
        "INSERT INTO parley.collections (name, title, description, public, embedding_model, embedding_dims)
         VALUES ($1, coalesce($2, $1), $3, coalesce($4, false), $5, $6)
         ON CONFLICT (name) DO NOTHING",
        &[&spec.name, &spec.title, &spec.description, &spec.public, &model, &dims_i32],
    )
    .await
    .map_err(pg("creating the collection"))?;
    let row = db
        .query_one(
            "SELECT id, embedding_model, embedding_dims FROM parley.collections WHERE name = $1",
            &[&spec.name],
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
        db.execute(
            "UPDATE parley.collections
                SET title = coalesce($2, title), description = coalesce($3, description),
                    public = coalesce($4, public), updated_at = now()
              WHERE id = $1",
            &[&id, &spec.title, &spec.description, &spec.public],
        )
        .await
        .map_err(pg("updating the collection"))?;
    }
    ensure_index(db, dims).await?;
    Ok(Collection { id })
}

/// Migration 0004 indexes 384-dimension vectors (all-MiniLM-L6-v2); a model of another length
/// gets its own partial HNSW index of the same shape, so its searches are indexed too.
async fn ensure_index(db: &Client, dims: usize) -> Result<(), IngestError> {
    if dims == 384 {
        return Ok(());
    }
    db.batch_execute(&format!(
        "CREATE INDEX IF NOT EXISTS chunks_embedding_{dims}_idx ON parley.chunks
             USING hnsw ((embedding::vector({dims})) vector_cosine_ops)
             WHERE vector_dims(embedding) = {dims}"
    ))
    .await
    .map_err(pg("creating the HNSW index for this model's length"))
}

/// The collection's documents by uri.
pub(crate) async fn stored(
    db: &Client,
    collection: &Collection,
) -> Result<HashMap<String, Stored>, IngestError> {
    let rows = db
        .query(
            "SELECT uri, content_hash, path, metadata, id FROM parley.documents WHERE collection_id = $1",
            &[&collection.id],
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
    db.execute(
        "UPDATE parley.documents SET path = $2, metadata = $3 WHERE id = $1",
        &[&id, &path, metadata],
    )
    .await
    .map_err(pg("updating a document's path and metadata"))?;
    Ok(())
}

/// pgvector's `vector` type as this database knows it (an extension type has no fixed oid).
pub(crate) async fn vector_type(db: &Client) -> Result<Type, IngestError> {
    let stmt = db
        .prepare("SELECT $1::vector")
        .await
        .map_err(pg("looking up pgvector's vector type"))?;
    Ok(stmt.params()[0].clone())
}

/// Replaces one document in one transaction: the old row (its sections and chunks by cascade)
/// deleted, the new one inserted, its sections and chunks copied in. A reader sees the old
/// document or the new one. Returns whether a document was replaced (rather than added).
pub(crate) async fn write_document(
    db: &mut Client,
    collection: &Collection,
    vector: &Type,
    doc: &NewDocument,
    embeddings: &[Vec<f32>],
) -> Result<bool, IngestError> {
    let tx = db
        .transaction()
        .await
        .map_err(pg("starting a document's transaction"))?;
    let replaced = tx
        .execute(
            "DELETE FROM parley.documents WHERE collection_id = $1 AND uri = $2",
            &[&collection.id, &doc.uri],
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
        .query_one(
            "INSERT INTO parley.documents (collection_id, uri, title, path, metadata, content_hash, chars)
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            &[
                &collection.id,
                &doc.uri,
                &doc.title,
                &doc.path,
                metadata,
                &doc.content_hash,
                &doc.chars,
            ],
        )
        .await
        .map_err(pg("inserting a document"))?
        .get(0);

    let sink = tx
        .copy_in("COPY parley.sections (document_id, collection_id, ord, heading, text) FROM STDIN (FORMAT binary)")
        .await
        .map_err(pg("starting COPY into sections"))?;
    let mut writer = pin!(BinaryCopyInWriter::new(
        sink,
        &[
            Type::INT8,
            Type::INT8,
            Type::INT4,
            Type::TEXT_ARRAY,
            Type::TEXT
        ]
    ));
    for (ord, s) in doc.sections.iter().enumerate() {
        let ord = ord as i32;
        writer
            .as_mut()
            .write(&[&id, &collection.id, &ord, &s.heading, &s.text])
            .await
            .map_err(pg("copying sections"))?;
    }
    writer
        .finish()
        .await
        .map_err(pg("finishing COPY into sections"))?;

    let sink = tx
        .copy_in(
            "COPY parley.chunks (document_id, collection_id, section, position, heading, text, context, page, embedding)
             FROM STDIN (FORMAT binary)",
        )
        .await
        .map_err(pg("starting COPY into chunks"))?;
    let mut writer = pin!(BinaryCopyInWriter::new(
        sink,
        &[
            Type::INT8,
            Type::INT8,
            Type::INT4,
            Type::INT4,
            Type::TEXT_ARRAY,
            Type::TEXT,
            Type::TEXT,
            Type::INT4,
            vector.clone(),
        ]
    ));
    for (c, e) in doc.chunks.iter().zip(embeddings) {
        writer
            .as_mut()
            .write(&[
                &id,
                &collection.id,
                &c.section,
                &c.position,
                &c.heading,
                &c.text,
                &c.context,
                &c.page,
                &Vector(e),
            ])
            .await
            .map_err(pg("copying chunks"))?;
    }
    writer
        .finish()
        .await
        .map_err(pg("finishing COPY into chunks"))?;
    tx.commit().await.map_err(pg("committing a document"))?;
    Ok(replaced)
}

/// Deletes the collection's documents whose uris are not in `keep`, in one statement (one
/// transaction). Returns how many.
pub(crate) async fn prune(
    db: &Client,
    collection: &Collection,
    keep: &[String],
) -> Result<u64, IngestError> {
    db.execute(
        "DELETE FROM parley.documents WHERE collection_id = $1 AND uri <> ALL ($2)",
        &[&collection.id, &keep],
    )
    .await
    .map_err(pg("pruning documents not seen in this run"))
}

pub(crate) async fn touch(db: &Client, collection: &Collection) -> Result<(), IngestError> {
    db.execute(
        "UPDATE parley.collections SET updated_at = now() WHERE id = $1",
        &[&collection.id],
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
        .query_opt(
            "SELECT id FROM parley.collections WHERE name = $1",
            &[&collection],
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
    db.execute(sql, &[&id, &kinds, &principals])
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
