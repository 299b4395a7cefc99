//! Refuses what a page of another site could make a browser send to the chat on its visitor's
//! behalf, before any handler runs: a body that is not JSON, a `Host` this server does not
//! answer to (DNS rebinding), and under `CHAT_AUTH=none` a cross-site `Origin` or
//! `Sec-Fetch-Site`. It decides what is refused; `error.rs` picks the statuses.
//!
//! Why: a page can POST `text/plain` to any address without a CORS preflight, and with
//! `CHAT_AUTH=none` no credential is needed, so any page the developer opened could run turns
//! on their LLM key and call write tools as `local-user`; a name rebound to 127.0.0.1 makes
//! the browser treat the chat as the attacker's own origin and read every conversation.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parley_core::config::{ConfigError, Env, in_lambda};

use crate::auth::AuthMode;

/// `Host` names accepted when `CHAT_ALLOWED_HOSTS` is not set and the function serves plain
/// HTTP: loopback only, as the mcp function's `MCP_ALLOWED_HOSTS`.
pub const DEFAULT_ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The setting that lists the accepted `Host` values.
pub const HOSTS_SETTING: &str = "CHAT_ALLOWED_HOSTS";

/// Why a request was refused before its handler ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("a request with a body must be sent as `Content-Type: application/json`; it was {0}")]
    NotJson(String),
    #[error(
        "this server does not answer to the Host this request was sent to; list it in \
         CHAT_ALLOWED_HOSTS if it is this server's name"
    )]
    HostNotAllowed,
    #[error(
        "requests from another site's page are refused while CHAT_AUTH=none; use the chat's \
         own page, or a client that is not a browser"
    )]
    CrossSite,
}

/// The checks' settings, read once at start-up.
#[derive(Debug, Clone)]
pub struct CrossSiteConfig {
    /// `CHAT_ALLOWED_HOSTS`: `None` accepts any Host (`*`, or unset under Lambda, where API
    /// Gateway or the Function URL passes its own domain and `CHAT_AUTH=jwt` asks for a token).
    allowed_hosts: Option<Vec<Allowed>>,
    /// `CHAT_AUTH=none`: no credential stands between a page and the API, so cross-site
    /// requests are refused outright. With tokens, a page without one gets 401 anyway, and a
    /// front end on another origin (`CorsAllowOrigins` in `template.yaml`) must keep working.
    refuse_cross_site: bool,
}

/// One `CHAT_ALLOWED_HOSTS` entry: a host, and a port unless any port will do.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Allowed {
    host: String,
    port: Option<u16>,
}

