-- 0023: what a request sets for its transaction, and the clean-up after a tool call, as
-- functions, so that no request sends a statement RDS Proxy documents as pinning a session
-- (`SET`, `SET LOCAL`, `RESET`, `set_config`, session advisory lock functions; see
-- docs/rds-proxy.md). Every setting made here is local to the transaction (`set_config(...,
-- true)`): it is gone at COMMIT or ROLLBACK, so the server connection carries nothing of the
-- request into the next client's transaction, which is what lets a proxy or a
-- transaction-mode pooler multiplex it.
--
-- SECURITY INVOKER (the default) on purpose: each setting is made by the role that calls, with
-- exactly the rights it would have had sending the `SET LOCAL` itself (a role may only take a
-- role it may SET ROLE to). No `SET` clause on the functions: Postgres would undo their
-- settings when they return. Names are schema-qualified, so a caller's search_path cannot
-- change what runs. Everyone may call them (schema parley has USAGE for PUBLIC since 0003):
-- they give no right that `set_config` does not already give.

-- `settings` as name, value, name, value...: made in that order. One statement, not a loop of
-- them: each statement a PL/pgSQL function runs costs a trip through the executor.
CREATE FUNCTION parley.set_local(settings text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_catalog.count(pg_catalog.set_config(settings[i], settings[i + 1], true))
    FROM pg_catalog.generate_subscripts(settings, 1) AS i
    WHERE i % 2 = 1;
END
$$;

-- The start of a declared tool's call (functions/mcp/src/tools/exec.rs): its time limit, a
-- name for pg_stat_activity, the tool's own settings (set by the login, as the tools file's
-- author tried them), the verified caller for parley.caller(), then the tool's role, last.
-- A NULL leaves that one as it is. One statement, evaluated left to right.
CREATE FUNCTION parley.begin_call(
    timeout_ms integer,
    application_name text,
    settings text[],
    caller text,
    role_name text
) RETURNS void
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM
        CASE WHEN timeout_ms IS NOT NULL
            THEN pg_catalog.set_config('statement_timeout', timeout_ms::text, true) END,
        CASE WHEN application_name IS NOT NULL
            THEN pg_catalog.set_config('application_name', application_name, true) END,
        (SELECT pg_catalog.count(pg_catalog.set_config(settings[i], settings[i + 1], true))
         FROM pg_catalog.generate_subscripts(settings, 1) AS i
         WHERE i % 2 = 1),
        CASE WHEN caller IS NOT NULL
            THEN pg_catalog.set_config('parley.caller', caller, true) END,
        CASE WHEN role_name IS NOT NULL
            THEN pg_catalog.set_config('role', role_name, true) END;
END
$$;

-- Session advisory locks survive COMMIT and ROLLBACK; a tool's SQL may have taken one.
CREATE FUNCTION parley.release_session_locks() RETURNS void
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_catalog.pg_advisory_unlock_all();
END
$$;

-- The end of a declared tool's call, before COMMIT: deferred constraints are checked while the
-- tool's role and parley.caller still hold (RESET ALL undoes them, and COMMIT would check them
-- without); then what the tool's SQL may have set for the session (`set_config(..., false)`)
-- is undone and its session advisory locks released, so none of it reaches the next client.
CREATE FUNCTION parley.end_call() RETURNS void
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    SET CONSTRAINTS ALL IMMEDIATE;
    RESET ALL;
    PERFORM pg_catalog.pg_advisory_unlock_all();
END
$$;
