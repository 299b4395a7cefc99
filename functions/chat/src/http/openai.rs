//! The OpenAI-compatible surface: `GET /v1/models` and `POST /v1/chat/completions`, streamed or
//! not, so chat front ends that speak the OpenAI API (Open WebUI, LibreChat, editor plugins)
//! can talk to Parley. The assistant runs its tools itself; clients see them in the text.
//!
//! The last user message is the question. The conversation is kept server-side: its id comes
//! from the `x-parley-conversation-id` header or a `conversation_id` field and is returned in
//! the same header. Without one a new conversation starts, seeded with the earlier messages the
//! client sent, as stateless OpenAI clients expect.
//!
//! Each chart the turn showed (`show_chart`) follows the reply as a Markdown table of its rows
//! and a line saying the chart is in the page ([`chart_table`]).
//!
//! A turn that pauses for the user's approval ends in a written question naming each waiting
//! call, and a last line naming the conversation ([`bodies::approval_ref_line`]); a next user
//! message in the answer grammar ([`Said`]) becomes the typed answer. A request that names no
//! conversation continues the one its last assistant message names that way, when it is the
//! user's own, so clients that resend the whole history (Open WebUI, LibreChat) can answer.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::AppState;
use crate::auth::User;
use crate::http::bodies::{self, ChatBody, Completion, CompletionBody, Wire, WireAnswer};
use crate::http::chart_table;
use crate::http::error::ApiError;
use crate::http::ui_stream::{self, DONE, Update, frame};
use crate::turn::TurnRequest;
use crate::turn::approval::{Approval, ApprovalId};
use crate::turn::conversation::{self, ConversationId, StorageError, StoredMessage, Trace};
use crate::turn::llm::Usage;
use crate::turn::{self, Progress, TurnEvent, TurnOutcome, TurnStatus};

/// The header a client sends, and gets back, to keep talking in one conversation.
pub const CONVERSATION_HEADER: &str = "x-parley-conversation-id";

/// `GET /v1/models`: the assistant is the one model.
pub async fn models(State(state): State<AppState>, _user: User) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [model(&state)],
    }))
}

fn model(state: &AppState) -> Value {
    json!({
        "id": state.model_id,
        "object": "model",
        "created": 0,
        "owned_by": "parley",
    })
}

/// A completion request, read: the model must be this server's, and the conversation header,
/// when sent, names the conversation.
fn parse(bytes: &[u8], headers: &HeaderMap, state: &AppState) -> Result<CompletionBody, ApiError> {
    let mut body: CompletionBody = bodies::parse_json(bytes)?;
    if *body.model != *state.model_id {
        return Err(ApiError::NotFound {
            code: "model_not_found",
            message: format!(
                "the model `{}` does not exist; this server's is `{}`",
                body.model, state.model_id
            ),
        });
    }
    if let Some(header) = headers.get(CONVERSATION_HEADER) {
        let id = header.to_str().map_err(|_| ApiError::Invalid {
            code: "invalid_conversation_id",
            message: format!("`{CONVERSATION_HEADER}` must be a UUID"),
        })?;
        body.conversation_id = Some(id.to_owned());
    }
    Ok(body)
}

