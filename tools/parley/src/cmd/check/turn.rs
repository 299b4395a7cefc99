//! The turn checks: `POST api/chat` answered as JSON, and streamed where the page streams
//! (its `stream_url`, else its own origin) with the first byte before the end. Each turn's
//! conversation is deleted afterwards. What the chat's error codes mean to the person
//! running the check is said here, once, for both.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::http::{Probe, describe, is_loopback, media_type};
use super::{Check, Outcome, Seen};

/// What each turn asks: short, so a real model answers quickly and cheaply.
pub const MESSAGE: &str = "This is `parley check` testing the chat: please answer with one short \
sentence.";

/// Across a network, the least time between a stream's first byte and its end for the turn to
/// count as streamed, unless the first byte came in the first half of the turn. A front door
/// that buffers hands the whole answer on at once: the end arrives with the first byte, or
/// within a few milliseconds when it spans several packets, at the very end of the turn. A
/// streamed turn's first byte (its `start` part) comes before the model has said anything, and
/// the end after the model's answer, a second or more with a real model.
pub const MIN_STREAM_GAP: Duration = Duration::from_millis(20);

/// The stream's last event (docs/api.md, "POST /api/chat, streamed").
const DONE: &[u8] = b"data: [DONE]";

/// A turn answered as JSON.
pub async fn turn(probe: &Probe) -> Outcome {
    let url = match probe.target.page.join("api/chat") {
        Ok(u) => u,
        Err(e) => return Outcome::fail(Check::Turn, e.to_string(), NOT_ROUTED_FIX),
    };
    let token = probe.user_token();
    let started = Instant::now();
    let answer = match probe
        .post_json(
            &url,
            &json!({"message": MESSAGE}),
            "application/json",
            token,
        )
        .await
    {
        Ok(a) => a,
        Err(why) => {
            return Outcome::fail(
                Check::Turn,
                format!("POST {url} got no answer: {why}"),
                if probe.is_local() {
                    "Start the local stack with scripts/dev (it serves the chat on \
                     127.0.0.1:3000), or pass the page's URL as URL."
                } else {
                    NOT_ROUTED_FIX
                },
            );
        }
    };
    let took = started.elapsed();
    if answer.status != 200 {
        let (code, message) = answer
            .api_error()
            .unwrap_or_else(|| (String::new(), answer.snippet()));
        return refused(
            Check::Turn,
            probe,
            &format!("POST {url}"),
            answer.status,
            &code,
            &message,
        );
    }
    let Some(body) = answer.json() else {
        return Outcome::fail(
            Check::Turn,
            format!(
                "POST {url} answered 200 with a body that is not JSON: {}",
                answer.snippet()
            ),
            NOT_ROUTED_FIX,
        );
    };
    delete_conversation(probe, body.get("conversation_id").and_then(Value::as_str)).await;
    let status = body.get("status").and_then(Value::as_str).unwrap_or("?");
    let traces = body
        .get("traces")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let failed = traces
        .iter()
        .filter(|t| t.get("is_error").and_then(Value::as_bool) == Some(true))
        .count();
    let reply: String = body
        .get("reply")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .chars()
        .take(60)
        .collect();
    let waiting: Vec<&str> = body
        .get("pending_approvals")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter_map(|p| p.get("tool").and_then(Value::as_str))
        .collect();
    let said = if waiting.is_empty() {
        format!("{reply:?}")
    } else {
        format!(
            "a call of {} waits for the user's approval",
            waiting.join(", ")
        )
    };
    let failures = if failed > 0 {
        format!(", {failed} answered an error")
    } else {
        String::new()
    };
    Outcome::ok(
        Check::Turn,
        format!(
            "answered in {} ({status}, {}{failures}): {said}",
            readable(took),
            super::count(traces.len() as u64, "tool call"),
        ),
    )
}

