//! The RS256, ES256 and EdDSA (Ed25519) verification keys of `JWT_JWKS_URL`, fetched on first use and cached for the
//! life of the instance: refreshed after `JWKS_CACHE_TTL_MS`, refetched early for an unknown
//! `kid`, but never more than once per `JWKS_MIN_REFRESH_MS`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;
use tokio::sync::{Mutex, RwLock};

use super::{TokenError, invalid};

/// Real key sets are a few KiB; a bigger answer is refused rather than buffered.
const MAX_JWKS_BYTES: usize = 512 * 1024;

/// An Ed25519 public key is 32 bytes: 43 characters of unpadded base64url (RFC 8037 §2).
/// jsonwebtoken takes any length here and fails only at verification, so a wrong length is
/// skipped with the set's other unusable keys.
const ED25519_X_CHARS: usize = 43;

pub(super) struct JwksCache {
    url: url::Url,
    http: reqwest::Client,
    timeout: Duration,
    ttl: Duration,
    min_refresh: Duration,
    state: RwLock<State>,
    /// Held while deciding on and running a fetch, so concurrent requests that miss the cache
    /// cause one fetch and then share its result.
    fetching: Mutex<()>,
}

#[derive(Default)]
struct State {
    keys: Vec<CachedKey>,
    /// The last successful fetch.
    fetched_at: Option<Instant>,
    /// The last fetch, successful or not: a failed one is retried `min_refresh` after it.
    attempted_at: Option<Instant>,
    /// The last fetch caused by an unknown `kid`: the next one waits `min_refresh`.
    refetched_at: Option<Instant>,
    /// Why the last fetch failed; `None` once one succeeds.
    last_error: Option<String>,
}

/// Why a fetch is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// No keys yet, or older than the TTL.
    Expired,
    /// The last fetch failed.
    Retry,
    /// The cache is fresh but no key has the token's `kid`: perhaps the IdP rotated its keys,
    /// perhaps the kid is forged.
    UnknownKid,
}

struct CachedKey {
    kid: Option<String>,
    alg: Algorithm,
    key: Arc<DecodingKey>,
}

impl fmt::Debug for JwksCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JwksCache")
            .field("url", &self.url.as_str())
            .field("ttl", &self.ttl)
            .field("min_refresh", &self.min_refresh)
            .finish_non_exhaustive()
    }
}

impl State {
    fn is_fresh(&self, ttl: Duration) -> bool {
        self.fetched_at.is_some_and(|at| at.elapsed() < ttl)
    }

    /// The keys for a token's `alg` and `kid`, in the set's order: every key with that `kid`
    /// (identity providers publish two under one `kid` while they rotate, and RFC 7517 §4.5
    /// does not make a `kid` unique), or without a `kid`, the set's only key for that
    /// algorithm, if it has exactly one. Empty when none fits.
    fn find(&self, alg: Algorithm, kid: Option<&str>) -> Result<Vec<Arc<DecodingKey>>, TokenError> {
        let mut candidates = self.keys.iter().filter(|k| k.alg == alg);
        let found: Vec<&CachedKey> = match kid {
            Some(kid) => candidates
                .filter(|k| k.kid.as_deref() == Some(kid))
                .collect(),
            None => match (candidates.next(), candidates.next()) {
                (Some(only), None) => vec![only],
                (Some(_), Some(_)) => {
                    return Err(invalid(format!(
                        "the token has no kid and the key set holds several {alg:?} keys"
                    )));
                }
                _ => Vec::new(),
            },
        };
        Ok(found.into_iter().map(|k| Arc::clone(&k.key)).collect())
    }
}

impl JwksCache {
    pub(super) fn new(
        url: url::Url,
        http: reqwest::Client,
        timeout: Duration,
        ttl: Duration,
        min_refresh: Duration,
    ) -> Self {
        Self {
            url,
            http,
            timeout,
            ttl,
            min_refresh,
            state: RwLock::default(),
            fetching: Mutex::new(()),
        }
    }

