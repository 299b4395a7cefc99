//! Renaming and deleting a conversation (`PATCH`/`DELETE /api/conversations/{id}`): the
//! owner's only (another user's is as missing as one that never existed), and a conversation
//! whose turn is running is never deleted from under it.

use deadpool_postgres::Pool;
use tokio_postgres::types::Type;

use super::{ConversationId, ConversationSummary, StorageError};
use crate::auth::UserId;

/// The longest title a rename may set, in characters: a line in the conversation list. (The
/// automatic title, the start of the first message, is at most 81.)
pub const MAX_TITLE_CHARS: usize = 200;

/// A title as a rename stores it: trimmed, 1 to [`MAX_TITLE_CHARS`] characters, no control
/// characters (a title is one line); `None` when `raw` is not one.
pub fn title(raw: &str) -> Option<String> {
    let title = raw.trim();
    let chars = title.chars().count();
    ((1..=MAX_TITLE_CHARS).contains(&chars) && !title.chars().any(char::is_control))
        .then(|| title.to_owned())
}

/// Sets the title of one of the owner's conversations. Its place in the list (`updated_at`)
/// stays: a rename is not a new message.
pub async fn rename(
    pool: &Pool,
    owner: &UserId,
    id: &ConversationId,
    title: &str,
) -> Result<ConversationSummary, StorageError> {
    let conn = pool.get().await?;
    let row = conn
        .query_typed_opt(
            "UPDATE chat.conversations SET title = $3 WHERE id = $1 AND owner = $2
             RETURNING id, title, message_count, created_at, updated_at",
            &[
                (id.as_uuid(), Type::UUID),
                (&owner.as_str(), Type::TEXT),
                (&title, Type::TEXT),
            ],
        )
        .await?
        .ok_or(StorageError::NotFound)?;
    Ok(ConversationSummary {
        id: ConversationId(row.get(0)),
        title: row.get(1),
        message_count: row.get(2),
        created_at: row.get(3),
        updated_at: row.get(4),
    })
}

/// Deletes one of the owner's conversations and its messages (`ON DELETE CASCADE`), unless a
/// turn holds its lease: that turn would then store its reply into nothing and its client be
/// told it was lost, so the caller is told `Busy` and may delete once the turn has finished.
pub async fn delete(pool: &Pool, owner: &UserId, id: &ConversationId) -> Result<(), StorageError> {
    let mut conn = pool.get().await?;
    let tx = conn.transaction().await?;
    // The row lock makes a turn that begins meanwhile wait, then find nothing to claim.
    let busy: bool = tx
        .query_typed_opt(
            "SELECT coalesce(turn_lease_until > now(), false) FROM chat.conversations
             WHERE id = $1 AND owner = $2 FOR UPDATE",
            &[(id.as_uuid(), Type::UUID), (&owner.as_str(), Type::TEXT)],
        )
        .await?
        .ok_or(StorageError::NotFound)?
        .get(0);
    if busy {
        return Err(StorageError::Busy);
    }
    tx.execute_typed(
        "DELETE FROM chat.conversations WHERE id = $1",
        &[(id.as_uuid(), Type::UUID)],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_one_trimmed_line_of_bounded_length() {
        assert_eq!(title("  Kent districts "), Some("Kent districts".into()));
        assert_eq!(title("   "), None);
        assert_eq!(title("two\nlines"), None);
        assert_eq!(
            title(&"é".repeat(MAX_TITLE_CHARS)).map(|t| t.chars().count()),
            Some(200)
        );
        assert_eq!(title(&"é".repeat(MAX_TITLE_CHARS + 1)), None);
    }
}
