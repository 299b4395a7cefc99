//! Who is calling `/mcp`: a [`Caller`] verified from the bearer token, put in the request's
//! extensions before either the direct path or rmcp's sees the request. Nothing else (no other
//! header, no argument) ever names the caller.
//!
//! The service token (`MCP_AUTH_TOKEN`) is compared in constant time so its bytes cannot be
//! learned by timing. When it comes from Secrets Manager it is a [`RotatingSecret`]: a mismatch
//! fetches it again (rate-limited), so a rotated token is accepted without a cold start, and it
//! is fetched again once older than `SECRETS_TTL_MS`, so a rotated-out token is refused within
//! that time. User tokens are JWTs verified by `parley_core::jwt` with the chat's settings, and
//! only when those settings are configured; then [`metadata`] tells clients where to get one.
//! Without either, auth is off (local development only) and every request is the service.

pub mod metadata;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use parley_core::config::{ExposeSecret, SecretString};
use parley_core::jwt::{TokenError, Verifier};
use parley_core::secrets::{RotatingSecret, Secrets};
use subtle::ConstantTimeEq;

use crate::config::McpConfig;
use crate::error::{Challenge, HttpError};

/// The setting (and secret key) holding the service token.
const TOKEN_SETTING: &str = "MCP_AUTH_TOKEN";

/// The verified caller of one request, in its extensions: the engine's own type, which it
/// runs a call for.
pub use parley_tools::call::Caller;

/// The caller [`authenticate`] recorded in a request's extensions; the service when none is
/// there (auth off).
pub fn caller_of(request: &axum::http::request::Parts) -> Caller {
    request
        .extensions
        .get::<Caller>()
        .cloned()
        .unwrap_or(Caller::Service)
}

/// The service token requests may present.
struct BearerAuth {
    token: RotatingSecret,
}

impl BearerAuth {
    fn new(token: SecretString, secrets: Option<Secrets>) -> Self {
        Self {
            token: RotatingSecret::new(TOKEN_SETTING, Some(token), secrets),
        }
    }

    /// Whether `presented` is the token as currently held (no fetch unless it is stale), and
    /// the generation it was compared with.
    async fn matches_current(&self, presented: &str) -> (bool, u64) {
        let (generation, token) = self.token.current().await;
        (token_matches(token.as_ref(), presented), generation)
    }

    /// After a mismatch with generation `used`: whether `presented` is the token now, fetching
    /// the secrets again if no newer value is held yet (rate-limited).
    async fn matches_renewed(&self, presented: &str, used: u64) -> bool {
        self.token.renew(used).await && token_matches(self.token.peek().1.as_ref(), presented)
    }
}

/// Turns the `Authorization` header into a [`Caller`]. Built once per instance: the verifier's
/// JWKS cache then serves every request of a warm instance.
pub struct Authenticator {
    service: Option<BearerAuth>,
    /// The chat's caller assertions (`MCP_CALLER_KEY`).
    assertions: Option<Verifier>,
    users: Option<Verifier>,
    /// What a 401 says: with user tokens, where the protected resource metadata is.
    challenge: Challenge,
}

impl Authenticator {
    /// `http` fetches the JWKS (no request is made here).
    pub fn new(config: &McpConfig, secrets: Option<Secrets>, http: reqwest::Client) -> Self {
        let users = config.users.as_ref();
        Self {
            service: config
                .auth_token
                .clone()
                .map(|token| BearerAuth::new(token, secrets)),
            assertions: config.caller_key.clone().map(|key| {
                Verifier::new(
                    parley_core::jwt::assertion::verifier_config(key),
                    http.clone(),
                )
            }),
            users: users.map(|u| Verifier::new(u.jwt.clone(), http)),
            challenge: Challenge::new(users.map(|u| metadata::document_url(&u.resource))),
        }
    }

    /// True when neither a service token nor user tokens are configured: anyone may call as
    /// the service (local development). Caller assertions may still be on, so the chat's
    /// users reach caller-bound tools under `scripts/dev`.
    pub fn is_open(&self) -> bool {
        self.service.is_none() && self.users.is_none()
    }

