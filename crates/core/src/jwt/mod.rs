//! Verifies bearer JWTs for every function: HS256 with a shared secret, RS256, ES256 and EdDSA
//! (Ed25519) with keys from a JWKS URL; checks `exp`, `nbf` (with clock skew), `iss`, `aud`, `crit`
//! and that `sub` is 1 to 255 characters without control characters; with `JWT_TOKEN_USE`, the
//! kind of token (an access token's `client_id` standing for `aud`, as Amazon Cognito's have no
//! `aud`); and hands back the verified claims. It knows tokens, not HTTP: each function maps [`TokenError`]
//! to its own responses and decides what a subject means to it.

pub mod assertion;
mod jwks;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};

use crate::config::{ConfigError, Env, ExposeSecret, SecretString};

use jwks::JwksCache;

/// Tokens longer than this are refused before any parsing: real JWTs are a few KiB at most,
/// and this bounds the work an anonymous caller can cause.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Longest `sub` accepted, in characters; with no control characters and not empty, the same
/// rule the chat applies to its user ids. An empty subject would also share the service's
/// idempotency namespace in mcp (`parley.idempotency` keys the service as `''`).
pub const MAX_SUBJECT_CHARS: usize = 255;

/// HS256 secrets shorter than this (the hash's output size) can be brute-forced offline from
/// one captured token (RFC 7518 §3.2 asks for at least 256 bits).
const MIN_SECRET_BYTES: usize = 32;

/// The JWT settings, read once at start-up. Holding one proves the values were well-formed;
/// whether a function requires any key at all is its own decision ([`JwtConfig::has_keys`]).
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// `JWT_SECRET`: shared secret that verifies HS256 tokens. A warning is logged at start if it
    /// is shorter than 32 bytes.
    pub secret: Option<SecretString>,
    /// `JWT_JWKS_URL`: http(s) URL of a JSON Web Key Set whose keys verify RS256, ES256 and
    /// EdDSA (Ed25519) tokens (selected by the token's `kid`; every key with that `kid` is tried).
    pub jwks_url: Option<url::Url>,
    /// `JWT_ISSUER`: when set, the token's `iss` must be present and equal to it.
    pub issuer: Option<String>,
    /// `JWT_AUDIENCE`: comma-separated list; when set, the token's `aud` must be present and
    /// contain one of them. When unset, `aud` is not checked.
    pub audience: Vec<String>,
    /// `JWT_LEEWAY_SECS`: clock skew allowed on `exp` and `nbf` (default 30, at most 300).
    pub leeway_secs: u64,
    /// `JWKS_CACHE_TTL_MS`: how long fetched keys are used before they are fetched again
    /// (default 3600000, one hour).
    pub jwks_cache_ttl: Duration,
    /// `JWKS_MIN_REFRESH_MS`: at most one JWKS fetch per this interval, whatever asks for it (an
    /// unknown `kid`, a failed fetch), so forged kids cannot hammer the identity provider
    /// (default 60000). The first fetch is never delayed.
    pub jwks_min_refresh: Duration,
    /// `JWKS_TIMEOUT_MS`: one JWKS request, start to end of body (default 5000).
    pub jwks_timeout: Duration,
    /// `JWT_TOKEN_USE`: which kind of token the service takes ([`TokenUse`]).
    pub token_use: TokenUse,
    /// Not a setting: the longest a token may still live when it arrives (`exp` - now, beyond
    /// the leeway). `None` for identity providers' tokens; caller assertions set their
    /// 60 s lifetime, so a leaked signing key cannot mint a token that lasts.
    pub max_lifetime: Option<Duration>,
}

