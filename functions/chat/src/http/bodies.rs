//! Request parsing for both chat routes: the wire structs of `POST /api/chat` and
//! `POST /v1/chat/completions` become a checked [`TurnRequest`] here and nowhere else, so
//! holding one proves its message, context, conversation id and tool names were checked.
//! It picks no HTTP status: its [`RequestError`]s are mapped in `http/error.rs`.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use serde::Deserialize;
use serde_json::Value;

use crate::limits::Limits;
use crate::nul;
use crate::turn::TurnRequest;
use crate::turn::approval::{Answer, ApprovalId};
use crate::turn::conversation::ConversationId;
use crate::turn::instructions::UiContext;
use crate::turn::llm::Item;

/// Most names a request may narrow the tools to.
pub const MAX_TOOL_NAMES: usize = 64;

/// Most approvals one request may answer: as many calls as one model response may make
/// (`MAX_TOOL_CALLS_PER_STEP` is at most 128).
pub const MAX_APPROVALS: usize = 128;

/// Most earlier messages taken from a `/v1` request that names no conversation.
pub const MAX_PRIOR_MESSAGES: usize = 50;

/// Why a request was refused before any turn began.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The body is not JSON.
    #[error("the body is not valid JSON: {0}")]
    Malformed(String),
    /// JSON of the wrong shape, or values the chat does not take; `code` says which.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
    #[error("request body is larger than {limit} bytes")]
    TooLarge { limit: usize },
    /// The body could not be read (the client hung up, a broken chunked encoding).
    #[error("{0}")]
    Unreadable(String),
}

fn invalid(code: &'static str, message: impl Into<String>) -> RequestError {
    RequestError::Invalid {
        code,
        message: message.into(),
    }
}

/// A wire struct and the limits it is checked against: what [`TryFrom`] takes.
pub struct Wire<'a, T> {
    pub body: T,
    pub limits: &'a Limits,
}

/// The body of `POST /api/chat`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatBody {
    #[serde(default)]
    pub message: Option<String>,
    /// Answers to a paused turn's waiting calls, instead of a message.
    #[serde(default)]
    pub approvals: Option<Vec<WireAnswer>>,
    #[serde(default)]
    pub context: Option<Value>,
    #[serde(default)]
    pub conversation_id: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// The AI SDK's `useChat` body instead of `message` or `approvals`: its UI messages, of
    /// which only the last is read (see [`from_ui_messages`]).
    #[serde(default)]
    pub messages: Option<Vec<Value>>,
    /// The rest of `useChat`'s body: its own chat id, why it sent, and the message it means
    /// to regenerate. Accepted and ignored: the conversation is stored here.
    #[serde(default)]
    pub id: Option<Value>,
    #[serde(default)]
    pub trigger: Option<Value>,
    #[serde(default, rename = "messageId")]
    pub message_id: Option<Value>,
}

/// What a `useChat` request says, read from the last of its UI messages: a user message is
/// the question; an assistant message with tool parts in state `approval-responded` (as
/// `addToolApprovalResponse` leaves them) answers those approvals. The conversation is the one
/// our stream named in that assistant message's metadata (`conversationId`), or the latest
/// assistant message's before a user message.
struct UiTurn {
    message: Option<String>,
    approvals: Option<Vec<WireAnswer>>,
    conversation: Option<String>,
    ui_message: Option<String>,
}

