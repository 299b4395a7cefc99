//! Feedback on answers (`chat.feedback`, migration 0030): a thumbs up or down, with an optional
//! comment, that a conversation's owner gives one of its assistant messages, changes or clears.
//! Typed values only ([`Rating`], [`Comment`]): the edge parses the request into them. Each
//! change is one statement that checks the owner and the message's role as it writes, so
//! another user's conversation, a missing message and a question are told apart from a stored
//! rating without a second round trip, and never half-written.

use chrono::{DateTime, Utc};
use deadpool_postgres::{Object, Pool};
use parley_core::db::retry_once_if_stale;
use serde::{Deserialize, Serialize};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};

use super::{Attempt, ConversationId, StorageError};
use crate::auth::UserId;

/// The largest comment the schema holds (`chat.feedback.comment`): the ceiling of
/// `FEEDBACK_MAX_COMMENT_CHARS`.
pub const COMMENT_CEILING_CHARS: usize = 10_000;

/// Thumbs up or down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rating {
    Up,
    Down,
}

impl Rating {
    /// As stored and sent: `up` or `down`.
    pub fn as_str(self) -> &'static str {
        match self {
            Rating::Up => "up",
            Rating::Down => "down",
        }
    }
}

/// A comment worth storing: trimmed, not empty, at most the limit it was made under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment(String);

/// Why a comment was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommentError {
    #[error(
        "`comment` is {chars} characters; at most {limit} are kept (FEEDBACK_MAX_COMMENT_CHARS)"
    )]
    TooLong { chars: usize, limit: usize },
    #[error("`comment` holds a control character other than a line break or tab")]
    ControlCharacter,
}

impl Comment {
    /// `raw` trimmed: `None` when nothing is left (an empty box is no comment), refused when
    /// longer than `limit` characters or holding a control character (NUL included: Postgres
    /// text cannot hold it) other than line breaks and tabs.
    pub fn parse(raw: &str, limit: usize) -> Result<Option<Comment>, CommentError> {
        let text = raw.trim();
        if text.is_empty() {
            return Ok(None);
        }
        let chars = text.chars().count();
        if chars > limit {
            return Err(CommentError::TooLong { chars, limit });
        }
        if text
            .chars()
            .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
        {
            return Err(CommentError::ControlCharacter);
        }
        Ok(Some(Comment(text.to_owned())))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a person asks for: a rating (with its comment), or none any more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Give {
        rating: Rating,
        comment: Option<Comment>,
    },
    Clear,
}

/// Feedback as stored, as the PUT answers it and the messages endpoint shows it on its message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Feedback {
    pub rating: Rating,
    pub comment: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What became of a [`Change`].
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Given or changed: the feedback as stored now.
    Stored(Feedback),
    /// Cleared (whether or not there was any).
    Cleared,
    /// The conversation has no message with this number.
    NoMessage,
    /// The message is the person's own (a question), not an answer.
    NotAnAnswer,
}

/// The message (`$2`) of an owned conversation (`$1`, owner `$3`): no row when the
/// conversation is missing or someone else's, a row with a NULL role when the message is.
macro_rules! target {
    () => {
        "target AS (
           SELECT m.role FROM chat.conversations c
           LEFT JOIN chat.messages m ON m.conversation_id = c.id AND m.seq = $2
           WHERE c.id = $1 AND c.owner = $3)"
    };
}

/// Gives or changes the rating (`$4`) and comment (`$5`) of an answer; a repeat stores the
/// same, so it is safe to send again on a connection found dead.
const GIVE: &str = concat!(
    "WITH ",
    target!(),
    ",
     stored AS (
       INSERT INTO chat.feedback (conversation_id, seq, owner, rating, comment)
       SELECT $1, $2, $3, $4, $5 FROM target WHERE role = 'assistant'
       ON CONFLICT (conversation_id, seq) DO UPDATE
         SET rating = EXCLUDED.rating, comment = EXCLUDED.comment, updated_at = now()
       RETURNING rating, comment, created_at, updated_at)
     SELECT t.role, s.rating, s.comment, s.created_at, s.updated_at
     FROM target t LEFT JOIN stored s ON true"
);

