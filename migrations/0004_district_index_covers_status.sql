-- 0004: lad_by_ref's feedback summary counts open items by status. With status in the
-- district index that summary is an index-only scan instead of reading every one of the
-- district's rows from the table (thousands per district at 1M rows).
DROP INDEX feedback_lad_created_idx;
CREATE INDEX feedback_lad_created_idx ON feedback (lad_code, created_at DESC)
    INCLUDE (category, sentiment, rating, status);
