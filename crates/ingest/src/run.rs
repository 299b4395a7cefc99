//! One ingestion run: each file read, hashed and compared with the stored document; changed
//! ones extracted and chunked; their chunks embedded in batches across documents (the model is
//! fastest on full batches) while the previous batch is written, each document in its own
//! transaction; then, with `prune`, documents not seen deleted. Bad files are recorded in the
//! summary and the run goes on.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use parley_embed::Embedder;
use sha2::{Digest, Sha256};
use tokio_postgres::Client;

use crate::chunk::{ChunkOptions, chunk_sections};
use crate::extract::{EXTRACTOR_VERSION, Format, extract};
use crate::metadata;
use crate::progress::Progress;
use crate::store::extraction::{self, Start};
use crate::store::{self, Claim, Collection, NewChunk, NewDocument, Written};
use crate::{CollectionSpec, IngestError, IngestOptions, Skipped, SourceFile, Summary};

/// Chunks gathered before one call to the embedder: two of its default batches of 32, so a
/// run of small documents still fills the model's batches, and the write of one batch overlaps
/// the embedding of the next.
const EMBED_BATCH: usize = 64;

/// Ingests `files` into the collection (created if new). See the crate doc.
pub async fn ingest(
    db: &mut Client,
    embedder: &Embedder,
    collection: &CollectionSpec,
    files: Vec<SourceFile>,
    options: &IngestOptions,
) -> Result<Summary, IngestError> {
    crate::check_collection_name(&collection.name)?;
    store::check_schema(db).await?;
    let coll =
        store::ensure_collection(db, collection, embedder.model_id(), embedder.dims()).await?;
    let sources = files.into_iter().map(|file| (file, None)).collect();
    ingest_sources(db, embedder, coll, sources, options).await
}

