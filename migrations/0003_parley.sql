-- 0003: who is asking, for the tools' SQL and for row-level security, and the record that makes
-- a write tool exactly-once. The mcp function sets `parley.caller` (the verified caller's claims
-- as JSON; unset or empty for the service) with set_config(.., true) in every tool
-- transaction, so it lasts exactly that transaction. Policies and declared SQL read it through
-- these helpers, never from an argument.

CREATE SCHEMA parley;
GRANT USAGE ON SCHEMA parley TO PUBLIC;

-- The caller's verified claims (`sub` included), or NULL for the service or outside a tool.
CREATE FUNCTION parley.caller() RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN nullif(current_setting('parley.caller', true), '')::jsonb;

-- The caller's subject (the token's `sub`), or NULL: the usual row-level security predicate is
-- `owner = parley.caller_sub()`, which no row matches without a user.
CREATE FUNCTION parley.caller_sub() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN parley.caller() ->> 'sub';

-- One claim of the caller's token as text (e.g. 'org_id'), or NULL.
CREATE FUNCTION parley.caller_claim(name text) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    RETURN parley.caller() ->> name;

GRANT EXECUTE ON FUNCTION parley.caller(), parley.caller_sub(), parley.caller_claim(text) TO PUBLIC;

-- Exactly-once writes: a write tool called with an idempotency key records its rows here in
-- the same transaction as the write; the same key again returns these rows and writes nothing.
-- `caller` is the user's subject, or '' for the service.
CREATE TABLE parley.idempotency (
    caller text NOT NULL,
    tool text NOT NULL,
    key text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    rows text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (caller, tool, key)
);

-- Each caller sees and records only its own keys, whatever role the tool runs as.
ALTER TABLE parley.idempotency ENABLE ROW LEVEL SECURITY;
ALTER TABLE parley.idempotency FORCE ROW LEVEL SECURITY;
CREATE POLICY own_keys ON parley.idempotency
    USING (caller = coalesce(parley.caller_sub(), ''))
    WITH CHECK (caller = coalesce(parley.caller_sub(), ''));

-- parley_tool_writer (0001) is the group every write role joins (`CREATE ROLE x NOLOGIN IN ROLE
-- parley_tool_writer`, as domains/tasks/schema.sql does): it may record and read back
-- idempotency keys and nothing else.
GRANT SELECT, INSERT ON parley.idempotency TO parley_tool_writer;
