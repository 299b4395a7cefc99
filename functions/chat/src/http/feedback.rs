//! `PUT /api/conversations/{id}/messages/{seq}/feedback`: a thumbs up or down, with an
//! optional comment, on an assistant message of the caller's own conversation; `"rating":
//! null` clears it. The body is parsed here into a [`Change`] (parse, don't validate); storage
//! is [`crate::turn::conversation::feedback`]'s. Another user's conversation looks missing (404),
//! as everywhere in this API.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use parley_core::config::{ConfigError, Env};
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::AppState;
use super::bodies::{body_bytes, parse_json};
use super::error::ApiError;
use crate::auth::User;
use crate::turn::conversation::feedback::{
    self, COMMENT_CEILING_CHARS, Change, Comment, CommentError, Outcome, Rating,
};
use crate::turn::conversation::{ConversationId, StorageError};

/// `FEEDBACK_MAX_COMMENT_CHARS`'s default: a paragraph or two on what went wrong.
pub const DEFAULT_MAX_COMMENT_CHARS: u64 = 2_000;

/// `FEEDBACK_*` settings (see docs/settings.md).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `FEEDBACK_MAX_COMMENT_CHARS`: the longest comment kept, in characters (1 to 10000,
    /// the column's own ceiling).
    pub max_comment_chars: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_comment_chars: DEFAULT_MAX_COMMENT_CHARS as usize,
        }
    }
}

impl Settings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let max = env.limit(
            "FEEDBACK_MAX_COMMENT_CHARS",
            DEFAULT_MAX_COMMENT_CHARS,
            1..=COMMENT_CEILING_CHARS as u64,
        )?;
        Ok(Self {
            max_comment_chars: max as usize,
        })
    }
}

/// The body as sent: `rating` must be present (`up`, `down`, or `null` to clear), so a body
/// that forgot it never clears a rating by accident.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    #[serde(default, deserialize_with = "present")]
    rating: Option<Option<Rating>>,
    comment: Option<String>,
}

/// `Some(value)` for a field that is there, null included; a missing one stays `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<Rating>>, D::Error> {
    Option::<Rating>::deserialize(d).map(Some)
}

fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::Invalid {
        code,
        message: message.into(),
    }
}

/// The body as a [`Change`], or the 422 that names what is wrong.
fn change(body: Body, max_comment_chars: usize) -> Result<Change, ApiError> {
    let comment = body
        .comment
        .as_deref()
        .map(|c| Comment::parse(c, max_comment_chars))
        .transpose()
        .map_err(|e| match e {
            CommentError::TooLong { .. } => invalid("comment_too_long", e.to_string()),
            CommentError::ControlCharacter => invalid("invalid_comment", e.to_string()),
        })?
        .flatten();
    match body.rating {
        None => Err(invalid(
            "invalid_request",
            "`rating` is required: \"up\", \"down\", or null to clear the feedback",
        )),
        Some(Some(rating)) => Ok(Change::Give { rating, comment }),
        Some(None) if comment.is_some() => Err(invalid(
            "invalid_request",
            "`comment` needs a `rating`: a cleared feedback keeps no comment",
        )),
        Some(None) => Ok(Change::Clear),
    }
}

/// The message number of the path: a positive integer, else no such message.
fn seq(raw: &str) -> Result<i32, ApiError> {
    raw.parse::<i32>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| no_message(raw))
}

fn no_message(seq: &str) -> ApiError {
    ApiError::NotFound {
        code: "message_not_found",
        message: format!("this conversation has no message {seq}"),
    }
}

/// 200 with `{conversation_id, seq, feedback}`: the feedback as stored, `null` once cleared.
pub async fn put(
    State(state): State<AppState>,
    User { id: user, .. }: User,
    Path((id, raw_seq)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = ConversationId::parse(&id).ok_or(StorageError::NotFound)?;
    let seq = seq(&raw_seq)?;
    let bytes = body_bytes(body, state.limits.max_body_bytes)?;
    let body: Body = parse_json(&bytes)?;
    let change = change(body, state.feedback.max_comment_chars)?;
    let stored = match feedback::change(&state.pool, &user, &id, seq, &change).await? {
        Outcome::Stored(f) => Some(f),
        Outcome::Cleared => None,
        Outcome::NoMessage => return Err(no_message(&raw_seq)),
        Outcome::NotAnAnswer => {
            return Err(invalid(
                "not_an_answer",
                format!(
                    "message {seq} is the question, not an answer: feedback is given on the \
                     assistant's messages"
                ),
            ));
        }
    };
    Ok(Json(
        json!({"conversation_id": id, "seq": seq, "feedback": stored}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(body: &str) -> Result<Change, String> {
        let body: Body = parse_json(body.as_bytes()).map_err(|e| e.to_string())?;
        change(body, 10).map_err(|e| e.to_string())
    }

    #[test]
    fn a_body_becomes_a_rating_with_its_trimmed_comment_or_a_clear() {
        assert_eq!(
            parsed(r#"{"rating": "down", "comment": " wrong year "}"#),
            Ok(Change::Give {
                rating: Rating::Down,
                comment: Comment::parse("wrong year", 10).unwrap()
            })
        );
        assert_eq!(
            parsed(r#"{"rating": "up", "comment": "  "}"#),
            Ok(Change::Give {
                rating: Rating::Up,
                comment: None
            })
        );
        assert_eq!(parsed(r#"{"rating": null}"#), Ok(Change::Clear));
    }

    #[test]
    fn a_missing_or_unknown_rating_a_stray_comment_and_a_long_one_are_refused_by_name() {
        let err = parsed(r#"{"rating": "meh"}"#).unwrap_err();
        assert!(err.contains("rating") && err.contains("up"), "{err}");
        assert!(
            parsed(r#"{"comment": "x"}"#)
                .unwrap_err()
                .contains("`rating` is required")
        );
        assert!(
            parsed(r#"{"rating": null, "comment": "x"}"#)
                .unwrap_err()
                .contains("`comment` needs a `rating`")
        );
        let err = parsed(r#"{"rating": "up", "comment": "eleven char"}"#).unwrap_err();
        assert!(err.contains("FEEDBACK_MAX_COMMENT_CHARS"), "{err}");
        assert!(
            parsed(r#"{"rating": "up", "stars": 5}"#)
                .unwrap_err()
                .contains("stars")
        );
    }

    #[test]
    fn a_message_number_is_a_positive_integer() {
        assert_eq!(seq("2").unwrap(), 2);
        for bad in ["0", "-1", "x", "2.5", "99999999999"] {
            assert!(seq(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_comment_limit_is_a_setting_bounded_by_the_column() {
        let read =
            |v: &str| Settings::from_env(&Env::from_pairs([("FEEDBACK_MAX_COMMENT_CHARS", v)]));
        assert_eq!(read("500").unwrap().max_comment_chars, 500);
        let err = read("10001").unwrap_err().to_string();
        assert!(err.contains("FEEDBACK_MAX_COMMENT_CHARS"), "{err}");
        assert!(read("0").is_err());
        assert_eq!(
            Settings::from_env(&Env::from_pairs(Vec::<(&str, &str)>::new()))
                .unwrap()
                .max_comment_chars,
            2_000
        );
    }
}
