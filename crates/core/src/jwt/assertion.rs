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

use super::{JwtConfig, VerifiedClaims};
use crate::config::{ConfigError, Env, ExposeSecret, SecretString};

/// The setting (and app secret key) both functions read.
pub const KEY_SETTING: &str = "MCP_CALLER_KEY";
/// `iss` of every assertion.
pub const ISSUER: &str = "parley-chat";
/// `aud` of every assertion: only the mcp function accepts it.
pub const AUDIENCE: &str = "parley-mcp";
/// How long an assertion is valid: one tool call, with room for clock skew, never a session.
pub const LIFETIME: Duration = Duration::from_secs(60);
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
    }
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
    /// from `now` (Unix seconds) for [`LIFETIME`].
    pub fn sign(&self, subject: &str, claims: &Map<String, Value>, now: u64) -> String {
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
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &payload, &self.key)
            .expect("an HS256 signature over a JSON object")
    }

    /// [`Self::sign`] for a verified token's claims.
    pub fn sign_verified(&self, caller: &VerifiedClaims, now: u64) -> String {
        self.sign(&caller.subject, &caller.claims, now)
    }
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::get_current_timestamp;
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
        let token = Signer::new(&key()).sign(
            "user-1",
            claims.as_object().unwrap(),
            get_current_timestamp(),
        );
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
        let forged = Signer::new(&other).sign("u", &Map::new(), get_current_timestamp());
        assert!(verifier.verify(&forged).await.is_err());
        let old = Signer::new(&key()).sign("u", &Map::new(), get_current_timestamp() - 3600);
        assert_eq!(
            verifier.verify(&old).await.unwrap_err(),
            super::super::TokenError::Expired
        );
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
