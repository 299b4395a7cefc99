-- 0015: the page a chunk starts on, for documents that have pages (PDF, issue 23), so a
-- citation opens the right page: search_documents returns the document's uri with `#page=N`,
-- the fragment PDF viewers (browsers' included) open at. NULL for documents without pages.
--
-- A nullable column without a default: Postgres adds it to the catalog only, and chunks stored
-- before this migration read as NULL, which is what they are.
ALTER TABLE parley.chunks ADD COLUMN page integer CHECK (page >= 1);