    /// The caller behind an `Authorization` header value (`None` when absent).
    pub async fn caller(&self, authorization: Option<&HeaderValue>) -> Result<Caller, HttpError> {
        let presented = authorization
            .and_then(|v| v.to_str().ok())
            .and_then(parley_core::http::bearer_token);
        if self.is_open() {
            // An assertion is still verified: a bad one is refused, not served as the service.
            return match (&self.assertions, presented) {
                (Some(verifier), Some(token)) if looks_like_jwt(token) => {
                    match verifier.verify(token).await {
                        Ok(verified) => Ok(Caller::User(verified)),
                        Err(e) => {
                            tracing::warn!(why = %e, "request refused: caller assertion not valid");
                            Err(HttpError::InvalidToken(self.challenge.clone(), Some(e)))
                        }
                    }
                }
                _ => Ok(Caller::Service),
            };
        }
        let presented = presented.ok_or_else(|| HttpError::MissingToken(self.challenge.clone()))?;
        let mut service_generation = None;
        if let Some(service) = &self.service {
            let (matches, generation) = service.matches_current(presented).await;
            if matches {
                return Ok(Caller::Service);
            }
            service_generation = Some(generation);
        }
        let mut refused = None;
        // An assertion is checked with one HMAC and no network, so it goes before the
        // identity provider's keys; its issuer and audience are Parley's own, so a token from
        // the provider never passes as one (nor the reverse).
        if let Some(verifier) = &self.assertions
            && looks_like_jwt(presented)
        {
            match verifier.verify(presented).await {
                Ok(verified) => return Ok(Caller::User(verified)),
                // A token naming the chat as its issuer is an assertion or nothing: its own
                // refusal (expired, say) is the one to report, not that the identity
                // provider's keys do not verify it either.
                Err(e) if parley_core::jwt::assertion::claims_to_be_one(presented) => {
                    tracing::warn!(why = %e, "request refused: caller assertion not valid");
                    return Err(HttpError::InvalidToken(self.challenge.clone(), Some(e)));
                }
                Err(e) => refused = Some(e),
            }
        }
        if let Some(verifier) = &self.users
            && looks_like_jwt(presented)
        {
            match verifier.verify(presented).await {
                Ok(verified) => return Ok(Caller::User(verified)),
                Err(TokenError::KeysUnavailable(why)) => {
                    tracing::warn!(%why, "user token not verified: the JWKS is unavailable");
                    return Err(HttpError::KeysUnavailable);
                }
                Err(e) => refused = Some(e),
            }
        }
        // Last: a service token rotated since it was read. The fetch is rate-limited,
        // so refused tokens cannot hammer Secrets Manager.
        if let (Some(service), Some(used)) = (&self.service, service_generation)
            && service.matches_renewed(presented, used).await
        {
            return Ok(Caller::Service);
        }
        match &refused {
            Some(why) => tracing::warn!(%why, "request refused: user token not valid"),
            None => tracing::warn!("request refused: invalid bearer token"),
        }
        Err(HttpError::InvalidToken(self.challenge.clone(), refused))
    }
}

/// Middleware in front of all of `/mcp`: refuses the request or records its [`Caller`].
pub async fn authenticate(
    State(auth): State<Arc<Authenticator>>,
    mut request: Request,
    next: Next,
) -> Result<Response, HttpError> {
    let caller = auth
        .caller(request.headers().get(header::AUTHORIZATION))
        .await?;
    request.extensions_mut().insert(caller);
    Ok(next.run(request).await)
}