impl JwtConfig {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let jwks_url = env
            .optional::<url::Url>("JWT_JWKS_URL")?
            .map(|url| match url.scheme() {
                "http" | "https" => Ok(url),
                _ => Err(ConfigError::new(
                    "JWT_JWKS_URL",
                    "must be an http or https URL",
                )),
            })
            .transpose()?;
        Ok(Self {
            secret: env.secret("JWT_SECRET"),
            jwks_url,
            issuer: env.get("JWT_ISSUER").map(str::to_owned),
            audience: env.list("JWT_AUDIENCE"),
            leeway_secs: env.limit("JWT_LEEWAY_SECS", 30, 0..=300)?,
            jwks_cache_ttl: env.millis(
                "JWKS_CACHE_TTL_MS",
                Duration::from_secs(3600),
                1_000..=86_400_000,
            )?,
            jwks_min_refresh: env.millis(
                "JWKS_MIN_REFRESH_MS",
                Duration::from_secs(60),
                1_000..=3_600_000,
            )?,
            jwks_timeout: env.millis("JWKS_TIMEOUT_MS", Duration::from_secs(5), 100..=60_000)?,
            token_use: TokenUse::from_env(env)?,
            max_lifetime: None,
        })
    }

    /// Whether any token can verify: `JWT_SECRET` or `JWT_JWKS_URL` is set.
    pub fn has_keys(&self) -> bool {
        self.secret.is_some() || self.jwks_url.is_some()
    }
}

/// Which kind of token a service takes. Identity providers issue two from one sign-in: an ID
/// token (for the client: `aud` is the client's id) and an access token (for the API). Amazon
/// Cognito marks each with `token_use` and gives its access tokens `client_id` and no `aud`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenUse {
    /// Unset: `aud` must contain one of `JWT_AUDIENCE` (when set); `token_use` is not read.
    #[default]
    Any,
    /// `access`: a token that says `token_use` other than `access` is refused; the audience
    /// check passes when `aud` contains one of `JWT_AUDIENCE` or `client_id` is one of them.
    Access,
    /// `id`: a token that says `token_use` other than `id` is refused; `aud` as for `Any`.
    Id,
}

impl TokenUse {
    pub const SETTING: &str = "JWT_TOKEN_USE";

    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        match env
            .get(Self::SETTING)
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref()
        {
            None | Some("") => Ok(Self::Any),
            Some("access") => Ok(Self::Access),
            Some("id") => Ok(Self::Id),
            Some(_) => Err(ConfigError::new(
                Self::SETTING,
                "must be access (access tokens, e.g. Amazon Cognito's, whose client_id stands \
                 for aud) or id (ID tokens), or unset",
            )),
        }
    }

    /// What the token's own `token_use` must be, if it says.
    fn expected(self) -> Option<&'static str> {
        match self {
            Self::Any => None,
            Self::Access => Some("access"),
            Self::Id => Some("id"),
        }
    }
}

/// Why a token was refused. Messages may go back to the caller, so they name the check that
/// failed but never include the token or any key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token has expired")]
    Expired,
    /// A forged signature, an algorithm off the allow-list (including `none`), a wrong issuer or
    /// audience, a malformed token, a missing `sub`, ...
    #[error("invalid token: {0}")]
    Invalid(String),
    /// The JWKS could not be fetched and no cached key fits: the verifier's problem, not the
    /// token's.
    #[error("the keys to verify tokens are unavailable: {0}")]
    KeysUnavailable(String),
}

fn invalid(why: impl Into<String>) -> TokenError {
    TokenError::Invalid(why.into())
}

/// The claims of a token whose signature, algorithm and registered claims were verified.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedClaims {
    /// `sub`: every accepted token has one, as a string.
    pub subject: String,
    /// Every claim of the payload, `sub` included.
    pub claims: Map<String, Value>,
}

