-- 0019: a card per document (issue 24, granularities): one short text saying what the whole
-- page is about (title, opening lines, section headings; crates/ingest/src/card.rs) and its
-- embedding, so search_documents can match a question against what a page is about as well
-- as against its passages. NULL until the document is next ingested; `parley ingest` and a
-- sync fill in the cards of unchanged documents without embedding their chunks again.
ALTER TABLE parley.documents
    ADD COLUMN card text,
    ADD COLUMN card_embedding vector;

-- As chunks_embedding_384_idx: a query uses it when it says vector_dims(card_embedding) = 384
-- and orders by card_embedding::vector(384) <=> ...
CREATE INDEX documents_card_384_idx ON parley.documents
    USING hnsw ((card_embedding::vector(384)) vector_cosine_ops)
    WHERE vector_dims(card_embedding) = 384;
