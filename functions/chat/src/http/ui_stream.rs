//! A streamed turn: `POST /api/chat` with `Accept: text/event-stream` answers with the turn's
//! [`TurnEvent`]s as they happen, as server-sent events in the AI SDK's UI message stream
//! protocol (v1), so a front end built on the AI SDK's `useChat` reads it unchanged.
//!
//! The turn runs in its own task and the response body holds the receiving end of its events:
//! a client that goes away drops the body, which is how the turn learns to stop.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::task::Poll;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::future::{BoxFuture, FutureExt};
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tracing::Instrument;

use super::AppState;
use crate::auth::User;
use crate::http::error::ApiError;
use crate::turn::TurnRequest;
use crate::turn::conversation::ConversationId;
use crate::turn::sources::Source;
use crate::turn::{self, Progress, TurnEvent, TurnOutcome, TurnStatus};

/// Most updates written to the client in one go.
pub const READY_CHUNK: usize = 64;

/// The header that names the protocol, and its version.
pub const PROTOCOL_HEADER: &str = "x-vercel-ai-ui-message-stream";

/// Whether the request asks for the stream (`Accept: text/event-stream`).
pub fn wanted(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
        })
}

/// A streamed turn as it happens: its events, then its outcome. Read by [`body`], which says
/// how often text may go out.
pub struct Updates {
    /// The first event, read by [`begin`] for the conversation's id.
    first: Option<TurnEvent>,
    /// The turn's other events, once given the flush interval; `None` when it ended before
    /// its first event.
    events: Option<Box<dyn FnOnce(Duration) -> BoxStream<'static, TurnEvent> + Send>>,
    done: BoxFuture<'static, Result<TurnOutcome, ApiError>>,
}

pub enum Update {
    Event(TurnEvent),
    Done(Result<TurnOutcome, ApiError>),
}

/// Starts the turn in its own task and returns its updates once it has begun (its
/// conversation claimed and the question stored). What fails before that (an unknown
/// conversation, one busy with another turn, an unknown tool) is returned as the error, so the
/// route answers with its status as the JSON route would; what fails after arrives as
/// [`Update::Done`]. Dropping the updates tells the turn its client went away. The
/// conversation's id, which the first event carries, comes with them.
pub async fn begin(
    state: AppState,
    user: User,
    request: TurnRequest,
) -> Result<(Option<ConversationId>, Updates), ApiError> {
    let (progress, mut events) = Progress::channel();
    let (done_tx, done_rx) = oneshot::channel();
    tokio::spawn(
        async move {
            let outcome = turn::run(&state.turn_deps(), &user, request, progress)
                .await
                .map_err(ApiError::from);
            let _ = done_tx.send(outcome);
        }
        .instrument(tracing::Span::current()),
    );
    let done = async move {
        done_rx.await.unwrap_or_else(|_| {
            Err(ApiError::Internal(
                "the turn's task ended without an outcome".into(),
            ))
        })
    };
    let Some(first) = events.next().await else {
        // The turn ended before its first event: it never began.
        let response = done.await?;
        let id = response.conversation_id;
        let updates = Updates {
            first: None,
            events: None,
            done: std::future::ready(Ok(response)).boxed(),
        };
        return Ok((Some(id), updates));
    };
    let conversation = match &first {
        TurnEvent::Started {
            conversation_id, ..
        } => Some(*conversation_id),
        _ => None,
    };
    let updates = Updates {
        first: Some(first),
        events: Some(Box::new(move |flush| events.every(flush).boxed())),
        done: done.boxed(),
    };
    Ok((conversation, updates))
}

/// The response headers of an event stream; `protocol` adds the UI message stream's own.
pub fn event_stream(body: Body, protocol: bool) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Proxies (nginx and its kin) would otherwise buffer the stream.
    headers.insert(
        header::HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    if protocol {
        headers.insert(
            header::HeaderName::from_static(PROTOCOL_HEADER),
            HeaderValue::from_static("v1"),
        );
    }
    response
}

