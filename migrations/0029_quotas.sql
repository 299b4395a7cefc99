-- 0029: per-user budgets and rate limits (issue 37, functions/chat/src/turn/quota.rs): one row
-- per user with the tokens charged on its UTC day and the turns started in its rate window.
-- Admission (one INSERT ... ON CONFLICT DO UPDATE) takes the row's lock, so one user's
-- concurrent admissions queue on it across instances; the statement that stores a turn
-- (with its chat.turn_usage row) charges its tokens here. No count of running turns is kept:
-- the overrun bound does not need one, and one left by an instance that died would never
-- come down.
CREATE TABLE chat.quota_counters (
    -- The caller's `sub`, as chat.conversations.owner.
    owner text PRIMARY KEY CHECK (length(owner) BETWEEN 1 AND 255),
    -- The UTC day `tokens` counts; a new day starts from 0.
    day date NOT NULL,
    -- Input and output tokens of the turns stored on `day`.
    tokens bigint NOT NULL CHECK (tokens >= 0),
    -- The current rate window (a minute from its start) and the turns admitted in it; a
    -- turn whose model never answered gives its slot back.
    window_start timestamptz NOT NULL,
    window_turns integer NOT NULL CHECK (window_turns >= 0),
    -- Whether the last admission was let in: decided on the locked row and read back by the
    -- same statement's RETURNING.
    admitted boolean NOT NULL
);

GRANT SELECT, INSERT, UPDATE ON chat.quota_counters TO parley_chat_writer;
