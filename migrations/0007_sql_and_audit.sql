-- 0007: ad-hoc read-only SQL (the `[sql]` tools of a tools file) and the audit trail of every
-- tool call. See docs/sql.md for the whole recipe and what is guaranteed.
--
-- parley_sql_reader: the group of the LOGIN user the mcp function's `run_sql` connects as
-- (`SQL_DATABASE_URL`). It is granted nothing here: a deployment grants it USAGE on the schemas
-- it opens to ad-hoc SQL and SELECT on their tables, nothing else. Recipe (as an admin):
--   CREATE ROLE parley_sql LOGIN PASSWORD '...' IN ROLE parley_sql_reader;
--   ALTER ROLE parley_sql SET default_transaction_read_only = on;
--   ALTER ROLE parley_sql SET temp_file_limit = '256MB';
--   ALTER ROLE parley_sql CONNECTION LIMIT 10;
--   GRANT USAGE ON SCHEMA analytics TO parley_sql_reader;
--   GRANT SELECT ON ALL TABLES IN SCHEMA analytics TO parley_sql_reader;
-- The user must belong to no other role, and PUBLIC's grants reach it too: the mcp function
-- checks the role at start-up and refuses one that can do more than read the allowed schemas.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'parley_sql_reader') THEN
        CREATE ROLE parley_sql_reader NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN
        NULL;
END
$$;

-- A session of a parley_sql_reader member runs SQL a model wrote, and any role may set a custom
-- setting such as `parley.caller` (set_config('parley.caller', '{"sub":"alice"}', true)).
-- In such a session the caller is therefore nobody, whatever the setting says: row-level
-- security keyed on parley.caller_sub() shows it no user's rows.
CREATE OR REPLACE FUNCTION parley.caller() RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        -- A subquery, so Postgres evaluates it once per statement, not once per row. Superusers
        -- are members of every role; they are not this group's members in the sense meant here.
        WHEN (SELECT NOT r.rolsuper AND pg_catalog.pg_has_role(r.oid, 'parley_sql_reader', 'MEMBER')
              FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) THEN NULL
        ELSE nullif(current_setting('parley.caller', true), '')::jsonb
    END;

-- The documents helpers run as their owner (SECURITY DEFINER) and answer about every
-- collection; PUBLIC could call them, and so could ad-hoc SQL. Only the tools' role needs them
-- (policies on parley's documents tables call readable_collections() as the querying role).
REVOKE EXECUTE ON FUNCTION parley.readable_collections(), parley.searchable_collections(text, text),
    parley.readable_document(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION parley.readable_collections(), parley.searchable_collections(text, text),
    parley.readable_document(bigint, text) TO parley_readonly;

-- One row per tool call (declared tools, ad-hoc SQL, writes), written by the mcp function after
-- the call's answer is on its way, in transactions that do not wait for the WAL flush
-- (functions/mcp/src/audit.rs). Append-only: rows are never updated or deleted by Parley, and
-- the triggers below refuse it to everyone but a superuser who disables them on purpose.
CREATE TABLE parley.audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL,
    request_id text NOT NULL,
    -- The user's subject, or 'service' for a call made with the service token.
    caller text NOT NULL,
    tool text NOT NULL,
    -- As the call sent them, except parameters declared `sensitive`: {"sha256": "<hex>"}.
    arguments jsonb NOT NULL,
    -- run_sql and explain_sql: the statement the call sent.
    statement text,
    rows integer,
    truncated boolean NOT NULL DEFAULT false,
    duration_ms double precision NOT NULL,
    outcome text NOT NULL CHECK (outcome IN ('ok', 'tool_error', 'timeout', 'refused')),
    -- What went wrong, in the words the log uses (no argument values).
    error text
);
CREATE INDEX audit_at_idx ON parley.audit (at);
CREATE INDEX audit_caller_at_idx ON parley.audit (caller, at);
CREATE INDEX audit_tool_at_idx ON parley.audit (tool, at);

COMMENT ON TABLE parley.audit IS
    'Every tool call the mcp function answered: who, which tool, with what, and how it went. Append-only.';

CREATE FUNCTION parley.audit_is_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'parley.audit is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON parley.audit
    FOR EACH ROW EXECUTE FUNCTION parley.audit_is_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON parley.audit
    FOR EACH STATEMENT EXECUTE FUNCTION parley.audit_is_append_only();

-- Only the mcp function's login writes it: parley_readonly may add rows, not read them back.
REVOKE ALL ON parley.audit FROM PUBLIC;
GRANT INSERT ON parley.audit TO parley_readonly;
