//! Caller assertions: how the chat function tells the mcp function who the signed-in user is.
//! For each tool call the chat signs a short-lived HS256 JWT with `MCP_CALLER_KEY` (from the
//! app secret); the mcp function verifies it like any user token, with the same key.
//!
//! Why not forward the user's own token: the chat may have no token to forward
//! (`CHAT_AUTH=none`), an identity provider's token names the chat as its audience, not the
//! mcp function (accepting it anyway is the token passthrough MCP's authorization spec
//! forbids), and it may expire in the middle of a turn. An assertion names exactly one
//! audience, lives a minute, and carries only the verified claims.

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Map, Value};

use super::{JwtConfig, MAX_TOKEN_BYTES, VerifiedClaims};
use crate::config::{ConfigError, Env, ExposeSecret, SecretString};

/// The setting (and app secret key) both functions read.
pub const KEY_SETTING: &str = "MCP_CALLER_KEY";
/// `iss`, `aud` and the lifetime of every assertion: the wire contract both functions share.
pub use parley_wire::assertion::{AUDIENCE, ISSUER, LIFETIME};
/// The key is an HS256 secret: at least the hash's output size (RFC 7518 §3.2).
const MIN_KEY_BYTES: usize = 32;

/// Claims the signer sets itself; a user's values for them are not copied.
const REGISTERED: [&str; 7] = ["iss", "sub", "aud", "exp", "nbf", "iat", "jti"];

/// `MCP_CALLER_KEY`, checked: `None` when unset, an error when too short to be safe.
pub fn key_from_env(env: &Env) -> Result<Option<SecretString>, ConfigError> {
    let Some(key) = env.secret(KEY_SETTING) else {
        return Ok(None);
    };
    if key.expose_secret().len() < MIN_KEY_BYTES {
        return Err(ConfigError::new(
            KEY_SETTING,
            "must be at least 32 bytes (a random secret shared by the chat and mcp functions)",
        ));
    }
    Ok(Some(key))
}

/// The [`JwtConfig`] that verifies assertions signed with `key` (and nothing else: a user
/// token from the identity provider has another issuer and audience).
pub fn verifier_config(key: SecretString) -> JwtConfig {
    JwtConfig {
        secret: Some(key),
        jwks_url: None,
        issuer: Some(ISSUER.to_owned()),
        audience: vec![AUDIENCE.to_owned()],
        leeway_secs: 30,
        jwks_cache_ttl: Duration::from_secs(3600),
        jwks_min_refresh: Duration::from_secs(60),
        jwks_timeout: Duration::from_secs(5),
        // However it was signed, an assertion that would outlive one call is refused.
        token_use: crate::jwt::TokenUse::Any,
        max_lifetime: Some(LIFETIME),
    }
}

/// Whether `token` says it is an assertion (its unverified `iss` is [`ISSUER`]). Only for
/// choosing which refusal to report: a token that claims to be the chat's and fails the
/// assertion checks is refused for that reason (expired, say), not for not matching the
/// identity provider's keys as well.
pub fn claims_to_be_one(token: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Issuer {
        iss: Option<String>,
    }
    if token.len() > MAX_TOKEN_BYTES {
        return false;
    }
    jsonwebtoken::dangerous::insecure_decode_claims::<Issuer>(token)
        .is_ok_and(|claims| claims.iss.as_deref() == Some(ISSUER))
}

/// An assertion the mcp function would refuse for its size: the user's token carries more
/// claims than fit in [`MAX_TOKEN_BYTES`]. Nothing is sent; retrying cannot help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the signed-in user's claims make a caller assertion of {bytes} bytes, more than the \
     {MAX_TOKEN_BYTES} the mcp function accepts (the identity provider's token carries too \
     many claims)"
)]
pub struct TooLarge {
    pub bytes: usize,
}

/// Signs assertions; built once per instance.
pub struct Signer {
    key: EncodingKey,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    pub fn new(key: &SecretString) -> Self {
        Self {
            key: EncodingKey::from_secret(key.expose_secret().as_bytes()),
        }
    }

