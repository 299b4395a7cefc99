-- 0002: conversation memory for the chat function, in its own schema `chat` so the mcp
-- function's roles (which may read what a domain grants in `public`) can never see it.

CREATE SCHEMA chat;

CREATE TABLE chat.conversations (
    id uuid PRIMARY KEY,
    -- The `sub` claim of the caller's token: a conversation is only ever visible to its owner.
    owner text NOT NULL CHECK (length(owner) BETWEEN 1 AND 255),
    title text NOT NULL,
    -- Messages so far; the next message takes message_count + 1 as its sequence number.
    message_count integer NOT NULL DEFAULT 0 CHECK (message_count >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- One turn at a time per conversation, by an expiring lease on its row: a turn holds a
    -- database connection only while it begins and while it finishes, not while the model
    -- thinks, and a lease whose holder froze or died expires by itself.
    -- The id of the last turn that claimed the conversation (kept after it finishes, so a
    -- retried finish can tell "already stored" from "taken over").
    turn_lease uuid,
    -- When that claim expires; NULL once the turn finished (the conversation is free). A turn
    -- may claim the conversation when this is NULL or in the past.
    turn_lease_until timestamptz
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
    -- assistant: the reply was stored when its turn reached TURN_DEADLINE_MS and holds only
    -- what the turn had by then; clients and readers of the history are told so.
    cut_short boolean NOT NULL DEFAULT false,
    PRIMARY KEY (conversation_id, seq)
);

GRANT USAGE ON SCHEMA chat TO parley_chat_writer;
GRANT SELECT, INSERT, UPDATE ON chat.conversations, chat.messages TO parley_chat_writer;