    /// The keys that may verify a token with this `alg` (RS256, ES256 or EdDSA) and `kid`:
    /// at least one, each to be tried in turn.
    pub(super) async fn keys_for(
        &self,
        alg: Algorithm,
        kid: Option<&str>,
    ) -> Result<Vec<Arc<DecodingKey>>, TokenError> {
        let asked_at = Instant::now();
        let _fetching = {
            let state = self.state.read().await;
            let keys = state.find(alg, kid)?;
            if keys.is_empty() {
                drop(state);
                self.fetching.lock().await
            } else if state.is_fresh(self.ttl) {
                return Ok(keys);
            } else {
                // Stale but usable: refresh them, unless another request already is, in which
                // case this one need not wait for it.
                match self.fetching.try_lock() {
                    Ok(guard) => guard,
                    Err(_) => return Ok(keys),
                }
            }
        };

        let trigger = {
            let state = self.state.read().await;
            let keys = state.find(alg, kid)?;
            if !keys.is_empty() && state.is_fresh(self.ttl) {
                return Ok(keys);
            }
            self.fetch_trigger(&state, asked_at)
        };
        if let Some(trigger) = trigger {
            let result = self.fetch().await;
            let mut state = self.state.write().await;
            state.attempted_at = Some(Instant::now());
            if trigger == Trigger::UnknownKid {
                state.refetched_at = state.attempted_at;
            }
            match result {
                Ok(keys) => {
                    tracing::debug!(url = %self.url, keys = keys.len(), ?trigger, "fetched the JWKS");
                    state.keys = keys;
                    state.fetched_at = state.attempted_at;
                    state.last_error = None;
                }
                Err(e) => {
                    tracing::warn!(
                        url = %self.url,
                        error = %e,
                        cached_keys = state.keys.len(),
                        ?trigger,
                        "cannot fetch the JWKS; keeping any cached keys"
                    );
                    state.last_error = Some(e);
                }
            }
        }

        let state = self.state.read().await;
        let keys = state.find(alg, kid)?;
        match (keys.is_empty(), &state.last_error) {
            (false, _) => Ok(keys),
            (true, Some(e)) => Err(TokenError::KeysUnavailable(e.clone())),
            (true, None) => Err(invalid(format!(
                "no {alg:?} key in the key set matches the token's kid"
            ))),
        }
    }

    /// Whether (and why) to fetch when no fresh key fits; `None` means answer from the cache.
    fn fetch_trigger(&self, state: &State, asked_at: Instant) -> Option<Trigger> {
        let waited =
            |since: Option<Instant>| since.is_none_or(|at| at.elapsed() >= self.min_refresh);
        if state.attempted_at.is_some_and(|at| at >= asked_at) {
            // Another request fetched while this one waited for its turn: use its result.
            None
        } else if state.last_error.is_some() {
            waited(state.attempted_at).then_some(Trigger::Retry)
        } else if !state.is_fresh(self.ttl) {
            Some(Trigger::Expired)
        } else {
            waited(state.refetched_at).then_some(Trigger::UnknownKid)
        }
    }

