-- 0014: what a waiting call will change (issue 22). The approval card said only that a call
-- "may change data"; the turn that pauses now stores why the call waits and what its tool
-- does, as the catalog listed them then, so the card shown after a reload (or in another tab)
-- says the same as the one shown when the turn paused, whatever the server lists by then.
--
-- Nullable columns without defaults: Postgres adds them to the catalog only, and rows stored
-- before this migration read as NULL (the page then keeps its generic sentence). The CHECK
-- scans the table once to validate; every existing row is NULL, so it holds.
ALTER TABLE chat.approvals
    -- `destructive` (destructiveHint), `always` (`_meta["parley/approval"]`), or `writes`
    -- (APPROVAL=writes and not read-only): the first that applies, in that order.
    ADD COLUMN why text CHECK (why IN ('destructive', 'always', 'writes')),
    -- The tool's description and title as its server listed them.
    ADD COLUMN description text,
    ADD COLUMN title text;