fn from_ui_messages(messages: &[Value]) -> Result<UiTurn, RequestError> {
    let Some(last) = messages.last() else {
        return Err(invalid("invalid_request", "`messages` must not be empty"));
    };
    let conversation_of = |m: &Value| m["metadata"]["conversationId"].as_str().map(str::to_owned);
    let parts = last["parts"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    match last["role"].as_str() {
        Some("user") => {
            let text = parts
                .iter()
                .filter(|p| p["type"] == "text")
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            let conversation = messages
                .iter()
                .rev()
                .find(|m| m["role"] == "assistant")
                .and_then(conversation_of);
            Ok(UiTurn {
                message: Some(text),
                approvals: None,
                conversation,
                ui_message: None,
            })
        }
        Some("assistant") => {
            let answers: Vec<WireAnswer> = parts
                .iter()
                .filter(|p| p["state"] == "approval-responded")
                .map(|p| {
                    let approval = &p["approval"];
                    Ok(WireAnswer {
                        id: approval["id"].as_str().unwrap_or_default().to_owned(),
                        approved: approval["approved"].as_bool().ok_or_else(|| {
                            invalid(
                                "invalid_approvals",
                                "a part in state `approval-responded` must say `approved`",
                            )
                        })?,
                        reason: approval["reason"].as_str().map(str::to_owned),
                    })
                })
                .collect::<Result<_, RequestError>>()?;
            if answers.is_empty() {
                return Err(invalid(
                    "invalid_approvals",
                    "the last of `messages` is the assistant's and answers no approval \
                     (no tool part in state `approval-responded`)",
                ));
            }
            Ok(UiTurn {
                message: None,
                approvals: Some(answers),
                conversation: conversation_of(last),
                ui_message: last["id"].as_str().map(str::to_owned),
            })
        }
        _ => Err(invalid(
            "invalid_request",
            "the last of `messages` must be the user's or the assistant's",
        )),
    }
}

/// One answer of `approvals`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireAnswer {
    pub id: String,
    pub approved: bool,
    #[serde(default)]
    pub reason: Option<String>,
}

/// `approvals`, checked: ids are approval ids, each once; reasons fit a message.
fn checked_answers(raw: Vec<WireAnswer>, limits: &Limits) -> Result<Vec<Answer>, RequestError> {
    if raw.is_empty() || raw.len() > MAX_APPROVALS {
        return Err(invalid(
            "invalid_approvals",
            format!("`approvals` must list between 1 and {MAX_APPROVALS} answers"),
        ));
    }
    let mut answers: Vec<Answer> = Vec::with_capacity(raw.len());
    for wire in raw {
        // An id that is no UUID names no approval: the same answer as one that does not exist.
        let Some(id) = ApprovalId::parse(&wire.id) else {
            return Err(invalid(
                "invalid_approvals",
                format!(
                    "`approvals`: `{}` is not an approval id",
                    wire.id.chars().take(64).collect::<String>()
                ),
            ));
        };
        if answers.iter().any(|a| a.id == id) {
            return Err(invalid(
                "invalid_approvals",
                format!("`approvals` answers `{id}` twice"),
            ));
        }
        let reason = wire
            .reason
            .map(|r| r.trim().to_owned())
            .filter(|r| !r.is_empty());
        if let Some(r) = &reason {
            if r.contains('\0') {
                return Err(invalid(
                    "invalid_characters",
                    "a `reason` must not contain NUL characters",
                ));
            }
            if r.chars().count() > limits.max_message_chars {
                return Err(invalid(
                    "message_too_long",
                    format!(
                        "a `reason` may have at most {} characters",
                        limits.max_message_chars
                    ),
                ));
            }
        }
        answers.push(Answer {
            id,
            approved: wire.approved,
            reason,
        });
    }
    Ok(answers)
}

