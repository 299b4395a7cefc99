//! Bearer-token auth in front of `/mcp`. The token is compared in constant time so its bytes
//! cannot be learned by timing; without `MCP_AUTH_TOKEN` auth is off (local development only).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use parley_core::config::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::error::HttpError;

/// Middleware: lets the request through only with the configured token.
pub async fn require_bearer(
    State(token): State<Arc<SecretString>>,
    request: Request,
    next: Next,
) -> Result<Response, HttpError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer)
        .ok_or(HttpError::MissingToken)?;
    if !token_matches(token.expose_secret(), presented) {
        tracing::warn!("request refused: invalid bearer token");
        return Err(HttpError::InvalidToken);
    }
    Ok(next.run(request).await)
}

/// The token of an `Authorization` value; the scheme is case-insensitive (RFC 7235).
fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

fn token_matches(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_is_case_insensitive() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
    }

    #[test]
    fn only_the_exact_token_matches() {
        assert!(token_matches("s3cret-token", "s3cret-token"));
        assert!(!token_matches("s3cret-token", "s3cret-toke"));
        assert!(!token_matches("s3cret-token", "S3cret-token"));
    }
}
