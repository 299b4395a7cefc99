//! Bearer-token auth in front of `/mcp`. The token is compared in constant time so its bytes
//! cannot be learned by timing; without `MCP_AUTH_TOKEN` auth is off (local development only).
//! When the token comes from Secrets Manager, a mismatch fetches it again (rate-limited), so a
//! rotated token is accepted without a cold start and the old one is refused from then on.

use std::sync::{Arc, RwLock};

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use parley_core::config::{ExposeSecret, SecretString};
use parley_core::secrets::Secrets;
use subtle::ConstantTimeEq;

use crate::error::HttpError;

/// The setting (and secret key) holding the token.
const TOKEN_SETTING: &str = "MCP_AUTH_TOKEN";

/// The token requests must present, and where a rotated one comes from.
pub struct BearerAuth {
    token: RwLock<SecretString>,
    secrets: Option<Secrets>,
}

impl BearerAuth {
    pub fn new(token: SecretString, secrets: Option<Secrets>) -> Self {
        Self {
            token: RwLock::new(token),
            secrets,
        }
    }

    fn current(&self) -> SecretString {
        // A poisoned lock only means a panic elsewhere while swapping the value: it is whole.
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether `presented` is the token, fetching the secrets again once on a mismatch.
    pub async fn accepts(&self, presented: &str) -> bool {
        if token_matches(self.current().expose_secret(), presented) {
            return true;
        }
        let Some(secrets) = &self.secrets else {
            return false;
        };
        match secrets.refresh().await {
            Ok(env) => match env.secret(TOKEN_SETTING) {
                Some(token) => {
                    *self.token.write().unwrap_or_else(|p| p.into_inner()) = token;
                }
                // Dropping the setting must not open the endpoint: keep the last token.
                None => tracing::warn!(
                    "the refreshed settings hold no MCP_AUTH_TOKEN; keeping the current one"
                ),
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot fetch the secrets to check a bearer token")
            }
        }
        token_matches(self.current().expose_secret(), presented)
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

fn token_matches(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_matches() {
        assert!(token_matches("s3cret-token", "s3cret-token"));
        assert!(!token_matches("s3cret-token", "s3cret-toke"));
        assert!(!token_matches("s3cret-token", "S3cret-token"));
    }
}
