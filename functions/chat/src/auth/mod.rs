//! Who is calling: every request carries `Authorization: Bearer <JWT>`, verified by
//! `parley_core::jwt` (HS256 with a shared secret, RS256/ES256/EdDSA with keys from a JWKS URL);
//! the caller is the token's `sub`, and its verified claims go with it to the tools (signed
//! again by `mcp_client` for the mcp function). `CHAT_AUTH=none` replaces all of this with one fixed local user,
//! for local development only.

use std::fmt;
use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use parley_core::config::{ConfigError, Env};
use parley_core::jwt::{JwtConfig, TokenError, Verifier};
use serde_json::{Map, Value};

/// Longest `sub` accepted as a user id, in characters.
pub const MAX_USER_ID_CHARS: usize = 255;

/// How callers are identified (`CHAT_AUTH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthMode {
    /// `jwt`: a verified bearer JWT on every request (the default).
    Jwt,
    /// `none`: no authentication; every request acts as [`UserId::local`].
    Disabled,
}

/// The auth settings, read once at start-up. Holding one proves the values were well-formed.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// `CHAT_AUTH`: `jwt` (default) requires a valid bearer JWT on every request; `none` turns
    /// authentication off for local development only (every request acts as `local-user`, and a
    /// warning is logged at start). Never the default.
    pub mode: AuthMode,
    /// How tokens are verified (`JWT_*`, `JWKS_*`). With `CHAT_AUTH=jwt`, at least one of
    /// `JWT_SECRET` and `JWT_JWKS_URL` is required.
    pub jwt: JwtConfig,
    /// `GROUPS_CLAIM`: the token claims listing the user's groups, each an array of strings or
    /// one string of names separated by spaces or commas. Unset, both `groups` and Cognito's
    /// `cognito:groups`, as the mcp function's `parley.caller_groups()` reads them, so a
    /// collection's group and a budget's group are the same group. Budgets are overridden and
    /// the usage view opened per group.
    pub groups_claims: Vec<String>,
}

impl AuthConfig {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let mode = match env.get("CHAT_AUTH").map(str::to_ascii_lowercase).as_deref() {
            None | Some("jwt") => AuthMode::Jwt,
            Some("none") => AuthMode::Disabled,
            Some(_) => return Err(ConfigError::new("CHAT_AUTH", "must be jwt or none")),
        };
        let jwt = JwtConfig::from_env(env)?;
        if mode == AuthMode::Jwt && !jwt.has_keys() {
            return Err(ConfigError::new(
                "JWT_SECRET",
                "JWT_SECRET or JWT_JWKS_URL is required to verify tokens \
                 (or CHAT_AUTH=none for local development)",
            ));
        }
        let groups_claims = match env.get("GROUPS_CLAIM").map(str::trim) {
            None => vec!["groups".to_owned(), "cognito:groups".to_owned()],
            Some(claim) if !claim.is_empty() && claim.len() <= 200 => vec![claim.to_owned()],
            Some(_) => {
                return Err(ConfigError::new(
                    "GROUPS_CLAIM",
                    "must be 1 to 200 characters",
                ));
            }
        };
        Ok(Self {
            mode,
            jwt,
            groups_claims,
        })
    }
}

/// The authenticated caller: a token's `sub`, or [`UserId::local`] with `CHAT_AUTH=none`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct UserId(String);

/// Why a string cannot be a [`UserId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be 1 to {MAX_USER_ID_CHARS} characters without control characters")]
pub struct InvalidUserId;

impl UserId {
    /// The one user of `CHAT_AUTH=none`.
    pub const LOCAL: &str = "local-user";

    pub fn new(id: impl Into<String>) -> Result<Self, InvalidUserId> {
        let id = id.into();
        // Control characters would let a crafted `sub` forge log lines or confuse whatever
        // later displays the id.
        let well_formed = !id.is_empty()
            && id.chars().count() <= MAX_USER_ID_CHARS
            && !id.chars().any(char::is_control);
        if well_formed {
            Ok(Self(id))
        } else {
            Err(InvalidUserId)
        }
    }

