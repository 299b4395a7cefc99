//! The large-corpus database for `search_documents` at 1M chunks: copies of the manual's real
//! chunks (text, heading, context) and pages' cards with their real embeddings perturbed, so
//! the vectors keep the manual's distribution without being duplicates. Loaded with `COPY` with
//! the search indexes and the BM25 postings' keys dropped, which are then built once (timed); a
//! rerun with the same size reuses it.

use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use futures_util::SinkExt;
use tokio_postgres::Client;

/// The synthetic collection's name.
pub const COLLECTION: &str = "synthetic";

/// Chunks per synthetic document (a long manual page has about this many).
const CHUNKS_PER_DOCUMENT: u64 = 50;

/// Standard deviation of the noise added to each embedding component before re-normalising:
/// about 0.93 cosine to the chunk it was copied from (|noise| ≈ 0.02·√384 ≈ 0.39), so copies of
/// one chunk spread out instead of stacking on one point of the graph.
const NOISE: f32 = 0.02;

/// A real chunk to copy.
pub struct Source {
    pub heading: Vec<String>,
    pub text: String,
    pub context: String,
    pub embedding: Vec<f32>,
}

/// A real page's card (migration 0019) to copy.
pub struct Card {
    pub text: String,
    pub embedding: Vec<f32>,
}

/// What loading took; `None` when the database already held the requested size.
pub struct Loaded {
    /// COPY of the documents and chunks, the BM25 postings written by 0017's trigger included.
    pub copy: Duration,
    pub hnsw: Duration,
    pub gin: Duration,
    /// The postings' primary key, foreign key and best-impact index, built after the COPY.
    pub postings: Duration,
    pub postings_count: i64,
}

/// The indexes the search reads, dropped for the load and rebuilt after it, exactly as the
/// migrations made them (chunk_terms' primary key and foreign key are constraints, below).
const INDEXES: [&str; 4] = [
    "chunks_embedding_384_idx",
    "chunks_tsv_idx",
    "chunk_terms_best_idx",
    "documents_card_384_idx",
];

/// The manual's chunks, from the manual database.
pub async fn sources(manual: &Client) -> anyhow::Result<Vec<Source>> {
    let rows = manual
        .query(
            "SELECT heading, text, context, embedding::real[] FROM parley.chunks ORDER BY id",
            &[],
        )
        .await
        .context("reading the manual's chunks")?;
    Ok(rows
        .iter()
        .map(|r| Source {
            heading: r.get(0),
            text: r.get(1),
            context: r.get(2),
            embedding: r.get(3),
        })
        .collect())
}

/// The manual's pages' cards, from the manual database.
pub async fn cards(manual: &Client) -> anyhow::Result<Vec<Card>> {
    let rows = manual
        .query(
            "SELECT card, card_embedding::real[] FROM parley.documents
             WHERE card IS NOT NULL AND card_embedding IS NOT NULL ORDER BY id",
            &[],
        )
        .await
        .context("reading the manual's cards")?;
    Ok(rows
        .iter()
        .map(|r| Card {
            text: r.get(0),
            embedding: r.get(1),
        })
        .collect())
}

