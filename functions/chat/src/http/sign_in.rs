//! The page's sign-in with an OpenID Connect provider: the `OIDC_*` settings as a checked
//! [`SignInSettings`], and [`Discovery`], the provider's endpoints read from its discovery
//! document by the server (some providers send that document without CORS headers, so the page
//! cannot read it). Nothing here sees a token: the page signs in, the chat verifies with `JWT_*`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parley_core::config::{ConfigError, Env};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

/// The `OIDC_*` settings, read once at start-up. Holding one proves they were well-formed:
/// http(s) URLs, a client id, scopes that include `openid`, a redirect path on this origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInSettings {
    /// `OIDC_ISSUER`, as written: the provider's discovery document must name exactly it.
    pub issuer: String,
    /// `OIDC_CLIENT_ID`: the page's public client (no secret).
    pub client_id: String,
    /// `OIDC_SCOPES` (default `openid profile email`), space-separated.
    pub scopes: String,
    /// `OIDC_REDIRECT_PATH` (default `/`): where the provider sends the browser back, on the
    /// page's origin; the page must be served there.
    pub redirect_path: String,
    /// `OIDC_END_SESSION_URL`: a sign-out address for providers whose discovery document has
    /// no `end_session_endpoint` (Amazon Cognito's `https://<domain>/logout`), which takes
    /// `client_id` and `logout_uri` instead of OpenID's `id_token_hint`.
    pub end_session_url: Option<url::Url>,
    /// `JWKS_TIMEOUT_MS`: one request for the discovery document, as for the provider's keys.
    pub discovery_timeout: Duration,
}

impl SignInSettings {
    pub const ISSUER: &str = "OIDC_ISSUER";
    pub const CLIENT_ID: &str = "OIDC_CLIENT_ID";
    pub const SCOPES: &str = "OIDC_SCOPES";
    pub const REDIRECT_PATH: &str = "OIDC_REDIRECT_PATH";
    pub const END_SESSION_URL: &str = "OIDC_END_SESSION_URL";
    pub const DEFAULT_SCOPES: &str = "openid profile email";
    /// Longer than any provider's client ids (Cognito: 26, Entra ID: 36, Auth0: 32).
    const MAX_CLIENT_ID_CHARS: usize = 256;

    /// The settings, or `None` when `OIDC_ISSUER` is unset (the page then offers the token box).
    /// `discovery_timeout` is `JWKS_TIMEOUT_MS`.
    pub fn from_env(env: &Env, discovery_timeout: Duration) -> Result<Option<Self>, ConfigError> {
        let Some(issuer) = env.get(Self::ISSUER) else {
            // Half a configuration: a client id or a sign-out address for no provider.
            if let Some(var) = [Self::CLIENT_ID, Self::END_SESSION_URL]
                .into_iter()
                .find(|var| env.is_set(var))
            {
                return Err(ConfigError::new(
                    Self::ISSUER,
                    format!("must be set when {var} is: {var} means nothing without a provider"),
                ));
            }
            return Ok(None);
        };
        http_url(Self::ISSUER, issuer)?;
        // Kept as written, not as the URL parser would write it back (it adds a `/` to a bare
        // host): discovery compares the document's `issuer` with exactly this text.
        let issuer = issuer.to_owned();
        let client_id = env.get(Self::CLIENT_ID).ok_or_else(|| {
            ConfigError::new(
                Self::CLIENT_ID,
                "must be set when OIDC_ISSUER is: the page signs in as that public client",
            )
        })?;
        let visible = |c: char| c.is_ascii_graphic();
        if client_id.chars().count() > Self::MAX_CLIENT_ID_CHARS || !client_id.chars().all(visible)
        {
            return Err(ConfigError::new(
                Self::CLIENT_ID,
                "must be 1 to 256 visible ASCII characters",
            ));
        }
        let scopes = scopes(env.get(Self::SCOPES).unwrap_or(Self::DEFAULT_SCOPES))?;
        let redirect_path = redirect_path(env.get(Self::REDIRECT_PATH).unwrap_or("/"))?;
        let end_session_url = env
            .get(Self::END_SESSION_URL)
            .map(|raw| http_url(Self::END_SESSION_URL, raw))
            .transpose()?;
        Ok(Some(Self {
            issuer,
            client_id: client_id.to_owned(),
            scopes,
            redirect_path,
            end_session_url,
            discovery_timeout,
        }))
    }

