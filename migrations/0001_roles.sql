-- 0001: the roles Parley's functions act as. Each is NOLOGIN; a deployment creates LOGIN users
-- that are members (recipes below), so a bug in one function cannot use another's rights.
--
-- This folder holds only Parley's own schema: a team running `parley migrate` against its own
-- database gets no demo tables (those are in domains/, applied by `parley demo-data`). Landed
-- migrations are never edited (the runner refuses changed checksums); change the schema in a new
-- numbered file.
--
-- parley_readonly: what the mcp function's tools read with. Never grant it anything but
-- SELECT/EXECUTE/USAGE/CONNECT; each domain grants it SELECT on its own tables. Recipe (once per
-- cluster, as an admin, with a generated password):
--   CREATE ROLE parley_mcp LOGIN PASSWORD '...' IN ROLE parley_readonly;
--   -- belt and braces: role settings apply to the login user, not through membership
--   ALTER ROLE parley_mcp SET default_transaction_read_only = on;
--   ALTER ROLE parley_mcp SET statement_timeout = '10s';
--   ALTER ROLE parley_mcp CONNECTION LIMIT 20;
--   -- per write role a domain declares (see 0003): may SET ROLE to it, never writes with it
--   -- outside a write tool's transaction
--   GRANT parley_tasks_writer TO parley_mcp WITH INHERIT FALSE, SET TRUE;
-- then give the mcp function postgres://parley_mcp:...@host/db?sslmode=require.
--
-- parley_chat_writer: the chat function's conversation memory (0002). Recipe:
--   CREATE ROLE parley_chat LOGIN PASSWORD '...' IN ROLE parley_chat_writer;
-- then give the chat function postgres://parley_chat:...@host/db?sslmode=verify-full.
--
-- parley_tool_writer: the group every write role of a domain joins (0003).

-- Roles are cluster-wide, so several databases migrating at once can race to create one: the
-- loser sees duplicate_object, or unique_violation from the pg_authid index.
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['parley_readonly', 'parley_chat_writer', 'parley_tool_writer'] LOOP
        BEGIN
            IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = name) THEN
                EXECUTE format(
                    'CREATE ROLE %I NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS',
                    name);
            END IF;
        EXCEPTION
            WHEN duplicate_object OR unique_violation THEN
                NULL;
        END;
    END LOOP;
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO parley_readonly, parley_chat_writer',
                   current_database());
END
$$;

GRANT USAGE ON SCHEMA public TO parley_readonly;