impl TryFrom<Wire<'_, ChatBody>> for TurnRequest {
    type Error = RequestError;

    fn try_from(Wire { mut body, limits }: Wire<'_, ChatBody>) -> Result<Self, RequestError> {
        let mut ui_message = None;
        if let Some(messages) = body.messages.take() {
            if body.message.is_some() || body.approvals.is_some() {
                return Err(invalid(
                    "invalid_request",
                    "send `messages` (as the AI SDK's `useChat` does), or a `message` or \
                     `approvals`, not both",
                ));
            }
            let ui = from_ui_messages(&messages)?;
            body.message = ui.message;
            body.approvals = ui.approvals;
            body.conversation_id = body.conversation_id.or(ui.conversation);
            ui_message = ui.ui_message;
        }
        if body.context.as_ref().is_some_and(nul::has_nul) {
            return Err(invalid(
                "invalid_characters",
                "`message` and `context` must not contain NUL characters",
            ));
        }
        let (message, approvals) = match (body.message, body.approvals) {
            (Some(message), None) => (checked_message(&message, limits)?, None),
            (None, Some(answers)) => {
                if body.conversation_id.is_none() {
                    return Err(invalid(
                        "invalid_approvals",
                        "`approvals` answer a paused turn: name its `conversation_id`",
                    ));
                }
                (String::new(), Some(checked_answers(answers, limits)?))
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "invalid_approvals",
                    "send either a `message` or `approvals`, not both: a new message denies \
                     the calls waiting for approval",
                ));
            }
            (None, None) => {
                return Err(invalid(
                    "invalid_request",
                    "missing field `message` (or `approvals`, answering a paused turn)",
                ));
            }
        };
        let context = match body.context {
            None | Some(Value::Null) => None,
            Some(Value::Object(map)) => {
                let size = Value::Object(map.clone()).to_string().len();
                if size > limits.max_context_bytes {
                    return Err(invalid(
                        "context_too_large",
                        format!(
                            "`context` is {size} bytes; the limit is {}",
                            limits.max_context_bytes
                        ),
                    ));
                }
                Some(UiContext::new(map))
            }
            Some(_) => {
                return Err(invalid(
                    "invalid_context",
                    "`context` must be a JSON object",
                ));
            }
        };
        let conversation = body
            .conversation_id
            .map(|raw| {
                ConversationId::parse(&raw).ok_or_else(|| {
                    invalid(
                        "invalid_conversation_id",
                        "`conversation_id` must be a UUID",
                    )
                })
            })
            .transpose()?;
        if let Some(tools) = &body.tools
            && (tools.is_empty() || tools.len() > MAX_TOOL_NAMES)
        {
            return Err(invalid(
                "invalid_tools",
                format!("`tools` must list between 1 and {MAX_TOOL_NAMES} tool names"),
            ));
        }
        Ok(TurnRequest {
            message,
            context,
            conversation,
            tools: body.tools,
            prior: Vec::new(),
            approvals,
            ui_message,
        })
    }
}

/// `POST /api/chat`'s body, read and checked.
pub fn chat(bytes: &[u8], limits: &Limits) -> Result<TurnRequest, RequestError> {
    TurnRequest::try_from(Wire {
        body: parse_json::<ChatBody>(bytes)?,
        limits,
    })
}

/// The body of `POST /v1/chat/completions`. Sampling settings, `user`, `tools` and the rest
/// are accepted and ignored: the assistant's own settings and tools apply.
#[derive(Debug, Deserialize)]
pub struct CompletionBody {
    pub model: String,
    pub messages: Vec<WireMessage>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// The conversation to continue; the route puts the `x-parley-conversation-id` header here.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Whether the answer starts with the tool calls as Open WebUI's `<details>` blocks;
    /// unset, `V1_TOOL_BLOCKS` decides.
    #[serde(default)]
    pub tool_blocks: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
pub struct WireMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

/// Message content: a string, or parts of which only text is understood.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Value>),
}

impl Content {
    fn text(&self) -> Result<String, RequestError> {
        match self {
            Content::Text(text) => Ok(text.clone()),
            Content::Parts(parts) => {
                let mut text = String::new();
                for part in parts {
                    match (part["type"].as_str(), part["text"].as_str()) {
                        (Some("text"), Some(t)) => {
                            if !text.is_empty() {
                                text.push('\n');
                            }
                            text.push_str(t);
                        }
                        (kind, _) => {
                            return Err(invalid(
                                "unsupported_content",
                                format!(
                                    "only text content is understood, not `{}`",
                                    kind.unwrap_or("?")
                                ),
                            ));
                        }
                    }
                }
                Ok(text)
            }
        }
    }
}

/// A checked completion request: the turn and how its answer is written.
#[derive(Debug)]
pub struct Completion {
    pub turn: TurnRequest,
    pub stream: bool,
    pub include_usage: bool,
    /// The request's `tool_blocks`, if it said.
    pub tool_blocks: Option<bool>,
}