/// The conversation a request that names none continues: the one the reference line of its
/// last assistant message names, with its history, when it is the user's own. Any other
/// reference (malformed, unknown, another user's) is no reference, and a new conversation
/// starts as for any stateless client: answering 404 to another user's would tell whoever
/// holds a copy of the history (a chat shared or cloned in the client) whether the
/// conversation still exists, and leave that copy unable to go on. Only the assistant's
/// messages count, so a user cannot point a message elsewhere by writing a reference.
async fn referenced(
    state: &AppState,
    user: &User,
    bytes: &[u8],
) -> Result<Option<(ConversationId, Vec<StoredMessage>)>, ApiError> {
    let Some(id) = last_assistant(bytes)
        .and_then(|text| bodies::approval_ref(&text))
        .map(|r| r.conversation)
    else {
        return Ok(None);
    };
    match conversation::messages(&state.pool, &user.id, &id).await {
        Ok(history) => Ok(Some((id, history))),
        Err(StorageError::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// `POST /v1/chat/completions`. What it refuses is in OpenAI's error shape
/// ([`ApiError::into_openai_response`]): a user over their budget or rate gets 429 with code
/// `quota_exceeded`, `Retry-After`, and for a budget `x-should-retry: false`, so OpenAI's
/// clients raise it at once instead of retrying for hours.
pub async fn completions(
    state: State<AppState>,
    user: User,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    complete(state, user, headers, body)
        .await
        .unwrap_or_else(ApiError::into_openai_response)
}

async fn complete(
    State(state): State<AppState>,
    user: User,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let bytes = bodies::body_bytes(body, state.limits.max_body_bytes)?;
    let mut body = parse(&bytes, &headers, &state)?;
    let mut history = None;
    if body.conversation_id.is_none()
        && let Some((id, stored)) = referenced(&state, &user, &bytes).await?
    {
        body.conversation_id = Some(id.to_string());
        history = Some(stored);
    }
    let mut completion = Completion::try_from(Wire {
        body,
        limits: &state.limits,
    })?;
    if let Some(answer) = approval_answer(&state, &user, &completion.turn, history, &bytes).await? {
        completion.turn = answer;
    }
    let model = state.model_id.to_string();
    let tool_blocks = completion.tool_blocks.unwrap_or(state.v1_tool_blocks);
    let table_rows = state.limits.v1_table_rows;
    if completion.stream {
        let flush = state.limits.stream_flush;
        let (conversation, updates) = ui_stream::begin(state, user, completion.turn).await?;
        return Ok(streamed(
            updates,
            flush,
            conversation,
            Chunks {
                id: completion_id(),
                created: now(),
                model,
                include_usage: completion.include_usage,
                tool_blocks,
                table_rows,
                started: false,
                at_line_start: true,
                pending: Vec::new(),
            },
        ));
    }
    let response = turn::run(&state.turn_deps(), &user, completion.turn, Progress::none()).await?;
    let mut content = String::new();
    if tool_blocks {
        for trace in &response.traces {
            content.push_str(&tool_block(trace));
        }
    }
    content.push_str(&response.reply);
    let tables = chart_table::tables(&response.charts, table_rows);
    content.push_str(if content.is_empty() {
        tables.trim_start()
    } else {
        &tables
    });
    if !response.pending_approvals.is_empty() {
        if !content.is_empty() {
            content.push_str("\n\n");
        }
        content.push_str(&pause_question(&response));
    }
    let body = json!({
        "id": completion_id(),
        "object": "chat.completion",
        "created": now(),
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": finish_reason(&response),
        }],
        "usage": usage(&response.usage),
        "conversation_id": response.conversation_id,
        "parley": parley_fields(&response),
    });
    Ok(with_conversation(
        Json(body).into_response(),
        response.conversation_id,
    ))
}

/// The streamed answer: `chat.completion.chunk`s whose content is the reply as it is written,
/// with each tool call as a block once its output is in (unless `tool_blocks` is off), and
/// the charts' tables at the end.
fn streamed(
    updates: ui_stream::Updates,
    flush: std::time::Duration,
    conversation: Option<ConversationId>,
    mut chunks: Chunks,
) -> Response {
    let body = ui_stream::body(updates, flush, move |update, out| {
        chunks.encode(update, out)
    });
    let response = ui_stream::event_stream(body, false);
    match conversation {
        Some(id) => with_conversation(response, id),
        None => response,
    }
}

/// The state of one streamed completion.
struct Chunks {
    id: String,
    created: i64,
    model: String,
    include_usage: bool,
    /// Tool calls are written as `<details>` blocks (`V1_TOOL_BLOCKS`, `tool_blocks`).
    tool_blocks: bool,
    /// `V1_TABLE_ROWS`: most rows of a chart's table.
    table_rows: usize,
    /// The first chunk (the role) has gone out.
    started: bool,
    /// The content so far ends a line, so a block can start on its own.
    at_line_start: bool,
    /// Calls whose output is not in yet: id, name, arguments.
    pending: Vec<(String, String, Value)>,
}

impl Chunks {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }

    fn content(&mut self, out: &mut String, text: &str) {
        if text.is_empty() {
            return;
        }
        self.at_line_start = text.ends_with('\n');
        frame(out, &self.chunk(json!({"content": text}), None));
    }

    fn encode(&mut self, update: Update, out: &mut String) {
        if !std::mem::replace(&mut self.started, true) {
            frame(
                out,
                &self.chunk(json!({"role": "assistant", "content": ""}), None),
            );
        }
        match update {
            Update::Event(TurnEvent::TextDelta(text)) => self.content(out, &text),
            Update::Event(TurnEvent::ToolInput {
                call_id,
                name,
                args,
            }) if self.tool_blocks => self.pending.push((call_id, name, args)),
            Update::Event(TurnEvent::ToolOutput {
                call_id,
                output,
                is_error,
            }) => {
                if let Some(i) = self.pending.iter().position(|(id, ..)| *id == call_id) {
                    let (call_id, name, args) = self.pending.remove(i);
                    let mut block = String::new();
                    if !self.at_line_start {
                        block.push_str("\n\n");
                    }
                    block.push_str(&details(&call_id, &name, &args, &output, is_error));
                    self.content(out, &block);
                }
            }
            Update::Event(
                TurnEvent::Started { .. }
                | TurnEvent::StepStarted { .. }
                | TurnEvent::StepFinished
                | TurnEvent::ToolInput { .. }
                | TurnEvent::Chart { .. },
            ) => {}
            Update::Done(Ok(response)) => {
                // A retried answer is told the stored outcome, which streamed nothing.
                // (Its calls' blocks are left out, as the resumed turn's stream has no block
                // for the calls decided before it, only for those it made.)
                if response.status == TurnStatus::AlreadyDecided {
                    self.content(out, &response.reply);
                }
                let tables = chart_table::tables(&response.charts, self.table_rows);
                self.content(out, &tables);
                if !response.pending_approvals.is_empty() {
                    let mut question = String::new();
                    if !self.at_line_start {
                        question.push_str("\n\n");
                    }
                    question.push_str(&pause_question(&response));
                    self.content(out, &question);
                }
                let mut last = self.chunk(json!({}), Some(finish_reason(&response)));
                last["parley"] = parley_fields(&response);
                frame(out, &last);
                if self.include_usage {
                    let mut usage_chunk = self.chunk(json!({}), None);
                    usage_chunk["choices"] = json!([]);
                    usage_chunk["usage"] = usage(&response.usage);
                    frame(out, &usage_chunk);
                }
                out.push_str(DONE);
            }
            Update::Done(Err(e)) => {
                // OpenAI's own mid-stream error shape, which its clients raise.
                frame(
                    out,
                    &json!({"error": {"message": e.public_summary(), "type": "server_error",
                                      "param": null, "code": null}}),
                );
                tracing::error!(error = %e, "streamed completion failed");
                out.push_str(DONE);
            }
        }
    }
}