/// Makes the synthetic collection `chunks` chunks big (unless it already is), public, embedded
/// by `model`. `maintenance_work_mem` is for the HNSW build: under the graph's size pgvector
/// builds far slower.
pub async fn ensure(
    db: &mut Client,
    chunks: u64,
    model: &str,
    sources: &[Source],
    cards: &[Card],
    maintenance_work_mem: &str,
) -> anyhow::Result<Option<Loaded>> {
    let have: i64 = db
        .query_one(
            "SELECT count(*) FROM parley.chunks c JOIN parley.collections k ON k.id = c.collection_id
             WHERE k.name = $1 AND k.embedding_model = $2",
            &[&COLLECTION, &model],
        )
        .await?
        .get(0);
    let indexed: i64 = db
        .query_one(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = 'parley'
             AND (indexname = ANY ($1) OR indexname = 'chunk_terms_pkey')",
            &[&&INDEXES[..]],
        )
        .await?
        .get(0);
    if u64::try_from(have)? == chunks && indexed == INDEXES.len() as i64 + 1 {
        eprintln!("synthetic: {chunks} chunks already loaded and indexed");
        return Ok(None);
    }
    anyhow::ensure!(!sources.is_empty(), "the manual has no chunks to copy");
    anyhow::ensure!(
        !cards.is_empty(),
        "the manual's pages have no cards to copy"
    );
    eprintln!(
        "synthetic: loading {chunks} chunks copied from {} real ones...",
        sources.len()
    );

    // The index definitions as the migration made them, to rebuild exactly those.
    let defs: Vec<(String, String)> = db
        .query(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'parley'
             AND indexname = ANY ($1) ORDER BY indexname",
            &[&&INDEXES[..]],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let def = |name: &str| {
        defs.iter()
            .find(|(n, _)| n == name)
            .map(|(_, d)| d.clone())
            .with_context(|| format!("index {name} missing; drop the bench database and rerun"))
    };
    let (hnsw_def, gin_def) = (def("chunks_embedding_384_idx")?, def("chunks_tsv_idx")?);
    let (best_def, cards_def) = (def("chunk_terms_best_idx")?, def("documents_card_384_idx")?);

    let tx = db.transaction().await?;
    tx.execute(
        "DELETE FROM parley.collections WHERE name = $1",
        &[&COLLECTION],
    )
    .await?;
    // Without its keys, 0017's trigger writes the ~45 postings a chunk has in one pass at the end
    // of the COPY instead of maintaining three B-trees and checking a foreign key per posting.
    tx.batch_execute(&format!(
        "DROP INDEX parley.chunks_embedding_384_idx, parley.chunks_tsv_idx,
                    parley.chunk_terms_best_idx, parley.documents_card_384_idx;
         ALTER TABLE parley.chunk_terms DROP CONSTRAINT chunk_terms_pkey,
                                        DROP CONSTRAINT chunk_terms_chunk_id_fkey;
         SET LOCAL work_mem = '256MB';
         SET LOCAL maintenance_work_mem = '{}'",
        maintenance_work_mem.replace('\'', "")
    ))
    .await?;
    let collection: i64 = tx
        .query_one(
            "INSERT INTO parley.collections (name, title, public, embedding_model, embedding_dims)
             VALUES ($1, 'Synthetic chunks (bench)', true, $2, 384) RETURNING id",
            &[&COLLECTION, &model],
        )
        .await?
        .get(0);
    let documents = chunks.div_ceil(CHUNKS_PER_DOCUMENT);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    let started = Instant::now();
    // One COPY, so the identity gives the documents consecutive ids from the first.
    let sink = tx
        .copy_in(
            "COPY parley.documents (collection_id, uri, title, content_hash, card, card_embedding) \
             FROM STDIN",
        )
        .await?;
    futures_util::pin_mut!(sink);
    let mut buf = String::with_capacity(1 << 20);
    for g in 1..=documents {
        let card = &cards[usize::try_from(g)? % cards.len()];
        document_row(&mut buf, collection, g, card, &mut rng);
        if buf.len() > (1 << 20) - 16_384 {
            sink.send(Bytes::from(std::mem::take(&mut buf))).await?;
            buf.reserve(1 << 20);
        }
    }
    sink.send(Bytes::from(std::mem::take(&mut buf))).await?;
    sink.finish().await?;
    let first_document: i64 = tx
        .query_one(
            "SELECT min(id) FROM parley.documents WHERE collection_id = $1",
            &[&collection],
        )
        .await?
        .get(0);

    let sink = tx
        .copy_in(
            "COPY parley.chunks (document_id, collection_id, section, position, heading, text, \
             context, embedding) FROM STDIN",
        )
        .await?;
    futures_util::pin_mut!(sink);
    buf.reserve(1 << 20);
    for i in 0..chunks {
        let s = &sources[usize::try_from(i)? % sources.len()];
        let document = first_document + i64::try_from(i / CHUNKS_PER_DOCUMENT)?;
        let position = i % CHUNKS_PER_DOCUMENT;
        row(&mut buf, document, collection, position, s, &mut rng);
        if buf.len() > (1 << 20) - 16_384 {
            sink.send(Bytes::from(std::mem::take(&mut buf))).await?;
            buf.reserve(1 << 20);
        }
        if (i + 1) % 100_000 == 0 {
            eprintln!("synthetic: {} chunks copied", i + 1);
        }
    }
    if !buf.is_empty() {
        sink.send(Bytes::from(buf)).await?;
    }
    eprintln!("synthetic: {chunks} chunks sent; the BM25 trigger writes their postings...");
    sink.finish().await?;
    let copy = started.elapsed();
    let postings_count: i64 = tx
        .query_one("SELECT count(*) FROM parley.chunk_terms", &[])
        .await?
        .get(0);
    eprintln!(
        "synthetic: documents, chunks and {postings_count} postings in {:.0} s; their keys...",
        copy.as_secs_f64()
    );
    let started = Instant::now();
    tx.batch_execute(&format!(
        "ALTER TABLE parley.chunk_terms ADD CONSTRAINT chunk_terms_pkey PRIMARY KEY (chunk_id, term),
           ADD CONSTRAINT chunk_terms_chunk_id_fkey FOREIGN KEY (chunk_id)
               REFERENCES parley.chunks (id) ON DELETE CASCADE;
         {best_def}"
    ))
    .await?;
    let postings = started.elapsed();
    eprintln!(
        "synthetic: postings' keys in {:.0} s; building the HNSW indexes...",
        postings.as_secs_f64()
    );
    let started = Instant::now();
    tx.batch_execute(&hnsw_def).await?;
    tx.batch_execute(&cards_def).await?;
    let hnsw = started.elapsed();
    eprintln!(
        "synthetic: HNSW built in {:.0} s; building the GIN index...",
        hnsw.as_secs_f64()
    );
    let started = Instant::now();
    tx.batch_execute(&gin_def).await?;
    let gin = started.elapsed();
    tx.commit().await?;
    // As autovacuum leaves a table at rest: statistics for the planner and the visibility map
    // that lets the postings be read from their index alone.
    db.batch_execute(
        "VACUUM (ANALYZE) parley.chunks, parley.documents, parley.chunk_terms, \
         parley.collection_terms",
    )
    .await?;
    Ok(Some(Loaded {
        copy,
        hnsw,
        gin,
        postings,
        postings_count,
    }))
}

/// One COPY text row of a document whose card is `card`'s, its embedding perturbed.
fn document_row(buf: &mut String, collection: i64, g: u64, card: &Card, rng: &mut Rng) {
    use std::fmt::Write as _;
    let _ = write!(
        buf,
        "{collection}\tsynthetic/{g}.html\tSynthetic page {g}\t{g:032x}\t"
    );
    card.text.chars().for_each(|c| escape(buf, c));
    buf.push('\t');
    vector(buf, &card.embedding, rng);
    buf.push('\n');
}

/// `embedding` with noise added and re-normalised, as a pgvector literal.
fn vector(buf: &mut String, embedding: &[f32], rng: &mut Rng) {
    use std::fmt::Write as _;
    let mut v: Vec<f32> = embedding.iter().map(|x| x + NOISE * rng.normal()).collect();
    let norm = v
        .iter()
        .map(|x| x * x)
        .sum::<f32>()
        .sqrt()
        .max(f32::EPSILON);
    v.iter_mut().for_each(|x| *x /= norm);
    buf.push('[');
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            buf.push(',');
        }
        let _ = write!(buf, "{x}");
    }
    buf.push(']');
}

