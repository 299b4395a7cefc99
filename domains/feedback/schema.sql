-- The feedback demo domain: local authority districts of England and Wales, public feedback
-- about them, and the bookkeeping `parley demo-data` uses to stay idempotent. Applied by
-- `parley demo-data` (after `parley migrate`, whose roles it grants to), in one transaction with
-- the data; safe to run again: every statement is a no-op when its object already exists.

-- SQL-standard bodies (RETURN ...) are parsed at creation time, so the functions do not
-- depend on the caller's search_path and pg_dump knows the generated columns need them.
CREATE OR REPLACE FUNCTION lad_name_key(t text) RETURNS text
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE sql
    RETURN btrim(regexp_replace(
        translate(replace(lower(t), '&', ' and '), '.,', ''),
        '\s+', ' ', 'g'));

COMMENT ON FUNCTION lad_name_key(text) IS
    'Normalises a district reference for matching: lower case, & -> and, no . or , punctuation, single spaces, trimmed.';

-- ONS writes a few unitary authorities as "Bristol, City of"; people write "Bristol".
CREATE OR REPLACE FUNCTION lad_common_key(t text) RETURNS text
    IMMUTABLE STRICT PARALLEL SAFE LANGUAGE sql
    RETURN lad_name_key(regexp_replace(t, ',\s*(city|county)\s+of\s*$', '', 'i'));

COMMENT ON FUNCTION lad_common_key(text) IS
    'lad_name_key of the name without a trailing ", City of" / ", County of" (Bristol, City of -> bristol).';

CREATE TABLE IF NOT EXISTS lads (
    code text PRIMARY KEY,
    name text NOT NULL,
    utla_code text NOT NULL,
    utla_name text NOT NULL,
    country text NOT NULL GENERATED ALWAYS AS (
        CASE left(code, 1) WHEN 'E' THEN 'England' WHEN 'W' THEN 'Wales' ELSE 'Unknown' END
    ) STORED,
    name_key text NOT NULL GENERATED ALWAYS AS (lad_name_key(name)) STORED,
    common_key text NOT NULL GENERATED ALWAYS AS (lad_common_key(name)) STORED
);

COMMENT ON TABLE lads IS
    'Lower-tier local authority districts (ONS LTLA April 2021, England and Wales). Contains public sector information licensed under the Open Government Licence v3.0.';

CREATE INDEX IF NOT EXISTS lads_name_key_idx ON lads (name_key);
CREATE INDEX IF NOT EXISTS lads_common_key_idx ON lads (common_key);
CREATE INDEX IF NOT EXISTS lads_utla_code_idx ON lads (utla_code);

CREATE TABLE IF NOT EXISTS feedback (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lad_code text NOT NULL REFERENCES lads (code),
    category text NOT NULL CHECK (category IN (
        'roads', 'waste', 'housing', 'parks', 'transport', 'noise', 'planning', 'council_tax')),
    rating smallint NOT NULL CHECK (rating BETWEEN 1 AND 5),
    sentiment text NOT NULL CHECK (sentiment IN ('negative', 'neutral', 'positive')),
    title text NOT NULL,
    body text NOT NULL,
    status text NOT NULL CHECK (status IN ('open', 'acknowledged', 'in_progress', 'resolved', 'closed')),
    created_at timestamptz NOT NULL,
    search tsvector NOT NULL GENERATED ALWAYS AS (
        setweight(to_tsvector('english', title), 'A') || setweight(to_tsvector('english', body), 'B')
    ) STORED
);

-- Sized for ~1M rows. The heap is wide (title, body and the tsvector), so every btree
-- INCLUDEs the few narrow columns feedback_stats reads: counts and avg(rating) grouped by
-- category, sentiment, month or district, under any mix of filters, then run as index-only
-- scans instead of reading the whole table. Each key leads with a filter column and ends
-- with created_at so date ranges and "newest first" stay index range scans. The district
-- index also covers status, so lad_by_ref's summary (open items by status) is an index-only
-- scan instead of reading every one of the district's rows (thousands at 1M rows).
CREATE INDEX IF NOT EXISTS feedback_search_idx ON feedback USING gin (search);
CREATE INDEX IF NOT EXISTS feedback_lad_created_idx ON feedback (lad_code, created_at DESC)
    INCLUDE (category, sentiment, rating, status);
CREATE INDEX IF NOT EXISTS feedback_category_created_idx ON feedback (category, created_at DESC)
    INCLUDE (sentiment, rating, lad_code);
CREATE INDEX IF NOT EXISTS feedback_created_idx ON feedback (created_at DESC)
    INCLUDE (category, sentiment, rating, lad_code);
CREATE INDEX IF NOT EXISTS feedback_sentiment_created_idx ON feedback (sentiment, created_at DESC)
    INCLUDE (category, rating, lad_code);

-- What `parley demo-data` last loaded, so a rerun with the same seed and size is a no-op.
CREATE TABLE IF NOT EXISTS demo_data_meta (
    key text PRIMARY KEY,
    value text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The tools read with parley_readonly (migrations/0001_roles.sql): it may read this domain and
-- call its key functions, nothing more.
GRANT SELECT ON lads, feedback, demo_data_meta TO parley_readonly;
GRANT EXECUTE ON FUNCTION lad_name_key(text), lad_common_key(text) TO parley_readonly;

-- Ad-hoc SQL (docs/sql.md): the SQL tools' role may read the domain's data, not its bookkeeping.
GRANT SELECT ON lads, feedback TO parley_sql_reader;
GRANT EXECUTE ON FUNCTION lad_name_key(text), lad_common_key(text) TO parley_sql_reader;
