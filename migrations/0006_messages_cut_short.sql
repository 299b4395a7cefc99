-- 0006: an assistant reply stored when its turn reached TURN_DEADLINE_MS holds only what the
-- turn had by then; clients and readers of the history are told so by this flag.
ALTER TABLE chat.messages ADD COLUMN cut_short boolean NOT NULL DEFAULT false;