impl TryFrom<Wire<'_, CompletionBody>> for Completion {
    type Error = RequestError;

    fn try_from(Wire { body, limits }: Wire<'_, CompletionBody>) -> Result<Self, RequestError> {
        let Some((last, earlier)) = body.messages.split_last() else {
            return Err(invalid("messages_empty", "`messages` must not be empty"));
        };
        if last.role != "user" {
            return Err(invalid(
                "last_message_not_user",
                "the last of `messages` must be the user's question",
            ));
        }
        let question = last
            .content
            .as_ref()
            .map(Content::text)
            .transpose()?
            .unwrap_or_default();
        let message = checked_message(&question, limits)?;
        let conversation = body
            .conversation_id
            .map(|raw| {
                ConversationId::parse(raw.trim()).ok_or_else(|| {
                    invalid(
                        "invalid_conversation_id",
                        "`x-parley-conversation-id` / `conversation_id` must be a UUID",
                    )
                })
            })
            .transpose()?;
        // A stored conversation has its own history; a new one starts from what the client
        // says came before.
        let prior = match conversation {
            Some(_) => Vec::new(),
            None => prior_items(earlier)?,
        };
        Ok(Completion {
            turn: TurnRequest {
                message,
                context: None,
                conversation,
                tools: None,
                prior,
                approvals: None,
                ui_message: None,
            },
            stream: body.stream,
            include_usage: body.stream_options.is_some_and(|o| o.include_usage),
            tool_blocks: body.tool_blocks,
        })
    }
}

/// Earlier user and assistant messages as the model's items; the assistant's tool blocks
/// (which the endpoint wrote) are left out, and system messages too: the assistant's own
/// instructions apply.
fn prior_items(earlier: &[WireMessage]) -> Result<Vec<Item>, RequestError> {
    let start = earlier.len().saturating_sub(MAX_PRIOR_MESSAGES);
    let mut items = Vec::new();
    for message in &earlier[start..] {
        let Some(content) = &message.content else {
            continue;
        };
        let text = content.text()?;
        if text.contains('\0') {
            return Err(invalid(
                "invalid_characters",
                "messages must not contain NUL characters",
            ));
        }
        match message.role.as_str() {
            "user" => items.push(Item::User(text)),
            "assistant" => {
                let said = strip_tool_blocks(strip_approval_ref(&text));
                if !said.trim().is_empty() {
                    items.push(Item::Assistant(said));
                }
            }
            _ => {}
        }
    }
    Ok(items)
}

/// The tool blocks the OpenAI-compatible endpoint writes (`<details type="tool_calls" ...>`
/// up to `</details>`), taken back out of an assistant message a client replays.
pub fn strip_tool_blocks(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<details type=\"tool_calls\"") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</details>") {
            Some(end) => rest = &rest[start + end + "</details>".len()..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out.trim().to_owned()
}

/// How the OpenAI-compatible endpoint's question for approval names its conversation and the
/// question itself, as its last line (`(Parley approval ref: <conversation id> <approval id>)`,
/// the approval id of the question's first call), so that a client that sends no conversation
/// id, only the whole history again, still answers in that conversation, and an answer is
/// bound to the question it follows. Lines written before the question was named
/// (`(Parley approval ref: <conversation id>)`) still name the conversation.
const APPROVAL_REF: (&str, &str) = ("(Parley approval ref: ", ")");

/// What a reference line names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalRef {
    pub conversation: ConversationId,
    /// The approval of the question's first call; `None` in a line of the older form.
    pub question: Option<ApprovalId>,
}

/// The reference line naming `conversation` and the question whose first call is `first`.
pub fn approval_ref_line(conversation: &ConversationId, first: &ApprovalId) -> String {
    format!("{}{conversation} {first}{}", APPROVAL_REF.0, APPROVAL_REF.1)
}

/// What an assistant message's last line names as [`approval_ref_line`] does (or the older
/// form did), when it is exactly such a line with UUIDs in it.
pub fn approval_ref(text: &str) -> Option<ApprovalRef> {
    let (_, line) = ref_line(text)?;
    let inner = line
        .strip_prefix(APPROVAL_REF.0)?
        .strip_suffix(APPROVAL_REF.1)?;
    let mut words = inner.split_whitespace();
    let conversation = ConversationId::parse(words.next()?)?;
    let question = match words.next() {
        None => None,
        Some(word) => Some(ApprovalId::parse(word)?),
    };
    if words.next().is_some() {
        return None;
    }
    Some(ApprovalRef {
        conversation,
        question,
    })
}