    /// An assertion that `subject` (with `claims`, e.g. a verified token's) is calling, valid
    /// from `now` (Unix seconds) for [`LIFETIME`]; [`TooLarge`] when the mcp function would
    /// refuse it for its length (the user's own token may be up to that length already, and
    /// the assertion adds its own claims).
    pub fn sign(
        &self,
        subject: &str,
        claims: &Map<String, Value>,
        now: u64,
    ) -> Result<String, TooLarge> {
        let mut payload: Map<String, Value> = claims
            .iter()
            .filter(|(name, _)| !REGISTERED.contains(&name.as_str()))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        payload.insert("iss".into(), ISSUER.into());
        payload.insert("sub".into(), subject.into());
        payload.insert("aud".into(), AUDIENCE.into());
        payload.insert("iat".into(), now.into());
        payload.insert("exp".into(), (now + LIFETIME.as_secs()).into());
        // Signing a JSON map with an HMAC key cannot fail.
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &payload, &self.key)
            .expect("an HS256 signature over a JSON object");
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TooLarge { bytes: token.len() });
        }
        Ok(token)
    }

    /// [`Self::sign`] for a verified token's claims.
    pub fn sign_verified(&self, caller: &VerifiedClaims, now: u64) -> Result<String, TooLarge> {
        self.sign(&caller.subject, &caller.claims, now)
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, get_current_timestamp};
    use serde_json::json;

    use super::super::Verifier;
    use super::*;

    const KEY: &str = "a-caller-key-that-is-at-least-32-bytes";

    fn key() -> SecretString {
        SecretString::from(KEY.to_owned())
    }

    #[tokio::test]
    async fn an_assertion_verifies_with_the_same_key_and_keeps_the_claims() {
        let claims =
            json!({"sub": "ignored", "email": "a@example.com", "org_id": 7, "aud": "chat"});
        let token = Signer::new(&key())
            .sign(
                "user-1",
                claims.as_object().unwrap(),
                get_current_timestamp(),
            )
            .unwrap();
        let verifier = Verifier::new(verifier_config(key()), reqwest::Client::new());
        let verified = verifier.verify(&token).await.unwrap();
        assert_eq!(verified.subject, "user-1");
        assert_eq!(verified.claims["email"], "a@example.com");
        assert_eq!(verified.claims["org_id"], 7);
        assert_eq!(verified.claims["aud"], AUDIENCE);
    }

    #[tokio::test]
    async fn an_assertion_signed_with_another_key_or_expired_is_refused() {
        let verifier = Verifier::new(verifier_config(key()), reqwest::Client::new());
        let other = SecretString::from("another-key-that-is-at-least-32-bytes!".to_owned());
        let forged = Signer::new(&other)
            .sign("u", &Map::new(), get_current_timestamp())
            .unwrap();
        assert!(verifier.verify(&forged).await.is_err());
        let old = Signer::new(&key())
            .sign("u", &Map::new(), get_current_timestamp() - 3600)
            .unwrap();
        assert_eq!(
            verifier.verify(&old).await.unwrap_err(),
            super::super::TokenError::Expired
        );
    }

    fn signed_with_key(payload: &Value) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            payload,
            &EncodingKey::from_secret(KEY.as_bytes()),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn an_assertion_that_would_outlive_its_minute_is_refused_however_it_was_signed() {
        let verifier = Verifier::new(verifier_config(key()), reqwest::Client::new());
        let now = get_current_timestamp();
        let lasting = signed_with_key(&json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "u", "iat": now, "exp": now + 86_400,
        }));
        let refused = verifier.verify(&lasting).await.unwrap_err();
        assert!(
            refused.to_string().contains("longer than the 90 s"),
            "{refused}"
        );
        // The signer's own minute (and the leeway for clocks apart) passes.
        let minute = signed_with_key(&json!({
            "iss": ISSUER, "aud": AUDIENCE, "sub": "u", "iat": now + 20, "exp": now + 80,
        }));
        assert!(verifier.verify(&minute).await.is_ok());
    }

    #[test]
    fn an_assertion_too_large_for_the_mcp_function_is_not_signed() {
        let mut claims = Map::new();
        claims.insert("groups".into(), json!(vec!["g".repeat(100); 120]));
        let refused = Signer::new(&key())
            .sign("u", &claims, get_current_timestamp())
            .unwrap_err();
        assert!(refused.bytes > MAX_TOKEN_BYTES, "{refused:?}");
        assert!(refused.to_string().contains("16384"), "{refused}");
        claims.insert("groups".into(), json!(vec!["g".repeat(100); 80]));
        let fits = Signer::new(&key())
            .sign("u", &claims, get_current_timestamp())
            .unwrap();
        assert!(fits.len() <= MAX_TOKEN_BYTES);
    }

    #[test]
    fn only_a_token_naming_the_chat_as_issuer_claims_to_be_an_assertion() {
        let now = get_current_timestamp();
        let assertion = Signer::new(&key()).sign("u", &Map::new(), now).unwrap();
        assert!(claims_to_be_one(&assertion));
        let idp = signed_with_key(&json!({"iss": "https://idp.example", "sub": "u", "exp": now}));
        assert!(!claims_to_be_one(&idp));
        assert!(!claims_to_be_one("not.a.token"));
    }

    #[test]
    fn a_short_key_is_refused_by_name() {
        let env = Env::from_pairs([(KEY_SETTING, "short")]);
        let err = key_from_env(&env).unwrap_err();
        assert!(err.to_string().contains(KEY_SETTING), "{err}");
        assert!(
            key_from_env(&Env::from_pairs::<&str, &str>([]))
                .unwrap()
                .is_none()
        );
    }
}