/// The conversation id goes back in the header a client sends it in.
fn with_conversation(mut response: Response, id: ConversationId) -> Response {
    if let Ok(value) = HeaderValue::from_str(&id.to_string()) {
        response.headers_mut().insert(CONVERSATION_HEADER, value);
    }
    response
}

/// A tool call as Open WebUI writes its own into a message: a `<details type="tool_calls">`
/// element whose attributes hold the arguments and result as escaped JSON, which Open WebUI
/// shows as a collapsible tool call and other clients show as a line of HTML or text.
fn tool_block(trace: &Trace) -> String {
    details(
        &trace.call_id,
        &trace.name,
        &trace.args,
        &trace.output,
        trace.is_error,
    )
}

fn details(call_id: &str, name: &str, args: &Value, output: &Value, is_error: bool) -> String {
    let result = if is_error {
        json!({"error": output})
    } else {
        output.clone()
    };
    format!(
        "<details type=\"tool_calls\" done=\"true\" id=\"{}\" name=\"{}\" arguments=\"{}\" \
         result=\"{}\">\n<summary>Tool Executed</summary>\n</details>\n",
        escape(call_id),
        escape(name),
        escape(&args.to_string()),
        escape(&json!(result.to_string()).to_string()),
    )
}

/// HTML attribute escaping, as Python's `html.escape` (which Open WebUI uses).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            c => out.push(c),
        }
    }
    out
}