/// The body of an event stream: `write` appends each update's frames. Updates that are ready
/// together go out in one write. Text goes out at most once per `flush` (`STREAM_FLUSH_MS`,
/// held by the turn's events until then: `Progress::channel`): a model writes a word at a
/// time, and a write per word cost the chat more CPU than the rest of the turn; other updates
/// (steps, tool calls, the end) go out as they come, after the text before them.
pub fn body(
    updates: Updates,
    flush: Duration,
    mut write: impl FnMut(Update, &mut String) + Send + 'static,
) -> Body {
    let events = match updates.events {
        Some(events) => events(flush),
        None => futures::stream::empty().boxed(),
    };
    let mut updates = futures::stream::iter(updates.first)
        .chain(events)
        .map(Update::Event)
        .chain(futures::stream::once(updates.done).map(Update::Done));
    let mut ended = false;
    Body::from_stream(futures::stream::poll_fn(move |cx| {
        if ended {
            return Poll::Ready(None);
        }
        // What is ready is written into one string, handed to hyper as one chunk.
        let mut out = String::new();
        let mut waiting = false;
        for _ in 0..READY_CHUNK {
            match updates.poll_next_unpin(cx) {
                Poll::Ready(Some(update)) => write(update, &mut out),
                Poll::Ready(None) => {
                    ended = true;
                    break;
                }
                Poll::Pending => {
                    waiting = true;
                    break;
                }
            }
        }
        if !out.is_empty() {
            Poll::Ready(Some(Ok::<Bytes, Infallible>(Bytes::from(out))))
        } else if ended {
            Poll::Ready(None)
        } else {
            if !waiting {
                // READY_CHUNK updates that wrote nothing: poll again rather than loop here.
                cx.waker().wake_by_ref();
            }
            Poll::Pending
        }
    }))
}

/// One server-sent event: `data: <json>` and a blank line (JSON never holds a raw newline).
pub fn frame(out: &mut String, part: &Value) {
    out.push_str("data: ");
    out.push_str(&part.to_string());
    out.push_str("\n\n");
}

/// The event that ends both protocols' streams.
pub const DONE: &str = "data: [DONE]\n\n";

/// `POST /api/chat`, streamed: the turn's updates as UI message stream parts.
///
/// A request refused before its turn begins (over its user's budget or rate, a busy or
/// unknown conversation) is answered as the JSON route answers it, status, `Retry-After` and
/// error body, not with a stream: the AI SDK's transport raises any non-2xx as an
/// `APICallError` carrying `statusCode` and `responseBody` without reading a stream, so an
/// `error` part in a 429 would never be read as one, and a 200 carrying it would lose the
/// 429 and `Retry-After` that clients, proxies and the SDK's `isRetryable` act on. The
/// `error` part is for what fails once the stream has begun (docs/budgets.md).
pub async fn respond(state: AppState, user: User, request: TurnRequest) -> Response {
    // A resumed turn goes on in the message that paused: the one `useChat` names, else the
    // client's current one (a `start` without `messageId` keeps it).
    let mut encoder = Encoder {
        message_id: match (request.approvals(), request.ui_message()) {
            (None, _) => MessageId::New,
            (Some(_), Some(id)) => MessageId::Continue(id.to_owned()),
            (Some(_), None) => MessageId::Current,
        },
        ..Encoder::default()
    };
    let flush = state.limits.stream_flush;
    let updates = match begin(state, user, request).await {
        Ok((_, updates)) => updates,
        Err(e) => return e.into_response(),
    };
    event_stream(
        body(updates, flush, move |update, out| {
            encoder.encode(update, out)
        }),
        true,
    )
}

/// Turns events into the protocol's parts. It keeps what the protocol needs that the events
/// leave implicit: whether a text part is open, and its id.
#[derive(Debug, Default)]
struct Encoder {
    /// The `messageId` of the `start` part.
    message_id: MessageId,
    /// Text parts started so far; the last one's id is `text_<texts>`.
    texts: u32,
    text_open: bool,
    step_open: bool,
}

/// Which UI message a stream's parts go into.
#[derive(Debug, Default)]
enum MessageId {
    /// A new assistant message, with a fresh id.
    #[default]
    New,
    /// The message with this id (the AI SDK keeps the parts it has and adds these).
    Continue(String),
    /// Whichever message the client is reading into: `start` names none.
    Current,
}