    pub fn local() -> Self {
        Self(Self::LOCAL.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a request could not be tied to a user. Messages go back to the caller, so they name the
/// check that failed but never include the token or any key material.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header, a blank one, or a scheme other than `Bearer`.
    #[error("send Authorization: Bearer <token>")]
    Missing,
    /// The token was refused: expired, invalid, or its keys could not be fetched.
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// Turns `Authorization` headers into users. Build one per instance and share it: its
/// [`Verifier`] holds the JWKS cache, which then serves every request of a warm instance.
pub struct Authenticator {
    /// `None` with `CHAT_AUTH=none`.
    verifier: Option<Verifier>,
    /// `GROUPS_CLAIM`.
    groups_claims: Vec<String>,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authenticator")
            .field("verifier", &self.verifier)
            .finish()
    }
}

impl Authenticator {
    /// Logs a warning when auth is off or the HS256 secret is short, so build it once at start,
    /// after logging is set up. `http` fetches the JWKS (no request is made here).
    pub fn new(config: AuthConfig, http: reqwest::Client) -> Self {
        let verifier = match config.mode {
            AuthMode::Jwt => Some(Verifier::new(config.jwt, http)),
            AuthMode::Disabled => {
                tracing::warn!(
                    user = UserId::LOCAL,
                    "CHAT_AUTH=none: authentication is OFF and every request acts as one local \
                     user; use this for local development only"
                );
                None
            }
        };
        Self {
            verifier,
            groups_claims: config.groups_claims,
        }
    }

    /// True with `CHAT_AUTH=none`.
    pub fn is_disabled(&self) -> bool {
        self.verifier.is_none()
    }

    /// The user behind an `Authorization` header value (`None` when the header is absent).
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<User, AuthError> {
        let Some(verifier) = &self.verifier else {
            return Ok(User::local());
        };
        let token = authorization
            .and_then(parley_core::http::bearer_token)
            .ok_or(AuthError::Missing)?;
        let verified = verifier.verify(token).await?;
        let id = UserId::new(verified.subject)
            .map_err(|e| AuthError::Token(TokenError::Invalid(format!("the sub claim {e}"))))?;
        Ok(User {
            id,
            groups: groups(&verified.claims, &self.groups_claims),
            claims: Arc::new(verified.claims),
        })
    }
}

/// The caller of a handler. A handler that takes a `User` cannot run unauthenticated: the
/// request is refused (401, or 503 when the keys are unavailable) before the handler starts.
#[derive(Debug, Clone, PartialEq)]
pub struct User {
    /// The token's `sub`, checked: what conversations belong to.
    pub id: UserId,
    /// Every claim of the verified token (`sub` included), for the tools that act for the user
    /// (e.g. `caller.claims.email`); empty with `CHAT_AUTH=none`. Never logged.
    pub claims: Arc<Map<String, Value>>,
    /// The groups named by the `GROUPS_CLAIM` claim, in the token's order without repeats;
    /// empty when the token has none.
    pub groups: Arc<[String]>,
}

impl User {
    /// The one user of `CHAT_AUTH=none`, with no claims.
    pub fn local() -> Self {
        Self {
            id: UserId::local(),
            claims: Arc::default(),
            groups: Arc::from([]),
        }
    }

    /// Whether the user is a member of `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// The groups the token's `claims` name, in order: each an array of strings (non-strings
/// skipped) or one string of names separated by spaces or commas. Empty names and repeats are
/// dropped.
fn groups(claims: &Map<String, Value>, names_of: &[String]) -> Arc<[String]> {
    let mut names: Vec<String> = Vec::new();
    let mut add = |name: &str| {
        let name = name.trim();
        if !name.is_empty() && !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    };
    for claim in names_of {
        match claims.get(claim) {
            Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).for_each(&mut add),
            Some(Value::String(list)) => list.split([' ', ',']).for_each(&mut add),
            _ => {}
        }
    }
    names.into()
}

impl<S> FromRequestParts<S> for User
where
    Arc<Authenticator>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = AuthError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let authenticator = Arc::<Authenticator>::from_ref(state);
        let authorization = match parts.headers.get(AUTHORIZATION) {
            None => None,
            // Not visible ASCII, so not a Bearer token either.
            Some(value) => Some(value.to_str().map_err(|_| AuthError::Missing)?),
        };
        authenticator.authenticate(authorization).await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
    use parley_core::config::ExposeSecret;
    use parley_core::jwt::MAX_TOKEN_BYTES;
    use serde_json::{Value, json};

    use super::*;

    const SECRET: &str = "a-test-secret-that-is-at-least-32-bytes-long";

    #[test]
    fn groups_come_from_an_array_or_a_spaced_string_of_the_named_claim() {
        let claims = |v: Value| v.as_object().unwrap().clone();
        let of = |v: Value, names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            groups(&claims(v), &names).to_vec()
        };
        assert_eq!(
            of(json!({"groups": ["a", "b", "a", 3, ""]}), &["groups"]),
            ["a", "b"]
        );
        assert_eq!(
            of(json!({"cognito:groups": "x y,z"}), &["cognito:groups"]),
            ["x", "y", "z"]
        );
        assert!(of(json!({"groups": ["a"]}), &["roles"]).is_empty());
        assert!(of(json!({"groups": {"a": 1}}), &["groups"]).is_empty());
        // Unset GROUPS_CLAIM reads both, as the mcp function does.
        let both = config(&[("JWT_SECRET", SECRET)]).unwrap().groups_claims;
        assert_eq!(
            of(
                json!({"groups": ["a"], "cognito:groups": ["b", "a"]}),
                &both.iter().map(String::as_str).collect::<Vec<_>>()
            ),
            ["a", "b"]
        );
    }

