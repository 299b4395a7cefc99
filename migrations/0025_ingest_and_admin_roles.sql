-- 0025: least privilege for ingestion and for the admin function's routine work (issue 33).
-- Until now the ingest function and every `aws lambda invoke` of the admin function connected
-- as the database's owner, which may drop any table. Two NOLOGIN groups, each granted what its
-- work sends and nothing else; a deployment creates LOGIN users in them (recipes below, or
-- `parley logins`, or the admin function's IngestSecretArn and AdminSecretArn). The owner's
-- secret is then used only to migrate and to set up roles.
--
-- parley_ingest_writer: what crates/ingest sends (store.rs, store/extraction.rs, s3/) for the
-- ingest function's S3 events, `parley ingest` and `parley sync`:
--   parley.collections     SELECT, INSERT, UPDATE  a collection made on its first object, its
--                                                   settings object applied, updated_at; UPDATE
--                                                   also for the row locks the chunks'
--                                                   triggers take (FOR NO KEY UPDATE) and their
--                                                   chunk_count and term_count
--   parley.documents       SELECT, INSERT, UPDATE, DELETE  one document replaced or deleted (its
--                                                   sections, chunks and postings go by cascade,
--                                                   which runs as the tables' owner)
--   parley.sections        SELECT, INSERT          stored; read back to make a missing card
--   parley.chunks          INSERT                  stored (never read: nothing ingestion sends
--                                                   selects a chunk)
--   parley.memberships     SELECT, INSERT, DELETE  a settings object's `readers`
--   parley.s3_objects      SELECT, INSERT, UPDATE  what was last read of each object (0016)
--   parley.s3_extractions  SELECT, INSERT, UPDATE, DELETE  extractions under way (0022)
--   parley.chunk_terms     INSERT                  what the trigger chunks_added (0017, 0020)
--   parley.collection_terms SELECT, INSERT, UPDATE, DELETE  writes: its functions run as the
--                                                   caller, and a document replaced runs
--                                                   chunks_removed too
--   parley.ensure_embedding_index(integer) EXECUTE  the HNSW index for a model whose vectors
--                                                   are not 384 long, which only the owner may
--                                                   create (below)
-- The documents tables keep row-level security (0004, 0017): the policy `ingest` lets the
-- group see and write every row, since an S3 key names any collection. Nothing of the chat
-- tables, the audit, the domains' tables, and no DDL: it owns nothing.
--
-- parley_admin_ops: the admin function's direct invocations other than migrate, demo-data and
-- logins (tools/parley/src/admin/invoke.rs): `sync` is ingestion, so it is a member of
-- parley_ingest_writer; besides, `collections` and `enroll --list` count chunks (SELECT on
-- parley.chunks), `collections remove` deletes a collection (DELETE on parley.collections, the
-- rest going by cascade) and `audit` reads the audit trail (SELECT on parley.audit, which
-- stays append-only: its triggers refuse UPDATE and DELETE).
--
-- Recipes (once per cluster, as the owner, each with a generated password):
--   CREATE ROLE parley_ingest LOGIN PASSWORD '...' IN ROLE parley_ingest_writer;
--   CREATE ROLE parley_ops LOGIN PASSWORD '...' IN ROLE parley_admin_ops;
-- then give the ingest function postgres://parley_ingest:...@host/db?sslmode=verify-full
-- (its SECRET_IDS' database secret) and the admin function the parley_ops secret as
-- ADMIN_ROUTINE_SECRET_ID (docs/admin-function.md). `parley logins --ingest-user parley_ingest
-- --admin-user parley_ops` does the same from PARLEY_INGEST_PASSWORD and PARLEY_ADMIN_PASSWORD.

-- Roles are cluster-wide: several databases migrating at once can race to create one (0001).
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['parley_ingest_writer', 'parley_admin_ops'] LOOP
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
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO parley_ingest_writer, parley_admin_ops',
                   current_database());
END
$$;
-- pgvector's type and functions (the `::vector` of every embedding written).
GRANT USAGE ON SCHEMA public TO parley_ingest_writer;

GRANT SELECT, INSERT, UPDATE ON parley.collections TO parley_ingest_writer;
GRANT SELECT, INSERT, UPDATE, DELETE ON parley.documents TO parley_ingest_writer;
GRANT SELECT, INSERT ON parley.sections TO parley_ingest_writer;
GRANT INSERT ON parley.chunks TO parley_ingest_writer;
GRANT SELECT, INSERT, DELETE ON parley.memberships TO parley_ingest_writer;
GRANT SELECT, INSERT, UPDATE ON parley.s3_objects TO parley_ingest_writer;
GRANT SELECT, INSERT, UPDATE, DELETE ON parley.s3_extractions TO parley_ingest_writer;
GRANT INSERT ON parley.chunk_terms TO parley_ingest_writer;
GRANT SELECT, INSERT, UPDATE, DELETE ON parley.collection_terms TO parley_ingest_writer;

-- Every row, for what the grants allow: ingestion writes whichever collection a key names.
CREATE POLICY ingest ON parley.collections FOR ALL TO parley_ingest_writer USING (true) WITH CHECK (true);
CREATE POLICY ingest ON parley.documents FOR ALL TO parley_ingest_writer USING (true) WITH CHECK (true);
CREATE POLICY ingest ON parley.sections FOR ALL TO parley_ingest_writer USING (true) WITH CHECK (true);
CREATE POLICY ingest ON parley.chunks FOR ALL TO parley_ingest_writer USING (true) WITH CHECK (true);
CREATE POLICY ingest ON parley.memberships FOR ALL TO parley_ingest_writer USING (true) WITH CHECK (true);
CREATE POLICY ingest ON parley.chunk_terms FOR ALL TO parley_ingest_writer USING (true) WITH CHECK (true);
CREATE POLICY ingest ON parley.collection_terms FOR ALL TO parley_ingest_writer USING (true) WITH CHECK (true);

-- The partial HNSW index for vectors of `dims` (0004 made the one for 384), created when
-- missing. CREATE INDEX needs the table's owner, even with IF NOT EXISTS and the index there,
-- so ingestion calls this rather than sending it; only the index of that one shape can come
-- of it. Looked up first, so a collection's every run does not queue for CREATE INDEX's
-- SHARE lock behind the documents being written.
CREATE FUNCTION parley.ensure_embedding_index(dims integer) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    vector_schema name;
BEGIN
    IF dims IS NULL OR dims NOT BETWEEN 1 AND 2000 THEN
        RAISE EXCEPTION 'an embedding index is for 1 to 2000 dimensions (HNSW''s limit), not %', dims;
    END IF;
    IF to_regclass(format('parley.chunks_embedding_%s_idx', dims)) IS NOT NULL THEN
        RETURN;
    END IF;
    SELECT n.nspname INTO vector_schema
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    EXECUTE format(
        'CREATE INDEX IF NOT EXISTS %I ON parley.chunks
             USING hnsw ((embedding::%I.vector(%s)) %I.vector_cosine_ops)
             WHERE %I.vector_dims(embedding) = %s',
        format('chunks_embedding_%s_idx', dims), vector_schema, dims, vector_schema,
        vector_schema, dims);
END
$$;
REVOKE EXECUTE ON FUNCTION parley.ensure_embedding_index(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION parley.ensure_embedding_index(integer) TO parley_ingest_writer;

-- The admin function's routine work: ingestion (sync) and the rest above.
GRANT parley_ingest_writer TO parley_admin_ops;
GRANT SELECT ON parley.chunks TO parley_admin_ops;
GRANT DELETE ON parley.collections TO parley_admin_ops;
GRANT SELECT ON parley.audit TO parley_admin_ops;