/// [`ingest`] into a collection already ensured, each file with the S3 claim it is written
/// under, if any (`crate::s3`).
pub(crate) async fn ingest_sources(
    db: &mut Client,
    embedder: &Embedder,
    coll: Collection,
    files: Vec<(SourceFile, Option<Claim>)>,
    options: &IngestOptions,
) -> Result<Summary, IngestError> {
    let start = Instant::now();
    let uris: Vec<String> = files.iter().map(|(f, _)| f.uri()).collect();
    let stored = store::stored(db, &coll, &uris).await?;

    let mut run = Run {
        coll,
        summary: Summary::default(),
        progress: Progress::new(options.progress, files.len()),
        ready: None,
        deadline: options.deadline,
        embedded: 0,
        embedding: Duration::ZERO,
    };
    let mut seen = HashSet::new();
    // Unchanged documents stored before cards existed (migration 0019): given one at the end.
    let mut without_card = Vec::new();
    let mut batch: Vec<NewDocument> = Vec::new();
    let mut batch_chunks = 0;
    for (file, claim) in files {
        let uri = file.uri();
        let chars = uri.chars().count();
        if chars > crate::MAX_URI_CHARS {
            // Cut, so the summary line stays readable; the whole would fail the table's CHECK.
            let shown: String = uri.chars().take(80).collect();
            run.skip(
                format!("{shown}..."),
                format!(
                    "its path is {chars} characters long, over the limit of {}",
                    crate::MAX_URI_CHARS
                ),
            );
            continue;
        }
        if !seen.insert(uri.clone()) {
            run.skip(uri, "another file in this run has the same uri".into());
            continue;
        }
        let doc = match read(&file, &uri, options) {
            Ok(bytes) => bytes,
            Err(reason) => {
                run.skip_claimed(db, claim, uri, reason).await?;
                continue;
            }
        };
        let hash = content_hash(&doc, &options.chunk);
        let path = file.structure();
        let metadata = metadata(&file, &doc, options);
        if let Some(old) = stored.get(&uri).filter(|s| s.content_hash == hash) {
            if let Some(c) = &claim
                && !store::claim(&*db, &run.coll, c, "unchanged", None).await?
            {
                run.summary.superseded += 1;
                run.progress.passed();
                continue;
            }
            if old.path != path || old.metadata != metadata {
                store::update_place(db, old.id, &path, &metadata).await?;
            }
            if !old.has_card {
                without_card.push(old.id);
            }
            run.summary.unchanged += 1;
            run.progress.passed();
            continue;
        }
        let stem = file
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| uri.clone());
        // Discover keeps only known formats; a SourceFile made by hand may name any file.
        let Some(format) = file.format() else {
            let reason = "not a Markdown, HTML, text, PDF or Word file".to_owned();
            run.skip_claimed(db, claim, uri, reason).await?;
            continue;
        };
        // An S3 object's extraction is recorded first, so that a process that dies on it
        // leaves a trace the next attempt finds (migration 0022).
        let started = match &claim {
            None => None,
            Some(c) => match extraction::begin(db, c, extraction_alive(options)).await? {
                Start::Started(at) => Some(at),
                Start::Unfinished(at) => {
                    let reason = format!(
                        "an extraction of this version begun at {at} never finished (the \
                         process ran out of memory or time on it); it is not tried again"
                    );
                    run.skip_claimed(db, claim, uri, reason).await?;
                    continue;
                }
                Start::Running(since) => return Err(IngestError::Extracting { uri, since }),
            },
        };
        let extracted = extract(&doc, format, &stem, &options.extract);
        if let (Some(c), Some(at)) = (&claim, started) {
            extraction::end(db, c, at).await?;
        }
        let extracted = match extracted {
            Ok(e) => e,
            Err(e) => {
                run.skip_claimed(db, claim, uri, e.to_string()).await?;
                continue;
            }
        };
        let chars = extracted.chars();
        let max = options.chunk.max_chunks;
        if options.chunk.fewest_chunks(chars) > max {
            let reason = format!(
                "its text ({chars} characters) makes more than the limit of {max} chunks a \
                 document may have; split it"
            );
            run.skip_claimed(db, claim, uri, reason).await?;
            continue;
        }
        let chunks = chunk_sections(&extracted.sections, &options.chunk);
        if chunks.len() > max {
            let reason = format!(
                "its text ({chars} characters) makes {} chunks, over the limit of {max} a \
                 document may have; split it",
                chunks.len()
            );
            run.skip_claimed(db, claim, uri, reason).await?;
            continue;
        }
        let card = crate::card::card(&extracted.title, &extracted.sections);
        let chars = i32::try_from(chars).unwrap_or(i32::MAX);
        // A document that would overflow the batch is embedded in a batch of its own, after
        // the documents before it: they are written while it is embedded, not after.
        if !batch.is_empty() && batch_chunks + chunks.len() > EMBED_BATCH {
            run.flush(db, embedder, std::mem::take(&mut batch)).await?;
            batch_chunks = 0;
        }
        batch_chunks += chunks.len();
        batch.push(NewDocument {
            chunks: chunks
                .into_iter()
                .map(|c| NewChunk {
                    section: c.section as i32,
                    position: c.position as i32,
                    context: context(&extracted.title, &c.heading),
                    page: c.page.map(|p| p as i32),
                    heading: c.heading,
                    text: c.text,
                })
                .collect(),
            uri,
            title: extracted.title,
            path,
            metadata,
            content_hash: hash,
            chars,
            sections: extracted.sections,
            card,
            claim,
        });
        if batch_chunks >= EMBED_BATCH {
            run.flush(db, embedder, std::mem::take(&mut batch)).await?;
            batch_chunks = 0;
        }
    }
    run.flush(db, embedder, batch).await?;
    run.flush(db, embedder, Vec::new()).await?;
    fill_cards(db, embedder, &without_card).await?;

    if options.prune {
        let keep: Vec<String> = seen.into_iter().collect();
        run.summary.deleted = store::prune(db, &run.coll, &keep).await?;
    }
    if run.summary.added + run.summary.replaced + run.summary.deleted > 0 {
        store::touch(db, &run.coll).await?;
    }
    run.progress.finish();
    run.summary.elapsed = start.elapsed();
    Ok(run.summary)
}

/// The document's metadata ([`metadata::merge`]): the run's, the file's own, and a Markdown
/// file's front matter. Read for unchanged files too (the front matter is at most a few lines
/// at the top), so a stored document keeps its front matter's keys when only `--meta` changes.
fn metadata(file: &SourceFile, doc: &[u8], options: &IngestOptions) -> serde_json::Value {
    let front = match file.format() {
        Some(Format::Markdown) => {
            // Front matter must be UTF-8 to be read; the rest of an invalid file is refused by
            // `extract`, with its reason.
            let text = match std::str::from_utf8(doc) {
                Ok(text) => text,
                Err(e) => std::str::from_utf8(&doc[..e.valid_up_to()]).unwrap_or_default(),
            };
            metadata::front_matter(text)
        }
        _ => serde_json::Map::new(),
    };
    metadata::merge(&options.metadata, &file.metadata, front)
}

/// Documents embedded and waiting to be written.
struct Embedded {
    docs: Vec<NewDocument>,
    embeddings: Vec<Vec<f32>>,
}

struct Run {
    coll: Collection,
    summary: Summary,
    progress: Progress,
    ready: Option<Embedded>,
    /// When the run must have finished ([`IngestOptions::deadline`]).
    deadline: Option<Instant>,
    /// Chunks embedded so far and the time it took: the rate a deadline is projected with.
    embedded: usize,
    embedding: Duration,
}

