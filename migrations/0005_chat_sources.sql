-- 0005: the sources an assistant reply drew on: [{id, title, uri, snippet, score, tool, call_id,
-- cited}], cited ones first in the order the reply cites them (see functions/chat/src/sources.rs).
ALTER TABLE chat.messages ADD COLUMN sources jsonb NOT NULL DEFAULT '[]'::jsonb;
