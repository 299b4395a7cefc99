//! The HTTP conventions both functions share: the `{"error":{"code","message"}}` body of every
//! refusal, reading a bearer token from `Authorization`, and what counts as a JSON body. Which status a failure gets is each
//! function's `error.rs`'s choice, not this module's.

use axum::body::Body;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::response::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;

/// The JSON text `{"error":{"code":..,"message":..}}`.
pub fn error_body(code: &str, message: &str) -> String {
    serde_json::json!({"error": {"code": code, "message": message}}).to_string()
}

/// The error body with fields of its own beside `error` (e.g. the conversation a failed turn
/// was stored in, so the client retries there).
pub fn error_body_with(
    code: &str,
    message: &str,
    beside: serde_json::Map<String, serde_json::Value>,
) -> String {
    let mut body = beside;
    body.insert(
        "error".into(),
        serde_json::json!({"code": code, "message": message}),
    );
    serde_json::Value::Object(body).to_string()
}

/// `Content-Type` names JSON, parameters aside (rmcp's own test; `application/jsonx` is not).
pub fn is_json_media_type(value: &str) -> bool {
    let essence = value.split_once(';').map_or(value, |(essence, _)| essence);
    essence.trim().eq_ignore_ascii_case("application/json")
}

/// A response with `status` and the error body.
pub fn error_response(status: StatusCode, code: &str, message: &str) -> Response {
    let mut response = Response::new(Body::empty());
    *response.status_mut() = status;
    let (parts, _) = response.into_parts();
    with_error_body(parts, code, message)
}

/// `parts` (status and headers kept, e.g. `Allow` or `WWW-Authenticate`) with the error body in
/// place of whatever body they had.
pub fn with_error_body(mut parts: Parts, code: &str, message: &str) -> Response {
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(error_body(code, message)))
}

/// The token of an `Authorization` value; the scheme is case-insensitive (RFC 7235). `None`
/// for another scheme or an empty token.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_and_case_aside_only_application_json_is_json() {
        assert!(is_json_media_type("application/json"));
        assert!(is_json_media_type("Application/JSON; charset=utf-8"));
        assert!(!is_json_media_type("application/jsonx"));
        assert!(!is_json_media_type("text/plain"));
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }

    #[tokio::test]
    async fn an_error_response_is_the_json_envelope() {
        let response = error_response(StatusCode::CONFLICT, "busy", "say \"later\"");
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"error": {"code": "busy", "message": "say \"later\""}})
        );
    }
}
