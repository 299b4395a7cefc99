-- 0016: what ingestion from S3 last did with each object (issue 23). S3 delivers events at
-- least once and out of order, and several ingest functions may handle one key at once, so
-- every writer compares before it changes a document:
--   sequencer   the greatest event sequencer seen for the key (hex, upper case, right-padded
--               with zeros to 64 characters, so that text order under "C" is S3's order): an
--               event whose sequencer is not greater is a duplicate or older, and is dropped
--               before S3 is read.
--   fetched_at  when the stored state was read from S3 (the database's clock, taken just before
--               the read). Whoever read S3 later saw newer content, so a write commits only over
--               a row read earlier; the loser's transaction changes nothing.
-- The row outlives its document (a deletion leaves `outcome = 'deleted'`), so an older create
-- event that arrives after a delete cannot bring the document back.
--
-- Only ingestion (the tables' owner) reads or writes it: no grants, so chat, mcp and the SQL
-- role cannot.
CREATE TABLE parley.s3_objects (
    bucket        text NOT NULL,
    key           text NOT NULL,
    collection_id bigint NOT NULL REFERENCES parley.collections (id) ON DELETE CASCADE,
    -- The document's uri in its collection (the key after `<collection>/`); NULL for the
    -- collection's settings object.
    uri           text,
    sequencer     text COLLATE "C" CHECK (sequencer ~ '^[0-9A-F]{64}$'),
    version_id    text,
    etag          text,
    fetched_at    timestamptz NOT NULL,
    outcome       text NOT NULL CHECK (outcome IN ('stored', 'unchanged', 'skipped', 'deleted', 'settings')),
    -- Why a skipped object was skipped, as reported to the dead-letter queue.
    reason        text,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (bucket, key)
);

-- `parley sync` prunes a collection's documents whose objects are gone.
CREATE INDEX s3_objects_collection_idx ON parley.s3_objects (collection_id, bucket);