    async fn fetch(&self) -> Result<Vec<CachedKey>, String> {
        let mut response = self
            .http
            .get(self.url.clone())
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| crate::error::chain(&e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("the JWKS endpoint {} answered {status}", self.url));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| crate::error::chain(&e))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(format!("the JWKS is larger than {MAX_JWKS_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        parse_key_set(&body)
    }
}

/// The RS256, ES256 and EdDSA signing keys of a JWKS document. Keys of other kinds, curves
/// (P-384, Ed448, X25519, ...) or uses are skipped, so one exotic key cannot take the whole set
/// down.
fn parse_key_set(body: &[u8]) -> Result<Vec<CachedKey>, String> {
    #[derive(Deserialize)]
    struct KeySet {
        keys: Vec<serde_json::Value>,
    }
    let set: KeySet =
        serde_json::from_slice(body).map_err(|e| format!("the JWKS is not a JSON key set: {e}"))?;
    let keys: Vec<CachedKey> = set
        .keys
        .into_iter()
        .filter_map(|value| serde_json::from_value::<Jwk>(value).ok())
        .filter_map(|jwk| usable_key(&jwk))
        .collect();
    if keys.is_empty() {
        return Err("the JWKS holds no RS256, ES256 or EdDSA signing key".to_owned());
    }
    Ok(keys)
}

fn usable_key(jwk: &Jwk) -> Option<CachedKey> {
    if jwk
        .common
        .public_key_use
        .as_ref()
        .is_some_and(|u| *u != PublicKeyUse::Signature)
    {
        return None;
    }
    let alg = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        // RFC 8037: `kty: OKP` with `crv: Ed25519`. Other OKP curves either fail to parse as a
        // `Jwk` (Ed448, X25519) or name a curve that is not an Edwards one (P-256).
        AlgorithmParameters::OctetKeyPair(p)
            if p.curve == EllipticCurve::Ed25519 && p.x.len() == ED25519_X_CHARS =>
        {
            Algorithm::EdDSA
        }
        _ => return None,
    };
    // A key pinned to another algorithm (say PS256) must not verify this one.
    if jwk
        .common
        .key_algorithm
        .is_some_and(|declared| declared != KeyAlgorithm::from(alg))
    {
        return None;
    }
    let key = DecodingKey::from_jwk(jwk).ok()?;
    Some(CachedKey {
        kid: jwk.common.key_id.clone(),
        alg,
        key: Arc::new(key),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use axum::Router;
    use axum::extract::State as AxumState;
    use axum::http::StatusCode;
    use axum::routing::get;
    use jsonwebtoken::{EncodingKey, Header, encode, get_current_timestamp};
    use serde_json::{Value, json};

    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use parley_testkit::keys::{
        EC_OTHER_PEM, EC_PEM, ED25519_OTHER_PEM, ED25519_PEM, JWKS, RSA_OTHER_PEM, RSA_PEM,
    };

    use crate::jwt::{JwtConfig, Verifier};

    use super::*;

    /// A JWKS endpoint on loopback that counts its requests and can be told to fail.
    struct IdP {
        url: url::Url,
        hits: Arc<AtomicUsize>,
        body: Arc<std::sync::Mutex<String>>,
        failing: Arc<AtomicBool>,
    }

    #[derive(Clone)]
    struct Served {
        hits: Arc<AtomicUsize>,
        body: Arc<std::sync::Mutex<String>>,
        failing: Arc<AtomicBool>,
    }

    async fn serve_jwks(served: AxumState<Served>) -> Result<String, StatusCode> {
        served.hits.fetch_add(1, Ordering::SeqCst);
        if served.failing.load(Ordering::SeqCst) {
            return Err(StatusCode::INTERNAL_SERVER_ERROR);
        }
        Ok(served.body.lock().unwrap().clone())
    }

    impl IdP {
        async fn start(jwks: &str) -> Self {
            let served = Served {
                hits: Arc::default(),
                body: Arc::new(std::sync::Mutex::new(jwks.to_owned())),
                failing: Arc::default(),
            };
            let app = Router::new()
                .route("/jwks", get(serve_jwks))
                .with_state(served.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await });
            Self {
                url: format!("http://{addr}/jwks").parse().unwrap(),
                hits: served.hits,
                body: served.body,
                failing: served.failing,
            }
        }

        /// The IdP and a verifier of its keys with the default settings.
        async fn start_with_verifier(jwks: &str) -> (Self, Verifier) {
            let idp = Self::start(jwks).await;
            let verifier = authenticator(config(idp.url.clone()));
            (idp, verifier)
        }

        fn hits(&self) -> usize {
            self.hits.load(Ordering::SeqCst)
        }
    }

    fn config(url: url::Url) -> JwtConfig {
        JwtConfig {
            secret: None,
            jwks_url: Some(url),
            issuer: None,
            audience: Vec::new(),
            leeway_secs: 30,
            jwks_cache_ttl: Duration::from_secs(3600),
            jwks_min_refresh: Duration::from_secs(60),
            jwks_timeout: Duration::from_secs(5),
            token_use: crate::jwt::TokenUse::Any,
            max_lifetime: None,
        }
    }

    fn authenticator(config: JwtConfig) -> Verifier {
        Verifier::new(config, reqwest::Client::new())
    }

    fn sign(alg: Algorithm, pem: &[u8], kid: Option<&str>, sub: &str) -> String {
        let key = match alg {
            Algorithm::ES256 => EncodingKey::from_ec_pem(pem),
            Algorithm::EdDSA => EncodingKey::from_ed_pem(pem),
            _ => EncodingKey::from_rsa_pem(pem),
        }
        .unwrap();
        let mut header = Header::new(alg);
        header.kid = kid.map(str::to_owned);
        let claims = json!({"sub": sub, "exp": get_current_timestamp() + 600});
        encode(&header, &claims, &key).unwrap()
    }

    /// The subject of a token that verifies.
    async fn check(auth: &Verifier, token: &str) -> Result<String, TokenError> {
        auth.verify(token).await.map(|verified| verified.subject)
    }

    fn assert_invalid(result: &Result<String, TokenError>, expected: &str) {
        match result {
            Err(TokenError::Invalid(why)) => {
                assert!(why.contains(expected), "expected {expected:?} in {why:?}")
            }
            other => panic!("expected Invalid({expected:?}), got {other:?}"),
        }
    }

    fn only_key(kid: &str) -> String {
        let mut set: Value = serde_json::from_str(JWKS).unwrap();
        set["keys"]
            .as_array_mut()
            .unwrap()
            .retain(|k| k["kid"] == kid);
        set.to_string()
    }

    #[tokio::test]
    async fn valid_rs256_es256_and_eddsa_tokens_pass() {
        let (_, auth) = IdP::start_with_verifier(JWKS).await;
        let rs = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "rsa-user");
        let es = sign(Algorithm::ES256, EC_PEM, Some("test-ec"), "ec-user");
        assert_eq!(check(&auth, &rs).await.unwrap(), "rsa-user");
        assert_eq!(check(&auth, &es).await.unwrap(), "ec-user");
        let ed = sign(Algorithm::EdDSA, ED25519_PEM, Some("test-ed"), "ed-user");
        assert_eq!(check(&auth, &ed).await.unwrap(), "ed-user");
    }