impl CrossSiteConfig {
    pub fn from_env(env: &Env, auth: AuthMode) -> Result<Self, ConfigError> {
        let hosts = env.list(HOSTS_SETTING);
        let allowed_hosts = match hosts.as_slice() {
            // Set but blank is most likely a template parameter that came out empty.
            [] if env.is_present(HOSTS_SETTING) => {
                return Err(ConfigError::new(
                    HOSTS_SETTING,
                    "is set but names no host; list the Host header values to accept, `*` to \
                     turn the check off, or leave it unset for loopback only",
                ));
            }
            [] if in_lambda(env) => None,
            [] => Some(
                DEFAULT_ALLOWED_HOSTS
                    .iter()
                    .map(|h| plain(h, None))
                    .collect(),
            ),
            [star] if star == "*" => None,
            list if list.iter().any(|h| h == "*") => {
                return Err(ConfigError::new(
                    HOSTS_SETTING,
                    "`*` cannot be mixed with host names",
                ));
            }
            list => Some(
                list.iter()
                    .map(|h| {
                        Allowed::parse(h).ok_or_else(|| {
                            ConfigError::new(
                                HOSTS_SETTING,
                                "each entry must be `host` or `host:port`",
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        Ok(Self {
            allowed_hosts,
            refuse_cross_site: auth == AuthMode::Disabled,
        })
    }

    /// The refusal for a request with these parts to an API route, if any.
    pub fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refusal> {
        if let Some(allowed) = &self.allowed_hosts {
            let host = single(headers, header::HOST).and_then(Allowed::parse);
            let fits = |a: &Allowed, h: &Allowed| {
                a.host == h.host && a.port.is_none_or(|p| h.port == Some(p))
            };
            if !host.is_some_and(|h| allowed.iter().any(|a| fits(a, &h))) {
                return Err(Refusal::HostNotAllowed);
            }
        }
        if self.refuse_cross_site && is_cross_site(headers) {
            return Err(Refusal::CrossSite);
        }
        if *method == Method::POST {
            match single(headers, header::CONTENT_TYPE) {
                Some(value) if parley_core::http::is_json_media_type(value) => {}
                Some(value) => return Err(Refusal::NotJson(format!("`{}`", shown(value)))),
                None => return Err(Refusal::NotJson("not given".to_owned())),
            }
        }
        Ok(())
    }
}

impl Allowed {
    /// `host`, `host:port`, `[v6]` or `[v6]:port`; a bare IPv6 address too (`::1`).
    fn parse(raw: &str) -> Option<Allowed> {
        let raw = raw.trim();
        if raw.parse::<std::net::Ipv6Addr>().is_ok() {
            return Some(plain(raw, None));
        }
        let authority = axum::http::uri::Authority::try_from(raw).ok()?;
        if authority.as_str().contains('@') || authority.host().is_empty() {
            return None;
        }
        Some(plain(authority.host(), authority.port_u16()))
    }
}

fn plain(host: &str, port: Option<u16>) -> Allowed {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Allowed {
        host: host.trim_end_matches('.').to_ascii_lowercase(),
        port,
    }
}

/// A browser says where a request comes from in `Sec-Fetch-Site` (all current browsers) and,
/// for POSTs and cross-origin reads, `Origin`. Only the chat's own page (`same-origin`) and a
/// user's own navigation (`none`) pass; `same-site` is another port or subdomain, which is
/// another origin. A request with neither header is not from a browser page.
fn is_cross_site(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().unwrap_or_default();
        if !(site.eq_ignore_ascii_case("same-origin") || site.eq_ignore_ascii_case("none")) {
            return true;
        }
    }
    match headers.get(header::ORIGIN) {
        None => false,
        Some(origin) => {
            let host = single(headers, header::HOST).map(str::to_ascii_lowercase);
            let origin_host = origin
                .to_str()
                .ok()
                .and_then(|o| o.split_once("://"))
                .map(|(_, authority)| authority.to_ascii_lowercase());
            // `null` (a sandboxed frame, a file) and anything unparsable count as cross-site.
            origin_host.is_none() || origin_host != host
        }
    }
}

/// The one value of a header sent once, as text.
fn single(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// A header value fit to quote in an error: short, printable.
fn shown(value: &str) -> String {
    value
        .chars()
        .filter(|c| !c.is_control())
        .take(100)
        .collect()
}

/// The middleware in front of the API routes (`/api/...`, `/v1/...`); the page's static files
/// and `/health` are left alone.
pub async fn guard(
    State(config): State<std::sync::Arc<CrossSiteConfig>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if !(path.starts_with("/api/") || path.starts_with("/v1/")) {
        return next.run(request).await;
    }
    match config.check(request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        // `error.rs` answers it, as every refusal.
        Err(refusal) => refusal.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> Result<CrossSiteConfig, ConfigError> {
        CrossSiteConfig::from_env(&Env::from_pairs(pairs.iter().copied()), AuthMode::Disabled)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn loopback_names_on_any_port_are_the_default_outside_lambda() {
        let c = config(&[]).unwrap();
        for host in [
            "127.0.0.1:3000",
            "localhost:3000",
            "LOCALHOST",
            "[::1]:3000",
        ] {
            assert_eq!(
                c.check(&Method::GET, &headers(&[("host", host)])),
                Ok(()),
                "{host}"
            );
        }
        for host in ["evil.example:3000", "127.0.0.1.evil.example"] {
            assert_eq!(
                c.check(&Method::GET, &headers(&[("host", host)])),
                Err(Refusal::HostNotAllowed),
                "{host}"
            );
        }
        assert_eq!(
            c.check(&Method::GET, &HeaderMap::new()),
            Err(Refusal::HostNotAllowed)
        );
    }

    #[test]
    fn under_lambda_any_host_passes_unless_the_setting_lists_some() {
        let lambda = [("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001")];
        let c = config(&lambda).unwrap();
        let api = headers(&[("host", "abc.execute-api.eu-west-2.amazonaws.com")]);
        assert_eq!(c.check(&Method::GET, &api), Ok(()));
        let c = config(&[lambda[0], (HOSTS_SETTING, "chat.example.com")]).unwrap();
        assert_eq!(c.check(&Method::GET, &api), Err(Refusal::HostNotAllowed));
        let mine = headers(&[("host", "chat.example.com")]);
        assert_eq!(c.check(&Method::GET, &mine), Ok(()));
    }

    #[test]
    fn a_blank_or_mixed_host_list_stops_start_up_naming_the_setting() {
        for bad in [" ", "*,a.example", "user@a.example"] {
            let e = config(&[(HOSTS_SETTING, bad)]).unwrap_err();
            assert_eq!(e.var, HOSTS_SETTING, "{bad:?}");
        }
        assert!(
            config(&[(HOSTS_SETTING, "*")])
                .unwrap()
                .allowed_hosts
                .is_none()
        );
    }

    #[test]
    fn a_post_must_be_json_and_a_get_need_not_say() {
        let c = config(&[]).unwrap();
        let host = ("host", "127.0.0.1:3000");
        for ok in ["application/json", "Application/JSON; charset=utf-8"] {
            let h = headers(&[host, ("content-type", ok)]);
            assert_eq!(c.check(&Method::POST, &h), Ok(()), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ] {
            let h = headers(&[host, ("content-type", bad)]);
            assert!(
                matches!(c.check(&Method::POST, &h), Err(Refusal::NotJson(m)) if m.contains(bad)),
                "{bad}"
            );
        }
        assert!(matches!(
            c.check(&Method::POST, &headers(&[host])),
            Err(Refusal::NotJson(_))
        ));
        assert_eq!(c.check(&Method::GET, &headers(&[host])), Ok(()));
    }

    #[test]
    fn without_auth_only_the_same_origin_or_no_browser_passes() {
        let c = config(&[]).unwrap();
        let host = ("host", "127.0.0.1:3000");
        let same = [
            vec![host],
            vec![
                host,
                ("sec-fetch-site", "same-origin"),
                ("origin", "http://127.0.0.1:3000"),
            ],
            vec![host, ("sec-fetch-site", "none")],
        ];
        for h in same {
            assert_eq!(c.check(&Method::GET, &headers(&h)), Ok(()), "{h:?}");
        }
        let cross = [
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![host, ("sec-fetch-site", "same-site")],
            vec![host, ("origin", "https://evil.example")],
            vec![host, ("origin", "http://127.0.0.1:5173")],
            vec![host, ("origin", "null")],
        ];
        for h in cross {
            assert_eq!(
                c.check(&Method::GET, &headers(&h)),
                Err(Refusal::CrossSite),
                "{h:?}"
            );
        }
        // With tokens a page without one is refused anyway; another origin's front end works.
        let jwt = CrossSiteConfig::from_env(&Env::from_pairs([("X", "y")]), AuthMode::Jwt).unwrap();
        let h = headers(&[host, ("origin", "https://app.example.com")]);
        assert_eq!(jwt.check(&Method::GET, &h), Ok(()));
    }
}
