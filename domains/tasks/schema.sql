-- The tasks demo domain: a personal task list per user. Every row belongs to the caller who
-- created it (`owner`, the token's `sub`), and row-level security makes Postgres itself keep
-- users apart: a tool whose SQL forgot its owner filter still sees only the caller's rows.
-- Applied by `parley demo-data` (after `parley migrate`, whose roles and parley.caller_sub() it
-- uses); safe to run again: every statement is a no-op when its object already exists.

CREATE TABLE IF NOT EXISTS tasks (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The caller's subject. The tools also bind it from the caller, never from an argument.
    owner text NOT NULL DEFAULT parley.caller_sub() CHECK (length(owner) BETWEEN 1 AND 255),
    title text NOT NULL CHECK (char_length(title) BETWEEN 1 AND 200),
    notes text NOT NULL DEFAULT '' CHECK (char_length(notes) <= 4000),
    due_on date,
    priority text NOT NULL DEFAULT 'normal' CHECK (priority IN ('low', 'normal', 'high')),
    status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'in_progress', 'done')),
    tags text[] NOT NULL DEFAULT '{}' CHECK (cardinality(tags) <= 20),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- Set exactly when the task is done.
    completed_at timestamptz,
    CONSTRAINT tasks_completed_when_done CHECK ((status = 'done') = (completed_at IS NOT NULL))
);

-- list_tasks: the caller's tasks by status, soonest due first.
CREATE INDEX IF NOT EXISTS tasks_owner_status_due_idx ON tasks (owner, status, due_on);

-- FORCE: the table's owner is held to the policy too (only superusers bypass it).
ALTER TABLE tasks ENABLE ROW LEVEL SECURITY;
ALTER TABLE tasks FORCE ROW LEVEL SECURITY;
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_policy
                    WHERE polrelid = 'tasks'::regclass AND polname = 'own_tasks') THEN
        CREATE POLICY own_tasks ON tasks FOR ALL
            USING (owner = parley.caller_sub())
            WITH CHECK (owner = parley.caller_sub());
    END IF;
END
$$;

-- The write tools run as parley_tasks_writer (`role` in tools.toml): it may change tasks and,
-- through parley_tool_writer, record idempotency keys; nothing else. The mcp login role is
-- granted it WITH INHERIT FALSE, SET TRUE, so it writes with it only inside a write tool's
-- transaction. Roles are cluster-wide: parallel runs on other databases may race to create it.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'parley_tasks_writer') THEN
        CREATE ROLE parley_tasks_writer NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
            NOBYPASSRLS IN ROLE parley_tool_writer;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN
        NULL;
END
$$;

GRANT USAGE ON SCHEMA public TO parley_tasks_writer;
GRANT SELECT, INSERT, UPDATE, DELETE ON tasks TO parley_tasks_writer;
GRANT USAGE ON SEQUENCE tasks_id_seq TO parley_tasks_writer;
-- list_tasks reads as parley_readonly; the policy still limits it to the caller's rows.
GRANT SELECT ON tasks TO parley_readonly;
