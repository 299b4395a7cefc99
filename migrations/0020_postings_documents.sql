-- 0020: each BM25 posting carries its chunk's document, in the index the search reads (issue
-- 24). search_documents ranks pages by BM25 too (each term's best impact in any of a page's
-- passages), so it needs the document of every posting it reads: 7,000 for a seven-word
-- question. Looked up by the chunks' primary key that took 56 ms at 1M chunks, the rows being
-- wide (text and embedding); read from the index, with chunk_id, it costs nothing more.
-- A chunk never moves between documents (a changed document's chunks are deleted and stored
-- again), so the copy cannot go stale.

ALTER TABLE parley.chunk_terms ADD COLUMN document_id bigint;
UPDATE parley.chunk_terms t SET document_id = c.document_id
  FROM parley.chunks c WHERE c.id = t.chunk_id;
ALTER TABLE parley.chunk_terms ALTER COLUMN document_id SET NOT NULL;

DROP INDEX parley.chunk_terms_best_idx;
CREATE INDEX chunk_terms_best_idx ON parley.chunk_terms (collection_id, term, impact DESC)
    INCLUDE (chunk_id, document_id);

-- 0017's trigger function, writing the document too.
CREATE OR REPLACE FUNCTION parley.chunks_added() RETURNS trigger
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
        SELECT n.id AS chunk_id, n.document_id, n.collection_id, f.term, f.tf,
               sum(f.tf) OVER (PARTITION BY n.id) AS len
          FROM new_chunks n, parley.term_frequencies(n.tsv) f
    ), postings AS (
        INSERT INTO parley.chunk_terms (chunk_id, document_id, collection_id, term, tf, impact)
        SELECT t.chunk_id, t.document_id, t.collection_id, t.term, t.tf,
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
