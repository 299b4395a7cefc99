-- 0005: one turn at a time per conversation by an expiring lease on its row, instead of a
-- session advisory lock held for the whole turn. A turn now holds a database connection only
-- while it begins and while it finishes, not while the model thinks, and a lease whose holder
-- froze or died expires by itself instead of blocking the conversation.
--
-- turn_lease: the id of the last turn that claimed the conversation (kept after it finishes,
--   so a retried finish can tell "already stored" from "taken over").
-- turn_lease_until: when that claim expires; NULL once the turn finished (the conversation is
--   free). A turn may claim the conversation when this is NULL or in the past.
--
-- Nullable columns without a default: adding them rewrites nothing. The chat role's table-wide
-- UPDATE grant (0003) covers them.

ALTER TABLE chat.conversations
    ADD COLUMN turn_lease uuid,
    ADD COLUMN turn_lease_until timestamptz;
