-- 0024: the ad-hoc SQL tools' per-call settings as a function, so that a call of run_sql,
-- explain_sql, list_tables or describe_table sends nothing RDS Proxy documents as pinning a
-- session (`SET`, `SET LOCAL`, `RESET`, `DISCARD`, `set_config`, session advisory locks) and
-- needs no clean-up statement after its ROLLBACK. Each setting is made with
-- `set_config(..., true)`: local to the transaction, undone by the ROLLBACK every call ends
-- with, so nothing of a call is left on a server connection the proxy hands on.
-- functions/mcp/src/adhoc/run.rs sends, in one pipeline:
--   BEGIN READ ONLY; SELECT parley.begin_sql($1, $2, $3, $4); <statement>; ROLLBACK
--
-- SECURITY INVOKER (the default): each setting is one the SQL role may make itself. No `SET`
-- clause: Postgres would undo the settings when the function returns. Names are qualified, so
-- a caller's search_path cannot change what runs. Only parley_sql_reader may run it; a
-- model's statement may not name it (the SQL tools' guard refuses calls of PL/pgSQL
-- functions), since it sets the statement timeout.
--
-- Migration 0008's warning to a migrator that is not a superuser says the mcp function refuses
-- the SQL role until a superuser runs its revokes. With this migration's mcp function it no
-- longer does: the SQL tools' guard (functions/mcp/src/adhoc/guard.rs) checks each statement's
-- plan instead, and start-up logs the revokes that would make that unnecessary (docs/sql.md).
--
-- A model's statement cannot take a session advisory lock (the guard refuses every advisory
-- lock function, and PL/pgSQL functions, by name); releasing any at the start of a call is a
-- second line, at no extra statement, for what the guard cannot see (an operator or cast
-- defined in the database).
CREATE FUNCTION parley.begin_sql(
    timeout_ms integer,
    idle_ms integer,
    schemas text[],
    application_name text
) RETURNS void
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT pg_catalog.current_setting('transaction_read_only')::boolean THEN
        RAISE EXCEPTION 'parley.begin_sql starts a call of the SQL tools, in a READ ONLY transaction'
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    PERFORM pg_catalog.set_config('statement_timeout', timeout_ms::text, true);
    PERFORM pg_catalog.set_config('idle_in_transaction_session_timeout', idle_ms::text, true);
    PERFORM pg_catalog.set_config('search_path',
        coalesce((SELECT pg_catalog.string_agg(pg_catalog.quote_ident(s), ', ' ORDER BY n)
                  FROM pg_catalog.unnest(schemas) WITH ORDINALITY AS u(s, n)), ''),
        true);
    PERFORM pg_catalog.set_config('application_name', application_name, true);
    -- The guard reads a statement's string literals as standard_conforming_strings reads them.
    PERFORM pg_catalog.set_config('standard_conforming_strings', 'on', true);
    PERFORM pg_catalog.pg_advisory_unlock_all();
END
$$;

REVOKE EXECUTE ON FUNCTION parley.begin_sql(integer, integer, text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION parley.begin_sql(integer, integer, text[], text) TO parley_sql_reader;
