-- 0026: the semantic catalog's search index (issue 35, docs/catalog.md). `parley catalog index`
-- (and `init` / `refresh`, which end with it) fills these tables from a catalog file and the
-- live database; the mcp function's `search_catalog` and `find_values` read them through the
-- two functions below. Both take the role whose privileges decide what is shown (the SQL
-- reader role): an entry or a value of a table or column that role cannot read is never
-- returned, whatever the index holds, because privileges are checked when the question is
-- asked, not when the index was built.
--
-- Nothing here needs an extension beyond pgvector (which 0004 already needs): the loose
-- matching of values folds case, accents, punctuation and spacing with `normalize` and
-- `lower` (the database's ctype must be UTF-8 aware: C.UTF-8 or a language's, as on RDS and
-- Aurora), and matches typos with trigrams kept in an array under a GIN index. RDS and Aurora
-- offer pg_trgm and unaccent, but the local server does not, and one method for both keeps
-- the numbers in docs/benchmarks.md true of a deployment.

-- What a person asks about: tables, columns, relationships, metrics, verified queries and
-- instructions, each with the text that is searched (`body`), its words (`tsv`) and its
-- embedding. The whole index is replaced in one transaction by each `parley catalog index`.
CREATE TABLE parley.catalog_entries (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('table', 'column', 'relationship', 'metric',
                                       'verified_query', 'instruction')),
    -- The table the entry belongs to (NULL for instructions and verified queries).
    schema_name text,
    table_name text,
    column_name text,
    -- A relationship's other table.
    related_schema text,
    related_table text,
    name text NOT NULL,
    description text,
    sql text,
    join_on text,
    body text NOT NULL,
    tsv tsvector NOT NULL,
    length real NOT NULL CHECK (length >= 0),
    embedding vector,
    CHECK ((schema_name IS NULL) = (table_name IS NULL))
);
CREATE INDEX catalog_entries_table_idx ON parley.catalog_entries (schema_name, table_name);
CREATE INDEX catalog_entries_related_idx ON parley.catalog_entries (related_schema, related_table)
    WHERE kind = 'relationship';
-- Nearest by meaning through HNSW, for the built-in model's 384 dimensions (as 0004 does for
-- chunks); another model's vectors are compared exactly.
CREATE INDEX catalog_entries_embedding_idx ON parley.catalog_entries
    USING hnsw ((embedding::vector(384)) vector_cosine_ops)
    WHERE vector_dims(embedding) = 384;

-- Each word of each entry with its BM25 impact (0017's parley.bm25_impact: saturated,
-- length-normalised term frequency), so a question reads only each word's best postings.
CREATE TABLE parley.catalog_postings (
    term text NOT NULL,
    impact real NOT NULL,
    entry_id bigint NOT NULL REFERENCES parley.catalog_entries (id) ON DELETE CASCADE,
    PRIMARY KEY (term, impact, entry_id)
);

