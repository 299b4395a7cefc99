-- 0008: what the ad-hoc SQL role (parley_sql_reader's login, docs/sql.md) could still do past
-- its READ ONLY transaction and ROLLBACK, through functions PostgreSQL 16 gives PUBLIC. Found
-- trying to break it (issue 20): `SELECT pg_logical_emit_message(false, 'x', repeat('x',
-- 200000000))` added 200 MB of WAL per call, audited `ok`; every SQL caller shares one login
-- role, so each saw the others' statements in pg_stat_activity and could end them with
-- pg_terminate_backend.
--
-- Privileges on pg_catalog's functions and views belong to their owner, the bootstrap
-- superuser: a migrator that is not a superuser (a managed server's admin) cannot take them
-- from PUBLIC (REVOKE on the view even fails), so this migration then does nothing but warn,
-- and the mcp function's start-up check (functions/mcp/src/adhoc/role.rs) refuses the SQL role
-- until a superuser has run the statements below. REVOKE and GRANT are idempotent.
--
-- Taken from PUBLIC (nothing of Parley's uses them; grep the tree before adding a use):
--   pg_logical_emit_message(bool, text, text|bytea): writes a WAL record of any size, with
--     transactional = false at once and for good, in a read-only transaction too.
--   txid_current(), pg_current_xact_id(): assign a transaction id in a read-only transaction,
--     which ROLLBACK then records in the WAL (an abort record) and which counts towards
--     wraparound. One per call, so small; but a question about data never needs one.
--   pg_cancel_backend(int), pg_terminate_backend(int, bigint): a role may signal any session of
--     its own role, i.e. every other SQL caller's. Given back to pg_signal_backend, whose
--     members are meant to have them.
--   pg_stat_activity, pg_stat_get_activity(int), pg_stat_get_backend_activity(int): a role sees
--     the `query` text of sessions of its own role. Views check a function's EXECUTE against
--     the querying role, so pg_stat_ssl, pg_stat_gssapi and pg_stat_replication (built on
--     pg_stat_get_activity) are refused too. Given back to pg_read_all_stats (pg_monitor is a
--     member), which may read every session's text anyway; a monitoring login in neither needs
--     a GRANT of its own.
--
-- Left to PUBLIC, on purpose:
--   nextval, setval: sequences ignore ROLLBACK, but both are refused in a read-only
--     transaction ("cannot execute nextval() in a read-only transaction"), and serial
--     columns' defaults call nextval as the inserting role.
--   pg_advisory_lock and friends: session locks survive ROLLBACK, but the SQL tools' session
--     clean-up (DISCARD ALL) releases them and statement_timeout bounds any wait; Parley's
--     migrator, `parley demo-data` and the declared tools' session reset use them.
--   pg_notify, NOTIFY: delivered only at commit, and the SQL tools never commit.
--   set_config, SET: undone by ROLLBACK; superuser-only settings (temp_file_limit) stay out of
--     reach.
--   lo_create, lo_unlink, lowrite, lo_put, lo_from_bytea...: refused in a read-only
--     transaction; reading a large object needs SELECT on it.
--   brin_summarize_*, gin_clean_pending_list: need the index's ownership.
--   pg_create_restore_point, pg_switch_wal, pg_stat_reset*, replication slots,
--     pg_import_system_collations, pg_nextoid, binary_upgrade_*: superuser or REPLICATION
--     only by default (the start-up check refuses a role granted the first three anyway).
--   setseed: changes only random()'s sequence on that pooled session.
DO $$
BEGIN
    IF NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        RAISE WARNING 'migration 0008 needs a superuser to take WAL-writing, signalling and '
            'activity functions from PUBLIC; the mcp function refuses its SQL role until one runs '
            'migrations/0008_sql_role_side_effects.sql''s statements (see docs/sql.md)';
        RETURN;
    END IF;
    REVOKE EXECUTE ON FUNCTION
        pg_catalog.pg_logical_emit_message(boolean, text, text),
        pg_catalog.pg_logical_emit_message(boolean, text, bytea),
        pg_catalog.txid_current(),
        pg_catalog.pg_current_xact_id(),
        pg_catalog.pg_cancel_backend(integer),
        pg_catalog.pg_terminate_backend(integer, bigint),
        pg_catalog.pg_stat_get_activity(integer),
        pg_catalog.pg_stat_get_backend_activity(integer)
        FROM PUBLIC;
    REVOKE SELECT ON pg_catalog.pg_stat_activity FROM PUBLIC;
    GRANT EXECUTE ON FUNCTION pg_catalog.pg_cancel_backend(integer),
        pg_catalog.pg_terminate_backend(integer, bigint) TO pg_signal_backend;
    GRANT EXECUTE ON FUNCTION pg_catalog.pg_stat_get_activity(integer),
        pg_catalog.pg_stat_get_backend_activity(integer) TO pg_read_all_stats;
    GRANT SELECT ON pg_catalog.pg_stat_activity TO pg_read_all_stats;
END
$$;