impl Run {
    fn skip(&mut self, uri: String, reason: String) {
        tracing::debug!(%uri, %reason, "skipped");
        self.summary.skipped.push(Skipped { uri, reason });
        self.progress.passed();
    }

    /// [`Run::skip`], recording the skip under the file's claim when it has one (a lost claim:
    /// someone read the object later, so this run's reason no longer stands).
    async fn skip_claimed(
        &mut self,
        db: &Client,
        claim: Option<Claim>,
        uri: String,
        reason: String,
    ) -> Result<(), IngestError> {
        if let Some(c) = &claim
            && !store::claim(db, &self.coll, c, "skipped", Some(&reason)).await?
        {
            self.summary.superseded += 1;
            self.progress.passed();
            return Ok(());
        }
        self.skip(uri, reason);
        Ok(())
    }

    /// Embeds `batch` while writing the batch embedded before it; `batch` is then the one
    /// waiting. An empty batch just writes what waits.
    async fn flush(
        &mut self,
        db: &mut Client,
        embedder: &Embedder,
        batch: Vec<NewDocument>,
    ) -> Result<(), IngestError> {
        // Each document's chunks, then its card.
        let texts: Vec<String> = batch
            .iter()
            .flat_map(|d| {
                d.chunks
                    .iter()
                    .map(|c| format!("{}\n\n{}", c.context, c.text))
                    .chain(std::iter::once(d.card.clone()))
            })
            .collect();
        let waiting = self.ready.take();
        let deadline = self.deadline;
        let (done_before, took_before) = (self.embedded, self.embedding);
        let embed = async {
            let mut all = Vec::with_capacity(texts.len());
            let started = Instant::now();
            // In slices, so a deadline is checked between them: one document may have
            // thousands of chunks.
            for slice in texts.chunks(EMBED_BATCH) {
                if let Some(deadline) = deadline {
                    check_deadline(
                        deadline,
                        done_before + all.len(),
                        took_before + started.elapsed(),
                        texts.len() - all.len(),
                    )?;
                }
                all.extend(embedder.embed(slice).await?);
            }
            Ok::<_, IngestError>((all, started.elapsed()))
        };
        let (embedded, written) = tokio::join!(embed, self.write(db, waiting));
        let embeddings = embedded.map(|(e, took)| {
            self.embedded += e.len();
            self.embedding += took;
            e
        });
        written?;
        let embeddings = embeddings?;
        if embeddings.len() != texts.len() {
            return Err(IngestError::EmbedCount {
                expected: texts.len(),
                got: embeddings.len(),
            });
        }
        if !batch.is_empty() {
            self.ready = Some(Embedded {
                docs: batch,
                embeddings,
            });
        }
        Ok(())
    }

    async fn write(
        &mut self,
        db: &mut Client,
        embedded: Option<Embedded>,
    ) -> Result<(), IngestError> {
        let Some(Embedded { docs, embeddings }) = embedded else {
            return Ok(());
        };
        let mut rest = embeddings.as_slice();
        for doc in &docs {
            let (mine, after) = rest.split_at(doc.chunks.len() + 1);
            rest = after;
            let (chunks, card) = mine.split_at(doc.chunks.len());
            match store::write_document(db, &self.coll, doc, chunks, &card[0]).await? {
                Written::Replaced => self.summary.replaced += 1,
                Written::Added => self.summary.added += 1,
                Written::Superseded => {
                    self.summary.superseded += 1;
                    self.progress.written(doc.chunks.len());
                    continue;
                }
            }
            self.summary.chunks += doc.chunks.len() as u64;
            self.progress.written(doc.chunks.len());
        }
        Ok(())
    }
}

/// Cards for unchanged documents that have none: made from their stored sections, embedded in
/// batches, stored; their chunks are not embedded again.
async fn fill_cards(db: &Client, embedder: &Embedder, ids: &[i64]) -> Result<(), IngestError> {
    for group in ids.chunks(EMBED_BATCH) {
        let sources = store::card_sources(db, group).await?;
        let cards: Vec<String> = sources
            .iter()
            .map(|(_, title, sections)| crate::card::card(title, sections))
            .collect();
        let embeddings = embedder.embed(&cards).await?;
        if embeddings.len() != cards.len() {
            return Err(IngestError::EmbedCount {
                expected: cards.len(),
                got: embeddings.len(),
            });
        }
        for (((id, _, _), card), e) in sources.iter().zip(&cards).zip(&embeddings) {
            store::set_card(db, *id, card, e).await?;
        }
    }
    Ok(())
}

