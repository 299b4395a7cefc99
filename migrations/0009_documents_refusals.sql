-- 0009: the documents functions' refusals say "not found or not yours" alike, and a search
-- by a caller who may read no collection says so instead of finding nothing.
--
-- 0004's refusals told a caller that a collection or document they may not read exists (and
-- its title): a name or a uri was an oracle for what other people's collections hold. Now a
-- collection or document the caller may not read is refused exactly as one that does not
-- exist. And a search by a caller who may read no collection (the service token with no
-- public collection, a user enrolled in none) returned no rows, which the model reads as
-- "nothing relevant": it now raises, saying why and what would fix it.

CREATE OR REPLACE FUNCTION parley.searchable_collections(name text, model text) RETURNS bigint[]
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
        SELECT * INTO target FROM parley.collections c
        WHERE c.name = searchable_collections.name AND c.id = ANY (readable);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'there is no collection named "%" that you may read (it does not exist, or you are not enrolled in it); list_collections shows the ones you may read', name;
        END IF;
        IF model IS NOT NULL AND target.embedding_model <> model THEN
            RAISE EXCEPTION 'the collection "%" was embedded with %, but this server embeds queries with %; ingest it again with this model, or configure the server''s embeddings to match', target.name, target.embedding_model, model;
        END IF;
        RETURN ARRAY[target.id];
    END IF;
    IF cardinality(readable) = 0 THEN
        IF parley.caller_sub() IS NULL THEN
            RAISE EXCEPTION 'you may read no collection: this call carries no user (it came with the service token) and no collection is public; call as a signed-in user (through the chat, or with a user token), or make a collection public (parley ingest --public)';
        END IF;
        RAISE EXCEPTION 'you may read no collection: you are not enrolled in any, and none is public; ask whoever runs Parley to enroll you (parley enroll --collection NAME --user <your subject>)';
    END IF;
    SELECT coalesce(array_agg(c.id), '{}') INTO matching
    FROM parley.collections c
    WHERE c.id = ANY (readable) AND (model IS NULL OR c.embedding_model = model);
    IF cardinality(matching) = 0 THEN
        SELECT c.embedding_model INTO other FROM parley.collections c WHERE c.id = ANY (readable) LIMIT 1;
        RAISE EXCEPTION 'the collections you may read were embedded with %, but this server embeds queries with %; ingest them again with this model, or configure the server''s embeddings to match', other, model;
    END IF;
    RETURN matching;
END
$$;

CREATE OR REPLACE FUNCTION parley.readable_document(id bigint, uri text) RETURNS bigint
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    readable bigint[] := parley.readable_collections();
    doc bigint;
BEGIN
    IF id IS NULL AND uri IS NULL THEN
        RAISE EXCEPTION 'give a document_id or a uri (both come from search_documents results)';
    END IF;
    SELECT d.id INTO doc FROM parley.documents d
    WHERE (readable_document.id IS NULL OR d.id = readable_document.id)
      AND (readable_document.uri IS NULL OR d.uri = readable_document.uri)
      AND d.collection_id = ANY (readable)
    ORDER BY d.id LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'there is no document % that you may read (it does not exist, or it is in a collection you are not enrolled in); search_documents gives the ids and uris of the ones you may read',
            coalesce('with id ' || id, 'with uri "' || uri || '"');
    END IF;
    RETURN doc;
END
$$;
