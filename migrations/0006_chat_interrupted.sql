-- 0006: an assistant reply stored when the client of a streamed turn went away before it ended:
-- the turn stopped calling the model and tools and stored what it had (see
-- functions/chat/src/turn.rs). Clients and readers of the history are told so.
ALTER TABLE chat.messages ADD COLUMN interrupted boolean NOT NULL DEFAULT false;
