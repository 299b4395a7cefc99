-- 0022: extractions of S3 objects under way (issue 32). A file built to exhaust memory can kill
-- the ingest function (an allocation failure aborts the process) before it records anything:
-- Lambda retries the event, the retry reads the same object and dies the same way, and
-- nothing says why. So before it extracts an object's text, ingestion writes a row here, and
-- deletes it once extraction returns (whatever it returned). A row found for the same version
-- when an extraction starts is one that never finished: the object is refused (`skipped` in
-- parley.s3_objects, and dead-lettered by the function) instead of being tried again.
--   started_at  the database's clock when the extraction began. Extraction is held to a time
--               limit (INGEST_EXTRACT_TIMEOUT_MS), so a row younger than that may belong to an
--               extraction still running elsewhere (S3 can deliver one event twice at once):
--               that one is left to finish, and the invocation fails, for Lambda to retry.
--
-- Only ingestion (the tables' owner) reads or writes it: no grants, so chat, mcp and the SQL
-- role cannot.
CREATE TABLE parley.s3_extractions (
    bucket      text NOT NULL,
    key         text NOT NULL,
    version_id  text,
    etag        text,
    started_at  timestamptz NOT NULL,
    PRIMARY KEY (bucket, key)
);
