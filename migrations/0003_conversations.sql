-- 0003: conversation memory for the chat function, in its own schema `chat` so the MCP
-- function's read-only role (which may read everything in `public`) can never see it.
--
-- Deployment recipe (once per cluster, as an admin):
--   CREATE ROLE parley_chat LOGIN PASSWORD '...' IN ROLE parley_chat_writer;
-- then give the chat function postgres://parley_chat:...@host/db?sslmode=verify-full.

CREATE SCHEMA chat;

CREATE TABLE chat.conversations (
    id uuid PRIMARY KEY,
    -- The `sub` claim of the caller's token: a conversation is only ever visible to its owner.
    owner text NOT NULL CHECK (length(owner) BETWEEN 1 AND 255),
    title text NOT NULL,
    -- Messages so far; the next message takes message_count + 1 as its sequence number.
    message_count integer NOT NULL DEFAULT 0 CHECK (message_count >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- GET /api/conversations: the caller's, newest first, keyset-paginated.
CREATE INDEX conversations_owner_updated_idx ON chat.conversations (owner, updated_at DESC, id DESC);

CREATE TABLE chat.messages (
    conversation_id uuid NOT NULL REFERENCES chat.conversations (id) ON DELETE CASCADE,
    seq integer NOT NULL CHECK (seq >= 1),
    role text NOT NULL CHECK (role IN ('user', 'assistant')),
    content text NOT NULL,
    -- user: the UI context sent with the message (non-authoritative hints).
    context jsonb,
    -- assistant: every tool call of the turn, in order: {call_id, step, name, args, output,
    -- is_error, duration_ms}.
    traces jsonb NOT NULL DEFAULT '[]'::jsonb,
    -- assistant: token usage summed over the turn's LLM calls.
    usage jsonb,
    -- assistant: model->tools rounds the turn took.
    steps integer,
    -- assistant: set when the turn failed; content then says so and the row is not replayed.
    error text,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, seq)
);

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'parley_chat_writer') THEN
        CREATE ROLE parley_chat_writer NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN
        NULL;
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO parley_chat_writer', current_database());
END
$$;

GRANT USAGE ON SCHEMA chat TO parley_chat_writer;
GRANT SELECT, INSERT, UPDATE ON chat.conversations, chat.messages TO parley_chat_writer;