impl Encoder {
    fn encode(&mut self, item: Update, out: &mut String) {
        match item {
            Update::Event(event) => self.event(event, out),
            Update::Done(Ok(response)) => {
                self.close_step(out);
                // Each waiting call, whose input the stream carried, now asks for the user's
                // answer: `useChat` shows it in state `approval-requested`. An answer told the
                // stored outcome carried none (the AI SDK refuses a request for a call it has
                // not seen): what waits then is in the metadata only.
                let asks = response.status != TurnStatus::AlreadyDecided;
                for pending in response.pending_approvals.iter().filter(|_| asks) {
                    frame(
                        out,
                        &json!({"type": "tool-approval-request",
                                "approvalId": pending.id, "toolCallId": pending.call_id}),
                    );
                }
                for source in &response.sources {
                    frame(out, &source_part(source));
                }
                // `length`: the turn was cut short at its deadline, as a model's answer is at its
                // token limit.
                let reason = if response.cut_short { "length" } else { "stop" };
                frame(
                    out,
                    &json!({"type": "finish", "finishReason": reason,
                            "messageMetadata": metadata(&response)}),
                );
                out.push_str(DONE);
            }
            Update::Done(Err(e)) => {
                self.close_step(out);
                frame(
                    out,
                    &json!({"type": "error", "errorText": e.public_summary()}),
                );
                // The status line went out with the first byte; the log keeps the details.
                if e.is_server_error() {
                    tracing::error!(error = %e, "streamed turn failed");
                } else {
                    tracing::info!(error = %e, "streamed turn refused");
                }
                out.push_str(DONE);
            }
        }
    }

    fn event(&mut self, event: TurnEvent, out: &mut String) {
        match event {
            TurnEvent::Started {
                conversation_id,
                decided,
            } => {
                let mut start = json!({
                    "type": "start",
                    "messageMetadata": {"conversationId": conversation_id},
                });
                match &self.message_id {
                    MessageId::New => {
                        start["messageId"] =
                            json!(format!("msg_{}", uuid::Uuid::new_v4().simple()));
                    }
                    MessageId::Continue(id) => start["messageId"] = json!(id),
                    MessageId::Current => {}
                }
                frame(out, &start);
                // The answered calls settle first, as the AI SDK's own resumed stream does:
                // outside any step, in the parts that asked.
                for call in decided {
                    let part = match call.output {
                        None => json!({"type": "tool-output-denied", "toolCallId": call.call_id}),
                        Some(output) => tool_output(call.call_id, output, call.is_error),
                    };
                    frame(out, &part);
                }
            }
            TurnEvent::StepStarted { .. } => {
                self.step_open = true;
                frame(out, &json!({"type": "start-step"}));
            }
            TurnEvent::TextDelta(delta) => {
                if !std::mem::replace(&mut self.text_open, true) {
                    self.texts += 1;
                    frame(
                        out,
                        &json!({"type": "text-start", "id": format!("text_{}", self.texts)}),
                    );
                }
                // The most frequent part, written without building a JSON tree.
                let _ = write!(
                    out,
                    "data: {{\"type\":\"text-delta\",\"id\":\"text_{}\",\"delta\":{}}}\n\n",
                    self.texts,
                    Value::String(delta)
                );
            }
            TurnEvent::ToolInput {
                call_id,
                name,
                args,
            } => {
                self.close_text(out);
                frame(
                    out,
                    &json!({
                        "type": "tool-input-available",
                        "toolCallId": call_id,
                        "toolName": name,
                        "input": args,
                        "dynamic": true,
                    }),
                );
            }
            TurnEvent::ToolOutput {
                call_id,
                output,
                is_error,
            } => frame(out, &tool_output(call_id, output, is_error)),
            // A data part of the AI SDK's stream (`data-<name>`): any `useChat` front end
            // receives it in the message's parts.
            TurnEvent::Chart { id, call_id, spec } => frame(
                out,
                &json!({"type": "data-chart", "id": id,
                        "data": {"call_id": call_id, "spec": spec}}),
            ),
            TurnEvent::StepFinished => self.close_step(out),
        }
    }

    fn close_text(&mut self, out: &mut String) {
        if std::mem::take(&mut self.text_open) {
            frame(
                out,
                &json!({"type": "text-end", "id": format!("text_{}", self.texts)}),
            );
        }
    }

