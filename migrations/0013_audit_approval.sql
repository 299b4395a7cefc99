-- 0013: the user's approval a tool call ran under (issue 22). A client that makes destructive
-- or `approval = "always"` calls wait for the user (Parley's chat) sends the approval with the
-- call it lets through, as `_meta["parley/approved"]`; the mcp function checks its shape and
-- that the user who approved is the verified caller, and records it here beside `caller`
-- (functions/mcp/src/audit.rs). NULL for a call that carried none.
--
-- A nullable column without a default: Postgres adds it to the catalog only, so neither the
-- table (however long the trail) is rewritten nor any row updated, and the append-only
-- triggers of 0007 have nothing to refuse.
ALTER TABLE parley.audit ADD COLUMN approval jsonb;

COMMENT ON COLUMN parley.audit.approval IS
    'The approval the call ran under, as the client claimed it: {"id", "decided_by", "decided_at"}; decided_by was checked to be the caller when the caller is a user. NULL when none.';