/// A streamed turn, where the page sends its own: its first byte must come before its end.
pub async fn stream(probe: &Probe, seen: &Seen) -> Outcome {
    let Some(config) = &seen.config else {
        return Outcome::skip(
            Check::Stream,
            "the page's settings did not load, so where it streams is unknown (see page)",
        );
    };
    let base = config.stream_url.as_ref().unwrap_or(&probe.target.page);
    let url = match base.join("api/chat") {
        Ok(u) => u,
        Err(e) => return Outcome::fail(Check::Stream, e.to_string(), stream_fix(config)),
    };
    let request = probe.post(
        &url,
        &json!({"message": MESSAGE}),
        "text/event-stream",
        probe.user_token(),
    );
    let started = Instant::now();
    let mut response = match request.send().await {
        Ok(r) => r,
        Err(e) => {
            return Outcome::fail(
                Check::Stream,
                format!("POST {url} got no answer: {}", describe(e)),
                stream_fix(config),
            );
        }
    };
    let status = response.status().as_u16();
    let content_type = media_type(
        response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
    );
    let mut body = Vec::new();
    let mut first: Option<(Duration, bool)> = None;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) if chunk.is_empty() => {}
            Ok(Some(chunk)) => {
                if body.len() < super::http::MAX_BODY_BYTES {
                    body.extend_from_slice(&chunk);
                }
                first.get_or_insert_with(|| (started.elapsed(), contains(&chunk, DONE)));
            }
            Ok(None) => break,
            Err(e) => {
                return Outcome::fail(
                    Check::Stream,
                    format!("POST {url}: the stream broke off: {}", describe(e)),
                    stream_fix(config),
                );
            }
        }
    }
    let end = started.elapsed();
    if status != 200 {
        let answer = super::http::Answer {
            status,
            headers: reqwest::header::HeaderMap::new(),
            body,
        };
        let (code, message) = answer
            .api_error()
            .unwrap_or_else(|| (String::new(), answer.snippet()));
        let outcome = refused(
            Check::Stream,
            probe,
            &format!("POST {url}"),
            status,
            &code,
            &message,
        );
        // The turn check says what to do about the model; this one cannot measure anything.
        return match code.as_str() {
            "llm_key_missing" | "llm_key_rejected" => Outcome::skip(
                Check::Stream,
                format!("no turn can be answered: {} (see turn)", outcome.detail),
            ),
            _ => outcome,
        };
    }
    if content_type != "text/event-stream" {
        return Outcome::fail(
            Check::Stream,
            format!(
                "POST {url} with Accept: text/event-stream answered {content_type:?}, not a stream"
            ),
            stream_fix(config),
        );
    }
    let parts = events(&body);
    delete_conversation(
        probe,
        parts
            .iter()
            .find_map(|p| p.pointer("/messageMetadata/conversationId"))
            .and_then(Value::as_str),
    )
    .await;
    if let Some(error) = parts
        .iter()
        .find(|p| p.get("type").and_then(Value::as_str) == Some("error"))
    {
        let text = error
            .get("errorText")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let (code, message) = text.split_once(": ").unwrap_or(("", text));
        let mut outcome = refused(
            Check::Stream,
            probe,
            &format!("POST {url}"),
            200,
            code,
            message,
        );
        outcome.detail = format!("the streamed turn ended with an error: {text}");
        return outcome;
    }
    let Some((first_at, ended_with_it)) = first else {
        return Outcome::fail(
            Check::Stream,
            format!("POST {url} answered an empty stream"),
            stream_fix(config),
        );
    };
    let timing = format!(
        "first byte after {}, the end after {}",
        readable(first_at),
        readable(end)
    );
    if !streamed(first_at, ended_with_it, end, is_loopback(&url)) {
        return Outcome::fail(
            Check::Stream,
            format!(
                "{url}: {timing}: the answer came whole, as a front door that buffers sends it"
            ),
            stream_fix(config),
        );
    }
    Outcome::ok(Check::Stream, format!("{url}: {timing}"))
}

/// Whether a stream whose first bytes came at `first` (holding its end or not) and whose end
/// came at `end` was delivered as it was written. On this machine (`local`) an answer handed
/// on whole arrives in one read, so first bytes without the end are proof enough (scripts/dev's
/// scripted model answers in milliseconds, too fast to time); across a network a whole answer
/// may come in several packets moments apart, so there the times decide.
pub fn streamed(first: Duration, first_held_the_end: bool, end: Duration, local: bool) -> bool {
    let gap = end.saturating_sub(first);
    !first_held_the_end && (local || gap >= MIN_STREAM_GAP || first * 2 <= end)
}

