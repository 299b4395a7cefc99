//! The one place the MCP function's own HTTP failures become responses: a status and a JSON
//! body `{"error":{"code","message"}}`. JSON-RPC errors inside MCP are rmcp's to shape, and so
//! are the statuses of its transport's refusals: [`json_transport_errors`] only gives them this
//! body (and makes an unparsable JSON body 400 instead of 415). The direct path
//! (`server/fast.rs`) answers as rmcp's transport would, its two 500s included.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("missing bearer token")]
    MissingToken,
    #[error("invalid bearer token")]
    InvalidToken,
    #[error("the database is unavailable")]
    DatabaseUnavailable,
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            HttpError::MissingToken => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "send `Authorization: Bearer <token>`",
            ),
            HttpError::InvalidToken => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "the bearer token is not valid",
            ),
            HttpError::DatabaseUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the database cannot be reached; retry shortly",
            ),
        };
        let mut response = parley_core::http::error_response(status, code, message);
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"parley-mcp\""),
            );
        }
        response
    }
}

/// rmcp answers transport-level refusals (Host not allowed, body too large, wrong media type)
/// in plain text; this rewrites them into the same JSON envelope as every other HTTP error, so
/// clients parse one shape. JSON-RPC responses (already JSON) pass through untouched.
pub async fn json_transport_errors(request: Request, next: Next) -> Response {
    let sent_json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(crate::server::is_json_media_type);
    let response = next.run(request).await;
    let mut status = response.status();
    // rmcp answers a body it cannot parse with 415 even when the media type was right; for the
    // client that is a malformed request.
    let unparsable = sent_json && status == StatusCode::UNSUPPORTED_MEDIA_TYPE;
    if unparsable {
        status = StatusCode::BAD_REQUEST;
    }
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    // These bodies are one short sentence; anything longer is cut rather than buffered.
    let text = match axum::body::to_bytes(body, 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_owned(),
        Err(_) => String::new(),
    };
    let code = match status {
        _ if unparsable => "parse_error",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::NOT_ACCEPTABLE => "not_acceptable",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let message = if status.is_server_error() || text.is_empty() {
        status.canonical_reason().unwrap_or("error").to_owned()
    } else {
        text
    };
    let mut response = parley_core::http::with_error_body(parts, code, &message);
    *response.status_mut() = status;
    response
}