/// Verifies tokens against one [`JwtConfig`]. Build one per instance and share it: it holds the
/// JWKS cache, which then serves every request of a warm instance.
pub struct Verifier {
    hmac: Option<Arc<DecodingKey>>,
    jwks: Option<JwksCache>,
    /// Claim checks shared by every algorithm; `algorithms` is set per token.
    validation: Validation,
    /// [`JwtConfig::max_lifetime`] with the leeway added, in seconds.
    max_lifetime_secs: Option<u64>,
    token_use: TokenUse,
    /// `JWT_AUDIENCE`, checked here (not by the library) for access tokens, whose `client_id`
    /// may stand for `aud`.
    access_audience: Vec<String>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys stay out of the output.
        f.debug_struct("Verifier")
            .field("hs256", &self.hmac.is_some())
            .field("jwks", &self.jwks)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// Logs a warning when the HS256 secret is short, so build it once at start, after logging
    /// is set up. `http` fetches the JWKS (no request is made here).
    pub fn new(config: JwtConfig, http: reqwest::Client) -> Self {
        if let Some(secret) = &config.secret
            && secret.expose_secret().len() < MIN_SECRET_BYTES
        {
            tracing::warn!(
                "JWT_SECRET is shorter than {MIN_SECRET_BYTES} bytes: HS256 tokens signed with \
                 it can be brute-forced; use a longer random secret"
            );
        }

        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = config.leeway_secs;
        validation.validate_nbf = true;
        let mut required = vec!["exp", "sub"];
        if let Some(issuer) = &config.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        let access_audience = match config.token_use {
            TokenUse::Access => config.audience.clone(),
            TokenUse::Any | TokenUse::Id => Vec::new(),
        };
        if config.audience.is_empty() || config.token_use == TokenUse::Access {
            // Otherwise every token that names any audience would be refused; an access token's
            // audience is checked in `verify`, where `client_id` may stand for it.
            validation.validate_aud = false;
        } else {
            validation.set_audience(&config.audience);
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);

        Self {
            hmac: config
                .secret
                .map(|s| Arc::new(DecodingKey::from_secret(s.expose_secret().as_bytes()))),
            jwks: config.jwks_url.map(|url| {
                JwksCache::new(
                    url,
                    http,
                    config.jwks_timeout,
                    config.jwks_cache_ttl,
                    config.jwks_min_refresh,
                )
            }),
            validation,
            max_lifetime_secs: config
                .max_lifetime
                .map(|max| max.as_secs() + config.leeway_secs),
            token_use: config.token_use,
            access_audience,
        }
    }

