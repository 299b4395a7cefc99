//! A model answer read as it is written: the server-sent events of a streamed request, in
//! either dialect, with text deltas handed on as they arrive and the answer put together into
//! the same [`Reply`] a whole one gives. Sending and retrying stay in `retry`; this reads.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::pin::pin;
use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use parley_core::retry::{Streaming, excerpt};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::time::Instant;

use super::chat_completions::{self, StreamedCall};
use super::{Llm, LlmApi, LlmError, Reply, WireUsage};
use super::{responses, sse};

/// Reads an opened stream to its end, or to `deadline`.
pub(super) async fn read(
    llm: &Llm,
    opened: Streaming,
    deadline: Instant,
    on_text: &mut (dyn FnMut(&str) + Send),
) -> Result<Reply, LlmError> {
    let config = &llm.config;
    // Some servers ignore `stream: true` and answer whole; that answer is as good as any.
    let whole = opened
        .response()
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let chunks = chunks(opened, config.retry.timeout, config.max_response_bytes);
    let mut said = Said::new(on_text);
    let reply = if whole {
        llm.parse(&read_whole(chunks, deadline).await?)?
    } else {
        read_events(config.api, chunks, deadline, llm.api_key(), &mut said).await?
    };
    Ok(said.settle(reply))
}

/// The answer the events in `chunks` add up to, their text handed to `said` as it comes.
async fn read_events(
    api: LlmApi,
    chunks: impl Stream<Item = Result<Bytes, ReadError>> + Send,
    deadline: Instant,
    key: Option<&str>,
    said: &mut Said<'_>,
) -> Result<Reply, LlmError> {
    let mut chunks = pin!(chunks);
    let mut events = sse::Reader::default();
    let mut answer = match api {
        LlmApi::Responses => Answer::Responses(ResponsesAnswer::default()),
        LlmApi::ChatCompletions => Answer::ChatCompletions(ChatAnswer::default()),
    };
    // One timer for the whole answer: a timeout per piece would register one with the
    // runtime's clock each time the next piece is not there yet, and remove it again.
    let mut deadline = pin!(tokio::time::sleep_until(deadline));
    loop {
        let next = tokio::select! {
            biased;
            next = chunks.next() => next,
            () = &mut deadline => return Err(LlmError::DeadlineReached),
        };
        let piece = match next {
            Some(piece) => piece?,
            None => return answer.ended(),
        };
        if let Some(reply) = events.feed(&piece, |data| answer.event(data, said, key))? {
            return Ok(reply);
        }
    }
}

/// The text handed on so far, so the reply's text is exactly what the caller was given.
struct Said<'a> {
    on_text: &'a mut (dyn FnMut(&str) + Send),
    text: String,
}

impl<'a> Said<'a> {
    fn new(on_text: &'a mut (dyn FnMut(&str) + Send)) -> Self {
        Self {
            on_text,
            text: String::new(),
        }
    }

    fn push(&mut self, delta: &str) {
        if !delta.is_empty() {
            self.text.push_str(delta);
            (self.on_text)(delta);
        }
    }

    /// The reply with the text said as its text. A server that sent its text only in the final
    /// answer (no deltas) has it handed on now, in one piece.
    fn settle(mut self, mut reply: Reply) -> Reply {
        if self.text.is_empty() {
            if let Some(whole) = &reply.text {
                self.push(whole);
            }
        } else {
            reply.text = Some(self.text);
        }
        reply
    }
}

/// Why reading the body stopped.
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("no bytes for LLM_TIMEOUT_MS")]
    Silence,
    #[error("more than {limit} bytes")]
    TooLarge { limit: usize },
    #[error(transparent)]
    Transport(reqwest::Error),
}

impl From<ReadError> for LlmError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Silence => LlmError::Timeout,
            ReadError::TooLarge { limit } => LlmError::TooLarge { limit },
            ReadError::Transport(e) if e.is_timeout() => LlmError::Timeout,
            // The URL stays out: a base URL may carry credentials.
            ReadError::Transport(e) => {
                LlmError::Transport(parley_core::error::chain(&e.without_url()))
            }
        }
    }
}

