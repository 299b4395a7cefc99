//! The HTTP every check makes: one client, whole answers read within a size cap, the chat's
//! `{"error":{"code","message"}}` bodies read back, and a transport failure said in a sentence.
//! It decides nothing about what an answer means; the checks do.

use std::net::IpAddr;

use parley_core::config::ExposeSecret;
use reqwest::header::{self, HeaderMap};
use serde_json::Value;

use super::Target;

/// The most of one answer kept: a page, an asset, a turn or a tool's result is far smaller;
/// a server that sends more is cut, not read into memory whole.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// What to do when no HTTP client can be built (no TLS roots on the machine, say).
pub const CLIENT_FIX: &str = "parley check could not build its HTTP client: run it on a machine \
with the system's CA certificates (apt-get install ca-certificates).";

/// The client and what it is pointed at.
pub struct Probe {
    pub http: reqwest::Client,
    pub target: Target,
}

/// One answer, read whole (up to [`MAX_BODY_BYTES`]).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Probe {
    pub fn new(target: &Target) -> Result<Probe, String> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("parley-check/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("no HTTP client: {}", describe(e)))?;
        Ok(Probe {
            http,
            target: target.clone(),
        })
    }

    /// Whether the page is on this machine (`scripts/dev`), so a fix names the local command
    /// rather than the deployed setting.
    pub fn is_local(&self) -> bool {
        is_loopback(&self.target.page)
    }

    /// The signed-in user's token, for the chat.
    pub fn user_token(&self) -> Option<&str> {
        self.target.user_token.as_ref().map(|t| t.expose_secret())
    }

    /// The token for the mcp function: its service token, else the user's (which it accepts
    /// when it verifies user tokens).
    pub fn mcp_token(&self) -> Option<&str> {
        self.target
            .mcp_token
            .as_ref()
            .map(|t| t.expose_secret())
            .or_else(|| self.user_token())
    }

    pub async fn get(&self, url: &url::Url) -> Result<Answer, String> {
        read(self.http.get(url.clone())).await
    }

    /// A POST of `body` as JSON, with `accept` and the bearer `token` when given.
    pub async fn post_json(
        &self,
        url: &url::Url,
        body: &Value,
        accept: &str,
        token: Option<&str>,
    ) -> Result<Answer, String> {
        read(self.post(url, body, accept, token)).await
    }

    /// The request [`Probe::post_json`] sends, for a caller that reads the answer itself.
    pub fn post(
        &self,
        url: &url::Url,
        body: &Value,
        accept: &str,
        token: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let request = self
            .http
            .post(url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, accept)
            .body(body.to_string());
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }
}

/// Sends `request` and reads its answer whole, cut at [`MAX_BODY_BYTES`].
async fn read(request: reqwest::RequestBuilder) -> Result<Answer, String> {
    let mut response = request.send().await.map_err(describe)?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(describe)? {
        let room = MAX_BODY_BYTES - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() == MAX_BODY_BYTES {
            break;
        }
    }
    Ok(Answer {
        status,
        headers,
        body,
    })
}

impl Answer {
    pub fn header(&self, name: header::HeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The media type, without parameters, in lower case ("" when absent).
    pub fn media_type(&self) -> String {
        media_type(self.header(header::CONTENT_TYPE))
    }

    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// The body's start as text on one line, for a detail.
    pub fn snippet(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
        match text.char_indices().nth(160) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text,
        }
    }

    /// `{"error":{"code","message"}}`, the body every chat and mcp refusal has; `None` for
    /// another body (API Gateway's own `{"message": ...}`, a proxy's HTML).
    pub fn api_error(&self) -> Option<(String, String)> {
        let body = self.json()?;
        let error = body.get("error")?;
        Some((
            error.get("code")?.as_str()?.to_owned(),
            error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        ))
    }

    /// `HTTP 404 not_found: no route` or `HTTP 502: <body>`: what was answered, for a detail.
    pub fn summary(&self) -> String {
        match self.api_error() {
            Some((code, message)) => format!("HTTP {} {code}: {message}", self.status),
            None if self.body.is_empty() => format!("HTTP {}", self.status),
            None => format!("HTTP {}: {}", self.status, self.snippet()),
        }
    }
}

/// A `Content-Type` value's media type, lower case, without parameters.
pub fn media_type(content_type: Option<&str>) -> String {
    content_type
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// A transport failure in a sentence with its causes (refused, timed out, a certificate),
/// without the URL: the line that shows it names the URL already.
pub fn describe(e: reqwest::Error) -> String {
    parley_core::error::chain(&e.without_url())
}

/// Whether `url`'s host is this machine: a loopback address or `localhost`.
pub fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_this_machine_by_address_or_name() {
        for (url, local) in [
            ("http://127.0.0.1:3000/", true),
            ("http://127.0.0.2/", true),
            ("http://[::1]:3000/", true),
            ("http://LOCALHOST:3000/", true),
            ("https://abc.execute-api.eu-west-1.amazonaws.com/", false),
            ("http://10.0.0.1/", false),
        ] {
            assert_eq!(is_loopback(&url::Url::parse(url).unwrap()), local, "{url}");
        }
    }

    #[test]
    fn media_types_lose_their_parameters_and_case() {
        assert_eq!(media_type(Some("Text/HTML; charset=utf-8")), "text/html");
        assert_eq!(media_type(None), "");
    }
}
