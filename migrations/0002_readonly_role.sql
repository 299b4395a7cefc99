-- 0002: the NOLOGIN role `parley_readonly`, which may read the demo schema and nothing else.
-- The MCP function connects as a LOGIN user that inherits it, so a bug or a prompt-injected
-- query in a tool can read but never write.
--
-- Deployment recipe (run once per cluster as an admin, with a generated password):
--   CREATE ROLE parley_mcp LOGIN PASSWORD '...' IN ROLE parley_readonly;
--   -- belt and braces: role settings apply to the login user, not through membership
--   ALTER ROLE parley_mcp SET default_transaction_read_only = on;
--   ALTER ROLE parley_mcp SET statement_timeout = '10s';
--   ALTER ROLE parley_mcp CONNECTION LIMIT 20;
-- then give the MCP function postgres://parley_mcp:...@host/db?sslmode=require.
-- Never grant parley_readonly anything but SELECT/EXECUTE/USAGE/CONNECT.

-- Roles are cluster-wide, so several databases migrating at once can race to create it:
-- the loser sees duplicate_object, or unique_violation from the pg_authid index.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'parley_readonly') THEN
        CREATE ROLE parley_readonly NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN
        NULL;
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO parley_readonly', current_database());
END
$$;

GRANT USAGE ON SCHEMA public TO parley_readonly;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO parley_readonly;
GRANT EXECUTE ON FUNCTION lad_name_key(text), lad_common_key(text) TO parley_readonly;

-- Only covers tables later created by the role running migrations, which is the point:
-- new demo tables become readable without another grant.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO parley_readonly;