/// The body's pieces as they arrive, ended by a silence longer than `silence` or by more
/// than `limit` bytes in all. Silence is measured between pieces, not events, so a server's
/// keep-alive comments keep a slow answer going.
fn chunks(
    opened: Streaming,
    silence: Duration,
    limit: usize,
) -> impl Stream<Item = Result<Bytes, ReadError>> + Send {
    // One timer, pushed back at each piece: moving a timer later is an atomic store, where a
    // timeout per piece registered a timer with the runtime's clock and removed it again.
    let quiet = Box::pin(tokio::time::sleep(silence));
    futures::stream::unfold(Some((opened, 0usize, quiet)), move |state| async move {
        let (mut opened, read, mut quiet) = state?;
        quiet.as_mut().reset(Instant::now() + silence);
        let chunk = tokio::select! {
            biased;
            chunk = opened.chunk() => chunk,
            () = &mut quiet => return Some((Err(ReadError::Silence), None)),
        };
        let error = match chunk {
            Err(e) => ReadError::Transport(e),
            Ok(None) => return None,
            Ok(Some(chunk)) if read + chunk.len() > limit => ReadError::TooLarge { limit },
            Ok(Some(chunk)) => {
                let read = read + chunk.len();
                return Some((Ok(chunk), Some((opened, read, quiet))));
            }
        };
        Some((Err(error), None))
    })
}

/// A body that turned out not to be a stream, read whole.
async fn read_whole(
    chunks: impl Stream<Item = Result<Bytes, ReadError>>,
    deadline: Instant,
) -> Result<Vec<u8>, LlmError> {
    let mut chunks = pin!(chunks);
    let mut body = Vec::new();
    let mut deadline = pin!(tokio::time::sleep_until(deadline));
    loop {
        let next = tokio::select! {
            biased;
            next = chunks.next() => next,
            () = &mut deadline => return Err(LlmError::DeadlineReached),
        };
        match next {
            Some(chunk) => body.extend_from_slice(&chunk?),
            None => return Ok(body),
        }
    }
}

/// The JSON of an event's `data`.
fn data<'a, T: Deserialize<'a>>(data: &'a str, key: Option<&str>) -> Result<T, LlmError> {
    serde_json::from_str(data).map_err(|e| {
        LlmError::BadResponse(format!(
            "an event is not what the dialect promises ({e}): {}",
            excerpt(data, key)
        ))
    })
}

/// An error the server reported inside a stream: a `Status` when it names an HTTP status (as
/// gateways relaying an upstream failure do), else a bad response with its message.
fn failure(error: Option<&Value>, key: Option<&str>) -> LlmError {
    let error = error.filter(|e| !e.is_null());
    let status = error
        .and_then(|e| ["status", "code"].iter().find_map(|k| e.get(*k)?.as_u64()))
        .and_then(|s| u16::try_from(s).ok())
        .filter(|s| (400..=599).contains(s));
    let message = error
        .and_then(|e| e.get("message").and_then(Value::as_str))
        .unwrap_or("no message");
    let detail = excerpt(message, key);
    match status {
        Some(status) => LlmError::Status { status, detail },
        None => LlmError::BadResponse(format!("the model failed mid-answer: {detail}")),
    }
}

/// An answer being put together from its events, in the dialect asked.
enum Answer {
    Responses(ResponsesAnswer),
    ChatCompletions(ChatAnswer),
}

impl Answer {
    /// Takes one event's data; the reply once the answer is complete.
    fn event(
        &mut self,
        raw: &str,
        text: &mut Said<'_>,
        key: Option<&str>,
    ) -> Result<Option<Reply>, LlmError> {
        match self {
            Answer::Responses(answer) => answer.event(data(raw, key)?, text, key),
            Answer::ChatCompletions(answer) if raw.trim() == "[DONE]" => {
                std::mem::take(answer).finish().map(Some)
            }
            Answer::ChatCompletions(answer) => answer.chunk(data(raw, key)?, text, key),
        }
    }

