-- 0021: whether a tool call's answer was a replay (issue 32). A write called again under an
-- idempotency key it already used (the chat resending an approved call whose answer was lost,
-- after a crash or a timeout) writes nothing and answers with the rows the first call
-- recorded; its audit record says so, so that two `ok` records of one approval read as one
-- write and its replay, not as two writes.
--
-- A constant default: since PostgreSQL 11 the column is added to the catalog only (existing
-- rows read the default), so the trail is not rewritten and the append-only triggers of 0007
-- have nothing to refuse.
ALTER TABLE parley.audit ADD COLUMN replayed boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN parley.audit.replayed IS
    'The call wrote nothing: it repeated an idempotency key already used, and answered with the rows the first call recorded.';
