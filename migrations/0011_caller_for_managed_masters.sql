-- 0011: parley.caller() again for the master user of a managed server (RDS, Aurora). On
-- PostgreSQL 16 a role that is not a superuser but has CREATEROLE is made a member of every
-- role it creates, with ADMIN OPTION but neither INHERIT nor SET (createrole_self_grant is
-- empty by default). So when such a master ran 0007, it became a "member" of
-- parley_sql_reader, 0007's caller() counted it as an ad-hoc SQL session, and every caller it
-- set was ignored: `parley demo-data` failed the tasks seed's row-level security check.
--
-- What 0007 means by a member is a session that runs with the reader's rights: one that holds
-- them at once (USAGE, through INHERIT grants) or can take them (SET ROLE). A membership that
-- only lets a role administer the group is neither. Found by tools/parley/tests/admin.rs.
CREATE OR REPLACE FUNCTION parley.caller() RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        -- A subquery, so Postgres evaluates it once per statement, not once per row. Superusers
        -- are members of every role; they are not this group's members in the sense meant here.
        WHEN (SELECT NOT r.rolsuper
                     AND (pg_catalog.pg_has_role(r.oid, 'parley_sql_reader', 'USAGE')
                          OR pg_catalog.pg_has_role(r.oid, 'parley_sql_reader', 'SET'))
              FROM pg_catalog.pg_roles r WHERE r.rolname = session_user) THEN NULL
        ELSE nullif(current_setting('parley.caller', true), '')::jsonb
    END;