    /// The verified claims of a compact JWT (without its `Bearer ` prefix).
    pub async fn verify(&self, token: &str) -> Result<VerifiedClaims, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(invalid(format!(
                "the token is longer than {MAX_TOKEN_BYTES} bytes"
            )));
        }
        // `alg: none` and other algorithms jsonwebtoken does not know fail right here.
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            invalid("the token header is malformed or names an unsupported algorithm")
        })?;
        // RFC 7515 §4.1.11: a recipient that does not understand every extension listed in
        // `crit` must reject the token. This verifier understands none.
        if header.crit.is_some() {
            return Err(invalid(
                "the token lists critical header extensions (crit) this service does not support",
            ));
        }
        // The keys come from the algorithm's own source, so an RS256 public key can never be
        // used as an HS256 secret (algorithm confusion).
        let keys = match (header.alg, &self.hmac, &self.jwks) {
            (Algorithm::HS256, Some(secret), _) => vec![Arc::clone(secret)],
            (Algorithm::RS256 | Algorithm::ES256 | Algorithm::EdDSA, _, Some(jwks)) => {
                jwks.keys_for(header.alg, header.kid.as_deref()).await?
            }
            (alg, _, _) => {
                return Err(invalid(format!(
                    "algorithm {alg:?} is not accepted (accepted: {})",
                    self.accepted_algorithms()
                )));
            }
        };
        let mut validation = self.validation.clone();
        validation.algorithms = vec![header.alg];
        let Payload { sub, mut claims } = decode_with_any(token, &keys, &validation)?;
        let subject = sub.ok_or_else(|| invalid("the sub claim is missing"))?;
        // Control characters would let a crafted `sub` forge log lines; an empty one names
        // nobody (and in mcp would share the service's idempotency keys).
        if subject.is_empty()
            || subject.chars().count() > MAX_SUBJECT_CHARS
            || subject.chars().any(char::is_control)
        {
            return Err(invalid(format!(
                "the sub claim must be 1 to {MAX_SUBJECT_CHARS} characters without control \
                 characters"
            )));
        }
        if let Some(max) = self.max_lifetime_secs {
            // `exp` is required and was checked to be a number in the future.
            let exp = claims
                .get("exp")
                .and_then(Value::as_u64)
                .unwrap_or(u64::MAX);
            let left = exp.saturating_sub(jsonwebtoken::get_current_timestamp());
            if left > max {
                return Err(invalid(format!(
                    "the token lives {left} s more, longer than the {max} s such tokens may \
                     (exp too far ahead)"
                )));
            }
        }
        self.check_token_use(&claims)?;
        claims.insert("sub".to_owned(), Value::String(subject.clone()));
        Ok(VerifiedClaims { subject, claims })
    }

    /// `JWT_TOKEN_USE`: an ID token where access tokens are expected is refused, and the
    /// reverse; an access token's `client_id` counts as its audience.
    fn check_token_use(&self, claims: &Map<String, Value>) -> Result<(), TokenError> {
        if let Some(expected) = self.token_use.expected()
            && let Some(said) = claims.get("token_use")
            && said.as_str() != Some(expected)
        {
            let said = said.as_str().unwrap_or("not a string");
            return Err(invalid(format!(
                "this service takes {expected} tokens, and this token's token_use is \
                 {said:?}"
            )));
        }
        if self.access_audience.is_empty() {
            return Ok(());
        }
        let named = |value: Option<&Value>| match value {
            Some(Value::String(one)) => self.access_audience.contains(one),
            Some(Value::Array(many)) => many
                .iter()
                .filter_map(Value::as_str)
                .any(|one| self.access_audience.iter().any(|a| a == one)),
            _ => false,
        };
        if named(claims.get("aud")) || named(claims.get("client_id")) {
            Ok(())
        } else {
            Err(invalid(
                "neither the audience (aud) nor the client (client_id) is one this service \
                 accepts",
            ))
        }
    }

    fn accepted_algorithms(&self) -> &'static str {
        match (self.hmac.is_some(), self.jwks.is_some()) {
            (true, true) => "HS256, RS256, ES256, EdDSA",
            (true, false) => "HS256",
            (false, true) => "RS256, ES256, EdDSA",
            (false, false) => "none",
        }
    }
}

/// The payload of `token` verified by the first of `keys` whose signature matches. Only a
/// signature this key does not verify (or a key that cannot verify at all) moves on to the
/// next key: the signature is checked before the claims, so any other failure (expired, wrong
/// audience, malformed) is the token's whichever key signed it.
fn decode_with_any(
    token: &str,
    keys: &[Arc<DecodingKey>],
    validation: &Validation,
) -> Result<Payload, TokenError> {
    let mut last = invalid("no key to verify the token with");
    for key in keys {
        match jsonwebtoken::decode::<Payload>(token, key, validation) {
            Ok(data) => return Ok(data.claims),
            Err(e) if is_this_keys_failure(&e) => last = rejection(e),
            Err(e) => return Err(rejection(e)),
        }
    }
    Err(last)
}

fn is_this_keys_failure(e: &jsonwebtoken::errors::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::InvalidSignature
            | ErrorKind::InvalidRsaKey(_)
            | ErrorKind::InvalidEcdsaKey
            | ErrorKind::InvalidEddsaKey
            | ErrorKind::InvalidKeyFormat
    )
}

/// A token's payload as decoded: a `sub` that is not a string fails here, as a malformed token.
#[derive(serde::Deserialize)]
struct Payload {
    sub: Option<String>,
    #[serde(flatten)]
    claims: Map<String, Value>,
}