    fn config(pairs: &[(&str, &str)]) -> Result<AuthConfig, ConfigError> {
        AuthConfig::from_env(&Env::from_pairs(pairs.iter().copied()))
    }

    fn authenticator(pairs: &[(&str, &str)]) -> Authenticator {
        let mut all = vec![("JWT_SECRET", SECRET)];
        all.extend_from_slice(pairs);
        Authenticator::new(config(&all).unwrap(), reqwest::Client::new())
    }

    fn hs256(claims: &Value, secret: &str) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    }

    fn claims(sub: &str) -> Value {
        json!({"sub": sub, "exp": get_current_timestamp() + 600})
    }

    async fn check(auth: &Authenticator, token: &str) -> Result<UserId, AuthError> {
        auth.authenticate(Some(&format!("Bearer {token}")))
            .await
            .map(|user| user.id)
    }

    fn assert_invalid(result: Result<UserId, AuthError>, expected: &str) {
        match result {
            Err(AuthError::Token(TokenError::Invalid(why))) => {
                assert!(why.contains(expected), "expected {expected:?} in {why:?}")
            }
            other => panic!("expected Invalid({expected:?}), got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_valid_hs256_token_yields_its_subject() {
        let auth = authenticator(&[]);
        let user = check(&auth, &hs256(&claims("user-42"), SECRET))
            .await
            .unwrap();
        assert_eq!(user.as_str(), "user-42");
    }

    #[tokio::test]
    async fn the_bearer_scheme_is_case_insensitive() {
        let auth = authenticator(&[]);
        let token = hs256(&claims("u"), SECRET);
        let user = auth.authenticate(Some(&format!("bearer  {token} "))).await;
        assert_eq!(user.unwrap().id.as_str(), "u");
    }

    #[tokio::test]
    async fn a_token_with_critical_extensions_is_refused() {
        let auth = authenticator(&[]);
        let mut header = Header::new(Algorithm::HS256);
        header.crit = Some(vec!["http://example.com/must-understand".into()]);
        let token = encode(
            &header,
            &claims("user-42"),
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        assert_invalid(
            check(&auth, &token).await,
            "critical header extensions (crit)",
        );
    }

    #[tokio::test]
    async fn an_expired_token_is_refused_as_expired() {
        let auth = authenticator(&[]);
        let expired = json!({"sub": "u", "exp": get_current_timestamp() - 120});
        let result = check(&auth, &hs256(&expired, SECRET)).await;
        assert!(
            matches!(result, Err(AuthError::Token(TokenError::Expired))),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn a_token_expired_within_the_leeway_still_passes() {
        let auth = authenticator(&[("JWT_LEEWAY_SECS", "30")]);
        let just_expired = json!({"sub": "u", "exp": get_current_timestamp() - 10});
        assert!(check(&auth, &hs256(&just_expired, SECRET)).await.is_ok());
    }

    #[tokio::test]
    async fn a_token_without_exp_is_invalid() {
        let auth = authenticator(&[]);
        let result = check(&auth, &hs256(&json!({"sub": "u"}), SECRET)).await;
        assert_invalid(result, "the exp claim is missing");
    }

    #[tokio::test]
    async fn a_token_not_valid_yet_is_invalid() {
        let auth = authenticator(&[]);
        let now = get_current_timestamp();
        let early = json!({"sub": "u", "exp": now + 600, "nbf": now + 300});
        assert_invalid(check(&auth, &hs256(&early, SECRET)).await, "nbf");
    }

    #[tokio::test]
    async fn a_token_signed_with_another_secret_is_invalid() {
        let auth = authenticator(&[]);
        let forged = hs256(&claims("u"), "another-secret-that-is-also-32-bytes-long");
        assert_invalid(check(&auth, &forged).await, "signature");
    }

    #[tokio::test]
    async fn a_token_with_a_tampered_payload_is_invalid() {
        let auth = authenticator(&[]);
        let genuine = hs256(&claims("alice"), SECRET);
        let other = hs256(&claims("mallory"), "whatever");
        let parts: Vec<&str> = genuine.split('.').collect();
        let other_payload = other.split('.').nth(1).unwrap();
        let spliced = format!("{}.{}.{}", parts[0], other_payload, parts[2]);
        assert_invalid(check(&auth, &spliced).await, "signature");
    }

    #[tokio::test]
    async fn an_unsigned_alg_none_token_is_invalid() {
        let auth = authenticator(&[]);
        // base64url of {"alg":"none","typ":"JWT"}, built by hand: no library will sign with none.
        let none_header = "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0";
        let payload = hs256(&claims("admin"), SECRET)
            .split('.')
            .nth(1)
            .unwrap()
            .to_owned();
        for token in [
            format!("{none_header}.{payload}."),
            format!("{none_header}.{payload}.c2ln"),
        ] {
            assert_invalid(check(&auth, &token).await, "unsupported algorithm");
        }
    }

    #[tokio::test]
    async fn algorithms_off_the_allow_list_are_invalid() {
        let auth = authenticator(&[]);
        let hs384 = encode(
            &Header::new(Algorithm::HS384),
            &claims("u"),
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap();
        assert_invalid(check(&auth, &hs384).await, "HS384 is not accepted");

        // No JWKS configured, so RS256 is not on the list either.
        let rs256 = encode(
            &Header::new(Algorithm::RS256),
            &claims("u"),
            &EncodingKey::from_rsa_pem(parley_testkit::keys::RSA_PEM).unwrap(),
        )
        .unwrap();
        assert_invalid(
            check(&auth, &rs256).await,
            "RS256 is not accepted (accepted: HS256)",
        );
    }

    #[tokio::test]
    async fn a_wrong_or_missing_issuer_is_invalid() {
        let auth = authenticator(&[("JWT_ISSUER", "https://idp.example")]);
        let mut good = claims("u");
        good["iss"] = json!("https://idp.example");
        assert!(check(&auth, &hs256(&good, SECRET)).await.is_ok());

        let mut wrong = claims("u");
        wrong["iss"] = json!("https://evil.example");
        assert_invalid(check(&auth, &hs256(&wrong, SECRET)).await, "issuer");
        assert_invalid(
            check(&auth, &hs256(&claims("u"), SECRET)).await,
            "the iss claim is missing",
        );
    }

    #[tokio::test]
    async fn the_audience_must_contain_a_configured_one() {
        let auth = authenticator(&[("JWT_AUDIENCE", "parley, parley-chat")]);
        let mut listed = claims("u");
        listed["aud"] = json!(["other-api", "parley-chat"]);
        assert!(check(&auth, &hs256(&listed, SECRET)).await.is_ok());

        let mut wrong = claims("u");
        wrong["aud"] = json!("other-api");
        assert_invalid(check(&auth, &hs256(&wrong, SECRET)).await, "audience");
        assert_invalid(
            check(&auth, &hs256(&claims("u"), SECRET)).await,
            "the aud claim is missing",
        );
    }

    #[tokio::test]
    async fn any_audience_passes_when_none_is_configured() {
        let auth = authenticator(&[]);
        let mut with_aud = claims("u");
        with_aud["aud"] = json!("some-api");
        assert!(check(&auth, &hs256(&with_aud, SECRET)).await.is_ok());
    }

    #[tokio::test]
    async fn a_token_without_a_usable_sub_is_invalid() {
        let auth = authenticator(&[]);
        let no_sub = json!({"exp": get_current_timestamp() + 600});
        assert_invalid(
            check(&auth, &hs256(&no_sub, SECRET)).await,
            "the sub claim is missing",
        );

        let too_long = "x".repeat(MAX_USER_ID_CHARS + 1);
        for bad in ["", too_long.as_str(), "alice\nINFO forged log line"] {
            let result = check(&auth, &hs256(&claims(bad), SECRET)).await;
            assert_invalid(result, "the sub claim must be 1 to 255 characters");
        }
        let numeric = json!({"sub": 42, "exp": get_current_timestamp() + 600});
        assert_invalid(check(&auth, &hs256(&numeric, SECRET)).await, "malformed");
    }

    #[tokio::test]
    async fn a_missing_blank_or_non_bearer_header_is_missing() {
        let auth = authenticator(&[]);
        for header in [
            None,
            Some(""),
            Some("   "),
            Some("Basic x"),
            Some("Bearer"),
            Some("Bearer  "),
        ] {
            let result = auth.authenticate(header).await;
            assert!(
                matches!(result, Err(AuthError::Missing)),
                "{header:?}: {result:?}"
            );
        }
        assert_eq!(
            AuthError::Missing.to_string(),
            "send Authorization: Bearer <token>"
        );
    }

    #[tokio::test]
    async fn garbage_and_oversized_tokens_are_invalid() {
        let auth = authenticator(&[]);
        for garbage in ["x", "a.b.c", "a.b", "....", "eyJ.eyJ.sig"] {
            assert_invalid(check(&auth, garbage).await, "malformed");
        }
        let huge = "a".repeat(MAX_TOKEN_BYTES + 1);
        assert_invalid(check(&auth, &huge).await, "longer than");
    }

    #[tokio::test]
    async fn refusals_never_echo_the_token() {
        let auth = authenticator(&[("JWT_ISSUER", "https://idp.example")]);
        let forged = hs256(&claims("u"), "another-secret-that-is-also-32-bytes-long");
        let mut wrong_iss = claims("u");
        wrong_iss["iss"] = json!("https://evil.example");
        for token in [forged, hs256(&wrong_iss, SECRET), "not-a-jwt".to_owned()] {
            let message = check(&auth, &token).await.unwrap_err().to_string();
            assert!(!message.contains(&token), "{message}");
            assert!(!message.contains("evil.example"), "{message}");
            assert!(!message.contains(SECRET), "{message}");
        }
    }

    #[tokio::test]
    async fn disabled_auth_yields_the_local_user_without_a_header() {
        let config = config(&[("CHAT_AUTH", "none")]).unwrap();
        let auth = Authenticator::new(config, reqwest::Client::new());
        assert!(auth.is_disabled());
        assert_eq!(auth.authenticate(None).await.unwrap(), User::local());
        let user = auth.authenticate(Some("Bearer whatever")).await.unwrap();
        assert_eq!(user.id.as_str(), "local-user");
        assert!(user.claims.is_empty());
    }

    #[test]
    fn jwt_mode_is_the_default_and_needs_a_secret_or_a_jwks_url() {
        let err = config(&[]).unwrap_err();
        assert_eq!(err.var, "JWT_SECRET");
        assert!(err.problem.contains("JWT_JWKS_URL"), "{err}");
        let err = config(&[("CHAT_AUTH", "jwt"), ("JWT_SECRET", "  ")]).unwrap_err();
        assert_eq!(err.var, "JWT_SECRET");

        let c = config(&[("JWT_SECRET", SECRET)]).unwrap();
        assert_eq!(c.mode, AuthMode::Jwt);
        assert!(!Authenticator::new(c, reqwest::Client::new()).is_disabled());
    }

    #[test]
    fn settings_have_their_documented_defaults() {
        let c = config(&[("JWT_JWKS_URL", "https://idp.example/.well-known/jwks.json")]).unwrap();
        assert!(c.jwt.secret.is_none());
        assert_eq!(c.jwt.jwks_url.unwrap().host_str(), Some("idp.example"));
        assert_eq!(c.jwt.issuer, None);
        assert!(c.jwt.audience.is_empty());
        assert_eq!(c.jwt.leeway_secs, 30);
        assert_eq!(c.jwt.jwks_cache_ttl, Duration::from_millis(3_600_000));
        assert_eq!(c.jwt.jwks_min_refresh, Duration::from_millis(60_000));
        assert_eq!(c.jwt.jwks_timeout, Duration::from_millis(5_000));
    }

    #[test]
    fn settings_are_read_from_their_variables() {
        let c = config(&[
            ("CHAT_AUTH", "JWT"),
            ("JWT_SECRET", SECRET),
            ("JWT_JWKS_URL", "http://localhost:8080/jwks"),
            ("JWT_ISSUER", "https://idp.example"),
            ("JWT_AUDIENCE", "a, b,"),
            ("JWT_LEEWAY_SECS", "5"),
            ("JWKS_CACHE_TTL_MS", "120000"),
            ("JWKS_MIN_REFRESH_MS", "2000"),
            ("JWKS_TIMEOUT_MS", "1500"),
        ])
        .unwrap();
        assert_eq!(c.jwt.secret.unwrap().expose_secret(), SECRET);
        assert_eq!(c.jwt.issuer.as_deref(), Some("https://idp.example"));
        assert_eq!(c.jwt.audience, vec!["a", "b"]);
        assert_eq!(c.jwt.leeway_secs, 5);
        assert_eq!(c.jwt.jwks_cache_ttl, Duration::from_secs(120));
        assert_eq!(c.jwt.jwks_min_refresh, Duration::from_secs(2));
        assert_eq!(c.jwt.jwks_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn malformed_settings_name_their_variable() {
        let cases = [
            ("CHAT_AUTH", "off", "CHAT_AUTH"),
            ("JWT_JWKS_URL", "not a url", "JWT_JWKS_URL"),
            ("JWT_JWKS_URL", "file:///etc/jwks.json", "JWT_JWKS_URL"),
            ("JWT_LEEWAY_SECS", "-1", "JWT_LEEWAY_SECS"),
            ("JWT_LEEWAY_SECS", "3600", "JWT_LEEWAY_SECS"),
            ("JWKS_CACHE_TTL_MS", "0", "JWKS_CACHE_TTL_MS"),
            ("JWKS_MIN_REFRESH_MS", "soon", "JWKS_MIN_REFRESH_MS"),
            ("JWKS_TIMEOUT_MS", "0", "JWKS_TIMEOUT_MS"),
        ];
        for (var, value, named) in cases {
            let err = config(&[("JWT_SECRET", SECRET), (var, value)]).unwrap_err();
            assert_eq!(err.var, named, "{var}={value}");
        }
    }

    #[test]
    fn disabled_auth_needs_no_keys_and_debug_output_hides_the_secret() {
        let c = config(&[("CHAT_AUTH", "None")]).unwrap();
        assert_eq!(c.mode, AuthMode::Disabled);

        let c = config(&[("JWT_SECRET", SECRET)]).unwrap();
        assert!(!format!("{c:?}").contains(SECRET));
        let auth = Authenticator::new(c, reqwest::Client::new());
        assert!(!format!("{auth:?}").contains(SECRET));
    }

    #[test]
    fn user_ids_are_bounded_and_free_of_control_characters() {
        assert_eq!(UserId::new("auth0|abc").unwrap().as_str(), "auth0|abc");
        assert!(UserId::new("é".repeat(MAX_USER_ID_CHARS)).is_ok());
        assert_eq!(UserId::new(""), Err(InvalidUserId));
        assert_eq!(
            UserId::new("x".repeat(MAX_USER_ID_CHARS + 1)),
            Err(InvalidUserId)
        );
        assert_eq!(UserId::new("a\u{7f}b"), Err(InvalidUserId));
        assert_eq!(UserId::local().as_str(), UserId::LOCAL);
        assert_eq!(
            serde_json::to_value(UserId::local()).unwrap(),
            json!("local-user")
        );
    }

    #[test]
    fn the_authenticator_can_be_shared_across_tasks() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Authenticator>();
    }

    #[derive(Clone)]
    struct AppState {
        auth: Arc<Authenticator>,
    }

    impl FromRef<AppState> for Arc<Authenticator> {
        fn from_ref(state: &AppState) -> Self {
            Arc::clone(&state.auth)
        }
    }

    async fn extract(state: &AppState, authorization: Option<&[u8]>) -> Result<User, AuthError> {
        let mut request = axum::http::Request::builder().uri("/conversations");
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value);
        }
        let (mut parts, ()) = request.body(()).unwrap().into_parts();
        User::from_request_parts(&mut parts, state).await
    }

    #[tokio::test]
    async fn the_user_extractor_admits_valid_tokens_only() {
        let state = AppState {
            auth: Arc::new(authenticator(&[])),
        };
        let mut with_email = claims("user-7");
        with_email["email"] = json!("u7@example.com");
        let token = format!("Bearer {}", hs256(&with_email, SECRET));
        let user = extract(&state, Some(token.as_bytes())).await.unwrap();
        assert_eq!(user.id.as_str(), "user-7");
        // The verified claims come along, for the tools that act for the user.
        assert_eq!(user.claims["email"], "u7@example.com");
        assert_eq!(user.claims["sub"], "user-7");

        for refused in [None, Some(&b"Basic x"[..]), Some(&b"Bearer \xff"[..])] {
            let err = extract(&state, refused).await.unwrap_err();
            assert!(matches!(err, AuthError::Missing), "{err:?}");
        }
        let expired = json!({"sub": "u", "exp": get_current_timestamp() - 120});
        let header = format!("Bearer {}", hs256(&expired, SECRET));
        let err = extract(&state, Some(header.as_bytes())).await.unwrap_err();
        assert!(
            matches!(err, AuthError::Token(TokenError::Expired)),
            "{err:?}"
        );
    }
}