    #[tokio::test]
    async fn a_token_signed_by_another_key_with_the_same_kid_fails() {
        let (_, auth) = IdP::start_with_verifier(JWKS).await;
        let forged_rs = sign(Algorithm::RS256, RSA_OTHER_PEM, Some("test-rsa"), "u");
        let forged_es = sign(Algorithm::ES256, EC_OTHER_PEM, Some("test-ec"), "u");
        let forged_ed = sign(Algorithm::EdDSA, ED25519_OTHER_PEM, Some("test-ed"), "u");
        for forged in [forged_rs, forged_es, forged_ed] {
            let result = check(&auth, &forged).await;
            assert_invalid(&result, "signature");
        }
    }

    /// The public half of [`RSA_OTHER_PEM`] as a JWK named `kid`.
    fn other_rsa_jwk(kid: &str) -> Value {
        let private = EncodingKey::from_rsa_pem(RSA_OTHER_PEM).unwrap();
        let mut jwk =
            serde_json::to_value(Jwk::from_encoding_key(&private, Algorithm::RS256).unwrap())
                .unwrap();
        jwk["kid"] = json!(kid);
        jwk["use"] = json!("sig");
        jwk
    }

    #[tokio::test]
    async fn two_rsa_keys_sharing_a_kid_each_verify_their_own_tokens() {
        // Mid-rotation, an identity provider publishes the old and the new key under one kid.
        let mut set: Value = serde_json::from_str(JWKS).unwrap();
        set["keys"]
            .as_array_mut()
            .unwrap()
            .push(other_rsa_jwk("test-rsa"));
        let (idp, auth) = IdP::start_with_verifier(&set.to_string()).await;
        let by_second = sign(Algorithm::RS256, RSA_OTHER_PEM, Some("test-rsa"), "second");
        assert_eq!(check(&auth, &by_second).await.unwrap(), "second");
        let by_first = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "first");
        assert_eq!(check(&auth, &by_first).await.unwrap(), "first");
        assert_eq!(idp.hits(), 1, "both served from one fetch");