/// An assistant message without its reference line: the model is not shown it again.
fn strip_approval_ref(text: &str) -> &str {
    match ref_line(text) {
        Some((before, _)) => before,
        None => text,
    }
}

/// The text before its last line, and that line when it looks like a reference.
fn ref_line(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_end();
    let (before, line) = text.rsplit_once('\n').unwrap_or(("", text));
    let line = line.trim();
    (line.starts_with(APPROVAL_REF.0) && line.ends_with(APPROVAL_REF.1)).then_some((before, line))
}

/// The user's message, trimmed: not empty, not too long, no NUL (Postgres text cannot hold
/// one; refused here rather than failing when stored).
fn checked_message(raw: &str, limits: &Limits) -> Result<String, RequestError> {
    if raw.contains('\0') {
        return Err(invalid(
            "invalid_characters",
            "`message` and `context` must not contain NUL characters",
        ));
    }
    let message = raw.trim();
    if message.is_empty() {
        return Err(invalid("message_empty", "`message` must not be empty"));
    }
    let chars = message.chars().count();
    if chars > limits.max_message_chars {
        return Err(invalid(
            "message_too_long",
            format!(
                "`message` has {chars} characters; the limit is {}",
                limits.max_message_chars
            ),
        ));
    }
    Ok(message.to_owned())
}

/// Bad JSON is [`RequestError::Malformed`]; JSON of the wrong shape (types, unknown or missing
/// fields) is `invalid_request`, with the path of the offending field.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, RequestError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed: Result<T, _> = serde_path_to_error::deserialize(&mut de);
    let trailing = parsed.is_ok().then(|| de.end()).and_then(Result::err);
    if let Some(e) = trailing {
        return Err(RequestError::Malformed(e.to_string()));
    }
    parsed.map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_data() {
            let at = if path == "." {
                String::new()
            } else {
                format!(" at `{path}`")
            };
            invalid("invalid_request", format!("{inner}{at}"))
        } else {
            RequestError::Malformed(inner.to_string())
        }
    })
}