/// How long an extraction may be under way, found recorded, before it is taken for one that
/// never finished: the extraction time limit, and 10 s for the statements around it and time
/// checks that come late (a check every few thousand steps). Lambda retries a failed event
/// after a minute or more, past the default 30 s + 10 s.
fn extraction_alive(options: &IngestOptions) -> Duration {
    options.extract.max_time + Duration::from_secs(10)
}

/// Fails when the chunks left, at the rate measured so far, would not be embedded before
/// `deadline` (with no rate yet, the first slice runs: it measures one).
fn check_deadline(
    deadline: Instant,
    done: usize,
    took: Duration,
    left: usize,
) -> Result<(), IngestError> {
    let now = Instant::now();
    let time_left = deadline.saturating_duration_since(now);
    if done == 0 {
        return if time_left.is_zero() {
            Err(IngestError::Deadline {
                chunks: left,
                needed: None,
                time_left,
            })
        } else {
            Ok(())
        };
    }
    let needed = took.mul_f64(left as f64 / done as f64);
    if needed > time_left {
        return Err(IngestError::Deadline {
            chunks: left,
            needed: Some(needed),
            time_left,
        });
    }
    Ok(())
}

/// The file's bytes, or why it is skipped. Only regular files are read: a FIFO would block the
/// run and `/dev/zero` never ends. The size is checked before reading, and the read stops one
/// byte past the limit whatever the size said (a file may grow between the two).
fn read(file: &SourceFile, uri: &str, options: &IngestOptions) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let cannot = |e: std::io::Error| format!("cannot read {uri}: {e}");
    // Checked before opening too: opening a FIFO waits for a writer.
    let kind = std::fs::metadata(&file.path).map_err(cannot)?.file_type();
    if !kind.is_file() {
        return Err(not_regular(kind));
    }
    let handle = open(&file.path).map_err(cannot)?;
    let meta = handle.metadata().map_err(cannot)?;
    if !meta.is_file() {
        return Err(not_regular(meta.file_type()));
    }
    let limit = options.max_document_bytes;
    if meta.len() > limit {
        return Err(format!(
            "larger than the limit of {limit} bytes ({} bytes)",
            meta.len()
        ));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    handle
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > limit {
        return Err(format!(
            "larger than the limit of {limit} bytes (it grew while being read)"
        ));
    }
    Ok(bytes)
}

/// Opens for reading without waiting: were the file swapped for a FIFO after the check, the
/// open would otherwise block until something writes to it.
fn open(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Regular files ignore it.
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

/// Why a file that is not a regular file is skipped.
fn not_regular(kind: std::fs::FileType) -> String {
    #[cfg(unix)]
    let what = {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            "a named pipe"
        } else if kind.is_char_device() {
            "a character device"
        } else if kind.is_block_device() {
            "a block device"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "a special file"
        }
    };
    #[cfg(not(unix))]
    let what = if kind.is_dir() {
        "a directory"
    } else {
        "a special file"
    };
    format!("not a regular file ({what}); only regular files are read")
}

/// sha256 (hex) of the extractor's version, the chunk sizes and the bytes: a change to any of
/// them changes what the file becomes, so the document is replaced.
pub(crate) fn content_hash(bytes: &[u8], chunk: &ChunkOptions) -> String {
    let mut h = Sha256::new();
    h.update(EXTRACTOR_VERSION.as_bytes());
    h.update([0]);
    h.update(format!("{}/{}", chunk.target_chars, chunk.overlap_chars).as_bytes());
    h.update([0]);
    h.update(bytes);
    h.finalize()
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            use std::fmt::Write;
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The chunk's place as one line, "Title › Heading › Subheading": weighted in full-text search
/// and put before the chunk's text when embedding. A first heading that repeats the title (a
/// Markdown file's `# Title`) is not said twice.
pub fn context(title: &str, heading: &[String]) -> String {
    let heading = match heading.first() {
        Some(h) if h == title => &heading[1..],
        _ => heading,
    };
    std::iter::once(title)
        .chain(heading.iter().map(String::as_str))
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" › ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_joins_title_and_headings_without_repeating_the_title() {
        let h = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(context("Guide", &h(&["Guide", "Setup"])), "Guide › Setup");
        assert_eq!(
            context("SET TRANSACTION", &h(&["Description"])),
            "SET TRANSACTION › Description"
        );
        assert_eq!(context("notes", &[]), "notes");
    }

    #[test]
    fn the_hash_changes_with_the_bytes_and_the_chunk_sizes() {
        let o = ChunkOptions::default();
        let a = content_hash(b"abc", &o);
        assert_eq!(a.len(), 64);
        assert_eq!(a, content_hash(b"abc", &o));
        assert_ne!(a, content_hash(b"abd", &o));
        let smaller = ChunkOptions {
            target_chars: 500,
            ..o
        };
        assert_ne!(a, content_hash(b"abc", &smaller));
    }
}