    fn close_step(&mut self, out: &mut String) {
        self.close_text(out);
        if std::mem::take(&mut self.step_open) {
            frame(out, &json!({"type": "finish-step"}));
        }
    }
}

/// A tool's output part: `tool-output-error` with the text of an error, else
/// `tool-output-available`.
fn tool_output(call_id: String, output: Value, is_error: bool) -> Value {
    if is_error {
        let text = match output {
            Value::String(text) => text,
            other => other.to_string(),
        };
        json!({"type": "tool-output-error", "toolCallId": call_id,
               "errorText": text, "dynamic": true})
    } else {
        json!({"type": "tool-output-available", "toolCallId": call_id,
               "output": output, "dynamic": true})
    }
}

/// A source with a web address is a `source-url`; one known by a path inside a collection
/// (`sql-set-transaction.html`) is a `source-document` naming that file; a verified query's is
/// a `source-document` titled `verified: <name>`, with no file.
fn source_part(source: &Source) -> Value {
    let title = source.title.clone().unwrap_or_else(|| source.id.clone());
    match source.uri.as_deref() {
        Some(uri) if uri.starts_with("https://") || uri.starts_with("http://") => json!({
            "type": "source-url", "sourceId": source.id, "url": uri, "title": title,
        }),
        uri => {
            let mut part = json!({
                "type": "source-document", "sourceId": source.id,
                "mediaType": "text/plain", "title": title,
            });
            if let Some(uri) = uri {
                part["filename"] = json!(uri);
            }
            part
        }
    }
}

