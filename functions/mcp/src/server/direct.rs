//! The direct path for `tools/call` and `tools/list`, nearly all of the traffic: answered in
//! the request's own task, where rmcp's stateless mode builds a service per request (two tasks
//! and their channels). A request takes it only when rmcp would accept every header as sent;
//! anything else goes to rmcp's `StreamableHttpService` untouched, so its answers stay rmcp's.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use axum::response::IntoResponse;
use rmcp::model::{
    CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, GetMeta, JsonObject,
    ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::common::http_header::{
    EVENT_STREAM_MIME_TYPE, HEADER_MCP_PROTOCOL_VERSION, JSON_MIME_TYPE,
};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;

use super::ParleyMcp;
use crate::auth;
use crate::config::McpConfig;
use parley_core::http::is_json_media_type;

type Transport = StreamableHttpService<ParleyMcp, NeverSessionManager>;

/// The service mounted at `/mcp`: the direct path in front of rmcp's transport.
#[derive(Clone)]
pub struct McpService(Arc<Inner>);

struct Inner {
    handler: ParleyMcp,
    transport: Transport,
    /// `None` when `MCP_ALLOWED_HOSTS=*`.
    allowed_hosts: Option<Vec<Authority>>,
    max_body_bytes: usize,
}

/// A request the direct path answers.
enum Direct {
    List,
    /// The call and its request `_meta` (which rmcp's parser keeps apart from the params).
    Call(CallToolRequestParams, JsonObject),
}

impl McpService {
    pub(super) fn new(config: &McpConfig, handler: ParleyMcp, transport: Transport) -> Self {
        let allowed_hosts = config
            .allowed_hosts
            .as_ref()
            .map(|hosts| hosts.iter().filter_map(|h| Authority::allowed(h)).collect());
        Self(Arc::new(Inner {
            handler,
            transport,
            allowed_hosts,
            max_body_bytes: config.max_body_bytes,
        }))
    }
}

impl tower::Service<Request<Body>> for McpService {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send + 'static>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let inner = self.0.clone();
        Box::pin(async move { Ok(inner.serve(request).await) })
    }
}

impl Inner {
    async fn serve(&self, request: Request<Body>) -> axum::response::Response {
        if !self.headers_pass_as_sent(request.method(), request.headers()) {
            return self.to_rmcp(request).await;
        }
        let (parts, body) = request.into_parts();
        // The length was checked against the limit; hyper holds the body to it.
        let bytes = match axum::body::to_bytes(body, self.max_body_bytes).await {
            Ok(bytes) => bytes,
            Err(e) => {
                // rmcp's answer to a body that breaks off.
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("Failed to read request body: {e}"),
                )
                    .into_response();
            }
        };
        match direct_request(&bytes) {
            Some((id, direct)) => {
                let request_id = super::request_id(&parts);
                self.answer(id, direct, &auth::caller_of(&parts), &request_id)
                    .await
            }
            None => {
                self.to_rmcp(Request::from_parts(parts, Body::from(bytes)))
                    .await
            }
        }
    }

    async fn to_rmcp(&self, request: Request<Body>) -> axum::response::Response {
        self.transport.handle(request).await.map(Body::new)
    }

    /// True when rmcp's transport checks (Host, Origin, method, `Accept`, `Content-Type`, body
    /// size, `MCP-Protocol-Version`) would all pass and need no body to decide. Deliberately
    /// narrower than rmcp: a request this does not recognise is rmcp's to judge.
    fn headers_pass_as_sent(&self, method: &Method, headers: &HeaderMap) -> bool {
        method == Method::POST
            && self.host_is_allowed(headers)
            // rmcp's Origin rules are not repeated here; browsers' requests go to rmcp.
            && !headers.contains_key(header::ORIGIN)
            && accepts_json_and_sse(headers)
            && single(headers, header::CONTENT_TYPE.as_str()).is_some_and(is_json_media_type)
            && single(headers, header::CONTENT_LENGTH.as_str())
                .and_then(|len| len.parse::<usize>().ok())
                .is_some_and(|len| len <= self.max_body_bytes)
            && legacy_protocol_version(headers)
    }

    fn host_is_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(host) = single(headers, header::HOST.as_str()) else {
            return false;
        };
        let Ok(authority) = http::uri::Authority::try_from(host) else {
            return false;
        };
        let host = Authority::new(authority.host(), authority.port_u16());
        match &self.allowed_hosts {
            None => true,
            Some(allowed) => {
                allowed.is_empty()
                    || allowed
                        .iter()
                        .any(|a| a.host == host.host && a.port.is_none_or(|p| host.port == Some(p)))
            }
        }
    }

    async fn answer(
        &self,
        id: RequestId,
        direct: Direct,
        caller: &auth::Caller,
        request_id: &str,
    ) -> axum::response::Response {
        let result = match direct {
            Direct::List => Ok(ServerResult::ListToolsResult(self.handler.list())),
            Direct::Call(params, meta) => self
                .handler
                .call(params, &meta, caller, request_id)
                .await
                .map(ServerResult::CallToolResult),
        };
        let message = match result {
            Ok(mut result) => {
                // What rmcp's handler does for every peer before 2026-07-28, the only ones
                // this path serves.
                result.strip_result_type_for_legacy_peer();
                result.strip_non_object_output_for_legacy_peer();
                ServerJsonRpcMessage::response(result, id)
            }
            Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
        };
        // rmcp's stateless JSON response: 200 and `application/json`, errors included.
        match serde_json::to_vec(&message) {
            Ok(body) => {
                ([(header::CONTENT_TYPE, JSON_MIME_TYPE)], Body::from(body)).into_response()
            }
            Err(e) => {
                tracing::error!("Internal server error when serialize json response: {e}");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("Encounter an error when serialize json response: {e}"),
                )
                    .into_response()
            }
        }
    }
}