fn finish_reason(response: &TurnOutcome) -> &'static str {
    if response.cut_short { "length" } else { "stop" }
}

fn usage(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    })
}

/// What only Parley knows about the answer, under one key clients ignore.
fn parley_fields(response: &TurnOutcome) -> Value {
    json!({
        "conversation_id": response.conversation_id,
        "steps": response.steps,
        "cut_short": response.cut_short,
        "interrupted": response.interrupted,
        "sources": response.sources,
        "status": response.status.code(),
        "pending_approvals": response.pending_approvals,
    })
}

/// A waiting call as the question names it.
struct Asked<'a> {
    id: ApprovalId,
    tool: &'a str,
    arguments: &'a Value,
    call_id: &'a str,
    expires_at: DateTime<Utc>,
}

/// The question a paused turn ends with: each waiting call in plain words, numbered when there
/// are several (ordered by call id, the order [`Said`]'s numbers refer to), what to answer, and
/// when the request expires (the earliest expiry, in UTC).
fn question(mut asked: Vec<Asked<'_>>) -> String {
    asked.sort_by(|a, b| a.call_id.cmp(b.call_id));
    let expires = asked
        .iter()
        .map(|a| a.expires_at)
        .min()
        .map(|at| format!(" This request expires at {} UTC.", at.format("%H:%M")))
        .unwrap_or_default();
    match asked.as_slice() {
        [one] => format!(
            "Before I go on, I need your approval to {}. Reply \"yes\" to approve or \"no\" to \
             decline (you can add a reason after \"no\").{expires}",
            action(one)
        ),
        several => {
            let mut text = format!(
                "Before I go on, I need your approval for {} actions:\n",
                several.len()
            );
            for (i, a) in several.iter().enumerate() {
                text.push_str(&format!("{}. {}\n", i + 1, action(a)));
            }
            text.push_str(&format!(
                "Reply \"yes to all\", \"no to all\" (you can add a reason after it), or one \
                 answer per number, such as \"1 yes, 2 no\".{expires}"
            ));
            text
        }
    }
}

/// `run delete_task with id = 42, reason = "done"`.
fn action(a: &Asked<'_>) -> String {
    let arguments = match a.arguments {
        Value::Object(map) if map.is_empty() => return format!("run {}", a.tool),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Null => return format!("run {}", a.tool),
        other => other.to_string(),
    };
    format!("run {} with {arguments}", a.tool)
}

/// The question a paused turn's reply ends with, and the line that leads a stateless client's
/// answer back to this conversation and binds it to this question (its first call's approval).
fn pause_question(response: &TurnOutcome) -> String {
    let asked: Vec<Asked<'_>> = response
        .pending_approvals
        .iter()
        .map(|p| Asked {
            id: p.id,
            tool: &p.tool,
            arguments: &p.arguments,
            call_id: &p.call_id,
            expires_at: p.expires_at,
        })
        .collect();
    let first = asked
        .iter()
        .min_by(|a, b| a.call_id.cmp(b.call_id))
        .map(|a| a.id);
    let question = question(asked);
    match first {
        Some(first) => format!(
            "{question}\n\n{}",
            bodies::approval_ref_line(&response.conversation_id, &first)
        ),
        None => question,
    }
}

fn asked(approvals: &[&Approval]) -> String {
    question(
        approvals
            .iter()
            .map(|a| Asked {
                id: a.id,
                tool: &a.tool,
                arguments: &a.arguments,
                call_id: &a.call_id,
                expires_at: a.expires_at,
            })
            .collect(),
    )
}

/// A user's message read as an answer to waiting calls. The grammar, case and punctuation
/// aside: `yes` or `yes to all` approves every waiting call; `no` or `no to all`, optionally
/// followed by a reason, declines every one with it; `<n> yes|no` once for each number of the
/// question (`1 yes, 2 no`) answers each. Anything else is no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Said {
    All {
        approved: bool,
        reason: Option<String>,
    },
    Each(Vec<(usize, bool)>),
}

