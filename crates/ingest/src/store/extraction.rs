//! Extractions of S3 objects under way (`parley.s3_extractions`, migration 0022): a row
//! written before an object's text is extracted and deleted after, so that when a process dies
//! extracting it (out of memory, out of time) the next attempt at the same version finds the
//! row and refuses the object instead of dying the same way. Each statement stands alone
//! (unnamed, outside any transaction): the row must outlive the process that wrote it.

use std::time::{Duration, SystemTime};

use tokio_postgres::Client;
use tokio_postgres::types::Type;

use super::Claim;
use crate::{IngestError, pg};

/// What starting an extraction found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// Recorded: end it with [`end`] once extraction returns.
    Started(SystemTime),
    /// An extraction of this version began at this time (UTC, as text) and never ended.
    Unfinished(String),
    /// An extraction of this version began this long ago, within the time one may take:
    /// another process may be running it.
    Running(Duration),
}

/// Records that `claim`'s object is about to be extracted, unless an extraction of the same
/// version is recorded already: one older than `alive` never finished (its row is removed, the
/// caller refuses the object), a younger one may still be running.
pub(crate) async fn begin(
    db: &Client,
    claim: &Claim,
    alive: Duration,
) -> Result<Start, IngestError> {
    let step = "recording an extraction under way";
    let alive_ms = i64::try_from(alive.as_millis()).unwrap_or(i64::MAX);
    // The second statement finds nothing only if the row went between the two: start again.
    loop {
        let started = db
            .query_typed_opt(
                "INSERT INTO parley.s3_extractions AS e (bucket, key, version_id, etag, started_at)
                 VALUES ($1, $2, $3, $4, clock_timestamp())
                 ON CONFLICT (bucket, key) DO UPDATE
                    SET version_id = EXCLUDED.version_id, etag = EXCLUDED.etag,
                        started_at = EXCLUDED.started_at
                  WHERE e.version_id IS DISTINCT FROM EXCLUDED.version_id
                     OR e.etag IS DISTINCT FROM EXCLUDED.etag
                 RETURNING started_at",
                &[
                    (&claim.bucket, Type::TEXT),
                    (&claim.key, Type::TEXT),
                    (&claim.version_id, Type::TEXT),
                    (&claim.etag, Type::TEXT),
                ],
            )
            .await
            .map_err(pg(step))?;
        if let Some(row) = started {
            return Ok(Start::Started(row.get(0)));
        }
        // The same version is recorded: how long ago did it start? Removed, in the same
        // statement, when it cannot be running any more.
        let found = db
            .query_typed_opt(
                "WITH found AS (
                     SELECT started_at,
                            clock_timestamp() - started_at >= $3 * interval '1 millisecond' AS over
                       FROM parley.s3_extractions WHERE bucket = $1 AND key = $2
                 ), gone AS (
                     DELETE FROM parley.s3_extractions
                      WHERE bucket = $1 AND key = $2 AND (SELECT over FROM found)
                 )
                 SELECT over,
                        to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS \"UTC\"'),
                        (extract(epoch FROM clock_timestamp() - started_at) * 1000)::bigint
                   FROM found",
                &[
                    (&claim.bucket, Type::TEXT),
                    (&claim.key, Type::TEXT),
                    (&alive_ms, Type::INT8),
                ],
            )
            .await
            .map_err(pg(step))?;
        match found {
            Some(row) if row.get::<_, bool>(0) => return Ok(Start::Unfinished(row.get(1))),
            Some(row) => {
                let ms = row.get::<_, i64>(2).max(0) as u64;
                return Ok(Start::Running(Duration::from_millis(ms)));
            }
            None => continue,
        }
    }
}

/// Ends the extraction recorded at `started` (another, later one is left alone).
pub(crate) async fn end(
    db: &Client,
    claim: &Claim,
    started: SystemTime,
) -> Result<(), IngestError> {
    db.query_typed(
        "DELETE FROM parley.s3_extractions WHERE bucket = $1 AND key = $2 AND started_at = $3",
        &[
            (&claim.bucket, Type::TEXT),
            (&claim.key, Type::TEXT),
            (&started, Type::TIMESTAMPTZ),
        ],
    )
    .await
    .map_err(pg("ending an extraction under way"))?;
    Ok(())
}