    /// The reply when the body ends without a closing event.
    fn ended(self) -> Result<Reply, LlmError> {
        let cut =
            || LlmError::BadResponse("the stream ended before the answer was complete".into());
        match self {
            Answer::Responses(_) => Err(cut()),
            // `[DONE]` is missing from some servers' streams; a finish reason says the answer
            // was complete all the same.
            Answer::ChatCompletions(answer) if answer.finish_reason.is_some() => answer.finish(),
            Answer::ChatCompletions(_) => Err(cut()),
        }
    }
}

/// One Responses API event, read flat: only the fields Parley uses, borrowed from the event's
/// text where it can. (An internally tagged enum would first copy every field of every event
/// into serde's buffer, and text deltas are most of a stream.) The event types read are
/// `response.output_text.delta` and `response.refusal.delta` (the text), `output_item.done`,
/// `completed`/`incomplete`, `failed` and `error`; the others (`response.created`, `*.done`,
/// reasoning...) carry nothing the final `response` does not.
#[derive(Deserialize)]
struct ResponsesEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    /// Each field is kept as its JSON text and read only for the event types that have it,
    /// so another type's field of another shape is passed over as before.
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    #[serde(borrow)]
    output_index: Option<&'a RawValue>,
    #[serde(borrow)]
    item_id: Option<&'a RawValue>,
    #[serde(borrow)]
    item: Option<&'a RawValue>,
    #[serde(borrow)]
    response: Option<&'a RawValue>,
    /// OpenAI puts `code` and `message` on an `error` event itself; some servers nest an `error`.
    #[serde(borrow)]
    code: Option<&'a RawValue>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

impl<'a> ResponsesEvent<'a> {
    /// Field `name`'s value (`raw`) as a `T`; `None` when absent or JSON null.
    fn field<T: Deserialize<'a>>(
        &self,
        name: &str,
        raw: Option<&'a RawValue>,
    ) -> Result<Option<T>, LlmError> {
        match raw {
            None => Ok(None),
            Some(raw) => serde_json::from_str::<Option<T>>(raw.get()).map_err(|e| {
                LlmError::BadResponse(format!(
                    "an event is not what the dialect promises (`{name}` of a `{}` event: {e})",
                    self.kind
                ))
            }),
        }
    }

    /// Like [`field`](Self::field), for a field the event type must have.
    fn required<T: Deserialize<'a>>(
        &self,
        name: &str,
        raw: Option<&'a RawValue>,
    ) -> Result<T, LlmError> {
        self.field(name, raw)?.ok_or_else(|| {
            LlmError::BadResponse(format!(
                "an event is not what the dialect promises (a `{}` event without `{name}`)",
                self.kind
            ))
        })
    }
}

#[derive(Default)]
struct ResponsesAnswer {
    /// The output item the last text delta belonged to.
    text_item: Option<(Option<u64>, Option<String>)>,
    /// Items as their `output_item.done` events gave them, for a final response without them.
    items: Vec<Box<RawValue>>,
}