/// What `finish` tells the client about the turn: what the JSON response says besides the
/// reply and traces, which the stream has already carried. A turn that paused for approval
/// ends its stream like any other: its waiting calls were streamed as tool inputs, each then
/// asked with `tool-approval-request`, and `finish` lists them too (`status:
/// awaiting_approval`, `pendingApprovals`).
fn metadata(response: &TurnOutcome) -> Value {
    let mut metadata = json!({
        "conversationId": response.conversation_id,
        "seq": response.seq,
        "status": response.status.code(),
        "usage": response.usage,
        "steps": response.steps,
        "cutShort": response.cut_short,
        "interrupted": response.interrupted,
        "sources": response.sources,
    });
    if !response.pending_approvals.is_empty() {
        metadata["pendingApprovals"] = json!(response.pending_approvals);
    }
    metadata
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(text: &str) -> Vec<Value> {
        text.split("\n\n")
            .filter(|f| !f.is_empty())
            .map(|f| {
                let data = f.strip_prefix("data: ").expect("a data line");
                if data == "[DONE]" {
                    json!("[DONE]")
                } else {
                    serde_json::from_str(data).unwrap()
                }
            })
            .collect()
    }

    fn types(encoder: &mut Encoder, events: Vec<TurnEvent>) -> Vec<String> {
        events
            .into_iter()
            .flat_map(|e| {
                let mut out = String::new();
                encoder.encode(Update::Event(e), &mut out);
                parts(&out)
            })
            .map(|p| p["type"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The body of updates made of `events` and a turn that ended in `outcome`, its
    /// writes as `write` shows them: text deltas as `[text]`, other updates as `<Event>`.
    async fn written(events: Vec<TurnEvent>, flush: Duration) -> Vec<String> {
        let (progress, receiver) = Progress::channel();
        for event in events {
            progress.send(|| event);
        }
        drop(progress);
        let updates = Updates {
            first: None,
            events: Some(Box::new(move |flush| receiver.every(flush).boxed())),
            done: std::future::ready(Err(ApiError::Internal("end".into()))).boxed(),
        };
        let write = |update: Update, out: &mut String| match update {
            Update::Event(TurnEvent::TextDelta(text)) => out.push_str(&format!("[{text}]")),
            Update::Event(event) => out.push_str(&format!("<{event:?}>")),
            Update::Done(_) => out.push_str("<done>"),
        };
        let mut body = body(updates, flush, write).into_data_stream();
        let mut writes = Vec::new();
        while let Some(chunk) = body.next().await {
            writes.push(String::from_utf8(chunk.unwrap().to_vec()).unwrap());
        }
        writes
    }

    #[tokio::test(start_paused = true)]
    async fn updates_ready_together_go_out_in_one_write_text_first() {
        let writes = written(
            vec![
                TurnEvent::TextDelta("Let me ".into()),
                TurnEvent::TextDelta("check.".into()),
                TurnEvent::StepFinished,
                TurnEvent::TextDelta("Bye.".into()),
            ],
            Duration::from_millis(20),
        )
        .await;
        assert_eq!(writes, ["[Let me check.]<StepFinished>[Bye.]<done>"]);
    }

    #[test]
    fn text_parts_open_once_and_close_before_tools_and_at_the_step_end() {
        let mut encoder = Encoder::default();
        let got = types(
            &mut encoder,
            vec![
                TurnEvent::StepStarted { step: 1 },
                TurnEvent::TextDelta("Let me ".into()),
                TurnEvent::TextDelta("check.".into()),
                TurnEvent::ToolInput {
                    call_id: "c1".into(),
                    name: "t".into(),
                    args: json!({}),
                },
                TurnEvent::ToolOutput {
                    call_id: "c1".into(),
                    output: json!("boom"),
                    is_error: true,
                },
                TurnEvent::StepFinished,
                TurnEvent::StepStarted { step: 2 },
                TurnEvent::TextDelta("Done.".into()),
                TurnEvent::StepFinished,
            ],
        );
        assert_eq!(
            got,
            [
                "start-step",
                "text-start",
                "text-delta",
                "text-delta",
                "text-end",
                "tool-input-available",
                "tool-output-error",
                "finish-step",
                "start-step",
                "text-start",
                "text-delta",
                "text-end",
                "finish-step"
            ]
        );
    }

    #[test]
    fn a_resumed_turn_starts_in_the_paused_message_and_settles_its_calls_first() {
        let conversation_id = ConversationId::parse("6f1c5d2e-8c7b-4f2a-9d1e-3b5a7c9e1f20")
            .expect("a conversation id");
        let started = || TurnEvent::Started {
            conversation_id,
            decided: vec![
                turn::Decided {
                    call_id: "c1".into(),
                    output: Some(json!({"rows": []})),
                    is_error: false,
                },
                turn::Decided {
                    call_id: "c2".into(),
                    output: None,
                    is_error: true,
                },
            ],
        };
        let encoded = |message_id: MessageId| {
            let mut encoder = Encoder {
                message_id,
                ..Encoder::default()
            };
            let mut out = String::new();
            encoder.encode(Update::Event(started()), &mut out);
            parts(&out)
        };

        let continued = encoded(MessageId::Continue("msg_paused".into()));
        assert_eq!(continued[0]["messageId"], "msg_paused");
        assert_eq!(
            continued[1],
            json!({"type": "tool-output-available", "toolCallId": "c1",
                   "output": {"rows": []}, "dynamic": true})
        );
        assert_eq!(
            continued[2],
            json!({"type": "tool-output-denied", "toolCallId": "c2"})
        );
        let current = encoded(MessageId::Current);
        assert!(current[0].get("messageId").is_none(), "{current:?}");
        assert_eq!(current.len(), 3);
        let new = encoded(MessageId::New);
        assert!(new[0]["messageId"].as_str().unwrap().starts_with("msg_"));
    }

    #[test]
    fn the_accept_header_chooses_the_stream() {
        let mut headers = axum::http::HeaderMap::new();
        assert!(!wanted(&headers));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream;q=0.9"),
        );
        assert!(wanted(&headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(!wanted(&headers));
    }

    #[test]
    fn sources_with_web_addresses_are_urls_and_the_rest_documents() {
        let source = |uri: Option<&str>| Source {
            id: "S1".into(),
            title: Some("SET TRANSACTION".into()),
            uri: uri.map(str::to_owned),
            snippet: None,
            score: None,
            tool: "search_documents".into(),
            call_id: "c1".into(),
            cited: true,
            verified: None,
        };
        assert_eq!(
            source_part(&source(Some("https://example.org/a")))["type"],
            "source-url"
        );
        let doc = source_part(&source(Some("sql-set-transaction.html")));
        assert_eq!(doc["type"], "source-document");
        assert_eq!(doc["filename"], "sql-set-transaction.html");
        assert!(source_part(&source(None)).get("filename").is_none());
    }
}