-- In how many entries each word occurs (BM25's df), and N with the average length.
CREATE TABLE parley.catalog_terms (
    term text PRIMARY KEY,
    df integer NOT NULL CHECK (df > 0)
);
CREATE TABLE parley.catalog_stats (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    entries integer NOT NULL,
    avg_length real NOT NULL,
    -- The model the entries were embedded with; a question is embedded with the same one.
    model text NOT NULL,
    indexed_at timestamptz NOT NULL DEFAULT now()
);

-- The columns whose values are indexed, and their values (each distinct value once per
-- column, bounded per column by the indexer). `folded` is the value in lower case without
-- accents, punctuation or spaces ("AC/DC" and "ac dc" are both "acdc"); `grams` its trigrams;
-- `words` its words folded the same way; `initials` the first letter of each word ("New York
-- City" is "nyc").
CREATE TABLE parley.catalog_value_columns (
    id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schema_name text NOT NULL,
    table_name text NOT NULL,
    column_name text NOT NULL,
    UNIQUE (schema_name, table_name, column_name)
);
CREATE TABLE parley.catalog_values (
    column_id integer NOT NULL REFERENCES parley.catalog_value_columns (id) ON DELETE CASCADE,
    value text NOT NULL,
    folded text NOT NULL,
    grams text[] NOT NULL,
    words text[] NOT NULL,
    initials text NOT NULL,
    PRIMARY KEY (column_id, value)
);
CREATE INDEX catalog_values_grams_idx ON parley.catalog_values USING gin (grams);
CREATE INDEX catalog_values_folded_idx ON parley.catalog_values (folded text_pattern_ops);
CREATE INDEX catalog_values_initials_idx ON parley.catalog_values (initials);
-- In how many values each trigram occurs: a lookup starts from the query's rarest trigrams.
CREATE TABLE parley.catalog_value_grams (
    gram text PRIMARY KEY,
    df integer NOT NULL CHECK (df > 0)
);

-- Lower case, accents and other combining marks gone (NFKD splits "ç" into "c" and a mark;
-- compatibility forms such as "ﬁ" become "fi"), then spaces and punctuation gone.
CREATE FUNCTION parley.catalog_fold(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN pg_catalog.regexp_replace(
        normalize(pg_catalog.lower(t), NFKD),
        '[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f[:space:][:punct:]\u00a0-\u00bf\u2000-\u206f]',
        '', 'g');

-- The trigrams of a folded text, padded with a space at each end so that its first and last
-- letters count as much as the middle ones ("acdc": " ac", "acd", "cdc", "dc ").
CREATE FUNCTION parley.catalog_grams(folded text) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN ARRAY(SELECT DISTINCT pg_catalog.substr(' ' || folded || ' ', i, 3)
                   FROM pg_catalog.generate_series(1, greatest(pg_catalog.length(folded), 1)) AS i
                  ORDER BY 1);

-- The words of a text, folded ("R&B/Soul" is r, b, soul).
CREATE FUNCTION parley.catalog_words(t text) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN ARRAY(
        SELECT w
          FROM pg_catalog.regexp_split_to_table(
                 pg_catalog.regexp_replace(normalize(pg_catalog.lower(t), NFKD),
                                           '[\u0300-\u036f]', '', 'g'),
                 '[^[:alnum:]]+') AS w
         WHERE w <> '');

-- The first letter of each word of a value, folded ("New York City" is "nyc", "AC/DC" "ad").
CREATE FUNCTION parley.catalog_initials(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN coalesce(pg_catalog.array_to_string(ARRAY(
        SELECT pg_catalog.left(w, 1)
          FROM pg_catalog.regexp_split_to_table(
                 pg_catalog.regexp_replace(normalize(pg_catalog.lower(t), NFKD),
                                           '[\u0300-\u036f]', '', 'g'),
                 '[^[:alnum:]]+') AS w
         WHERE w <> ''), ''), '');

-- May `reader` read this table (any of its columns)? NULL when it no longer exists.
CREATE FUNCTION parley.catalog_readable(reader name, schema_name text, table_name text)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN pg_catalog.has_schema_privilege(reader, schema_name, 'USAGE')
       AND pg_catalog.has_any_column_privilege(
             reader,
             pg_catalog.to_regclass(pg_catalog.quote_ident(schema_name) || '.'
                                    || pg_catalog.quote_ident(table_name)),
             'SELECT');

-- May `reader` read this column? NULL when it no longer exists.
CREATE FUNCTION parley.catalog_column_readable(reader name, schema_name text, table_name text,
                                               column_name text)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
BEGIN ATOMIC
    SELECT pg_catalog.has_schema_privilege(reader, schema_name, 'USAGE')
       AND pg_catalog.has_column_privilege(reader, a.attrelid, a.attnum, 'SELECT')
      FROM pg_catalog.pg_attribute a
     WHERE a.attrelid = pg_catalog.to_regclass(pg_catalog.quote_ident(schema_name) || '.'
                                               || pg_catalog.quote_ident(table_name))
       AND a.attname = column_name AND NOT a.attisdropped AND a.attnum > 0;
END;

-- The catalog entries that answer `question`, best first, among those `reader` may see:
-- hybrid retrieval as for documents (0017): the 40 entries nearest the question's embedding
-- and the 60 best by BM25 over their words (each word's 500 best postings), fused by
-- reciprocal rank (k = 10; each list weighs 1), with a third list: the columns that hold a
-- value the question names ("Miles Davis" is in artist.name). Then the join paths between the
-- tables found: every relationship that joins two of the first five tables, or joins them
-- through one table in between, and every relationship of those five (their neighbours, at
-- 0.9 of the table's score), each just after the weaker of its two ends, so the model sees
-- how the tables it will use connect.
CREATE FUNCTION parley.search_catalog(question text, question_embedding real[], reader name,
                                      max_rows integer)
    RETURNS TABLE (kind text, "table" text, "column" text, name text, description text,
                   sql text, "join" text, related_table text, score real)
    LANGUAGE plpgsql STABLE
    -- public: pgvector's type and operators (0004 creates the extension there).
    SET search_path = pg_catalog, public, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    near bigint[];
BEGIN
    IF cardinality(question_embedding) = 384 THEN
        SELECT array_agg(x.id ORDER BY x.distance, x.id) INTO near
          FROM (SELECT e.id, e.embedding::vector(384) <=> question_embedding::vector(384) AS distance
                  FROM parley.catalog_entries e
                 WHERE vector_dims(e.embedding) = 384
                 ORDER BY e.embedding::vector(384) <=> question_embedding::vector(384)
                 LIMIT 40) AS x;
    ELSIF question_embedding IS NOT NULL THEN
        SELECT array_agg(x.id ORDER BY x.distance, x.id) INTO near
          FROM (SELECT e.id, e.embedding <=> question_embedding::vector AS distance
                  FROM parley.catalog_entries e
                 WHERE vector_dims(e.embedding) = cardinality(question_embedding)
                 ORDER BY 2, 1
                 LIMIT 40) AS x;
    END IF;
    -- Planned for this question's own words and phrases (as dynamic SQL is, each time): a
    -- generic plan cannot tell how many there are and may read every value to join them.
    RETURN QUERY EXECUTE $sql$
    WITH terms AS (
        SELECT DISTINCT t.lexeme AS term,
               -- Lucene's idf: never negative, however common the word.
               ln(1 + ((SELECT st.entries FROM parley.catalog_stats st) - ct.df + 0.5)
                      / (ct.df + 0.5)) AS idf
          FROM unnest(to_tsvector('english', $1)) AS t
          JOIN parley.catalog_terms ct ON ct.term = t.lexeme
    ),
    words AS (
        SELECT p.entry_id AS id,
               row_number() OVER (ORDER BY sum(tm.idf * p.impact) DESC, p.entry_id) AS rank
          FROM terms tm
         CROSS JOIN LATERAL (SELECT cp.entry_id, cp.impact FROM parley.catalog_postings cp
                              WHERE cp.term = tm.term
                              ORDER BY cp.impact DESC
                              LIMIT 500) AS p
         GROUP BY p.entry_id
         ORDER BY rank
         LIMIT 60
    ),
    meaning AS (
        SELECT m.id, m.rank FROM unnest($2) WITH ORDINALITY AS m(id, rank)
    ),
    phrases AS (
        -- The $1's phrases of one to three words, folded as values are ("Miles
        -- Davis" is "milesdavis"); a single word only when it is not a stop word.
        SELECT DISTINCT parley.catalog_fold(array_to_string(q.w[i:i + n - 1], ' ')) AS folded,
               n AS words
          FROM (SELECT regexp_split_to_array(btrim($1), '\s+') AS w) AS q
         CROSS JOIN generate_series(1, cardinality(q.w)) AS i
         CROSS JOIN generate_series(1, 3) AS n
         WHERE i + n - 1 <= cardinality(q.w)
           AND (n > 1 OR to_tsvector('english', q.w[i]) <> ''::tsvector)
    ),
    named AS (
        -- Columns holding a value the $1 names exactly (up to case, accents and
        -- punctuation): the longest phrase first.
        SELECT e.id, row_number() OVER (ORDER BY max(p.words) DESC, count(*) DESC, e.id) AS rank
          FROM phrases p
          JOIN parley.catalog_values v ON v.folded = p.folded
          JOIN parley.catalog_value_columns c ON c.id = v.column_id
          JOIN parley.catalog_entries e
            ON e.kind = 'column' AND e.schema_name = c.schema_name
           AND e.table_name = c.table_name AND e.column_name = c.column_name
         WHERE length(p.folded) >= 3
         GROUP BY e.id
         ORDER BY rank
         LIMIT 20
    ),
    fused AS (
        SELECT f.id, sum(f.score)::real AS score
          FROM (SELECT wd.id, 1.0 / (10 + wd.rank) AS score FROM words wd
                UNION ALL
                SELECT m.id, 1.0 / (10 + m.rank) FROM meaning m
                UNION ALL
                SELECT nm.id, 1.0 / (10 + nm.rank) FROM named nm) AS f
         GROUP BY f.id
    ),
    shown AS (
        SELECT e.id, e.kind, e.schema_name, e.table_name, e.column_name, e.related_schema,
               e.related_table, e.name, e.description, e.sql, e.join_on, fu.score AS rank_score
          FROM fused fu
          JOIN parley.catalog_entries e ON e.id = fu.id
         WHERE parley.catalog_entry_visible($3, e.kind, e.schema_name, e.table_name,
                                            e.column_name, e.related_schema, e.related_table)
         ORDER BY fu.score DESC, e.id
         LIMIT $4
    ),
    found AS (
        -- The first five tables the ranked entries belong to, with their best score.
        SELECT t.schema_name, t.table_name, t.best
          FROM (SELECT s.schema_name, s.table_name, max(s.rank_score) AS best
                  FROM shown s WHERE s.table_name IS NOT NULL
                 GROUP BY 1, 2) AS t
         ORDER BY t.best DESC, 1, 2
         LIMIT 5
    ),
    edges AS (
        -- The relationships of the tables found that the reader may see.
        SELECT e.id, e.schema_name, e.table_name, e.related_schema, e.related_table
          FROM parley.catalog_entries e
         WHERE e.id IN (SELECT x.id FROM found f JOIN parley.catalog_entries x
                          ON x.schema_name = f.schema_name AND x.table_name = f.table_name
                         WHERE x.kind = 'relationship'
                        UNION
                        SELECT x.id FROM found f JOIN parley.catalog_entries x
                          ON x.related_schema = f.schema_name AND x.related_table = f.table_name
                         WHERE x.kind = 'relationship')
           AND parley.catalog_entry_visible($3, 'relationship', e.schema_name, e.table_name,
                                            NULL, e.related_schema, e.related_table)
    ),
    direct AS (
        SELECT ed.id, least(a.best, z.best) AS score
          FROM edges ed
          JOIN found a ON (a.schema_name, a.table_name) = (ed.schema_name, ed.table_name)
          JOIN found z ON (z.schema_name, z.table_name) = (ed.related_schema, ed.related_table)
    ),
    bridged AS (
        -- found -- x -- found, x any table: both relationships, when no direct one joins them.
        SELECT unnest(ARRAY[e1.id, e2.id]) AS id, least(a.best, z.best) AS score
          FROM found a
          JOIN found z ON (a.schema_name, a.table_name) < (z.schema_name, z.table_name)
          JOIN edges e1 ON (a.schema_name, a.table_name) IN ((e1.schema_name, e1.table_name),
                                                             (e1.related_schema, e1.related_table))
          JOIN edges e2 ON (z.schema_name, z.table_name) IN ((e2.schema_name, e2.table_name),
                                                             (e2.related_schema, e2.related_table))
                       AND e2.id <> e1.id
         WHERE (CASE WHEN (e1.schema_name, e1.table_name) = (a.schema_name, a.table_name)
                     THEN (e1.related_schema, e1.related_table)
                     ELSE (e1.schema_name, e1.table_name) END)
             = (CASE WHEN (e2.schema_name, e2.table_name) = (z.schema_name, z.table_name)
                     THEN (e2.related_schema, e2.related_table)
                     ELSE (e2.schema_name, e2.table_name) END)
           AND NOT EXISTS (SELECT FROM direct d JOIN edges x ON x.id = d.id
                            WHERE ((x.schema_name, x.table_name, x.related_schema, x.related_table)
                                   = (a.schema_name, a.table_name, z.schema_name, z.table_name))
                               OR ((x.schema_name, x.table_name, x.related_schema, x.related_table)
                                   = (z.schema_name, z.table_name, a.schema_name, a.table_name)))
    ),
    neighbours AS (
        -- The tables next to the five found, through one relationship, at 0.9 of the score of
        -- the table found: what a $1 about a table usually also needs (the rows that
        -- record its events, the names its codes stand for).
        SELECT ed.id, 0.9 * f.best AS score
          FROM found f
          JOIN edges ed ON (f.schema_name, f.table_name) IN ((ed.schema_name, ed.table_name),
                                                             (ed.related_schema, ed.related_table))
    ),
    paths AS (
        SELECT p.id, max(p.score) AS score
          FROM (SELECT * FROM direct UNION ALL SELECT * FROM bridged
                UNION ALL SELECT * FROM neighbours) AS p
         WHERE p.id NOT IN (SELECT s.id FROM shown s)
         GROUP BY p.id
         ORDER BY 2 DESC, 1
         LIMIT 20
    ),
    answer AS (
        -- A join path comes just after the weaker of the two tables it joins.
        SELECT s.* FROM shown s
        UNION ALL
        SELECT e.id, e.kind, e.schema_name, e.table_name, e.column_name, e.related_schema,
               e.related_table, e.name, e.description, e.sql, e.join_on, pa.score * 0.999
          FROM paths pa
          JOIN parley.catalog_entries e ON e.id = pa.id
    )
    SELECT an.kind,
           CASE WHEN an.table_name IS NOT NULL THEN an.schema_name || '.' || an.table_name END,
           an.column_name, an.name, an.description, an.sql, an.join_on,
           CASE WHEN an.related_table IS NOT NULL
                THEN an.related_schema || '.' || an.related_table END,
           round(an.rank_score::numeric, 4)::real
      FROM answer an
     ORDER BY an.rank_score DESC, an.id
    $sql$
    USING question, near, reader, max_rows;
END
$$;

-- Whether `reader` may see an entry: its table (and column) readable; a relationship needs
-- both its tables; instructions and verified queries are the team's words for everyone (a
-- verified query runs as its own tool, under the caller's privileges).
CREATE FUNCTION parley.catalog_entry_visible(reader name, kind text, schema_name text,
                                             table_name text, column_name text,
                                             related_schema text, related_table text)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN CASE
        WHEN table_name IS NULL THEN true
        WHEN kind = 'column' THEN
            coalesce(parley.catalog_column_readable(reader, schema_name, table_name, column_name),
                     false)
        WHEN kind = 'relationship' THEN
            coalesce(parley.catalog_readable(reader, schema_name, table_name), false)
            AND coalesce(parley.catalog_readable(reader, related_schema, related_table), false)
        ELSE coalesce(parley.catalog_readable(reader, schema_name, table_name), false)
    END;

-- The stored values that match `text` loosely, best first, among the columns `reader` may
-- read (optionally one table, or one column): the same folded text scores 1; every word of
-- the text a whole word of the value ("apple" in "Apple Inc.") 0.85 to 1, more as the text
-- covers more of the value; the same initials ("NYC") 0.8; else trigram similarity, the
-- larger of the share of all trigrams in common (typos) and of the text's trigrams found in
-- the value (a name given in part, misspelt), the second counting 0.9, at most 0.84.
-- Candidates hold two of the text's four rarest trigrams (those that occur in some value): a
-- typo spoils at most three trigrams in a row, so a misspelt name keeps two of four, while
-- asking for two at once keeps a common trigram from making a lookup read most of the index.
-- At most 5,000 candidates are scored; privileges are checked on the columns of those scored.
CREATE FUNCTION parley.find_values(query text, in_table text, in_column text, reader name,
                                   max_rows integer)
    RETURNS TABLE ("table" text, "column" text, value text, score real)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    q_folded text := parley.catalog_fold(query);
    q_grams text[];
    q_words text[] := parley.catalog_words(query);
    picked text[];
    columns integer[];
    lookup text;
BEGIN
    IF q_folded IS NULL OR q_folded = '' THEN
        RETURN;
    END IF;
    q_grams := parley.catalog_grams(q_folded);
    IF in_table IS NOT NULL OR in_column IS NOT NULL THEN
        SELECT coalesce(array_agg(c.id), '{}') INTO columns
          FROM parley.catalog_value_columns c
         WHERE (in_table IS NULL
                OR c.table_name = in_table
                OR c.schema_name || '.' || c.table_name = in_table)
           AND (in_column IS NULL OR c.column_name = in_column);
    END IF;
    SELECT array_agg(r.gram ORDER BY r.df, r.gram) INTO picked
      FROM (SELECT d.gram, d.df FROM unnest(q_grams) AS g(gram)
              JOIN parley.catalog_value_grams d ON d.gram = g.gram
             ORDER BY d.df, d.gram
             LIMIT 4) AS r;
    -- Which rows to score, spelt out so that each lookup is planned with its own trigrams: a
    -- bitmap of each pair's GIN scan and of the B-tree lookups of the folded text and initials.
    SELECT string_agg(format('w.grams @> ARRAY[%L, %L]', picked[i], picked[j]), ' OR ')
      INTO lookup
      FROM generate_series(1, 3) AS i, generate_series(2, 4) AS j
     WHERE i < j AND j <= cardinality(picked);
    lookup := coalesce(lookup || ' OR ', '') || 'w.folded = $1'
             || CASE WHEN length(q_folded) >= 2 THEN ' OR w.initials = $1' ELSE '' END;
    RETURN QUERY EXECUTE format($sql$
    WITH candidates AS (
        SELECT w.column_id, w.value, w.folded, w.grams, w.words, w.initials
          FROM parley.catalog_values w
         WHERE (%s) AND ($2::integer[] IS NULL OR w.column_id = ANY ($2))
         LIMIT 5000
    ),
    scored AS (
        SELECT ca.column_id, ca.value,
               CASE WHEN ca.folded = $1 THEN 1
                    WHEN $4 <@ ca.words
                        THEN 0.85 + 0.15 * length($1) / greatest(length(ca.folded), 1)
                    WHEN ca.initials = $1 THEN 0.8
                    ELSE least(0.84, greatest(
                        c.common::real / (cardinality(ca.grams) + cardinality($3) - c.common),
                        0.9 * c.common::real / cardinality($3)))
               END AS score
          FROM candidates ca
          CROSS JOIN LATERAL (SELECT count(*) AS common FROM unnest(ca.grams) AS g
                               WHERE g = ANY ($3)) AS c
    ),
    readable AS (
        SELECT k.id, k.schema_name, k.table_name, k.column_name
          FROM parley.catalog_value_columns k
         WHERE k.id IN (SELECT DISTINCT sc.column_id FROM scored sc WHERE sc.score >= 0.3)
           AND coalesce(parley.catalog_column_readable($5, k.schema_name, k.table_name,
                                                       k.column_name), false)
    )
    SELECT r.schema_name || '.' || r.table_name, r.column_name, s.value,
           round(s.score::numeric, 4)::real
      FROM scored s
      JOIN readable r ON r.id = s.column_id
     WHERE s.score >= 0.3
     ORDER BY s.score DESC, length(s.value), s.value, 1, 2
     LIMIT $6
    $sql$, lookup)
    USING q_folded, columns, q_grams, q_words, reader, max_rows;
END
$$;

-- The mcp function's tools read with parley_readonly; `parley catalog index` writes as the
-- owner (a migration's role), like `parley migrate`.
GRANT SELECT ON parley.catalog_entries, parley.catalog_postings, parley.catalog_terms,
                parley.catalog_stats,
                parley.catalog_value_columns, parley.catalog_values, parley.catalog_value_grams
    TO parley_readonly;
