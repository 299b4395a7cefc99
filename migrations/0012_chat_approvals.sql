-- Tool calls waiting for the user's approval (issue 22). A turn whose model calls a tool the
-- catalog marks destructive (or `parley/approval: always`) stores its assistant message and one
-- row here per waiting call, and ends; the owner's answer (or a new message, or expiry)
-- decides each row once, and the turn resumes from the stored history.

CREATE TABLE chat.approvals (
    -- Random (UUID v4): the only handle a client has on the call, so it must not be guessable.
    id uuid PRIMARY KEY,
    conversation_id uuid NOT NULL,
    -- The assistant message of the turn that paused: the call belongs to its last step.
    message_seq integer NOT NULL,
    -- The model->tools round (1-based) the call was made in, and the model's call id.
    step integer NOT NULL CHECK (step >= 1),
    call_id text NOT NULL,
    -- The MCP server (as configured) and the tool's name as the model called it.
    server text NOT NULL,
    tool text NOT NULL,
    arguments jsonb NOT NULL,
    -- The key the call runs under once approved: a retried approval replays, never reruns.
    idempotency_key text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    decision text NOT NULL DEFAULT 'pending'
        CHECK (decision IN ('pending', 'approved', 'denied', 'expired')),
    -- The verified subject of whoever decided (the conversation's owner), and when.
    decided_by text,
    decided_at timestamptz,
    reason text,
    -- What the model is given as the call's output: the tool's result once an approved call
    -- ran, or the sentence a denial or expiry becomes. NULL while pending, and while an
    -- approved call has not answered yet (a resume then runs it under the same key).
    result jsonb,
    result_is_error boolean NOT NULL DEFAULT false,
    CHECK ((decision = 'pending') = (decided_at IS NULL)),
    FOREIGN KEY (conversation_id, message_seq)
        REFERENCES chat.messages (conversation_id, seq) ON DELETE CASCADE
);

CREATE INDEX approvals_message_idx ON chat.approvals (conversation_id, message_seq);

GRANT SELECT, INSERT, UPDATE, DELETE ON chat.approvals TO parley_chat_writer;