/// Names the failed check; the library's own messages are not passed on because some of them
/// quote parts of the token or key.
fn rejection(e: jsonwebtoken::errors::Error) -> TokenError {
    let why = match e.kind() {
        ErrorKind::ExpiredSignature => return TokenError::Expired,
        ErrorKind::InvalidSignature => "the signature does not verify",
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)",
        ErrorKind::InvalidIssuer => "the issuer (iss) is not the expected one",
        ErrorKind::InvalidAudience => "the audience (aud) does not include this service",
        ErrorKind::MissingRequiredClaim(claim) => {
            return invalid(format!("the {claim} claim is missing"));
        }
        ErrorKind::InvalidClaimFormat(claim) => {
            return invalid(format!("the {claim} claim is malformed"));
        }
        ErrorKind::InvalidAlgorithm => "the algorithm does not match the key",
        ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidEddsaKey
        | ErrorKind::InvalidKeyFormat => "the key for this token cannot verify it",
        _ => "the token is malformed",
    };
    invalid(why)
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{EncodingKey, Header, encode, get_current_timestamp};
    use serde_json::json;

    use super::*;

    const SECRET: &str = "a-test-secret-that-is-at-least-32-bytes-long";

    fn config(pairs: &[(&str, &str)]) -> JwtConfig {
        JwtConfig::from_env(&Env::from_pairs(pairs.iter().copied())).unwrap()
    }

    #[test]
    fn the_config_reads_without_keys_and_says_so() {
        assert!(!config(&[]).has_keys());
        assert!(config(&[("JWT_SECRET", SECRET)]).has_keys());
        assert!(config(&[("JWT_JWKS_URL", "https://idp.example/jwks")]).has_keys());
    }

    #[tokio::test]
    async fn verified_claims_carry_the_subject_and_every_claim() {
        let verifier = Verifier::new(config(&[("JWT_SECRET", SECRET)]), reqwest::Client::new());
        let claims = json!({
            "sub": "user-1",
            "exp": get_current_timestamp() + 600,
            "email": "a@example.com",
            "org_id": 7,
        });
        let token = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        let verified = verifier.verify(&token).await.unwrap();
        assert_eq!(verified.subject, "user-1");
        assert_eq!(Value::Object(verified.claims), claims);
    }

    #[tokio::test]
    async fn an_empty_long_or_control_character_subject_is_refused() {
        let verifier = Verifier::new(config(&[("JWT_SECRET", SECRET)]), reqwest::Client::new());
        let too_long = "x".repeat(MAX_SUBJECT_CHARS + 1);
        for sub in [
            "",
            "alice\nINFO forged log line",
            "tab\there",
            too_long.as_str(),
        ] {
            let token = encode(
                &Header::new(Algorithm::HS256),
                &json!({"sub": sub, "exp": get_current_timestamp() + 600}),
                &EncodingKey::from_secret(SECRET.as_bytes()),
            )
            .unwrap();
            assert_eq!(
                verifier.verify(&token).await.unwrap_err(),
                invalid("the sub claim must be 1 to 255 characters without control characters"),
                "{sub:?}"
            );
        }
        let longest = encode(
            &Header::new(Algorithm::HS256),
            &json!({"sub": "é".repeat(MAX_SUBJECT_CHARS), "exp": get_current_timestamp() + 600}),
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        assert!(verifier.verify(&longest).await.is_ok());
    }

    fn signed(claims: &Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    }

    /// What Amazon Cognito issues from one sign-in: an access token (`client_id`, no `aud`)
    /// and an ID token (`aud` is the client).
    fn cognito_tokens(client: &str) -> (String, String) {
        let iss = "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_Example";
        let exp = get_current_timestamp() + 600;
        let access = signed(&json!({
            "sub": "user-1", "iss": iss, "client_id": client, "token_use": "access",
            "scope": "openid email", "username": "user-1", "exp": exp,
        }));
        let id = signed(&json!({
            "sub": "user-1", "iss": iss, "aud": client, "token_use": "id",
            "email": "a@example.com", "exp": exp,
        }));
        (access, id)
    }

    #[tokio::test]
    async fn an_access_tokens_client_id_stands_for_its_audience_and_an_id_token_is_refused() {
        let verifier = Verifier::new(
            config(&[
                ("JWT_SECRET", SECRET),
                ("JWT_AUDIENCE", "page-client"),
                ("JWT_TOKEN_USE", "access"),
            ]),
            reqwest::Client::new(),
        );
        let (access, id) = cognito_tokens("page-client");
        assert_eq!(verifier.verify(&access).await.unwrap().subject, "user-1");
        assert_eq!(
            verifier.verify(&id).await.unwrap_err(),
            invalid("this service takes access tokens, and this token's token_use is \"id\"")
        );
        let (other_client, _) = cognito_tokens("another-client");
        assert_eq!(
            verifier.verify(&other_client).await.unwrap_err(),
            invalid(
                "neither the audience (aud) nor the client (client_id) is one this service \
                 accepts"
            )
        );
        // Another provider's access token names the API in `aud`, with no token_use.
        let api_token = signed(&json!({
            "sub": "user-1", "aud": ["https://api.example", "page-client"],
            "exp": get_current_timestamp() + 600,
        }));
        assert!(verifier.verify(&api_token).await.is_ok());
    }

    #[tokio::test]
    async fn an_id_token_service_refuses_access_tokens() {
        let verifier = Verifier::new(
            config(&[
                ("JWT_SECRET", SECRET),
                ("JWT_AUDIENCE", "page-client"),
                ("JWT_TOKEN_USE", "id"),
            ]),
            reqwest::Client::new(),
        );
        let (access, id) = cognito_tokens("page-client");
        assert_eq!(verifier.verify(&id).await.unwrap().subject, "user-1");
        let refused = verifier.verify(&access).await.unwrap_err();
        assert_eq!(refused, invalid("the aud claim is missing"));
        // Even with an audience, an access token is not an ID token.
        let with_aud = signed(&json!({
            "sub": "user-1", "aud": "page-client", "token_use": "access",
            "exp": get_current_timestamp() + 600,
        }));
        assert_eq!(
            verifier.verify(&with_aud).await.unwrap_err(),
            invalid("this service takes id tokens, and this token's token_use is \"access\"")
        );
    }

    #[tokio::test]
    async fn without_jwt_token_use_a_cognito_access_token_fails_the_audience_check() {
        let verifier = Verifier::new(
            config(&[("JWT_SECRET", SECRET), ("JWT_AUDIENCE", "page-client")]),
            reqwest::Client::new(),
        );
        let (access, _) = cognito_tokens("page-client");
        assert_eq!(
            verifier.verify(&access).await.unwrap_err(),
            invalid("the aud claim is missing")
        );
        let bad = JwtConfig::from_env(&Env::from_pairs([("JWT_TOKEN_USE", "refresh")]));
        assert_eq!(bad.unwrap_err().var, "JWT_TOKEN_USE");
    }

    #[tokio::test]
    async fn eddsa_is_refused_without_a_key_set() {
        let verifier = Verifier::new(config(&[("JWT_SECRET", SECRET)]), reqwest::Client::new());
        let token = encode(
            &Header::new(Algorithm::EdDSA),
            &json!({"sub": "u", "exp": get_current_timestamp() + 600}),
            &EncodingKey::from_ed_pem(parley_testkit::keys::ED25519_PEM).unwrap(),
        )
        .unwrap();
        let refused = verifier.verify(&token).await.unwrap_err();
        assert_eq!(
            refused,
            invalid("algorithm EdDSA is not accepted (accepted: HS256)")
        );
    }
}
