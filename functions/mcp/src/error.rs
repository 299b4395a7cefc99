//! The one place the MCP function's own HTTP failures become responses: a status and a JSON
//! body `{"error":{"code","message"}}`. JSON-RPC errors inside MCP are rmcp's to shape, and so
//! are the statuses of its transport's refusals: [`json_transport_errors`] only gives them this
//! body (and makes an unparsable JSON body 400 instead of 415). The direct path
//! (`server/direct.rs`) answers as rmcp's transport would, its two 500s included.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parley_core::jwt::TokenError;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("missing bearer token")]
    MissingToken(Challenge),
    /// The token is neither the service token nor a valid user token; the [`TokenError`] says
    /// why a user token was refused (its message is safe to return).
    #[error("invalid bearer token")]
    InvalidToken(Challenge, Option<TokenError>),
    /// A user token could not be checked: the JWKS cannot be fetched.
    #[error("the keys to verify tokens are unavailable")]
    KeysUnavailable,
    #[error("the database is unavailable")]
    DatabaseUnavailable,
}

/// The `WWW-Authenticate` challenge of a 401: with user tokens it names the protected resource
/// metadata (RFC 9728 §5.1), as MCP clients need to find the authorization server.
#[derive(Debug, Clone, Default)]
pub struct Challenge {
    resource_metadata: Option<Arc<str>>,
}

impl Challenge {
    pub fn new(resource_metadata: Option<String>) -> Self {
        Self {
            resource_metadata: resource_metadata.map(Into::into),
        }
    }

    /// `invalid_token` adds RFC 6750's error code, for a token that was sent and refused.
    fn header(&self, invalid_token: bool) -> HeaderValue {
        let Some(url) = &self.resource_metadata else {
            return HeaderValue::from_static("Bearer realm=\"parley-mcp\"");
        };
        let mut value = format!("Bearer realm=\"parley-mcp\", resource_metadata=\"{url}\"");
        if invalid_token {
            value.push_str(", error=\"invalid_token\"");
        }
        // The URL was parsed from a setting, so it holds no quote or control character.
        HeaderValue::from_str(&value)
            .unwrap_or_else(|_| HeaderValue::from_static("Bearer realm=\"parley-mcp\""))
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let (status, code, message, challenge) = match self {
            HttpError::MissingToken(challenge) => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "send `Authorization: Bearer <token>`".to_owned(),
                Some(challenge.header(false)),
            ),
            HttpError::InvalidToken(challenge, why) => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                why.map_or_else(
                    || "the bearer token is not valid".to_owned(),
                    |e| e.to_string(),
                ),
                Some(challenge.header(true)),
            ),
            HttpError::KeysUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "auth_unavailable",
                "the keys to verify tokens cannot be fetched; retry shortly".to_owned(),
                None,
            ),
            HttpError::DatabaseUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "database_unavailable",
                "the database cannot be reached; retry shortly".to_owned(),
                None,
            ),
        };
        let mut response = parley_core::http::error_response(status, code, &message);
        if let Some(challenge) = challenge {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, challenge);
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
        .is_some_and(parley_core::http::is_json_media_type);
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