/// Three base64url segments: the compact JWS form. A service token that is not shaped like
/// this never reaches the verifier.
fn looks_like_jwt(token: &str) -> bool {
    let segments: Vec<&str> = token.split('.').collect();
    segments.len() == 3 && segments[..2].iter().all(|s| !s.is_empty())
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
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
    use parley_core::config::Env;
    use serde_json::json;

    use super::*;
    use parley_core::jwt::VerifiedClaims;

    const SECRET: &str = "a-test-secret-that-is-at-least-32-bytes-long";

    fn authenticator(pairs: &[(&str, &str)]) -> Authenticator {
        let mut all = vec![
            ("DATABASE_URL", "postgres://u@localhost/db"),
            ("TOOLS_FILE", "tools.toml"),
        ];
        all.extend_from_slice(pairs);
        let config = McpConfig::from_env(&Env::from_pairs(all)).unwrap();
        Authenticator::new(&config, None, reqwest::Client::new())
    }

    async fn caller(auth: &Authenticator, token: &str) -> Result<Caller, HttpError> {
        let header = HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
        auth.caller(Some(&header)).await
    }

    #[tokio::test]
    async fn the_service_token_is_the_service_and_a_verified_jwt_is_its_user() {
        let auth = authenticator(&[
            ("MCP_AUTH_TOKEN", "service-token"),
            ("JWT_SECRET", SECRET),
            ("MCP_RESOURCE_URL", "https://api.example/mcp"),
        ]);
        assert_eq!(
            caller(&auth, "service-token").await.unwrap(),
            Caller::Service
        );
        let claims = json!({"sub": "user-7", "email": "u@example.com",
                            "exp": get_current_timestamp() + 600});
        let jwt = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        match caller(&auth, &jwt).await.unwrap() {
            Caller::User(VerifiedClaims { subject, claims }) => {
                assert_eq!(subject, "user-7");
                assert_eq!(claims["email"], "u@example.com");
            }
            other => panic!("expected a user, got {other:?}"),
        }
        assert!(matches!(
            caller(&auth, "service-tokenx").await,
            Err(HttpError::InvalidToken(_, None))
        ));
    }

    #[tokio::test]
    async fn with_auth_off_every_request_is_the_service_and_without_jwt_settings_no_user() {
        let open = authenticator(&[]);
        assert!(open.is_open());
        assert_eq!(open.caller(None).await.unwrap(), Caller::Service);

        let service_only = authenticator(&[("MCP_AUTH_TOKEN", "service-token")]);
        let jwt = encode(
            &Header::new(Algorithm::HS256),
            &json!({"sub": "u", "exp": get_current_timestamp() + 600}),
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        assert!(matches!(
            caller(&service_only, &jwt).await,
            Err(HttpError::InvalidToken(_, None))
        ));
    }

    #[tokio::test]
    async fn a_chat_assertion_is_its_user_and_needs_the_caller_key() {
        use parley_core::jwt::assertion::Signer;
        const KEY: &str = "a-caller-key-that-is-at-least-32-bytes";
        let claims = json!({"email": "u@example.com"});
        let assertion = Signer::new(&SecretString::from(KEY))
            .sign(
                "user-9",
                claims.as_object().unwrap(),
                get_current_timestamp(),
            )
            .unwrap();
        let auth = authenticator(&[("MCP_AUTH_TOKEN", "service-token"), ("MCP_CALLER_KEY", KEY)]);
        match caller(&auth, &assertion).await.unwrap() {
            Caller::User(VerifiedClaims { subject, claims }) => {
                assert_eq!(subject, "user-9");
                assert_eq!(claims["email"], "u@example.com");
            }
            other => panic!("expected a user, got {other:?}"),
        }
        // With auth otherwise off (scripts/dev), a request without a token is the service,
        // an assertion is its user, and a forged one is refused.
        let dev = authenticator(&[("MCP_CALLER_KEY", KEY)]);
        assert_eq!(dev.caller(None).await.unwrap(), Caller::Service);
        assert!(matches!(
            caller(&dev, &assertion).await,
            Ok(Caller::User(_))
        ));
        let forged = Signer::new(&SecretString::from(
            "another-key-that-is-at-least-32-bytes!",
        ))
        .sign("user-9", &serde_json::Map::new(), get_current_timestamp())
        .unwrap();
        assert!(matches!(
            caller(&dev, &forged).await,
            Err(HttpError::InvalidToken(_, Some(_)))
        ));
        // The same assertion where no caller key is configured, and a user token signed with
        // the caller key but not shaped as an assertion (no Parley issuer), are refused.
        let service_only = authenticator(&[("MCP_AUTH_TOKEN", "service-token")]);
        assert!(caller(&service_only, &assertion).await.is_err());
        let not_an_assertion = encode(
            &Header::new(Algorithm::HS256),
            &json!({"sub": "u", "exp": get_current_timestamp() + 600}),
            &EncodingKey::from_secret(KEY.as_bytes()),
        )
        .unwrap();
        assert!(matches!(
            caller(&auth, &not_an_assertion).await,
            Err(HttpError::InvalidToken(_, Some(_)))
        ));
    }

    #[test]
    fn only_the_exact_token_matches() {
        let token = SecretString::from("s3cret-token");
        assert!(token_matches(Some(&token), "s3cret-token"));
        assert!(!token_matches(Some(&token), "s3cret-toke"));
        assert!(!token_matches(Some(&token), "S3cret-token"));
        assert!(!token_matches(None, ""));
    }

    #[test]
    fn only_three_segment_tokens_go_to_the_verifier() {
        assert!(looks_like_jwt("eyJh.eyJz.sig"));
        assert!(looks_like_jwt("a.b."));
        for not_jwt in ["opaque-service-token", "a.b", "a.b.c.d", ".b.c", "a..c"] {
            assert!(!looks_like_jwt(not_jwt), "{not_jwt}");
        }
    }
}