/// The request, when it is a `tools/call` or `tools/list` without per-request protocol
/// metadata (those negotiate per request: rmcp's).
fn direct_request(body: &[u8]) -> Option<(RequestId, Direct)> {
    let ClientJsonRpcMessage::Request(request) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    let meta = request.request.get_meta();
    if meta.protocol_version().is_some() {
        return None;
    }
    let meta = meta.0.0.clone();
    let direct = match request.request {
        ClientRequest::CallToolRequest(call) => Direct::Call(call.params, meta),
        ClientRequest::ListToolsRequest(_) => Direct::List,
        _ => return None,
    };
    Some((request.id, direct))
}

/// The header's only value as text; `None` when absent, repeated or not text.
fn single<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// MCP requires a client to accept both; entries with parameters or quotes (weights) are
/// left to rmcp's parser.
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains([';', '"']) {
            return false;
        }
        for essence in value.split(',').map(str::trim) {
            json |= essence.eq_ignore_ascii_case(JSON_MIME_TYPE);
            sse |= essence.eq_ignore_ascii_case(EVENT_STREAM_MIME_TYPE);
        }
    }
    json && sse
}

/// No `MCP-Protocol-Version` (rmcp assumes 2025-03-26), or one known version before
/// 2026-07-28, the revision that moves the lifecycle and headers into every request.
fn legacy_protocol_version(headers: &HeaderMap) -> bool {
    if !headers.contains_key(HEADER_MCP_PROTOCOL_VERSION) {
        return true;
    }
    single(headers, HEADER_MCP_PROTOCOL_VERSION).is_some_and(|version| {
        version < ProtocolVersion::V_2026_07_28.as_str()
            && ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .any(|known| known.as_str() == version)
    })
}

/// A host and optional port compared as rmcp does: brackets off, lower case, and an allowed
/// entry without a port matches any port.
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn new(host: &str, port: Option<u16>) -> Self {
        Self {
            host: host
                .trim_matches('[')
                .trim_matches(']')
                .to_ascii_lowercase(),
            port,
        }
    }

    fn allowed(entry: &str) -> Option<Self> {
        let entry = entry.trim();
        if entry.is_empty() {
            return None;
        }
        Some(match http::uri::Authority::try_from(entry) {
            Ok(a) => Self::new(a.host(), a.port_u16()),
            Err(_) => Self::new(entry, None),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn weighted_or_quoted_accept_headers_are_left_to_rmcp() {
        assert!(accepts_json_and_sse(&headers(&[(
            "accept",
            "application/json, text/event-stream"
        )])));
        assert!(accepts_json_and_sse(&headers(&[
            ("accept", "Application/JSON"),
            ("accept", "text/event-stream")
        ])));
        assert!(!accepts_json_and_sse(&headers(&[(
            "accept",
            "application/json"
        )])));
        assert!(!accepts_json_and_sse(&headers(&[(
            "accept",
            "application/json;q=0, text/event-stream"
        )])));
        assert!(!accepts_json_and_sse(&headers(&[(
            "accept",
            "application/json, text/event-stream;x=\"a,b\""
        )])));
    }

    #[test]
    fn only_known_versions_before_2026_07_28_take_the_direct_path() {
        assert!(legacy_protocol_version(&headers(&[])));
        for v in ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"] {
            assert!(
                legacy_protocol_version(&headers(&[("mcp-protocol-version", v)])),
                "{v}"
            );
        }
        for v in ["2026-07-28", "2025-01-01", "latest"] {
            assert!(
                !legacy_protocol_version(&headers(&[("mcp-protocol-version", v)])),
                "{v}"
            );
        }
        assert!(!legacy_protocol_version(&headers(&[
            ("mcp-protocol-version", "2025-06-18"),
            ("mcp-protocol-version", "2025-06-18")
        ])));
    }
}
