//! Bearer-token auth in front of `/mcp`. The token is compared in constant time so its bytes
//! cannot be learned by timing; without `MCP_AUTH_TOKEN` auth is off (local development only).
//! When the token comes from Secrets Manager it is a [`RotatingSecret`]: a mismatch fetches it
//! again (rate-limited), so a rotated token is accepted without a cold start, and it is fetched
//! again once older than `SECRETS_TTL_MS`, so a rotated-out token is refused within that time.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use parley_core::config::{ExposeSecret, SecretString};
use parley_core::secrets::{RotatingSecret, Secrets};
use subtle::ConstantTimeEq;

use crate::error::HttpError;

/// The setting (and secret key) holding the token.
const TOKEN_SETTING: &str = "MCP_AUTH_TOKEN";

/// The token requests must present.
pub struct BearerAuth {
    token: RotatingSecret,
}

impl BearerAuth {
    pub fn new(token: SecretString, secrets: Option<Secrets>) -> Self {
        Self {
            token: RotatingSecret::new(TOKEN_SETTING, Some(token), secrets),
        }
    }

    /// Whether `presented` is the token, fetching the secrets again once on a mismatch.
    pub async fn accepts(&self, presented: &str) -> bool {
        let (generation, token) = self.token.current().await;
        if token_matches(token.as_ref(), presented) {
            return true;
        }
        self.token.renew(generation).await && token_matches(self.token.peek().1.as_ref(), presented)
    }
}

/// Middleware: lets the request through only with the configured token.
pub async fn require_bearer(
    State(auth): State<Arc<BearerAuth>>,
    request: Request,
    next: Next,
) -> Result<Response, HttpError> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(parley_core::http::bearer_token)
        .ok_or(HttpError::MissingToken)?;
    if !auth.accepts(presented).await {
        tracing::warn!("request refused: invalid bearer token");
        return Err(HttpError::InvalidToken);
    }
    Ok(next.run(request).await)
}

fn token_matches(expected: Option<&SecretString>, presented: &str) -> bool {
    expected.is_some_and(|t| {
        t.expose_secret()
            .as_bytes()
            .ct_eq(presented.as_bytes())
            .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_matches() {
        let token = SecretString::from("s3cret-token");
        assert!(token_matches(Some(&token), "s3cret-token"));
        assert!(!token_matches(Some(&token), "s3cret-toke"));
        assert!(!token_matches(Some(&token), "S3cret-token"));
        assert!(!token_matches(None, ""));
    }
}