/// Clears an answer's feedback.
const CLEAR: &str = concat!(
    "WITH ",
    target!(),
    ",
     removed AS (
       DELETE FROM chat.feedback f USING target t
       WHERE t.role = 'assistant' AND f.conversation_id = $1 AND f.seq = $2
       RETURNING 1)
     SELECT t.role, NULL::text AS rating FROM target t"
);

/// Applies `change` to message `seq` of `owner`'s conversation `id`.
/// [`StorageError::NotFound`] when the conversation is missing or someone else's (the two
/// look the same, as everywhere in this API).
pub async fn change(
    pool: &Pool,
    owner: &UserId,
    id: &ConversationId,
    seq: i32,
    change: &Change,
) -> Result<Outcome, StorageError> {
    let (sql, rating, comment) = match change {
        Change::Give { rating, comment } => (
            GIVE,
            Some(rating.as_str()),
            comment.as_ref().map(Comment::as_str),
        ),
        Change::Clear => (CLEAR, None, None),
    };
    let owner = owner.as_str();
    let params: Vec<(&(dyn ToSql + Sync), Type)> = match change {
        Change::Give { .. } => vec![
            (id.as_uuid(), Type::UUID),
            (&seq, Type::INT4),
            (&owner, Type::TEXT),
            (&rating, Type::TEXT),
            (&comment, Type::TEXT),
        ],
        Change::Clear => vec![
            (id.as_uuid(), Type::UUID),
            (&seq, Type::INT4),
            (&owner, Type::TEXT),
        ],
    };
    let row = retry_once_if_stale!(pool, |conn| run(&conn, sql, &params).await)
        .map_err(Attempt::into_error)?;
    // The conversation went between the check and the write (deleted meanwhile).
    let Some(Some(row)) = row else {
        return Err(StorageError::NotFound);
    };
    let role: Option<String> = row.get("role");
    match role.as_deref() {
        None => return Ok(Outcome::NoMessage),
        Some("assistant") => {}
        Some(_) => return Ok(Outcome::NotAnAnswer),
    }
    let rating: Option<String> = row.get("rating");
    let Some(rating) = rating else {
        return Ok(Outcome::Cleared);
    };
    let rating = match rating.as_str() {
        "up" => Rating::Up,
        "down" => Rating::Down,
        other => {
            return Err(StorageError::Failed(format!(
                "stored feedback has rating {other:?}"
            )));
        }
    };
    Ok(Outcome::Stored(Feedback {
        rating,
        comment: row.get("comment"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
    }))
}

/// One attempt: `None` for a foreign-key violation (the message went while it was written),
/// else the statement's row (`None` when the conversation is not the owner's).
async fn run(
    conn: &Object,
    sql: &str,
    params: &[(&(dyn ToSql + Sync), Type)],
) -> Result<Option<Option<tokio_postgres::Row>>, Attempt> {
    match conn.query_typed_opt(sql, params).await {
        Ok(row) => Ok(Some(row)),
        Err(e) if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comment_is_trimmed_an_empty_one_is_none_and_a_long_one_is_refused_by_characters() {
        assert_eq!(Comment::parse("  \n ", 10), Ok(None));
        assert_eq!(
            Comment::parse("  wrong table\n", 20)
                .unwrap()
                .unwrap()
                .as_str(),
            "wrong table"
        );
        // Characters, not bytes: ten accented letters fit a limit of ten.
        assert!(Comment::parse(&"é".repeat(10), 10).unwrap().is_some());
        assert_eq!(
            Comment::parse(&"é".repeat(11), 10),
            Err(CommentError::TooLong {
                chars: 11,
                limit: 10
            })
        );
        assert_eq!(
            Comment::parse("a\u{0}b", 10),
            Err(CommentError::ControlCharacter)
        );
        assert!(
            Comment::parse("line one\n\tline two", 30)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn ratings_are_up_or_down_in_lowercase() {
        assert_eq!(serde_json::to_value(Rating::Down).unwrap(), "down");
        assert_eq!(
            serde_json::from_value::<Rating>(serde_json::json!("up")).unwrap(),
            Rating::Up
        );
        assert!(serde_json::from_value::<Rating>(serde_json::json!("meh")).is_err());
    }
}