        // A signature neither key made still fails as such, and a failure of the token's own
        // (expired) is not hidden behind the other key's signature mismatch.
        let other_payload = by_first.split('.').nth(1).unwrap();
        let parts: Vec<&str> = by_second.split('.').collect();
        let spliced = format!("{}.{other_payload}.{}", parts[0], parts[2]);
        assert_invalid(&check(&auth, &spliced).await, "signature");
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("test-rsa".into());
        let expired = encode(
            &header,
            &json!({"sub": "second", "exp": get_current_timestamp() - 3600}),
            &EncodingKey::from_rsa_pem(RSA_OTHER_PEM).unwrap(),
        )
        .unwrap();
        assert_eq!(check(&auth, &expired).await, Err(TokenError::Expired));
    }

    #[tokio::test]
    async fn a_kid_of_the_other_key_type_does_not_verify() {
        let (_, auth) = IdP::start_with_verifier(JWKS).await;
        // An ES256 token naming the RSA key's kid finds no ES256 key with that kid.
        let confused = sign(Algorithm::ES256, EC_PEM, Some("test-rsa"), "u");
        assert_invalid(&check(&auth, &confused).await, "no ES256 key");
        for kid in ["test-rsa", "test-ec"] {
            let confused = sign(Algorithm::EdDSA, ED25519_PEM, Some(kid), "u");
            assert_invalid(&check(&auth, &confused).await, "no EdDSA key");
        }
    }

    #[tokio::test]
    async fn keys_are_fetched_once_for_many_verifications() {
        let (idp, auth) = IdP::start_with_verifier(JWKS).await;
        assert_eq!(idp.hits(), 0, "nothing is fetched before the first token");
        let rs = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u");
        let es = sign(Algorithm::ES256, EC_PEM, Some("test-ec"), "u");
        for _ in 0..10 {
            check(&auth, &rs).await.unwrap();
            check(&auth, &es).await.unwrap();
        }
        assert_eq!(idp.hits(), 1);
    }

    #[tokio::test]
    async fn concurrent_first_requests_share_one_fetch() {
        let idp = IdP::start(JWKS).await;
        let auth = Arc::new(authenticator(config(idp.url.clone())));
        let rs = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u");
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let auth = Arc::clone(&auth);
                let rs = rs.clone();
                tokio::spawn(async move { check(&auth, &rs).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(idp.hits(), 1);
    }

    #[tokio::test]
    async fn an_unknown_kid_triggers_one_refetch_then_none_within_the_min_refresh() {
        let (idp, auth) = IdP::start_with_verifier(JWKS).await;
        check(
            &auth,
            &sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u"),
        )
        .await
        .unwrap();
        assert_eq!(idp.hits(), 1);

        for kid in ["forged-1", "forged-2", "forged-3", "forged-1"] {
            let result = check(&auth, &sign(Algorithm::RS256, RSA_PEM, Some(kid), "u")).await;
            assert_invalid(&result, "kid");
            assert_eq!(
                idp.hits(),
                2,
                "one refetch for the first unknown kid, then none"
            );
        }
        // Known kids are still served from the cache.
        check(&auth, &sign(Algorithm::ES256, EC_PEM, Some("test-ec"), "u"))
            .await
            .unwrap();
        assert_eq!(idp.hits(), 2);
    }

    #[tokio::test]
    async fn a_rotated_key_is_picked_up_at_once_and_forged_kids_wait_for_the_min_refresh() {
        let idp = IdP::start(&only_key("test-rsa")).await;
        let mut cfg = config(idp.url.clone());
        cfg.jwks_min_refresh = Duration::from_millis(200);
        let auth = authenticator(cfg);
        check(
            &auth,
            &sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u"),
        )
        .await
        .unwrap();
        assert_eq!(idp.hits(), 1);

        // The IdP rotates in a new key; tokens naming it arrive before our cache knows it.
        let mut rotated: Value = serde_json::from_str(JWKS).unwrap();
        rotated["keys"][0]["kid"] = json!("test-rsa-2");
        *idp.body.lock().unwrap() = rotated.to_string();
        let new_kid = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa-2"), "u");
        let forged_kid = sign(Algorithm::RS256, RSA_PEM, Some("forged"), "u");
        assert_eq!(check(&auth, &new_kid).await.unwrap(), "u");
        assert_eq!(idp.hits(), 2, "one refetch for the unknown kid");

        for _ in 0..5 {
            assert!(check(&auth, &forged_kid).await.is_err());
        }
        assert_eq!(idp.hits(), 2, "no more refetches within the min refresh");

        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(check(&auth, &forged_kid).await.is_err());
        assert_eq!(idp.hits(), 3, "one more once it has passed");
        // The rotated-out kid is gone for good.
        let old_kid = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u");
        assert!(check(&auth, &old_kid).await.is_err());
    }

    #[tokio::test]
    async fn the_jwks_server_down_at_first_use_means_keys_unavailable() {
        // A port that was just free: connecting to it is refused.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let auth = authenticator(config(format!("http://{addr}/jwks").parse().unwrap()));
        let token = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u");
        let result = check(&auth, &token).await;
        assert!(
            matches!(result, Err(TokenError::KeysUnavailable(_))),
            "{result:?}"
        );
        // Retried no sooner than the min refresh, and still reported as unavailable.
        let result = check(&auth, &token).await;
        assert!(
            matches!(result, Err(TokenError::KeysUnavailable(_))),
            "{result:?}"
        );
    }

    #[tokio::test]
    async fn an_error_status_or_a_bad_document_means_keys_unavailable() {
        for body in [
            "not json",
            r#"{"keys": []}"#,
            r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#,
        ] {
            let (_, auth) = IdP::start_with_verifier(body).await;
            let token = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u");
            let result = check(&auth, &token).await;
            assert!(
                matches!(result, Err(TokenError::KeysUnavailable(_))),
                "{body}: {result:?}"
            );
        }
        let idp = IdP::start(JWKS).await;
        idp.failing.store(true, Ordering::SeqCst);
        let auth = authenticator(config(idp.url.clone()));
        let token = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u");
        match check(&auth, &token).await {
            Err(TokenError::KeysUnavailable(why)) => assert!(why.contains("500"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn stale_keys_are_refreshed_and_kept_when_the_refresh_fails() {
        let idp = IdP::start(JWKS).await;
        let mut cfg = config(idp.url.clone());
        cfg.jwks_cache_ttl = Duration::from_millis(100);
        cfg.jwks_min_refresh = Duration::from_millis(10);
        let auth = authenticator(cfg);
        let token = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u");
        check(&auth, &token).await.unwrap();

        tokio::time::sleep(Duration::from_millis(150)).await;
        check(&auth, &token).await.unwrap();
        assert_eq!(idp.hits(), 2, "refreshed after the TTL");

        idp.failing.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(check(&auth, &token).await.unwrap(), "u");
        assert_eq!(idp.hits(), 3, "the failed refresh was attempted");
    }

    #[tokio::test]
    async fn a_token_without_kid_uses_the_only_key_of_its_algorithm() {
        let (_, auth) = IdP::start_with_verifier(JWKS).await;
        let rs = sign(Algorithm::RS256, RSA_PEM, None, "u");
        assert_eq!(check(&auth, &rs).await.unwrap(), "u");
        let ed = sign(Algorithm::EdDSA, ED25519_PEM, None, "u");
        assert_eq!(check(&auth, &ed).await.unwrap(), "u");

        // Two RSA keys: which one is meant is ambiguous.
        let mut two: Value = serde_json::from_str(JWKS).unwrap();
        let mut copy = two["keys"][0].clone();
        copy["kid"] = json!("test-rsa-copy");
        two["keys"].as_array_mut().unwrap().push(copy);
        let (_, auth) = IdP::start_with_verifier(&two.to_string()).await;
        let result = check(&auth, &rs).await;
        assert_invalid(&result, "no kid");
    }

    #[tokio::test]
    async fn hs256_tokens_are_refused_when_only_a_jwks_is_configured() {
        let (idp, auth) = IdP::start_with_verifier(JWKS).await;
        // The classic confusion attack: HMAC keyed with the (public) RSA modulus.
        let set: Value = serde_json::from_str(JWKS).unwrap();
        let public = set["keys"][0]["n"].as_str().unwrap();
        let claims = json!({"sub": "u", "exp": get_current_timestamp() + 600});
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("test-rsa".to_owned());
        let token = encode(
            &header,
            &claims,
            &EncodingKey::from_secret(public.as_bytes()),
        )
        .unwrap();
        let result = check(&auth, &token).await;
        assert_invalid(&result, "HS256 is not accepted");
        assert_eq!(idp.hits(), 0);
    }

    #[tokio::test]
    async fn a_secret_and_a_jwks_can_be_used_together() {
        let idp = IdP::start(JWKS).await;
        let mut cfg = config(idp.url.clone());
        let secret = "a-test-secret-that-is-at-least-32-bytes-long";
        cfg.secret = Some(secret.to_owned().into());
        let auth = authenticator(cfg);
        let claims = json!({"sub": "hs-user", "exp": get_current_timestamp() + 600});
        let hs = encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap();
        assert_eq!(check(&auth, &hs).await.unwrap(), "hs-user");
        assert_eq!(idp.hits(), 0, "HS256 needs no keys from the IdP");
        let es = sign(Algorithm::ES256, EC_PEM, Some("test-ec"), "ec-user");
        assert_eq!(check(&auth, &es).await.unwrap(), "ec-user");
        let ed = sign(Algorithm::EdDSA, ED25519_PEM, Some("test-ed"), "ed-user");
        assert_eq!(check(&auth, &ed).await.unwrap(), "ed-user");
    }

    #[test]
    fn only_rs256_es256_and_ed25519_signing_keys_are_kept() {
        let mut set: Value = serde_json::from_str(JWKS).unwrap();
        let rsa = set["keys"][0].clone();
        let ec = set["keys"][1].clone();
        let ed = set["keys"][2].clone();
        let x = ed["x"].clone();
        let mut extra = vec![
            json!({"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}),
            json!({"kty": "EC", "kid": "p384", "crv": "P-384", "x": "AA", "y": "AA"}),
            json!({"kty": "OKP", "kid": "short-ed", "crv": "Ed25519", "x": "AA"}),
            json!({"kty": "OKP", "kid": "ed448", "crv": "Ed448", "x": x}),
            json!({"kty": "OKP", "kid": "x25519", "crv": "X25519", "x": x}),
            json!({"kty": "OKP", "kid": "okp-p256", "crv": "P-256", "x": x}),
            json!({"kty": "weird"}),
            json!("not an object"),
        ];
        let mut pinned_elsewhere = ed.clone();
        pinned_elsewhere["alg"] = json!("ES256");
        pinned_elsewhere["kid"] = json!("ed-as-es256");
        extra.push(pinned_elsewhere);
        let mut encryption = rsa.clone();
        encryption["use"] = json!("enc");
        encryption["kid"] = json!("enc");
        let mut pss = rsa.clone();
        pss["alg"] = json!("PS256");
        pss["kid"] = json!("pss");
        let mut bare = ec.clone();
        bare.as_object_mut().unwrap().remove("alg");
        bare.as_object_mut().unwrap().remove("use");
        bare["kid"] = json!("bare-ec");
        extra.extend([encryption, pss, bare]);
        set["keys"].as_array_mut().unwrap().extend(extra);

        let keys = parse_key_set(set.to_string().as_bytes()).unwrap();
        let kept: Vec<(Option<&str>, Algorithm)> =
            keys.iter().map(|k| (k.kid.as_deref(), k.alg)).collect();
        assert_eq!(
            kept,
            vec![
                (Some("test-rsa"), Algorithm::RS256),
                (Some("test-ec"), Algorithm::ES256),
                (Some("test-ed"), Algorithm::EdDSA),
                (Some("bare-ec"), Algorithm::ES256),
            ]
        );
    }

    #[tokio::test]
    async fn an_eddsa_token_with_a_tampered_payload_fails() {
        let (_, auth) = IdP::start_with_verifier(JWKS).await;
        let genuine = sign(Algorithm::EdDSA, ED25519_PEM, Some("test-ed"), "alice");
        let other = sign(Algorithm::EdDSA, ED25519_PEM, Some("test-ed"), "mallory");
        let parts: Vec<&str> = genuine.split('.').collect();
        let other_payload = other.split('.').nth(1).unwrap();
        let spliced = format!("{}.{}.{}", parts[0], other_payload, parts[2]);
        assert_invalid(&check(&auth, &spliced).await, "signature");
    }

    /// HS256 keyed with the Ed25519 public key, as published (`x`) and as raw bytes.
    fn hs256_with_the_ed25519_public_key() -> Vec<String> {
        let set: Value = serde_json::from_str(JWKS).unwrap();
        let x = set["keys"][2]["x"].as_str().unwrap();
        let raw = URL_SAFE_NO_PAD.decode(x).unwrap();
        assert_eq!(raw.len(), 32);
        let claims = json!({"sub": "u", "exp": get_current_timestamp() + 600});
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("test-ed".to_owned());
        [x.as_bytes(), raw.as_slice()]
            .into_iter()
            .map(|key| encode(&header, &claims, &EncodingKey::from_secret(key)).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn hs256_signed_with_the_ed25519_public_key_is_refused() {
        let (idp, auth) = IdP::start_with_verifier(JWKS).await;
        for token in hs256_with_the_ed25519_public_key() {
            let result = check(&auth, &token).await;
            assert_invalid(&result, "HS256 is not accepted");
        }

        // With a shared secret as well, HS256 is verified with that secret only.
        let mut cfg = config(idp.url.clone());
        cfg.secret = Some(
            "a-test-secret-that-is-at-least-32-bytes-long"
                .to_owned()
                .into(),
        );
        let auth = authenticator(cfg);
        for token in hs256_with_the_ed25519_public_key() {
            let result = check(&auth, &token).await;
            assert_invalid(&result, "signature");
        }
        assert_eq!(idp.hits(), 0, "HS256 never looks at the key set");
    }

    #[tokio::test]
    async fn a_set_of_only_ed25519_keys_serves_eddsa_and_refuses_the_others() {
        let (_, auth) = IdP::start_with_verifier(&only_key("test-ed")).await;
        let ed = sign(Algorithm::EdDSA, ED25519_PEM, Some("test-ed"), "ed-user");
        assert_eq!(check(&auth, &ed).await.unwrap(), "ed-user");
        let rs = sign(Algorithm::RS256, RSA_PEM, Some("test-rsa"), "u");
        let result = check(&auth, &rs).await;
        assert_invalid(&result, "no RS256 key");
    }
}