    /// Where the provider publishes its endpoints (OpenID Connect Discovery 1.0, section 4).
    fn discovery_url(&self) -> String {
        format!(
            "{}/.well-known/openid-configuration",
            self.issuer.trim_end_matches('/')
        )
    }
}

/// `raw` as a URL if it is an absolute http(s) URL with a host and no query, fragment or
/// credentials.
fn http_url(var: &str, raw: &str) -> Result<url::Url, ConfigError> {
    let url = url::Url::parse(raw)
        .map_err(|_| ConfigError::new(var, "must be an absolute http(s) URL"))?;
    if !matches!(url.scheme(), "https" | "http") || url.host_str().is_none() {
        return Err(ConfigError::new(var, "must be an http(s) URL with a host"));
    }
    if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(ConfigError::new(
            var,
            "must have no query, fragment or credentials",
        ));
    }
    Ok(url)
}

/// Space-separated scope tokens (RFC 6749 section 3.3), `openid` among them: without it the
/// provider issues no ID token, and sign-out has none to name the session by.
fn scopes(raw: &str) -> Result<String, ConfigError> {
    let bad = |problem: &str| ConfigError::new(SignInSettings::SCOPES, problem);
    let tokens: Vec<&str> = raw.split_whitespace().collect();
    let allowed = |c: char| c.is_ascii_graphic() && c != '"' && c != '\\';
    if tokens.iter().any(|t| !t.chars().all(allowed)) {
        return Err(bad(
            "must be scope names separated by spaces, without quotes or backslashes",
        ));
    }
    if !tokens.contains(&"openid") {
        return Err(bad("must include `openid`"));
    }
    Ok(tokens.join(" "))
}

/// A path on the page's own origin: `/`-rooted, no `//` (which a browser reads as another
/// host), no query or fragment (the provider adds its own query).
fn redirect_path(raw: &str) -> Result<String, ConfigError> {
    let ok = raw.starts_with('/')
        && !raw.starts_with("//")
        && !raw.contains(['?', '#', '\\'])
        && raw.chars().all(|c| c.is_ascii_graphic());
    if !ok {
        return Err(ConfigError::new(
            SignInSettings::REDIRECT_PATH,
            "must be a path such as `/` or `/prod/`, without query, fragment or host",
        ));
    }
    Ok(raw.to_owned())
}

/// The provider's endpoints the page uses, from its discovery document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub authorization: url::Url,
    pub token: url::Url,
    /// `OIDC_END_SESSION_URL` when set, else the document's `end_session_endpoint`, if any.
    pub end_session: Option<url::Url>,
}

/// Why the provider's endpoints are not known. Shown on the page, which has nothing secret to
/// lose: the document is public.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DiscoveryError {
    #[error("the sign-in provider's discovery document {url} could not be fetched: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the sign-in provider's discovery document {url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("the sign-in provider's discovery document {url} is not valid: {reason}")]
    Invalid { url: String, reason: String },
    #[error(
        "the sign-in provider's discovery document names issuer {found:?}, not OIDC_ISSUER \
         {expected:?}"
    )]
    WrongIssuer { found: String, expected: String },
}

/// The discovery document's fields the page needs (OpenID Connect Discovery 1.0, section 3).
#[derive(Deserialize)]
struct Document {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
    end_session_endpoint: Option<String>,
    code_challenge_methods_supported: Option<Vec<String>>,
}

/// The provider's endpoints, fetched on first use and kept for the instance's life. A failure
/// is kept for [`Discovery::RETRY_AFTER`], so the page and its `/api/page` loaded together see
/// the same answer and a provider that is down is not asked again by every page load.
pub struct Discovery {
    settings: SignInSettings,
    http: reqwest::Client,
    known: Mutex<Option<Known>>,
}

enum Known {
    Endpoints(Arc<Endpoints>),
    Failed(DiscoveryError, Instant),
}

impl Discovery {
    /// Long enough to cover one page load (the page, then `/api/page`), short enough that a
    /// provider back up is used within a minute.
    pub const RETRY_AFTER: Duration = Duration::from_secs(30);
    /// Discovery documents are a few kilobytes (Cognito's: 1.5 KB, Entra ID's: 1.8 KB, Auth0's
    /// 3 KB); the bound keeps a misbehaving endpoint from filling the instance's memory.
    const MAX_DOCUMENT_BYTES: usize = 256 * 1024;

    pub fn new(settings: SignInSettings, http: reqwest::Client) -> Self {
        Self {
            settings,
            http,
            known: Mutex::new(None),
        }
    }

