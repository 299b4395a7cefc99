-- 0017: a lexical ranking like BM25 (issue 24), in plain SQL with B-tree indexes (nothing
-- RDS or Aurora lacks). 0004's full-text branch asked for every word of a question in one
-- chunk (websearch_to_tsquery) and ranked with ts_rank_cd, so a paraphrase almost never
-- matched. Now any word matches, each weighted by how rare it is in the collection (idf) and
-- saturated by how often it occurs in the chunk, normalised by the chunk's length (BM25's k1
-- and b), so a rare word found once outweighs a common one found often.
--
-- Kept by triggers on parley.chunks, so every way chunks come and go (ingest, replace, prune,
-- S3 events, a collection removed) keeps the statistics true:
--   parley.chunk_terms       one row per (chunk, term): the term's weighted frequency in the
--                            chunk and its BM25 impact, tf*(k1+1) / (tf + k1*(1 - b + b*len/avg));
--                            indexed by (collection, term, impact) so a query reads only the
--                            best postings of each of its terms.
--   parley.collection_terms  in how many of a collection's chunks each term occurs (df).
--   parley.collections       chunk_count and term_count: N and the average length.
-- A term in a chunk's title or headings (tsvector weight A) counts CONTEXT_WEIGHT times. The
-- impact uses the collection's average length when the chunk was stored: chunks are cut to a
-- target size, so the average barely moves as a collection grows.

ALTER TABLE parley.collections
    ADD COLUMN chunk_count bigint NOT NULL DEFAULT 0 CHECK (chunk_count >= 0),
    ADD COLUMN term_count double precision NOT NULL DEFAULT 0 CHECK (term_count >= 0);

CREATE TABLE parley.collection_terms (
    collection_id bigint NOT NULL REFERENCES parley.collections (id) ON DELETE CASCADE,
    term text NOT NULL,
    df integer NOT NULL CHECK (df >= 0),
    PRIMARY KEY (collection_id, term)
);

CREATE TABLE parley.chunk_terms (
    chunk_id bigint NOT NULL REFERENCES parley.chunks (id) ON DELETE CASCADE,
    collection_id bigint NOT NULL,
    term text NOT NULL,
    tf real NOT NULL CHECK (tf > 0),
    impact real NOT NULL CHECK (impact > 0),
    PRIMARY KEY (chunk_id, term)
);
CREATE INDEX chunk_terms_best_idx ON parley.chunk_terms (collection_id, term, impact DESC)
    INCLUDE (chunk_id);

-- BM25's constants (Robertson's defaults) and the weight of a title or heading occurrence.
CREATE FUNCTION parley.bm25_k1() RETURNS real LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 1.2;
CREATE FUNCTION parley.bm25_b() RETURNS real LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 0.75;
CREATE FUNCTION parley.bm25_context_weight() RETURNS real LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 2;