/// A time as a person reads it: milliseconds under a second, else seconds.
fn readable(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// What to change when the streamed turn does not reach the caller as it is written.
fn stream_fix(config: &super::page::PageConfig) -> String {
    match &config.stream_url {
        None => "The page streams its turns through its own origin, which hands each answer on \
                 whole (API Gateway's HTTP API does): set the chat's PAGE_STREAM_URL to a front \
                 door that streams, the stack's ChatStreamUrl output (ChatStreamingUrl true; \
                 docs/deploy-reference.md \"Streaming chat turns\")."
            .to_owned(),
        Some(url) => format!(
            "The page's stream_url {url} (the chat's PAGE_STREAM_URL) does not stream: it must \
             reach a chat function answering in streaming mode (LAMBDA_RESPONSE_STREAMING=true) \
             through a front door that streams, a Function URL with InvokeMode RESPONSE_STREAM \
             or a REST API with responseTransferMode STREAM (docs/deploy-reference.md \
             \"Streaming chat turns\")."
        ),
    }
}

/// The `data:` parts of an event stream that are JSON objects, in order.
pub fn events(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .filter(Value::is_object)
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Deletes the conversation a check's turn made, so the user's list is as it was. Best
/// effort: a conversation left behind is not a failure of the stack.
async fn delete_conversation(probe: &Probe, id: Option<&str>) {
    let Some(id) = id.filter(|id| id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')) else {
        return;
    };
    let Ok(url) = probe.target.page.join(&format!("api/conversations/{id}")) else {
        return;
    };
    let mut request = probe.http.delete(url);
    if let Some(token) = probe.user_token() {
        request = request.bearer_auth(token);
    }
    // A turn's conversation is busy a moment after its answer while its lease is given back.
    for _ in 0..3 {
        match request.try_clone().map(|r| r.send()) {
            Some(send) => match send.await {
                Ok(r) if r.status().as_u16() == 409 => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                _ => return,
            },
            None => return,
        }
    }
}

/// What to do when `POST api/chat` does not reach the chat.
const NOT_ROUTED_FIX: &str = "POST api/chat beside the page must reach the chat function: pass the \
stack's ApiUrl output with its trailing / (docs/deploy-reference.md \"The two URLs\"), or nothing \
for scripts/dev's http://127.0.0.1:3000/.";

/// A turn the chat did not answer: the chat's error `code` (or the front door's `status`)
/// said as what it means, with the fix.
fn refused(
    check: Check,
    probe: &Probe,
    request: &str,
    status: u16,
    code: &str,
    message: &str,
) -> Outcome {
    let seen = if code.is_empty() {
        format!("{request} answered HTTP {status}: {message}")
    } else {
        format!("{request} answered HTTP {status} {code}: {message}")
    };
    let fail = |detail: String, fix: &str| Outcome::fail(check, detail, fix);
    match (status, code) {
        (_, "llm_key_missing") => fail(
            format!("the model key is missing: {request} answered {code}"),
            if probe.is_local() {
                "Give the chat a model: LLM_API_KEY=sk-... scripts/dev, or LLM_BASE_URL=<an \
                 OpenAI-compatible server> scripts/dev, or PARLEY_LLM=stub scripts/dev for the \
                 scripted stand-in (README.md \"A first chat\")."
            } else {
                "Add LLM_API_KEY to the app secret (or set LlmBaseUrl to an OpenAI-compatible \
                 server), then start fresh instances of chat and chat-stream (docs/deploy.md \
                 \"4. The model's key\")."
            },
        ),
        (_, "llm_key_rejected") => fail(
            seen,
            "The model API refuses LLM_API_KEY: put a valid key in the app secret (locally, \
             LLM_API_KEY) and start fresh instances (docs/deploy.md \"4. The model's key\").",
        ),
        (_, "llm_unavailable" | "llm_timeout" | "llm_rate_limited") => fail(
            seen,
            "The chat function gets no answer from the model at LLM_BASE_URL: check that \
             address and the function's way out to it (docs/deploy-reference.md \"The network\", \
             InternetEgress); a rate limit passes by itself.",
        ),
        (_, "database_unavailable" | "database_pool_exhausted") => fail(
            seen,
            "The chat function cannot reach its database: check its subnets and security groups \
             (docs/deploy-reference.md \"When something is wrong\"); a paused Aurora answers at \
             the next try, so run parley check again first.",
        ),
        (_, "host_not_allowed") => fail(
            seen,
            "The chat refuses this host name: add it to the chat's CHAT_ALLOWED_HOSTS \
             (docs/settings.md \"chat\").",
        ),
        (401, _) if probe.user_token().is_none() => Outcome::skip(
            check,
            format!(
                "the chat asks for a signed-in user's token ({request} answered 401): pass one \
                 with --token or {} (docs/deploy.md \"7. Ask\" says where to copy it)",
                super::USER_TOKEN_SETTING
            ),
        ),
        (401, _) => fail(
            seen,
            "Sign in on the page again and pass a fresh access token (--token or \
             PARLEY_USER_TOKEN); if fresh tokens are refused too, the chat's JWT_ISSUER, \
             JWT_AUDIENCE or JWT_JWKS_URL do not match the provider (docs/deploy-reference.md \
             \"When something is wrong\").",
        ),
        (404 | 405, _) => fail(seen, NOT_ROUTED_FIX),
        (500.., _) => fail(
            seen,
            "The chat function failed: its log has the cause (deployed: /aws/lambda/<stack>-chat, \
             docs/deploy-reference.md \"When something is wrong\"; locally: scripts/dev's \
             terminal).",
        ),
        _ => fail(
            seen,
            "docs/api.md \"chat errors\" says what the code means and what to change.",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_counts_as_streamed_only_when_its_end_came_after_its_first_byte() {
        let ms = Duration::from_millis;
        assert!(streamed(ms(30), false, ms(900), false));
        // A cold start before the first byte, then the model's second.
        assert!(streamed(ms(2000), false, ms(3000), false));
        // A buffered answer: the end arrives with the first byte, or right after it.
        assert!(!streamed(ms(900), true, ms(900), false));
        assert!(!streamed(ms(900), false, ms(903), false));
        assert!(!streamed(ms(900), true, ms(900), true));
        // scripts/dev's scripted model answers at once: on this machine, bytes before the end
        // are proof enough.
        assert!(streamed(ms(9), false, ms(10), true));
        assert_eq!(readable(ms(7)), "7 ms");
        assert_eq!(readable(ms(1500)), "1.50 s");
    }

    #[test]
    fn events_are_the_json_data_parts() {
        let body =
            b"data: {\"type\":\"start\",\"messageMetadata\":{\"conversationId\":\"c1\"}}\n\n\
data: {\"type\":\"text-delta\",\"delta\":\"Hi\"}\n\ndata: [DONE]\n\n";
        let parts = events(body);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0]["messageMetadata"]["conversationId"], "c1");
        assert!(contains(body, DONE));
    }
}
