//! The HTTP client under the MCP transport: reqwest's, with URLs taken out of its errors, and
//! each tool call's caller assertion moved out of the message into that one POST's
//! `Authorization` header. It must not keep an assertion beyond the call that lent it.
//!
//! The message never holds the assertion itself, only a reference (`_meta["parley/caller"]`)
//! to [`Assertions`]: rmcp may log whole messages (at trace level, when `RUST_LOG` names it),
//! and a reference means nothing outside this instance or after its call.
//!
//! With traces on (docs/tracing.md), a call to the `parley` server (`MCP_URL`) carries its
//! span's W3C trace context the same way: [`lend_trace_context`] puts `traceparent` (and
//! `tracestate`) in its `_meta` where the call is made, since the POST itself is sent from
//! rmcp's worker task, outside the call's span; here they become that POST's headers. Servers
//! of `MCP_SERVERS` never receive them: a trace id joins their logs to ours.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use parley_core::config::{ExposeSecret, SecretString};
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::Value;

/// The `_meta` key of a `tools/call` that refers to its caller assertion; removed before the
/// message is sent.
pub(super) const CALLER_META: &str = parley_wire::META_CALLER;

/// The `_meta` keys of a `tools/call` that carry its W3C trace context to this client; the
/// names MCP's trace-context proposal gives them. Removed before the message is sent.
const TRACE_META: [&str; 2] = ["traceparent", "tracestate"];

/// Puts the current span's trace context in a `tools/call`'s `meta` when traces are on; the
/// caller does so only for the `parley` server.
pub(super) fn lend_trace_context(meta: &mut serde_json::Map<String, Value>) {
    if !parley_core::telemetry::traces::enabled() {
        return;
    }
    let mut headers = reqwest::header::HeaderMap::new();
    parley_core::telemetry::traces::inject_current(&mut headers);
    for name in TRACE_META {
        if let Some(value) = headers.get(name).and_then(|v| v.to_str().ok()) {
            meta.insert(name.into(), value.into());
        }
    }
}

/// Assertions lent to the tool calls in flight, by reference. One per instance, shared by the
/// `parley` server's connections.
#[derive(Clone, Default)]
pub(super) struct Assertions {
    lent: Arc<Mutex<HashMap<u64, SecretString>>>,
    next: Arc<AtomicU64>,
}

