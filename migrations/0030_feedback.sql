-- 0030: feedback on answers (issue 37): a thumbs up or down, with an optional comment, that
-- the owner of a conversation gives one of its assistant messages
-- (PUT /api/conversations/{id}/messages/{seq}/feedback). What the answer was (the question
-- before it, its tool calls with run_sql's SQL, its sources, its error) stays in
-- chat.messages, the model in chat.turn_usage; `parley feedback export` joins them into lines
-- a person labels for `parley eval` (docs/feedback.md).
--
-- Deleting a conversation deletes its feedback (ON DELETE CASCADE), though a team lead
-- reading feedback would rather keep it: the feedback quotes nothing, but everything that
-- makes it useful (the question, the answer, the SQL and sources) is the conversation the
-- person chose to delete, and keeping a row that points at nothing, or a copy of what they
-- deleted, would go against that choice. A team that wants a durable set exports it
-- (`parley feedback export --since ...`) on a schedule; what it cost stays in
-- chat.turn_usage, which keeps no content.
CREATE TABLE chat.feedback (
    conversation_id uuid NOT NULL,
    -- The assistant message rated (the PUT checks the role; a user's message takes none).
    seq integer NOT NULL,
    -- Who gave it: the conversation's owner (`sub`), the only one who may.
    owner text NOT NULL CHECK (length(owner) BETWEEN 1 AND 255),
    rating text NOT NULL CHECK (rating IN ('up', 'down')),
    -- Optional, never empty; FEEDBACK_MAX_COMMENT_CHARS (at most this ceiling) bounds it.
    comment text CHECK (comment IS NULL OR length(comment) BETWEEN 1 AND 10000),
    created_at timestamptz NOT NULL DEFAULT now(),
    -- When the rating or comment last changed: `parley feedback export --since` reads it.
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, seq),
    FOREIGN KEY (conversation_id, seq)
        REFERENCES chat.messages (conversation_id, seq) ON DELETE CASCADE
);

-- `parley feedback export --since/--until` reads a period.
CREATE INDEX feedback_updated_at_idx ON chat.feedback (updated_at);

-- A person changes or clears their rating (a PUT with `"rating": null` deletes the row).
GRANT SELECT, INSERT, UPDATE, DELETE ON chat.feedback TO parley_chat_writer;