impl Said {
    fn parse(text: &str) -> Option<Said> {
        let text = text.trim();
        let words: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        match words.as_slice() {
            ["yes"] | ["yes", "to", "all"] => Some(Said::All {
                approved: true,
                reason: None,
            }),
            ["no", ..] => {
                let rest = word(text, "no")?;
                let rest = word(rest, "to")
                    .and_then(|r| word(r, "all"))
                    .unwrap_or(rest);
                let reason = rest
                    .trim_start_matches(|c: char| !c.is_alphanumeric())
                    .trim();
                Some(Said::All {
                    approved: false,
                    reason: (!reason.is_empty()).then(|| reason.to_owned()),
                })
            }
            [first, ..] if first.chars().all(|c| c.is_ascii_digit()) => {
                if !words.len().is_multiple_of(2) {
                    return None;
                }
                words
                    .chunks(2)
                    .map(|pair| {
                        let n = pair[0].parse().ok()?;
                        match pair[1] {
                            "yes" => Some((n, true)),
                            "no" => Some((n, false)),
                            _ => None,
                        }
                    })
                    .collect::<Option<Vec<_>>>()
                    .map(Said::Each)
            }
            _ => None,
        }
    }

    /// The answers to `waiting` (in the question's order), when this answers each exactly once.
    fn answers(self, waiting: &[ApprovalId]) -> Option<Vec<WireAnswer>> {
        match self {
            Said::All { approved, reason } => Some(
                waiting
                    .iter()
                    .map(|id| WireAnswer {
                        id: id.to_string(),
                        approved,
                        reason: reason.clone(),
                    })
                    .collect(),
            ),
            Said::Each(each) => {
                let mut answers: Vec<Option<bool>> = vec![None; waiting.len()];
                for (n, approved) in each {
                    let slot = answers.get_mut(n.checked_sub(1)?)?;
                    if slot.replace(approved).is_some() {
                        return None;
                    }
                }
                waiting
                    .iter()
                    .zip(answers)
                    .map(|(id, approved)| {
                        Some(WireAnswer {
                            id: id.to_string(),
                            approved: approved?,
                            reason: None,
                        })
                    })
                    .collect()
            }
        }
    }
}

/// `text` after its first word when that is `word` (any case), else `None`.
fn word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let text = text.trim_start_matches(|c: char| !c.is_alphanumeric());
    let head = text.get(..word.len())?;
    let rest = &text[word.len()..];
    (head.eq_ignore_ascii_case(word) && !rest.starts_with(char::is_alphanumeric)).then_some(rest)
}

/// The request as an answer to a question for approval, when its last message is one
/// ([`Said`]) and it is bound to the question it answers ([`answered_calls`]): the typed
/// `approvals` answer to exactly the calls that question named. Those still waiting are
/// decided; an answer to calls decided before (the client retrying a request whose response
/// was lost, even after the turn went on and asked something else) is told the stored outcome,
/// and nothing runs. An answer bound to no question while calls wait is refused
/// ([`ApiError::Conflict`]): it cannot tell which question the user saw. Any other message goes
/// on as a message (declining what waits). `known` is the conversation's history when it was
/// read already.
async fn approval_answer(
    state: &AppState,
    user: &User,
    turn: &TurnRequest,
    known: Option<Vec<StoredMessage>>,
    bytes: &[u8],
) -> Result<Option<TurnRequest>, ApiError> {
    let Some(id) = turn.conversation() else {
        return Ok(None);
    };
    let Some(said) = Said::parse(turn.message()) else {
        return Ok(None);
    };
    let history = match known {
        Some(history) => history,
        None => match conversation::messages(&state.pool, &user.id, &id).await {
            Ok(history) => history,
            // The turn itself refuses the conversation as usual.
            Err(StorageError::NotFound) => return Ok(None),
            Err(e) => return Err(e.into()),
        },
    };
    let Some(asked) = answered_calls(&history, previous_assistant(bytes).as_deref()) else {
        if waits(&history) {
            return Err(ApiError::Conflict {
                code: "approval_question_missing",
                message: "calls in this conversation wait for approval, but this answer does not \
follow the question it answers: send the messages with the assistant's question (its last line \
included) just before the answer, or answer by id with `approvals` on POST /api/chat"
                    .to_owned(),
            });
        }
        return Ok(None);
    };
    let Some(answers) = said.answers(&asked) else {
        return Ok(None);
    };
    let body = ChatBody {
        message: None,
        approvals: Some(answers),
        context: None,
        conversation_id: Some(id.to_string()),
        tools: None,
        messages: None,
        id: None,
        trigger: None,
        message_id: None,
    };
    Ok(Some(TurnRequest::try_from(Wire {
        body,
        limits: &state.limits,
    })?))
}