/// The body as axum buffered it, up to `limit` bytes (`MAX_BODY_BYTES`).
pub fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Bytes, RequestError> {
    body.map_err(|rejection| match rejection {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            RequestError::TooLarge { limit }
        }
        other => RequestError::Unreadable(other.body_text()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::error::ApiError;
    use axum::response::IntoResponse;
    use serde_json::json;
    use std::time::Duration;

    fn limits() -> Limits {
        Limits {
            history: 20,
            replay_chars: 2000,
            max_steps: 8,
            max_calls_per_step: 16,
            turn_deadline: Duration::from_secs(25),
            stream_turn_deadline: Duration::from_secs(300),
            stream_flush: Duration::from_millis(20),
            max_message_chars: 10,
            max_body_bytes: 1024,
            max_context_bytes: 64,
            turn_lock_wait: Duration::from_secs(1),
            turn_lease: Duration::from_secs(30),
            mcp_timeout: Duration::from_secs(1),
            page_max: 100,
            chart_max_rows: 5000,
            chart_max_spec_bytes: 1024 * 1024,
            v1_table_rows: 50,
        }
    }

    fn error(body: &str) -> (u16, &'static str) {
        let e = chat(body.as_bytes(), &limits()).unwrap_err();
        let code = match &e {
            RequestError::Invalid { code, .. } => *code,
            RequestError::Malformed(_) => "invalid_json",
            _ => "other",
        };
        (ApiError::from(e).into_response().status().as_u16(), code)
    }

    #[test]
    fn malformed_json_is_400() {
        assert_eq!(error("{\"message\":"), (400, "invalid_json"));
        assert_eq!(
            error("{\"message\":\"hi\"} trailing"),
            (400, "invalid_json")
        );
    }

    #[test]
    fn wrong_shapes_are_422() {
        assert_eq!(error(r#"{"message": 5}"#), (422, "invalid_request"));
        assert_eq!(
            error(r#"{"message": "hi", "colour": "red"}"#),
            (422, "invalid_request")
        );
        assert_eq!(error(r#"{}"#), (422, "invalid_request"));
        assert_eq!(
            error(r#"{"message": "hi", "context": [1]}"#),
            (422, "invalid_context")
        );
        assert_eq!(
            error(r#"{"message": "hi", "conversation_id": "nope"}"#),
            (422, "invalid_conversation_id")
        );
        assert_eq!(
            error(r#"{"message": "hi", "tools": []}"#),
            (422, "invalid_tools")
        );
        assert_eq!(
            error(r#"{"message": "a\u0000b"}"#),
            (422, "invalid_characters")
        );
        assert_eq!(
            error(r#"{"message": "hi", "context": {"x": ["\u0000"]}}"#),
            (422, "invalid_characters")
        );
    }

    #[test]
    fn message_bounds_are_enforced_after_trimming() {
        assert_eq!(error(r#"{"message": "   "}"#), (422, "message_empty"));
        assert_eq!(
            error(r#"{"message": "eleven chars"}"#),
            (422, "message_too_long")
        );
        let ok = chat(br#"{"message": "  ten chars!  "}"#, &limits()).unwrap();
        assert_eq!(ok.message(), "ten chars!");
    }

    #[test]
    fn approvals_answer_a_named_conversation_instead_of_a_message() {
        let id = "0b9f8c1e-2d3a-4b5c-8d7e-6f5a4b3c2d1e";
        let conversation = "6f1c5d2e-8c7b-4f2a-9d1e-3b5a7c9e1f20";
        let r = chat(
            format!(
                r#"{{"conversation_id": "{conversation}", "approvals": [{{"id": "{id}", "approved": false, "reason": " keep it "}}]}}"#
            )
            .as_bytes(),
            &limits(),
        )
        .unwrap();
        let answers = r.approvals().unwrap();
        assert_eq!(answers[0].id.to_string(), id);
        assert!(!answers[0].approved);
        assert_eq!(answers[0].reason.as_deref(), Some("keep it"));
        assert_eq!(r.message(), "");

        let refused = |body: String| error(&body);
        let one = format!(r#"[{{"id": "{id}", "approved": true}}]"#);
        assert_eq!(
            refused(format!(r#"{{"approvals": {one}}}"#)),
            (422, "invalid_approvals"),
            "no conversation"
        );
        assert_eq!(
            refused(format!(
                r#"{{"message": "hi", "conversation_id": "{conversation}", "approvals": {one}}}"#
            )),
            (422, "invalid_approvals"),
            "both"
        );
        assert_eq!(
            refused(format!(
                r#"{{"conversation_id": "{conversation}", "approvals": []}}"#
            )),
            (422, "invalid_approvals")
        );
        assert_eq!(
            refused(format!(
                r#"{{"conversation_id": "{conversation}", "approvals": [{{"id": "x", "approved": true}}]}}"#
            )),
            (422, "invalid_approvals")
        );
        let twice =
            format!(r#"[{{"id": "{id}", "approved": true}}, {{"id": "{id}", "approved": false}}]"#);
        assert_eq!(
            refused(format!(
                r#"{{"conversation_id": "{conversation}", "approvals": {twice}}}"#
            )),
            (422, "invalid_approvals")
        );
        assert_eq!(
            refused(format!(
                r#"{{"conversation_id": "{conversation}", "approvals": [{{"id": "{id}"}}]}}"#
            )),
            (422, "invalid_request"),
            "`approved` is required"
        );
    }

    #[test]
    fn use_chats_messages_become_a_question_or_the_answers_of_approval_responded_parts() {
        let id = "0b9f8c1e-2d3a-4b5c-8d7e-6f5a4b3c2d1e";
        let conversation = "6f1c5d2e-8c7b-4f2a-9d1e-3b5a7c9e1f20";
        let paused = json!({"id": "msg_1", "role": "assistant",
            "metadata": {"conversationId": conversation},
            "parts": [{"type": "step-start"},
                      {"type": "dynamic-tool", "toolCallId": "c1", "state": "approval-responded",
                       "approval": {"id": id, "approved": false, "reason": "no"}},
                      {"type": "dynamic-tool", "toolCallId": "c0", "state": "output-available"}]});
        let question =
            json!({"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]});
        let body = |messages: Value| {
            json!({"id": "chat", "trigger": "submit-message", "messages": messages}).to_string()
        };

        let r = chat(body(json!([question, paused])).as_bytes(), &limits()).unwrap();
        let answers = r.approvals().unwrap();
        assert_eq!(answers.len(), 1);
        assert_eq!(answers[0].id.to_string(), id);
        assert!(!answers[0].approved);
        assert_eq!(answers[0].reason.as_deref(), Some("no"));
        assert_eq!(r.conversation().unwrap().to_string(), conversation);
        assert_eq!(r.ui_message(), Some("msg_1"));

        let r = chat(
            body(json!([question, paused, question])).as_bytes(),
            &limits(),
        )
        .unwrap();
        assert_eq!(r.message(), "hi");
        assert!(r.approvals().is_none());
        assert_eq!(r.conversation().unwrap().to_string(), conversation);
        let r = chat(body(json!([question])).as_bytes(), &limits()).unwrap();
        assert!(r.conversation().is_none(), "a new conversation");

        let mut unanswered = paused.clone();
        unanswered["parts"][1]["state"] = json!("approval-requested");
        assert_eq!(
            error(&body(json!([question, unanswered]))),
            (422, "invalid_approvals")
        );
        let mut nameless = paused.clone();
        nameless["metadata"] = json!({});
        assert_eq!(
            error(&body(json!([question, nameless]))),
            (422, "invalid_approvals"),
            "no conversation to resume"
        );
        assert_eq!(error(&body(json!([]))), (422, "invalid_request"));
        assert_eq!(
            error(&json!({"message": "hi", "messages": [question]}).to_string()),
            (422, "invalid_request")
        );
    }

    #[test]
    fn a_valid_request_becomes_a_turn_request() {
        let r = chat(
            br#"{"message": " hi ", "context": {"district": "Leeds"}, "conversation_id": "6f1c5d2e-8c7b-4f2a-9d1e-3b5a7c9e1f20", "tools": ["lad_by_ref"]}"#,
            &limits(),
        )
        .unwrap();
        assert_eq!(r.message(), "hi");
        assert!(r.context().is_some());
        assert!(r.conversation().is_some());
        assert_eq!(r.tools().unwrap(), ["lad_by_ref"]);
    }

    #[test]
    fn an_oversize_context_is_refused() {
        let big = format!(
            r#"{{"message": "hi", "context": {{"note": "{}"}}}}"#,
            "x".repeat(100)
        );
        assert_eq!(error(&big), (422, "context_too_large"));
    }

    #[test]
    fn a_completion_without_a_conversation_keeps_the_earlier_messages_minus_tool_blocks() {
        let body: CompletionBody = serde_json::from_value(json!({
            "model": "parley",
            "messages": [
                {"role": "system", "content": "ignored"},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "<details type=\"tool_calls\" id=\"c\">\n</details>\nsaid"},
                {"role": "user", "content": [{"type": "text", "text": "next"}]},
            ],
            "tool_blocks": false,
        }))
        .unwrap();
        let mut c = Completion::try_from(Wire {
            body,
            limits: &limits(),
        })
        .unwrap();
        assert_eq!(c.turn.message(), "next");
        assert_eq!(c.tool_blocks, Some(false));
        assert_eq!(
            c.turn.take_prior(),
            [Item::User("first".into()), Item::Assistant("said".into())]
        );
    }

    #[test]
    fn only_text_content_is_understood() {
        let parts = Content::Parts(vec![
            json!({"type": "text", "text": "a"}),
            json!({"type": "text", "text": "b"}),
        ]);
        assert_eq!(parts.text().unwrap(), "a\nb");
        let image = Content::Parts(vec![json!({"type": "image_url", "image_url": {}})]);
        assert!(image.text().is_err());
    }
}
