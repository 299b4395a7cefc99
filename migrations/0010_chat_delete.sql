-- 0010: people may delete their conversations (DELETE /api/conversations/{id}); the messages
-- go with them by the foreign key's ON DELETE CASCADE (0002).
GRANT DELETE ON chat.conversations, chat.messages TO parley_chat_writer;