impl Assertions {
    /// A slot for one call's assertion, emptied when the call ends (the [`Lent`] is dropped,
    /// also when its future is abandoned at the turn's deadline).
    pub(super) fn lend(&self) -> Lent {
        Lent {
            table: self.clone(),
            id: self.next.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn get(&self, reference: &str) -> Option<SecretString> {
        let id: u64 = reference.strip_prefix("assertion-")?.parse().ok()?;
        self.table().get(&id).cloned()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, SecretString>> {
        // The table holds no invariant a panicking holder could break.
        self.lent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One call's slot in [`Assertions`].
pub(super) struct Lent {
    table: Assertions,
    id: u64,
}

impl Lent {
    /// What the call's `_meta["parley/caller"]` says.
    pub(super) fn reference(&self) -> String {
        format!("assertion-{}", self.id)
    }

    /// The assertion the next attempt sends (each attempt signs a fresh one).
    pub(super) fn set(&self, assertion: String) {
        self.table
            .table()
            .insert(self.id, SecretString::from(assertion));
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.table.table().remove(&self.id);
    }
}

/// reqwest's client as the transport uses it. `MCP_URL` may carry a credential in its query
/// string and the transport's errors reach the log, rmcp's own included, so URLs are taken out
/// of errors (`reqwest::Error::without_url`), as the LLM client does. With `assertions` (the
/// `parley` server only), a `tools/call` that refers to an assertion is sent with it as its
/// bearer token instead of the service token. Only the methods the transport calls are passed
/// through; the rest keep the trait's defaults.
#[derive(Clone)]
pub(super) struct UrlFree {
    http: reqwest::Client,
    assertions: Option<Assertions>,
}

impl UrlFree {
    pub(super) fn new(http: reqwest::Client, assertions: Option<Assertions>) -> Self {
        Self { http, assertions }
    }

    /// The bearer token for `message`: its caller's assertion when it is a `tools/call` that
    /// refers to one (the reference is removed from the message), else `auth_header`. A
    /// reference that is no longer lent (its call ended) sends no token at all: never the
    /// service token in a user's place.
    fn bearer_for(
        &self,
        message: &mut ClientJsonRpcMessage,
        auth_header: Option<String>,
    ) -> Option<String> {
        let JsonRpcMessage::Request(request) = message else {
            return auth_header;
        };
        let ClientRequest::CallToolRequest(call) = &mut request.request else {
            return auth_header;
        };
        let Some(reference) = call
            .params
            .meta
            .as_mut()
            .and_then(|meta| meta.remove(CALLER_META))
        else {
            return auth_header;
        };
        let assertion = match (&self.assertions, reference) {
            (Some(assertions), Value::String(reference)) => assertions.get(&reference),
            _ => None,
        };
        assertion.map(|a| a.expose_secret().to_owned())
    }

    /// `custom_headers` with the trace context a `tools/call` carries in its `_meta` (taken
    /// out of the message), for the `parley` server only.
    fn with_trace_context(
        &self,
        message: &mut ClientJsonRpcMessage,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HashMap<HeaderName, HeaderValue> {
        let JsonRpcMessage::Request(request) = message else {
            return custom_headers;
        };
        let ClientRequest::CallToolRequest(call) = &mut request.request else {
            return custom_headers;
        };
        let Some(meta) = call.params.meta.as_mut() else {
            return custom_headers;
        };
        for name in TRACE_META {
            let Some(Value::String(value)) = meta.remove(name) else {
                continue;
            };
            if self.assertions.is_none() {
                continue;
            }
            if let Ok(value) = HeaderValue::from_str(&value) {
                custom_headers.insert(HeaderName::from_static(name), value);
            }
        }
        custom_headers
    }
}

type HttpResult<T> = Result<T, StreamableHttpError<reqwest::Error>>;
type SseStream = BoxStream<'static, Result<sse_stream::Sse, SseError>>;

fn url_free<T>(result: HttpResult<T>) -> HttpResult<T> {
    result.map_err(|e| match e {
        StreamableHttpError::Client(e) => StreamableHttpError::Client(e.without_url()),
        other => other,
    })
}

impl StreamableHttpClient for UrlFree {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<StreamableHttpPostResponse> {
        // As reqwest's own client does: the default limits.
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        mut message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> HttpResult<StreamableHttpPostResponse> {
        let bearer = self.bearer_for(&mut message, auth_header);
        let custom_headers = self.with_trace_context(&mut message, custom_headers);
        url_free(
            self.http
                .post_message_with_response_limits(
                    uri,
                    message,
                    session_id,
                    bearer,
                    custom_headers,
                    limits,
                )
                .await,
        )
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<()> {
        url_free(
            self.http
                .delete_session(uri, session_id, auth_header, custom_headers)
                .await,
        )
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> HttpResult<SseStream> {
        self.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default().max_sse_event_size,
        )
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> HttpResult<SseStream> {
        url_free(
            self.http
                .get_stream_with_max_sse_event_size(
                    uri,
                    session_id,
                    last_event_id,
                    auth_header,
                    custom_headers,
                    max_sse_event_size,
                )
                .await,
        )
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolRequest, CallToolRequestParams, MetaObject, RequestMetaObject};
    use serde_json::{Map, json};

    use super::*;

    fn call_with_meta(meta: Value) -> ClientJsonRpcMessage {
        let mut params = CallToolRequestParams::new("create_task");
        params.meta = Some(RequestMetaObject(MetaObject(
            meta.as_object().unwrap().clone(),
        )));
        ClientJsonRpcMessage::request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            rmcp::model::RequestId::Number(1),
        )
    }

    fn sent_meta(message: &ClientJsonRpcMessage) -> Map<String, Value> {
        let json = serde_json::to_value(message).unwrap();
        json["params"]["_meta"]
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn a_lent_assertion_becomes_the_bearer_and_leaves_the_message() {
        let assertions = Assertions::default();
        let client = UrlFree::new(reqwest::Client::new(), Some(assertions.clone()));
        let lent = assertions.lend();
        lent.set("user-jwt".into());
        let mut message = call_with_meta(json!({
            CALLER_META: lent.reference(),
            "parley/idempotency_key": "t:c1"
        }));
        let bearer = client.bearer_for(&mut message, Some("service-token".into()));
        assert_eq!(bearer.as_deref(), Some("user-jwt"));
        let meta = sent_meta(&message);
        assert!(!meta.contains_key(CALLER_META), "{meta:?}");
        assert_eq!(meta["parley/idempotency_key"], "t:c1");
    }

    #[test]
    fn an_ended_call_or_a_server_without_assertions_never_sends_the_service_token_instead() {
        let assertions = Assertions::default();
        let lent = assertions.lend();
        lent.set("user-jwt".into());
        let reference = lent.reference();
        drop(lent);
        let with = UrlFree::new(reqwest::Client::new(), Some(assertions));
        let mut message = call_with_meta(json!({ CALLER_META: reference.clone() }));
        assert_eq!(with.bearer_for(&mut message, Some("service".into())), None);

        let without = UrlFree::new(reqwest::Client::new(), None);
        let mut message = call_with_meta(json!({ CALLER_META: reference }));
        assert_eq!(
            without.bearer_for(&mut message, Some("service".into())),
            None
        );
        assert!(!sent_meta(&message).contains_key(CALLER_META));
    }

    #[test]
    fn other_messages_keep_the_service_token() {
        let client = UrlFree::new(reqwest::Client::new(), Some(Assertions::default()));
        let mut message = call_with_meta(json!({"parley/idempotency_key": "k"}));
        assert_eq!(
            client.bearer_for(&mut message, Some("service".into())),
            Some("service".into())
        );
        let mut list = ClientJsonRpcMessage::request(
            ClientRequest::ListToolsRequest(Default::default()),
            rmcp::model::RequestId::Number(2),
        );
        assert_eq!(
            client.bearer_for(&mut list, Some("service".into())),
            Some("service".into())
        );
    }

    #[test]
    fn the_trace_context_becomes_headers_for_the_parley_server_only_and_leaves_the_message() {
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let meta = || {
            call_with_meta(json!({
                "traceparent": traceparent,
                "tracestate": "vendor=1",
                "parley/idempotency_key": "t:c1"
            }))
        };

        let parley = UrlFree::new(reqwest::Client::new(), Some(Assertions::default()));
        let mut message = meta();
        let headers = parley.with_trace_context(&mut message, HashMap::new());
        assert_eq!(
            headers[&HeaderName::from_static("traceparent")],
            traceparent
        );
        assert_eq!(headers[&HeaderName::from_static("tracestate")], "vendor=1");
        let sent = sent_meta(&message);
        assert!(!sent.contains_key("traceparent") && !sent.contains_key("tracestate"));
        assert_eq!(sent["parley/idempotency_key"], "t:c1");

        // A server of MCP_SERVERS: neither the headers nor the keys reach it.
        let other = UrlFree::new(reqwest::Client::new(), None);
        let mut message = meta();
        let headers = other.with_trace_context(&mut message, HashMap::new());
        assert!(headers.is_empty(), "{headers:?}");
        let sent = sent_meta(&message);
        assert!(!sent.contains_key("traceparent") && !sent.contains_key("tracestate"));
    }

    #[test]
    fn with_traces_off_no_trace_context_is_lent() {
        let mut meta = serde_json::Map::new();
        lend_trace_context(&mut meta);
        assert!(meta.is_empty(), "{meta:?}");
    }
}