-- Each term of a tsvector with its weighted frequency: an occurrence at weight A (the chunk's
-- title and headings, 0004's `context`) counts bm25_context_weight(), any other one.
CREATE FUNCTION parley.term_frequencies(doc tsvector)
    RETURNS TABLE (term text, tf real)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT t.lexeme,
           (SELECT count(*) FILTER (WHERE w <> 'A')
                   + parley.bm25_context_weight() * count(*) FILTER (WHERE w = 'A')
              FROM unnest(t.weights) AS w)::real
      FROM unnest(doc) AS t;
END;

-- BM25's saturated, length-normalised term frequency.
CREATE FUNCTION parley.bm25_impact(tf real, len real, avg_len real) RETURNS real
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN tf * (parley.bm25_k1() + 1)
           / (tf + parley.bm25_k1() * (1 - parley.bm25_b() + parley.bm25_b() * len / greatest(avg_len, 1)));

-- Chunks stored: their postings, the collection's N and length, each term's df. The
-- collections' rows are locked first, in id order, so two documents stored at once in one
-- collection take turns rather than deadlock on the terms they share.
CREATE FUNCTION parley.chunks_added() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM parley.collections k
      WHERE k.id IN (SELECT DISTINCT n.collection_id FROM new_chunks n)
      ORDER BY k.id FOR NO KEY UPDATE;
    UPDATE parley.collections k
       SET chunk_count = k.chunk_count + a.chunks, term_count = k.term_count + a.terms
      FROM (SELECT n.collection_id, count(*) AS chunks,
                   coalesce(sum((SELECT sum(f.tf) FROM parley.term_frequencies(n.tsv) f)), 0) AS terms
              FROM new_chunks n GROUP BY n.collection_id) a
     WHERE k.id = a.collection_id;
    WITH terms AS MATERIALIZED (
        SELECT n.id AS chunk_id, n.collection_id, f.term, f.tf,
               sum(f.tf) OVER (PARTITION BY n.id) AS len
          FROM new_chunks n, parley.term_frequencies(n.tsv) f
    ), postings AS (
        INSERT INTO parley.chunk_terms (chunk_id, collection_id, term, tf, impact)
        SELECT t.chunk_id, t.collection_id, t.term, t.tf,
               parley.bm25_impact(t.tf, t.len, (k.term_count / greatest(k.chunk_count, 1))::real)
          FROM terms t JOIN parley.collections k ON k.id = t.collection_id
    )
    INSERT INTO parley.collection_terms AS c (collection_id, term, df)
    SELECT collection_id, term, count(*) FROM terms
     GROUP BY collection_id, term ORDER BY collection_id, term
    ON CONFLICT (collection_id, term) DO UPDATE SET df = c.df + EXCLUDED.df;
    RETURN NULL;
END
$$;

-- Chunks deleted (a document replaced or removed): their postings go by cascade; N, the
-- length and the dfs come down. Chunks of a collection being removed are skipped: its rows
-- go with it.
CREATE FUNCTION parley.chunks_removed() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM parley.collections k
      WHERE k.id IN (SELECT DISTINCT o.collection_id FROM old_chunks o)
      ORDER BY k.id FOR NO KEY UPDATE;
    WITH gone AS MATERIALIZED (
        SELECT o.id, o.collection_id, o.tsv FROM old_chunks o
         WHERE EXISTS (SELECT FROM parley.collections k WHERE k.id = o.collection_id)
    ), terms AS MATERIALIZED (
        SELECT g.id AS chunk_id, g.collection_id, f.term, f.tf
          FROM gone g, parley.term_frequencies(g.tsv) f
    ), totals AS (
        UPDATE parley.collections k
           SET chunk_count = greatest(k.chunk_count - a.chunks, 0),
               term_count = greatest(k.term_count - a.terms, 0)
          FROM (SELECT g.collection_id, count(*) AS chunks,
                       coalesce(sum((SELECT sum(t.tf) FROM terms t WHERE t.chunk_id = g.id)), 0) AS terms
                  FROM gone g GROUP BY g.collection_id) a
         WHERE k.id = a.collection_id
    ), counts AS (
        SELECT collection_id, term, count(*) AS n FROM terms GROUP BY collection_id, term
    ), lowered AS (
        UPDATE parley.collection_terms c SET df = c.df - x.n
          FROM counts x
         WHERE c.collection_id = x.collection_id AND c.term = x.term AND c.df > x.n
    )
    DELETE FROM parley.collection_terms c
     USING counts x
     WHERE c.collection_id = x.collection_id AND c.term = x.term AND c.df <= x.n;
    RETURN NULL;
END
$$;

CREATE TRIGGER chunks_added AFTER INSERT ON parley.chunks
    REFERENCING NEW TABLE AS new_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION parley.chunks_added();
CREATE TRIGGER chunks_removed AFTER DELETE ON parley.chunks
    REFERENCING OLD TABLE AS old_chunks
    FOR EACH STATEMENT EXECUTE FUNCTION parley.chunks_removed();

-- What is stored already. The same arithmetic as the triggers, once over every chunk.
UPDATE parley.collections k
   SET chunk_count = a.chunks, term_count = a.terms
  FROM (SELECT c.collection_id, count(*) AS chunks,
               coalesce(sum((SELECT sum(f.tf) FROM parley.term_frequencies(c.tsv) f)), 0) AS terms
          FROM parley.chunks c GROUP BY c.collection_id) a
 WHERE k.id = a.collection_id;
WITH terms AS MATERIALIZED (
    SELECT c.id AS chunk_id, c.collection_id, f.term, f.tf,
           sum(f.tf) OVER (PARTITION BY c.id) AS len
      FROM parley.chunks c, parley.term_frequencies(c.tsv) f
), postings AS (
    INSERT INTO parley.chunk_terms (chunk_id, collection_id, term, tf, impact)
    SELECT t.chunk_id, t.collection_id, t.term, t.tf,
           parley.bm25_impact(t.tf, t.len, (k.term_count / greatest(k.chunk_count, 1))::real)
      FROM terms t JOIN parley.collections k ON k.id = t.collection_id
)
INSERT INTO parley.collection_terms (collection_id, term, df)
SELECT collection_id, term, count(*) FROM terms GROUP BY collection_id, term;

-- Row-level security as on the chunks: every role but the owner sees the statistics of the
-- collections the caller may read, and nothing of the others (a term's df would say what
-- another collection's chunks contain).
ALTER TABLE parley.chunk_terms ENABLE ROW LEVEL SECURITY;
ALTER TABLE parley.collection_terms ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable ON parley.chunk_terms FOR SELECT
    USING (collection_id = ANY ((SELECT parley.readable_collections())::bigint[]));
CREATE POLICY readable ON parley.collection_terms FOR SELECT
    USING (collection_id = ANY ((SELECT parley.readable_collections())::bigint[]));
GRANT SELECT ON parley.chunk_terms, parley.collection_terms TO parley_readonly;
