-- 0004: documents for retrieval (pgvector). A collection (a course, a manual, a policy set)
-- holds documents; each document is cut into sections (what read_document returns) and
-- chunks (what search finds: text, heading path, a tsvector and an embedding). Memberships say
-- who may read a collection: a user by subject, or a group named in the caller's token; an
-- enrollment is a membership.
--
-- `parley ingest` writes these tables as their owner (row-level security does not apply to
-- the owner); every other role, the mcp function's included, sees only the collections the
-- caller may read, whatever its SQL says. Needs pgvector >= 0.5.0 (HNSW).

CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE parley.collections (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- What tools and the command line call it: lower-case, no spaces.
    name text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    title text NOT NULL CHECK (length(title) BETWEEN 1 AND 500),
    description text,
    -- Readable by every caller, the service included; otherwise only by members.
    public boolean NOT NULL DEFAULT false,
    -- The model its chunks were embedded with, and the vectors' length: a query embedded by
    -- another model is refused (parley.searchable_collections), never compared.
    embedding_model text NOT NULL CHECK (length(embedding_model) BETWEEN 1 AND 200),
    embedding_dims integer NOT NULL CHECK (embedding_dims BETWEEN 1 AND 2000),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE parley.documents (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    collection_id bigint NOT NULL REFERENCES parley.collections (id) ON DELETE CASCADE,
    -- The source path as ingested, relative to the ingested root ('sql-select.html').
    uri text NOT NULL CHECK (length(uri) BETWEEN 1 AND 2000),
    title text NOT NULL,
    -- Where the document sits in its corpus: part / chapter / section, course / module / lesson.
    path text[] NOT NULL DEFAULT '{}',
    metadata jsonb NOT NULL DEFAULT '{}',
    -- sha256 (hex) of the source bytes and the extractor's version: equal means unchanged.
    content_hash text NOT NULL,
    -- Characters of extracted text, for listings.
    chars integer NOT NULL DEFAULT 0,
    ingested_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (collection_id, uri)
);

-- A document's text in reading order, cut at its headings.
CREATE TABLE parley.sections (
    document_id bigint NOT NULL REFERENCES parley.documents (id) ON DELETE CASCADE,
    collection_id bigint NOT NULL,
    ord integer NOT NULL CHECK (ord >= 0),
    -- The headings above this section, outermost first; empty before the first heading.
    heading text[] NOT NULL DEFAULT '{}',
    text text NOT NULL,
    PRIMARY KEY (document_id, ord)
);

CREATE TABLE parley.chunks (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id bigint NOT NULL REFERENCES parley.documents (id) ON DELETE CASCADE,
    -- The document's, repeated so search filters and row-level security need no join.
    collection_id bigint NOT NULL,
    -- The section it was cut from (parley.sections.ord), and its place in the document.
    section integer NOT NULL,
    position integer NOT NULL CHECK (position >= 0),
    heading text[] NOT NULL DEFAULT '{}',
    text text NOT NULL,
    -- Title and heading path as one line: weighted above the text in full-text search.
    context text NOT NULL DEFAULT '',
    tsv tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, context), 'A')
        || to_tsvector('english'::regconfig, text)
    ) STORED,
    -- Untyped, so collections embedded with models of other lengths share the table; each
    -- length has its own partial HNSW index (below for 384, all-MiniLM-L6-v2), which a query
    -- uses when it says `vector_dims(embedding) = 384` and orders by
    -- `embedding::vector(384) <=> $query`.
    embedding vector NOT NULL,
    UNIQUE (document_id, position)
);

CREATE INDEX chunks_embedding_384_idx ON parley.chunks
    USING hnsw ((embedding::vector(384)) vector_cosine_ops)
    WHERE vector_dims(embedding) = 384;
CREATE INDEX chunks_tsv_idx ON parley.chunks USING gin (tsv);
CREATE INDEX chunks_collection_idx ON parley.chunks (collection_id);
CREATE INDEX sections_collection_idx ON parley.sections (collection_id);
CREATE INDEX documents_uri_idx ON parley.documents (uri);

CREATE TABLE parley.memberships (
    collection_id bigint NOT NULL REFERENCES parley.collections (id) ON DELETE CASCADE,
    -- 'user': `principal` is a subject (the token's `sub`); 'group': a group named in the
    -- token's `groups` or `cognito:groups` claim.
    kind text NOT NULL CHECK (kind IN ('user', 'group')),
    principal text NOT NULL CHECK (length(principal) BETWEEN 1 AND 255),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection_id, kind, principal)
);
CREATE INDEX memberships_principal_idx ON parley.memberships (kind, principal);