impl ResponsesAnswer {
    /// The final response of `event` read as a tree first: its `output` replaced by the
    /// items streamed before it when it has no list of them.
    fn completed_as_value(
        &mut self,
        event: &ResponsesEvent<'_>,
    ) -> Result<responses::Answer, LlmError> {
        let mut response: Value = event.required("response", event.response)?;
        if let Some(fields) = response.as_object_mut()
            && fields
                .get("output")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty)
            && !self.items.is_empty()
        {
            let items = std::mem::take(&mut self.items)
                .into_iter()
                .map(|item| serde_json::from_str(item.get()))
                .collect::<Result<Vec<Value>, _>>()
                .map_err(|e| LlmError::BadResponse(format!("an output item is not JSON: {e}")))?;
            fields.insert("output".to_owned(), Value::Array(items));
        }
        serde_json::from_value(response).map_err(|e| {
            LlmError::BadResponse(format!(
                "the final response is not in the expected shape: {e}"
            ))
        })
    }

    fn event(
        &mut self,
        event: ResponsesEvent<'_>,
        text: &mut Said<'_>,
        key: Option<&str>,
    ) -> Result<Option<Reply>, LlmError> {
        match &*event.kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                let delta: Cow<'_, str> = event.required("delta", event.delta)?;
                let index: Option<u64> = event.field("output_index", event.output_index)?;
                let item_id: Option<Cow<'_, str>> = event.field("item_id", event.item_id)?;
                let same_item = self
                    .text_item
                    .as_ref()
                    .is_some_and(|(i, id)| *i == index && id.as_deref() == item_id.as_deref());
                // `responses::parse` joins the texts of separate messages with a blank line;
                // the streamed text must be that same text.
                if !same_item && !delta.is_empty() {
                    if !text.text.is_empty() {
                        text.push("\n\n");
                    }
                    self.text_item = Some((index, item_id.map(Cow::into_owned)));
                }
                text.push(&delta);
                Ok(None)
            }
            "response.output_item.done" => {
                let item: Box<RawValue> = event.required("item", event.item)?;
                self.items.push(item);
                Ok(None)
            }
            "response.completed" | "response.incomplete" => {
                // Read straight into the answer's shape (the whole reply again, so a tree of
                // it first cost as much as its deltas did); a response that does not fit is
                // read the long way, which says why or fits it together.
                let fast = event
                    .response
                    .and_then(|raw| serde_json::from_str::<responses::Answer>(raw.get()).ok())
                    .and_then(|answer| answer.or_items(&self.items).ok());
                let answer = match fast {
                    Some(answer) => answer,
                    None => self.completed_as_value(&event)?,
                };
                responses::parse(answer).map(Some)
            }
            "response.failed" => {
                let response: Option<Value> = event.field("response", event.response)?;
                Err(failure(response.as_ref().and_then(|r| r.get("error")), key))
            }
            "error" => {
                let nested: Option<Value> = event.field("error", event.error)?;
                let error = match nested.filter(Value::is_object) {
                    Some(error) => error,
                    None => {
                        let code: Option<Value> = event.field("code", event.code)?;
                        let message: Option<String> = event.field("message", event.message)?;
                        serde_json::json!({"code": code, "message": message})
                    }
                };
                Err(failure(Some(&error), key))
            }
            _ => Ok(None),
        }
    }
}

/// One `chat.completion.chunk`: deltas of the first choice, or (last) the usage alone.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    usage: Option<WireUsage>,
    /// Some servers report a failure mid-stream as a chunk holding only an `error`.
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u64,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    /// A string; anything else carries no text we can show.
    content: Option<Value>,
    refusal: Option<String>,
    tool_calls: Option<Vec<CallDelta>>,
}

#[derive(Deserialize)]
struct CallDelta {
    /// Which call this piece belongs to; absent from servers that send each call whole.
    index: Option<usize>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<Value>,
}

#[derive(Default)]
struct ChatAnswer {
    content: String,
    refusal: String,
    /// Calls by their `index`, in order.
    calls: BTreeMap<usize, StreamedCall>,
    finish_reason: Option<String>,
    usage: Option<WireUsage>,
}

impl ChatAnswer {
    fn chunk(
        &mut self,
        chunk: Chunk,
        text: &mut Said<'_>,
        key: Option<&str>,
    ) -> Result<Option<Reply>, LlmError> {
        if let Some(error) = &chunk.error {
            return Err(failure(Some(error), key));
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        let Some(choice) = chunk.choices.into_iter().find(|c| c.index == 0) else {
            return Ok(None);
        };
        if choice.finish_reason.is_some() {
            self.finish_reason = choice.finish_reason;
        }
        let Some(delta) = choice.delta else {
            return Ok(None);
        };
        if let Some(Value::String(piece)) = &delta.content {
            self.content.push_str(piece);
            text.push(piece);
        }
        if let Some(piece) = &delta.refusal {
            self.refusal.push_str(piece);
            text.push(piece);
        }
        for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
            let (id, name, arguments) = self
                .calls
                .entry(call.index.unwrap_or(position))
                .or_default();
            if let Some(piece) = call.id.filter(|i| !i.is_empty()) {
                *id = piece;
            }
            let Some(function) = call.function else {
                continue;
            };
            // The name comes whole in the call's first delta; some servers repeat it.
            if let Some(piece) = function.name.filter(|_| name.is_empty()) {
                *name = piece;
            }
            match function.arguments {
                Some(Value::String(piece)) => arguments.push_str(&piece),
                None | Some(Value::Null) => {}
                Some(whole) => arguments.push_str(&whole.to_string()),
            }
        }
        Ok(None)
    }