/// One COPY text row: the source's text with a perturbed, re-normalised embedding.
fn row(buf: &mut String, document: i64, collection: i64, position: u64, s: &Source, rng: &mut Rng) {
    use std::fmt::Write as _;
    let _ = write!(buf, "{document}\t{collection}\t0\t{position}\t{{");
    for (i, h) in s.heading.iter().enumerate() {
        if i > 0 {
            buf.push(',');
        }
        // An array element, double-quoted, inside a COPY field.
        buf.push('"');
        for c in h.chars() {
            match c {
                '"' | '\\' => {
                    escape(buf, '\\');
                    escape(buf, c);
                }
                _ => escape(buf, c),
            }
        }
        buf.push('"');
    }
    buf.push_str("}\t");
    s.text.chars().for_each(|c| escape(buf, c));
    buf.push('\t');
    s.context.chars().for_each(|c| escape(buf, c));
    buf.push('\t');
    vector(buf, &s.embedding, rng);
    buf.push('\n');
}

/// `c` as COPY's text format needs it.
fn escape(buf: &mut String, c: char) {
    match c {
        '\\' => buf.push_str("\\\\"),
        '\t' => buf.push_str("\\t"),
        '\n' => buf.push_str("\\n"),
        '\r' => buf.push_str("\\r"),
        _ => buf.push(c),
    }
}

/// A small deterministic generator (xorshift64*), so every run builds the same corpus.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32) / (1u64 << 24) as f32
    }

    /// Roughly standard normal: the sum of four uniforms, centred and scaled.
    fn normal(&mut self) -> f32 {
        let s: f32 = (0..4).map(|_| self.next()).sum();
        (s - 2.0) * 3f32.sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_escapes_text_and_heading_for_copy() {
        let s = Source {
            heading: vec!["A \"b\"".into(), "c\\d".into()],
            text: "x\ty\nz".into(),
            context: "ctx".into(),
            embedding: vec![1.0, 0.0],
        };
        let mut buf = String::new();
        row(&mut buf, 7, 3, 2, &s, &mut Rng(1));
        let fields: Vec<&str> = buf.trim_end().split('\t').collect();
        assert_eq!(
            fields[..7],
            [
                "7",
                "3",
                "0",
                "2",
                r#"{"A \\"b\\"","c\\\\d"}"#,
                "x\\ty\\nz",
                "ctx"
            ]
        );
        let v: Vec<f32> = fields[7]
            .trim_matches(['[', ']'])
            .split(',')
            .map(|x| x.parse().unwrap())
            .collect();
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4 && v[0] > 0.9, "{v:?}");
    }

    #[test]
    fn noise_is_centred() {
        let mut rng = Rng(42);
        let mean: f32 = (0..10_000).map(|_| rng.normal()).sum::<f32>() / 10_000.0;
        assert!(mean.abs() < 0.05, "{mean}");
    }
}