-- The caller's groups: the `groups` and `cognito:groups` claims, each a JSON array of strings
-- or one space-separated string (both forms occur in the wild). Empty without a user.
CREATE FUNCTION parley.caller_groups() RETURNS text[]
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN coalesce((
        SELECT array_agg(DISTINCT g)
        FROM (VALUES (parley.caller() -> 'groups'), (parley.caller() -> 'cognito:groups')) AS c (claim),
             LATERAL (
                 SELECT jsonb_array_elements_text(claim) WHERE jsonb_typeof(claim) = 'array'
                 UNION ALL
                 SELECT regexp_split_to_table(claim #>> '{}', '\s+') WHERE jsonb_typeof(claim) = 'string'
             ) AS g (g)
        WHERE g <> ''
    ), '{}');

-- The ids of the collections the caller may read: public ones, and those the caller's subject
-- or one of its groups is a member of. SECURITY DEFINER so it can read every membership; it
-- reveals only the caller's own. Policies call it as `(SELECT parley.readable_collections())::bigint[]`,
-- which Postgres evaluates once per statement rather than once per row.
CREATE FUNCTION parley.readable_collections() RETURNS bigint[]
    LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN coalesce((
        SELECT array_agg(c.id ORDER BY c.id)
        FROM parley.collections c
        WHERE c.public
           OR EXISTS (
               SELECT FROM parley.memberships m
               WHERE m.collection_id = c.id
                 AND ((m.kind = 'user' AND m.principal = parley.caller_sub())
                   OR (m.kind = 'group' AND m.principal = ANY (parley.caller_groups())))
           )
    ), '{}');

-- The collections a search covers, by name or all the caller may read, for a query embedded by
-- `model`. Raises, with a message for the person asking, when the named collection does not
-- exist, when the caller may not read it, or when it was embedded by another model (its
-- vectors cannot be compared with the query's). Without a name, collections of other models
-- are left out; if that leaves none of several readable ones, it raises too.
CREATE FUNCTION parley.searchable_collections(name text, model text) RETURNS bigint[]
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    readable bigint[] := parley.readable_collections();
    target parley.collections;
    matching bigint[];
    other text;
BEGIN
    IF name IS NOT NULL THEN
        SELECT * INTO target FROM parley.collections c WHERE c.name = searchable_collections.name;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'there is no collection named "%"; list_collections shows the ones you may read', name;
        END IF;
        IF NOT target.id = ANY (readable) THEN
            RAISE EXCEPTION 'you are not enrolled in the collection "%" (%), so it cannot be searched or read for you; list_collections shows the ones you may read', target.name, target.title;
        END IF;
        IF model IS NOT NULL AND target.embedding_model <> model THEN
            RAISE EXCEPTION 'the collection "%" was embedded with %, but this server embeds queries with %; ingest it again with this model, or configure the server''s embeddings to match', target.name, target.embedding_model, model;
        END IF;
        RETURN ARRAY[target.id];
    END IF;
    SELECT coalesce(array_agg(c.id), '{}') INTO matching
    FROM parley.collections c
    WHERE c.id = ANY (readable) AND (model IS NULL OR c.embedding_model = model);
    IF cardinality(matching) = 0 AND cardinality(readable) > 0 THEN
        SELECT c.embedding_model INTO other FROM parley.collections c WHERE c.id = ANY (readable) LIMIT 1;
        RAISE EXCEPTION 'the collections you may read were embedded with %, but this server embeds queries with %; ingest them again with this model, or configure the server''s embeddings to match', other, model;
    END IF;
    RETURN matching;
END
$$;

-- For read_document: raises, with a message for the person asking, when no document has this
-- id or uri, or when the caller may not read its collection; otherwise returns its id. A uri
-- that several collections hold resolves to the one the caller may read (the lowest id).
CREATE FUNCTION parley.readable_document(id bigint, uri text) RETURNS bigint
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    readable bigint[] := parley.readable_collections();
    doc bigint;
    coll parley.collections;
BEGIN
    IF id IS NULL AND uri IS NULL THEN
        RAISE EXCEPTION 'give a document_id or a uri (both come from search_documents results)';
    END IF;
    SELECT d.id INTO doc FROM parley.documents d
    WHERE (readable_document.id IS NULL OR d.id = readable_document.id)
      AND (readable_document.uri IS NULL OR d.uri = readable_document.uri)
      AND d.collection_id = ANY (readable)
    ORDER BY d.id LIMIT 1;
    IF FOUND THEN
        RETURN doc;
    END IF;
    SELECT c.* INTO coll FROM parley.documents d JOIN parley.collections c ON c.id = d.collection_id
    WHERE (readable_document.id IS NULL OR d.id = readable_document.id)
      AND (readable_document.uri IS NULL OR d.uri = readable_document.uri)
    ORDER BY d.id LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no document %; search_documents gives the ids and uris of the ones you may read',
            coalesce('with id ' || id, 'with uri "' || uri || '"');
    END IF;
    RAISE EXCEPTION 'that document is in the collection "%" (%), which you are not enrolled in, so it cannot be read for you', coll.name, coll.title;
END
$$;

GRANT EXECUTE ON FUNCTION parley.caller_groups(), parley.readable_collections(),
    parley.searchable_collections(text, text), parley.readable_document(bigint, text) TO PUBLIC;

-- Row-level security: every role but the owner sees only what the caller may read. ENABLE, not
-- FORCE, so `parley ingest`, connected as the owner, writes without policies of its own.
ALTER TABLE parley.collections ENABLE ROW LEVEL SECURITY;
ALTER TABLE parley.documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE parley.sections ENABLE ROW LEVEL SECURITY;
ALTER TABLE parley.chunks ENABLE ROW LEVEL SECURITY;
ALTER TABLE parley.memberships ENABLE ROW LEVEL SECURITY;
CREATE POLICY readable ON parley.collections FOR SELECT
    USING (id = ANY ((SELECT parley.readable_collections())::bigint[]));
CREATE POLICY readable ON parley.documents FOR SELECT
    USING (collection_id = ANY ((SELECT parley.readable_collections())::bigint[]));
CREATE POLICY readable ON parley.sections FOR SELECT
    USING (collection_id = ANY ((SELECT parley.readable_collections())::bigint[]));
CREATE POLICY readable ON parley.chunks FOR SELECT
    USING (collection_id = ANY ((SELECT parley.readable_collections())::bigint[]));
-- A caller sees its own memberships (enrollments), not other people's.
CREATE POLICY own ON parley.memberships FOR SELECT
    USING ((kind = 'user' AND principal = parley.caller_sub())
        OR (kind = 'group' AND principal = ANY (parley.caller_groups())));

GRANT SELECT ON parley.collections, parley.documents, parley.sections, parley.chunks,
    parley.memberships TO parley_readonly;