    fn finish(self) -> Result<Reply, LlmError> {
        chat_completions::assembled(
            self.content,
            self.refusal,
            self.calls.into_values().collect(),
            self.finish_reason,
            self.usage,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use parley_testkit::llm::{ScriptedLlm, Step};

    use super::*;
    use crate::turn::llm::fixtures::{call_triples, config, far_deadline, history, tools};
    use crate::turn::llm::{Item, LlmConfig, Prompt, ToolDef, Usage};

    const BOTH: [LlmApi; 2] = [LlmApi::Responses, LlmApi::ChatCompletions];

    #[test]
    fn responses_events_are_read_by_type_and_other_types_fields_pass_over() {
        let mut said = Vec::new();
        let mut on_text = |delta: &str| said.push(delta.to_owned());
        let mut text = Said::new(&mut on_text);
        let mut answer = ResponsesAnswer::default();
        let mut feed = |raw: &str| answer.event(data(raw, None)?, &mut text, None);
        assert!(matches!(
            feed(
                r#"{"type":"response.output_text.delta","item_id":"m1","output_index":0,"delta":"caf\u00e9 "}"#
            ),
            Ok(None)
        ));
        // Another type may give a field another shape: it is not read.
        assert!(matches!(
            feed(r#"{"type":"response.output_json.delta","delta":{"a":1},"message":[2]}"#),
            Ok(None)
        ));
        assert!(matches!(
            feed(
                r#"{"type":"response.refusal.delta","item_id":"m1","output_index":0,"delta":"au lait"}"#
            ),
            Ok(None)
        ));
        // A text delta without its text is not what the dialect promises.
        let Err(LlmError::BadResponse(problem)) = feed(r#"{"type":"response.output_text.delta"}"#)
        else {
            panic!("a delta without `delta` was read");
        };
        assert!(problem.contains("without `delta`"), "{problem}");
        assert_eq!(text.text, "café au lait");
        drop(text);
        assert_eq!(said, ["café ", "au lait"]);
    }

    fn client(llm: &ScriptedLlm, api: LlmApi) -> Llm {
        client_with(llm, api, |_| {})
    }

    fn client_with(llm: &ScriptedLlm, api: LlmApi, tweak: impl FnOnce(&mut LlmConfig)) -> Llm {
        let mut config = LlmConfig {
            api,
            base_url: url::Url::parse(&format!("{}/", llm.base_url())).unwrap(),
            retry: parley_core::retry::RetrySettings {
                max_retries: 3,
                retry_budget: Duration::from_secs(10),
                ..config().retry
            },
            ..config()
        };
        tweak(&mut config);
        Llm::new(config, reqwest::Client::new())
    }

    /// What one streamed request gave: the result, and each text delta with when it came.
    struct Streamed {
        result: Result<Reply, LlmError>,
        deltas: Vec<(Instant, String)>,
        ended: Instant,
    }

    impl Streamed {
        fn text(&self) -> String {
            self.deltas.iter().map(|(_, d)| d.as_str()).collect()
        }
    }

    async fn stream(llm: &Llm, deadline: Instant) -> Streamed {
        let (items, tools) = (history(), tools());
        stream_prompt(llm, &items, &tools, deadline).await
    }

    async fn stream_prompt(
        llm: &Llm,
        items: &[Item],
        tools: &[ToolDef],
        deadline: Instant,
    ) -> Streamed {
        let prompt = Prompt {
            instructions: "Be brief.",
            items,
            tools,
        };
        let mut deltas = Vec::new();
        let mut on_text = |delta: &str| deltas.push((Instant::now(), delta.to_owned()));
        let result = llm.respond_streaming(prompt, deadline, &mut on_text).await;
        Streamed {
            result,
            deltas,
            ended: Instant::now(),
        }
    }

    fn scripted_usage() -> Usage {
        Usage {
            input_tokens: 100,
            output_tokens: 20,
            total_tokens: 120,
        }
    }

    #[tokio::test]
    async fn text_deltas_arrive_in_order_before_the_answer_ends() {
        let text = "Forty characters of answer, give or take";
        for api in BOTH {
            let llm = ScriptedLlm::start(vec![Step::text(text)]).await;
            llm.set_pace(Duration::from_millis(20));
            let streamed = stream(&client(&llm, api), far_deadline()).await;
            let reply = streamed.result.as_ref().unwrap();
            assert_eq!(reply.text.as_deref(), Some(text), "{api:?}");
            assert_eq!(streamed.text(), text, "{api:?}");
            assert_eq!(streamed.deltas.len(), 10, "{api:?}: pieces of 4 characters");
            let first = streamed.deltas[0].0;
            assert!(
                streamed.ended.duration_since(first) >= Duration::from_millis(150),
                "{api:?}: the first delta came {:?} before the end, not as it was written",
                streamed.ended.duration_since(first)
            );
            assert_eq!(reply.usage, scripted_usage(), "{api:?}");
        }
    }

    #[tokio::test]
    async fn the_request_is_the_unstreamed_one_asking_for_a_stream() {
        for (api, extra) in [
            (LlmApi::Responses, serde_json::json!({"stream": true})),
            (
                LlmApi::ChatCompletions,
                serde_json::json!({"stream": true, "stream_options": {"include_usage": true}}),
            ),
        ] {
            let llm = ScriptedLlm::start(vec![Step::text("ok")]).await;
            let client = client(&llm, api);
            stream(&client, far_deadline()).await.result.unwrap();
            let (items, tools) = (history(), tools());
            let prompt = Prompt {
                instructions: "Be brief.",
                items: &items,
                tools: &tools,
            };
            let mut expected: Value =
                serde_json::from_slice(&client.request(prompt, false).1).unwrap();
            for (k, v) in extra.as_object().unwrap() {
                expected[k] = v.clone();
            }
            assert_eq!(llm.requests(), vec![expected], "{api:?}");
        }
    }

    #[tokio::test]
    async fn parallel_calls_are_assembled_from_their_deltas_as_respond_reads_them_whole() {
        let step = || {
            Step::TextAndCalls(
                "Checking.".to_owned(),
                vec![
                    ("count_orders".to_owned(), "{}".to_owned()),
                    (
                        "list_customers".to_owned(),
                        "{\"limit\": 2, \"name\": \"Ada Lovelace\"}".to_owned(),
                    ),
                ],
            )
        };
        for api in BOTH {
            let streaming = ScriptedLlm::start(vec![step()]).await;
            let streamed = stream(&client(&streaming, api), far_deadline()).await;
            let reply = streamed.result.unwrap();
            assert_eq!(
                call_triples(&reply),
                vec![
                    ("call_1", "count_orders", "{}"),
                    (
                        "call_2",
                        "list_customers",
                        "{\"limit\": 2, \"name\": \"Ada Lovelace\"}"
                    ),
                ],
                "{api:?}"
            );
            assert_eq!(reply.text.as_deref(), Some("Checking."));
            assert_eq!(reply.usage, scripted_usage(), "{api:?}");
            let whole = ScriptedLlm::start(vec![step()]).await;
            let (items, tools) = (history(), tools());
            let prompt = Prompt {
                instructions: "",
                items: &items,
                tools: &tools,
            };
            let expected = client(&whole, api).respond(prompt, far_deadline()).await;
            assert_eq!(reply, expected.unwrap(), "{api:?}");
        }
    }

    #[tokio::test]
    async fn the_deadline_mid_stream_is_reached_with_the_partial_text_delivered() {
        for api in BOTH {
            let llm = ScriptedLlm::start(vec![Step::stall("The first half of")]).await;
            let deadline = Instant::now() + Duration::from_millis(300);
            let streamed = stream(&client(&llm, api), deadline).await;
            assert!(
                matches!(streamed.result, Err(LlmError::DeadlineReached)),
                "{api:?}: {:?}",
                streamed.result
            );
            assert_eq!(streamed.text(), "The first half of", "{api:?}");
            assert!(streamed.ended >= deadline, "{api:?}");
            assert_eq!(llm.requests().len(), 1, "{api:?}");
        }
    }

    #[tokio::test]
    async fn a_silence_longer_than_the_timeout_is_a_timeout_and_not_retried() {
        for api in BOTH {
            let llm = ScriptedLlm::start(vec![Step::stall("Part"), Step::text("no")]).await;
            let client = client_with(&llm, api, |c| c.retry.timeout = Duration::from_millis(200));
            let streamed = stream(&client, far_deadline()).await;
            assert!(
                matches!(streamed.result, Err(LlmError::Timeout)),
                "{api:?}: {:?}",
                streamed.result
            );
            assert_eq!(streamed.text(), "Part");
            assert_eq!(llm.requests().len(), 1, "{api:?}: the stream had begun");
        }
    }

    #[tokio::test]
    async fn a_failure_event_mid_stream_is_an_error_and_not_retried() {
        for api in BOTH {
            let llm = ScriptedLlm::start(vec![
                Step::FailMidStream {
                    text: "So far so".to_owned(),
                    message: "The model crashed.".to_owned(),
                },
                Step::text("no"),
            ])
            .await;
            let streamed = stream(&client(&llm, api), far_deadline()).await;
            assert!(
                matches!(&streamed.result, Err(LlmError::BadResponse(m)) if m.contains("The model crashed.")),
                "{api:?}: {:?}",
                streamed.result
            );
            assert_eq!(streamed.text(), "So far so");
            assert_eq!(llm.requests().len(), 1, "{api:?}");
        }
    }

    #[tokio::test]
    async fn a_5xx_before_the_stream_is_retried() {
        for api in BOTH {
            let llm = ScriptedLlm::start(vec![Step::error(503, "busy"), Step::text("Fine.")]).await;
            let streamed = stream(&client(&llm, api), far_deadline()).await;
            let reply = streamed.result.as_ref().unwrap();
            assert_eq!(reply.text.as_deref(), Some("Fine."), "{api:?}");
            assert_eq!(streamed.text(), "Fine.");
            assert_eq!(llm.requests().len(), 2, "{api:?}");
        }
    }

    #[tokio::test]
    async fn no_first_byte_within_the_timeout_is_retried_then_a_timeout_or_the_deadline() {
        let slow = || Step::delayed(Duration::from_secs(5), Step::text("late"));
        let llm = ScriptedLlm::start(vec![slow(), slow(), slow()]).await;
        let client = client_with(&llm, LlmApi::Responses, |c| {
            c.retry.timeout = Duration::from_millis(100);
            c.retry.max_retries = 1;
        });
        let streamed = stream(&client, far_deadline()).await;
        assert!(
            matches!(streamed.result, Err(LlmError::Timeout)),
            "{:?}",
            streamed.result
        );
        assert_eq!(llm.requests().len(), 2);
        let client = client_with(&llm, LlmApi::Responses, |c| {
            c.retry.timeout = Duration::from_secs(1)
        });
        let streamed = stream(&client, Instant::now() + Duration::from_millis(200)).await;
        assert!(
            matches!(streamed.result, Err(LlmError::DeadlineReached)),
            "{:?}",
            streamed.result
        );
        assert_eq!(llm.requests().len(), 3);
    }

    #[tokio::test]
    async fn a_stream_larger_than_the_cap_is_too_large_and_not_retried() {
        for api in BOTH {
            let llm =
                ScriptedLlm::start(vec![Step::text("x".repeat(8000)), Step::text("no")]).await;
            let client = client_with(&llm, api, |c| c.max_response_bytes = 4096);
            let streamed = stream(&client, far_deadline()).await;
            assert!(
                matches!(streamed.result, Err(LlmError::TooLarge { limit: 4096 })),
                "{api:?}: {:?}",
                streamed.result
            );
            assert!(streamed.text().len() < 4096, "{api:?}");
            assert_eq!(llm.requests().len(), 1, "{api:?}");
        }
    }

    #[tokio::test]
    async fn a_server_answering_whole_json_is_read_as_one_delta() {
        let body = serde_json::json!({"output": [{"type": "message", "content": [
            {"type": "output_text", "text": "All at once."}
        ]}]});
        let llm = ScriptedLlm::start(vec![Step::Status {
            status: 200,
            retry_after: None,
            body: body.to_string(),
        }])
        .await;
        let streamed = stream(&client(&llm, LlmApi::Responses), far_deadline()).await;
        let reply = streamed.result.as_ref().unwrap();
        assert_eq!(reply.text.as_deref(), Some("All at once."));
        assert_eq!(streamed.text(), "All at once.");
    }

    /// Reads `body` as a stream in `api`'s dialect, without a server: for event shapes
    /// [`ScriptedLlm`] does not send.
    async fn read_text(api: LlmApi, body: &str) -> (Result<Reply, LlmError>, String) {
        let chunks = futures::stream::iter(
            body.as_bytes()
                .chunks(7)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect::<Vec<_>>(),
        );
        let mut text = String::new();
        let mut on_text = |delta: &str| text.push_str(delta);
        let mut said = Said::new(&mut on_text);
        let result = read_events(api, chunks, far_deadline(), Some("sk-secret"), &mut said)
            .await
            .map(|reply| said.settle(reply));
        (result, text)
    }

    #[tokio::test]
    async fn an_error_event_is_a_bad_response_or_the_status_it_names() {
        let (result, text) = read_text(
            LlmApi::Responses,
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\"Hi\"}\n\n\
             event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"bad key sk-secret\",\"param\":null,\"sequence_number\":1}\n\n",
        )
        .await;
        assert_eq!(text, "Hi");
        assert!(
            matches!(&result, Err(LlmError::BadResponse(m)) if m.contains("bad key [redacted]")),
            "{result:?}"
        );
        let (result, _) = read_text(
            LlmApi::ChatCompletions,
            "data: {\"error\":{\"code\":502,\"message\":\"upstream gone\"}}\n\n",
        )
        .await;
        assert!(
            matches!(&result, Err(LlmError::Status { status: 502, detail }) if detail == "upstream gone"),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn interleaved_call_deltas_are_put_together_by_index() {
        let chunk = |delta: &str| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n"
            )
        };
        let body = [
            chunk(r#"{"tool_calls":[{"index":0,"id":"c1","function":{"name":"a","arguments":""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":1,"id":"c2","function":{"name":"b","arguments":"{\"y\""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":1,"function":{"arguments":":2}"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}"#),
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n".to_owned(),
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n".to_owned(),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let (result, text) = read_text(LlmApi::ChatCompletions, &body).await;
        let reply = result.unwrap();
        assert_eq!(
            call_triples(&reply),
            vec![("c1", "a", "{\"x\":1}"), ("c2", "b", "{\"y\":2}")]
        );
        assert_eq!((reply.text, text.as_str()), (None, ""));
        assert_eq!(reply.usage.total_tokens, 7);
    }

    #[tokio::test]
    async fn a_chat_stream_without_done_is_complete_only_with_a_finish_reason() {
        let content = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hey\"}}]}\n\n";
        let finish =
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
        let (result, _) = read_text(LlmApi::ChatCompletions, &format!("{content}{finish}")).await;
        assert_eq!(result.unwrap().text.as_deref(), Some("Hey"));
        let (result, text) = read_text(LlmApi::ChatCompletions, content).await;
        assert!(
            matches!(result, Err(LlmError::BadResponse(_))),
            "{result:?}"
        );
        assert_eq!(text, "Hey");
        let (result, _) = read_text(
            LlmApi::Responses,
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n",
        )
        .await;
        assert!(
            matches!(result, Err(LlmError::BadResponse(_))),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn separate_messages_are_streamed_with_the_blank_line_a_whole_answer_has() {
        let delta = |index: u32, delta: &str| {
            format!(
                "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"output_index\":{index},\"item_id\":\"m{index}\",\"delta\":\"{delta}\"}}\n\n"
            )
        };
        let completed = "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"output\":[\
            {\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"One.\"}]},\
            {\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"Two.\"}]}]}}\n\n";
        let body = [
            delta(0, "On"),
            delta(0, "e."),
            delta(1, "Two."),
            completed.to_owned(),
        ]
        .concat();
        let (result, text) = read_text(LlmApi::Responses, &body).await;
        assert_eq!(text, "One.\n\nTwo.");
        assert_eq!(result.unwrap().text.as_deref(), Some("One.\n\nTwo."));
    }
}