    pub fn settings(&self) -> &SignInSettings {
        &self.settings
    }

    /// The endpoints, fetching the document when they are not known yet. Callers at the same
    /// time wait for one fetch.
    pub async fn endpoints(&self) -> Result<Arc<Endpoints>, DiscoveryError> {
        let mut known = self.known.lock().await;
        match &*known {
            Some(Known::Endpoints(endpoints)) => return Ok(endpoints.clone()),
            Some(Known::Failed(e, at)) if at.elapsed() < Self::RETRY_AFTER => {
                return Err(e.clone());
            }
            _ => {}
        }
        match self.fetch().await {
            Ok(endpoints) => {
                let endpoints = Arc::new(endpoints);
                tracing::info!(
                    issuer = %self.settings.issuer,
                    token_endpoint = %endpoints.token,
                    "sign-in provider discovered"
                );
                *known = Some(Known::Endpoints(endpoints.clone()));
                Ok(endpoints)
            }
            Err(e) => {
                tracing::warn!(error = %e, "page sign-in unavailable");
                *known = Some(Known::Failed(e.clone(), Instant::now()));
                Err(e)
            }
        }
    }

    async fn fetch(&self) -> Result<Endpoints, DiscoveryError> {
        let url = self.settings.discovery_url();
        let unreachable = |e: reqwest::Error| DiscoveryError::Unreachable {
            url: url.clone(),
            reason: if e.is_timeout() {
                format!(
                    "no answer within JWKS_TIMEOUT_MS ({} ms)",
                    self.settings.discovery_timeout.as_millis()
                )
            } else {
                // The causes without the URL, which the message already names.
                parley_core::error::chain(&e.without_url())
            },
        };
        let mut response = self
            .http
            .get(&url)
            .header(reqwest::header::ACCEPT, "application/json")
            .timeout(self.settings.discovery_timeout)
            .send()
            .await
            .map_err(unreachable)?;
        if !response.status().is_success() {
            return Err(DiscoveryError::Status {
                url,
                status: response.status().as_u16(),
            });
        }
        let invalid = |reason: String| DiscoveryError::Invalid {
            url: url.clone(),
            reason,
        };
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
            if body.len() + chunk.len() > Self::MAX_DOCUMENT_BYTES {
                return Err(invalid(format!(
                    "larger than {} bytes",
                    Self::MAX_DOCUMENT_BYTES
                )));
            }
            body.extend_from_slice(&chunk);
        }
        let document: Document = serde_json::from_slice(&body)
            .map_err(|e| invalid(format!("not the JSON of a discovery document ({e})")))?;
        if document.issuer != self.settings.issuer {
            return Err(DiscoveryError::WrongIssuer {
                found: document.issuer,
                expected: self.settings.issuer.clone(),
            });
        }
        // A provider that says which PKCE methods it takes must take S256, the page's only one.
        if let Some(methods) = &document.code_challenge_methods_supported
            && !methods.iter().any(|m| m == "S256")
        {
            return Err(invalid(
                "code_challenge_methods_supported lacks S256 (PKCE), which the page uses".into(),
            ));
        }
        let endpoint = |field: &str, raw: &str| {
            url::Url::parse(raw)
                .ok()
                .filter(|u| matches!(u.scheme(), "https" | "http") && u.host_str().is_some())
                .ok_or_else(|| invalid(format!("{field} is not an http(s) URL")))
        };
        let end_session = match (
            &self.settings.end_session_url,
            &document.end_session_endpoint,
        ) {
            (Some(url), _) => Some(url.clone()),
            (None, Some(raw)) => Some(endpoint("end_session_endpoint", raw)?),
            (None, None) => None,
        };
        Ok(Endpoints {
            authorization: endpoint("authorization_endpoint", &document.authorization_endpoint)?,
            token: endpoint("token_endpoint", &document.token_endpoint)?,
            end_session,
        })
    }
}

/// What `GET /api/page` says about signing in (`sign_in`), so one build of the page serves
/// every deployment.
#[derive(Debug, Serialize)]
pub struct SignInInfo<'a> {
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub scopes: &'a str,
    pub redirect_path: &'a str,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub end_session_endpoint: Option<String>,
    /// How the page signs out at `end_session_endpoint`: `oidc` (`id_token_hint`,
    /// `post_logout_redirect_uri`, `client_id`) or `logout_uri` (Cognito's `client_id` and
    /// `logout_uri`, for `OIDC_END_SESSION_URL`).
    pub end_session_style: &'static str,
    /// Why the page cannot sign anyone in (the endpoints are then null).
    pub unavailable: Option<String>,
}