/// Whether calls of the conversation's latest message wait for an answer.
fn waits(history: &[StoredMessage]) -> bool {
    history.last().is_some_and(StoredMessage::has_waiting_calls)
}

/// The calls of the question `previous` (the request's message before its answer) asked
/// about, in the question's order (by call id), whatever has been decided since: the message
/// whose first call's approval its reference line names, or, for a line of the older form, the
/// latest message whose question it quotes. `None` when it is no question of this conversation.
fn answered_calls(history: &[StoredMessage], previous: Option<&str>) -> Option<Vec<ApprovalId>> {
    let previous = previous?;
    let message = match bodies::approval_ref(previous).and_then(|r| r.question) {
        Some(first) => history
            .iter()
            .find(|m| m.approvals.iter().any(|a| a.id == first))?,
        None => {
            let said = squeeze(previous);
            history.iter().rev().find(|m| {
                !m.approvals.is_empty()
                    && said.contains(&squeeze(&asked(&m.approvals.iter().collect::<Vec<_>>())))
            })?
        }
    };
    let mut approvals: Vec<&Approval> = message.approvals.iter().collect();
    approvals.sort_by(|a, b| a.call_id.cmp(&b.call_id));
    Some(approvals.iter().map(|a| a.id).collect())
}

/// The text of the message before the last of the request, when it is the assistant's.
fn previous_assistant(bytes: &[u8]) -> Option<String> {
    let body: Value = serde_json::from_slice(bytes).ok()?;
    let messages = body["messages"].as_array()?;
    let previous = messages.len().checked_sub(2).map(|i| &messages[i])?;
    (previous["role"] == "assistant").then(|| text_of(previous))?
}

/// The text of the request's last assistant message.
fn last_assistant(bytes: &[u8]) -> Option<String> {
    let body: Value = serde_json::from_slice(bytes).ok()?;
    let messages = body["messages"].as_array()?;
    text_of(messages.iter().rev().find(|m| m["role"] == "assistant")?)
}

