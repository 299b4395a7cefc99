-- 0028: what each turn cost (issue 37), one row per turn stored (its answer or its error, in
-- the statement that stores it): the ledger
-- `GET /api/usage` and `parley usage` report per user, model and day, priced at report time
-- from MODEL_PRICES. Kept apart from chat.messages, without a foreign key, so deleting a
-- conversation does not delete what it cost.
CREATE TABLE chat.turn_usage (
    -- The turn's own id (one request's run of the loop; a turn resumed after an approval is
    -- a second row): storing the same turn again changes nothing.
    turn_id uuid PRIMARY KEY,
    -- The caller's `sub`, as chat.conversations.owner.
    owner text NOT NULL CHECK (length(owner) BETWEEN 1 AND 255),
    -- The conversation and the assistant message (its seq) the turn stored; they may since
    -- have been deleted.
    conversation_id uuid NOT NULL,
    seq integer,
    -- When the turn ended; the day of usage and budgets is its UTC date.
    at timestamptz NOT NULL DEFAULT now(),
    -- The model the LLM endpoint was asked for (LLM_MODEL).
    model text NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
    -- Requests to the model that it answered (each step's response, retries not counted).
    model_calls integer NOT NULL CHECK (model_calls >= 0),
    input_tokens bigint NOT NULL CHECK (input_tokens >= 0),
    output_tokens bigint NOT NULL CHECK (output_tokens >= 0),
    -- Tool calls the turn ran (show_chart included), and those that ended in a tool error.
    tool_calls integer NOT NULL CHECK (tool_calls >= 0),
    tool_errors integer NOT NULL CHECK (tool_errors >= 0),
    -- The turn's outcome code (answered, interrupted, awaiting_approval, llm_failed, ...).
    outcome text NOT NULL CHECK (length(outcome) BETWEEN 1 AND 64),
    -- Whether the turn failed (an error code, not an interruption or a wait for approval).
    error boolean NOT NULL
);

-- Reports read a period; a user's own view and budgets read one owner's days.
CREATE INDEX turn_usage_at_idx ON chat.turn_usage (at);
CREATE INDEX turn_usage_owner_at_idx ON chat.turn_usage (owner, at);

GRANT SELECT, INSERT ON chat.turn_usage TO parley_chat_writer;