impl<'a> SignInInfo<'a> {
    pub fn new(
        settings: &'a SignInSettings,
        endpoints: Result<&Endpoints, &DiscoveryError>,
    ) -> Self {
        let (authorization, token, end_session, unavailable) = match endpoints {
            Ok(e) => (
                Some(e.authorization.to_string()),
                Some(e.token.to_string()),
                e.end_session.as_ref().map(url::Url::to_string),
                None,
            ),
            Err(e) => (None, None, None, Some(e.to_string())),
        };
        Self {
            issuer: &settings.issuer,
            client_id: &settings.client_id,
            scopes: &settings.scopes,
            redirect_path: &settings.redirect_path,
            authorization_endpoint: authorization,
            token_endpoint: token,
            end_session_endpoint: end_session,
            end_session_style: if settings.end_session_url.is_some() {
                "logout_uri"
            } else {
                "oidc"
            },
            unavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<Option<SignInSettings>, ConfigError> {
        SignInSettings::from_env(&Env::from_pairs(pairs.to_vec()), Duration::from_secs(5))
    }

    #[test]
    fn without_an_issuer_there_is_no_sign_in() {
        assert_eq!(parse(&[]).unwrap(), None);
    }

    #[test]
    fn an_issuer_with_a_client_id_takes_the_documented_defaults() {
        let s = parse(&[
            ("OIDC_ISSUER", "https://id.example.org/realms/x"),
            ("OIDC_CLIENT_ID", "parley-page"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.issuer, "https://id.example.org/realms/x");
        assert_eq!(s.scopes, "openid profile email");
        assert_eq!(s.redirect_path, "/");
        assert_eq!(s.end_session_url, None);
        assert_eq!(
            s.discovery_url(),
            "https://id.example.org/realms/x/.well-known/openid-configuration"
        );
    }

    #[test]
    fn half_a_configuration_is_refused_naming_the_missing_setting() {
        for (pairs, var) in [
            (
                &[("OIDC_ISSUER", "https://id.example.org")][..],
                "OIDC_CLIENT_ID",
            ),
            (&[("OIDC_CLIENT_ID", "parley-page")][..], "OIDC_ISSUER"),
            (
                &[("OIDC_END_SESSION_URL", "https://auth.example.org/logout")][..],
                "OIDC_ISSUER",
            ),
        ] {
            assert_eq!(parse(pairs).unwrap_err().var, var, "{pairs:?}");
        }
    }

    #[test]
    fn bad_values_are_refused_naming_their_setting() {
        let base = [
            ("OIDC_ISSUER", "https://id.example.org"),
            ("OIDC_CLIENT_ID", "parley-page"),
        ];
        for (var, value) in [
            ("OIDC_ISSUER", "ftp://id.example.org"),
            ("OIDC_ISSUER", "id.example.org"),
            ("OIDC_ISSUER", "https://id.example.org/?x=1"),
            ("OIDC_CLIENT_ID", "has space"),
            ("OIDC_SCOPES", "profile email"),
            ("OIDC_SCOPES", "openid \"x\""),
            ("OIDC_REDIRECT_PATH", "//evil.example/"),
            ("OIDC_REDIRECT_PATH", "https://evil.example/"),
            ("OIDC_REDIRECT_PATH", "/?next=x"),
            ("OIDC_END_SESSION_URL", "javascript:alert(1)"),
        ] {
            let mut pairs = base.to_vec();
            pairs.retain(|(k, _)| *k != var);
            pairs.push((var, value));
            let e = parse(&pairs).unwrap_err();
            assert_eq!(e.var, var, "{value}: {}", e.problem);
        }
    }

    #[test]
    fn scopes_are_normalised_to_single_spaces() {
        let s = parse(&[
            ("OIDC_ISSUER", "https://id.example.org"),
            ("OIDC_CLIENT_ID", "parley-page"),
            ("OIDC_SCOPES", "  openid   offline_access "),
            ("OIDC_REDIRECT_PATH", "/prod/"),
            ("OIDC_END_SESSION_URL", "https://auth.example.org/logout"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.scopes, "openid offline_access");
        assert_eq!(s.redirect_path, "/prod/");
        assert_eq!(
            s.end_session_url.unwrap().as_str(),
            "https://auth.example.org/logout"
        );
    }
}