/// A message's content as text: a string, or its text parts a line each.
fn text_of(message: &Value) -> Option<String> {
    match &message["content"] {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// Whitespace collapsed, as clients may re-wrap the text they send back.
fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::new_v4().simple())
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_blocks_escape_their_json_and_come_back_out_of_replayed_messages() {
        let block = details(
            "call_1",
            "lad_by_ref",
            &json!({"ref": "Leeds \"LS\""}),
            &json!([{"name": "<b>"}]),
            false,
        );
        assert!(
            block.contains("arguments=\"{&quot;ref&quot;:&quot;Leeds \\&quot;LS\\&quot;&quot;}\"")
        );
        assert!(!block.contains("<b>"));
        let replayed = format!("{block}\nLeeds has 3 complaints.");
        assert_eq!(
            bodies::strip_tool_blocks(&replayed),
            "Leeds has 3 complaints."
        );
    }

    #[test]
    fn a_reference_counts_only_as_the_last_line_and_only_with_uuids() {
        let id = ConversationId::new();
        let first = ApprovalId::new();
        let line = bodies::approval_ref_line(&id, &first);
        let named = Some(bodies::ApprovalRef {
            conversation: id,
            question: Some(first),
        });
        let asked = format!("Reply \"yes\" to approve.\n\n{line}");
        assert_eq!(bodies::approval_ref(&asked), named);
        assert_eq!(bodies::approval_ref(&format!("{asked}\n  \n")), named);
        assert_eq!(bodies::approval_ref(&line), named);
        assert_eq!(bodies::approval_ref(&format!("{line}\nThen more.")), None);
        assert_eq!(bodies::approval_ref("(Parley approval ref: 42)"), None);
        assert_eq!(
            bodies::approval_ref(&format!("(Parley approval ref: {id} 42)")),
            None
        );
        assert_eq!(
            bodies::approval_ref(&format!("(Parley approval ref: {id} {first} {first})")),
            None
        );
        assert_eq!(
            bodies::approval_ref(&format!("Parley approval ref: {id}")),
            None
        );
        assert_eq!(bodies::approval_ref("Reply \"yes\" to approve."), None);
        // A line written before questions were named still names the conversation.
        assert_eq!(
            bodies::approval_ref(&format!("(Parley approval ref: {id})")),
            Some(bodies::ApprovalRef {
                conversation: id,
                question: None
            })
        );
    }

    fn all(approved: bool, reason: Option<&str>) -> Option<Said> {
        Some(Said::All {
            approved,
            reason: reason.map(str::to_owned),
        })
    }

    #[test]
    fn answers_are_read_strictly_whatever_their_case_and_punctuation() {
        assert_eq!(Said::parse("yes"), all(true, None));
        assert_eq!(Said::parse(" Yes! "), all(true, None));
        assert_eq!(Said::parse("YES, to all."), all(true, None));
        assert_eq!(Said::parse("no"), all(false, None));
        assert_eq!(Said::parse("No, keep it"), all(false, Some("keep it")));
        assert_eq!(
            Said::parse("no to all: not today"),
            all(false, Some("not today"))
        );
        assert_eq!(
            Said::parse("no, today is busy"),
            all(false, Some("today is busy"))
        );
        assert_eq!(
            Said::parse("1 yes, 2: NO"),
            Some(Said::Each(vec![(1, true), (2, false)]))
        );
        for not_an_answer in [
            "yes please",
            "yeah",
            "nope",
            "ok",
            "y",
            "1 yes, 2",
            "1 maybe",
            "yes to some",
            "Delete my passport task",
        ] {
            assert_eq!(Said::parse(not_an_answer), None, "{not_an_answer}");
        }
    }

    #[test]
    fn a_numbered_answer_must_answer_each_waiting_call_once() {
        let waiting = [ApprovalId::new(), ApprovalId::new()];
        let each = |pairs: &[(usize, bool)]| Said::Each(pairs.to_vec()).answers(&waiting);
        let answers = each(&[(2, false), (1, true)]).unwrap();
        assert_eq!(answers[0].id, waiting[0].to_string());
        assert!(answers[0].approved);
        assert!(!answers[1].approved);
        assert!(each(&[(1, true)]).is_none(), "2 unanswered");
        assert!(each(&[(1, true), (1, false), (2, true)]).is_none());
        assert!(each(&[(1, true), (3, true)]).is_none());
        assert!(each(&[(0, true), (1, true), (2, true)]).is_none());
        let declined = all(false, Some("keep them")).unwrap().answers(&waiting);
        assert!(
            declined
                .unwrap()
                .iter()
                .all(|a| !a.approved && a.reason.as_deref() == Some("keep them"))
        );
    }

    #[test]
    fn the_question_names_each_call_and_its_arguments_in_words() {
        let at = DateTime::parse_from_rfc3339("2026-11-27T14:05:09Z")
            .unwrap()
            .with_timezone(&Utc);
        let args = json!({"id": 42, "title": "Renew \"it\""});
        let one = question(vec![Asked {
            id: ApprovalId::new(),
            tool: "delete_task",
            arguments: &args,
            call_id: "call_1",
            expires_at: at,
        }]);
        assert_eq!(
            one,
            "Before I go on, I need your approval to run delete_task with id = 42, title = \
             \"Renew \\\"it\\\"\". Reply \"yes\" to approve or \"no\" to decline (you can add a \
             reason after \"no\"). This request expires at 14:05 UTC."
        );
        let none = json!({});
        let several = question(vec![
            Asked {
                id: ApprovalId::new(),
                tool: "send_mail",
                arguments: &none,
                call_id: "call_b",
                expires_at: at,
            },
            Asked {
                id: ApprovalId::new(),
                tool: "delete_task",
                arguments: &args,
                call_id: "call_a",
                expires_at: at,
            },
        ]);
        assert!(
            several.contains("for 2 actions:\n1. run delete_task with id = 42")
                && several.contains("\n2. run send_mail\n")
                && several.contains("\"1 yes, 2 no\""),
            "{several}"
        );
    }
}
