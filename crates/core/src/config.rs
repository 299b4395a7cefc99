//! Typed settings, read at start-up from environment variables (with the settings from Secrets
//! Manager laid over them, see [`crate::secrets`]).
//!
//! Each binary builds its own `Config` with an [`Env`] once; a missing or malformed value becomes
//! a [`ConfigError`] naming the variable, so start-up stops with one clear line. The few values
//! that may change while an instance runs are not held here but as
//! [`crate::secrets::RotatingSecret`]s.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

pub use secrecy::{ExposeSecret, SecretString};

/// Why a setting could not be read. Never carries the value itself: it may be a secret.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting {var}: {problem}")]
pub struct ConfigError {
    pub var: String,
    pub problem: String,
}

impl ConfigError {
    pub fn new(var: &str, problem: impl Into<String>) -> Self {
        Self {
            var: var.to_owned(),
            problem: problem.into(),
        }
    }
}

/// A source of settings: the process environment in production, a map in tests
/// (so tests never mutate the process environment).
#[derive(Clone, Default)]
pub struct Env {
    vars: HashMap<String, String>,
}

impl fmt::Debug for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Values may be secrets; only the names are safe to show.
        let mut names: Vec<_> = self.vars.keys().collect();
        names.sort();
        f.debug_struct("Env").field("names", &names).finish()
    }
}

impl Env {
    pub fn from_process() -> Self {
        Self {
            vars: std::env::vars().collect(),
        }
    }

    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// This environment with `overrides` set on top (an override replaces a value of the same
    /// name): how settings from Secrets Manager join the process environment.
    pub fn overlay<K: Into<String>, V: Into<String>>(
        &self,
        overrides: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let mut vars = self.vars.clone();
        vars.extend(overrides.into_iter().map(|(k, v)| (k.into(), v.into())));
        Self { vars }
    }

    /// The raw value; an empty string counts as unset, as in most shells' `VAR=` idiom.
    pub fn get(&self, var: &str) -> Option<&str> {
        self.vars
            .get(var)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    pub fn is_set(&self, var: &str) -> bool {
        self.get(var).is_some()
    }

    /// Whether the variable exists at all, even blank: for the few settings where "set to
    /// nothing" is a mistake worth naming rather than the same as unset.
    pub fn is_present(&self, var: &str) -> bool {
        self.vars.contains_key(var)
    }

    pub fn required<T: FromStr>(&self, var: &str) -> Result<T, ConfigError>
    where
        T::Err: fmt::Display,
    {
        let raw = self
            .get(var)
            .ok_or_else(|| ConfigError::new(var, "is required but not set"))?;
        parse(var, raw)
    }

    pub fn optional<T: FromStr>(&self, var: &str) -> Result<Option<T>, ConfigError>
    where
        T::Err: fmt::Display,
    {
        self.get(var).map(|raw| parse(var, raw)).transpose()
    }

    pub fn or<T: FromStr>(&self, var: &str, default: T) -> Result<T, ConfigError>
    where
        T::Err: fmt::Display,
    {
        Ok(self.optional(var)?.unwrap_or(default))
    }

    /// A positive whole number within `range`, e.g. a row or byte limit.
    pub fn limit(
        &self,
        var: &str,
        default: u64,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<u64, ConfigError> {
        let value: u64 = self.or(var, default)?;
        if !range.contains(&value) {
            return Err(ConfigError::new(
                var,
                format!(
                    "must be between {} and {}, got {value}",
                    range.start(),
                    range.end()
                ),
            ));
        }
        Ok(value)
    }

    /// A duration written in milliseconds (variables end in `_MS`).
    pub fn millis(
        &self,
        var: &str,
        default: Duration,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<Duration, ConfigError> {
        let default_ms = u64::try_from(default.as_millis()).unwrap_or(u64::MAX);
        self.limit(var, default_ms, range)
            .map(Duration::from_millis)
    }

    pub fn flag(&self, var: &str, default: bool) -> Result<bool, ConfigError> {
        match self.get(var).map(str::to_ascii_lowercase).as_deref() {
            None => Ok(default),
            Some("1" | "true" | "yes" | "on") => Ok(true),
            Some("0" | "false" | "no" | "off") => Ok(false),
            Some(_) => Err(ConfigError::new(var, "must be true or false")),
        }
    }

    pub fn secret(&self, var: &str) -> Option<SecretString> {
        self.get(var).map(|v| SecretString::from(v.to_owned()))
    }

    /// A comma-separated list; blanks are dropped.
    pub fn list(&self, var: &str) -> Vec<String> {
        self.get(var)
            .map(|raw| {
                raw.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn parse<T: FromStr>(var: &str, raw: &str) -> Result<T, ConfigError>
where
    T::Err: fmt::Display,
{
    raw.parse()
        .map_err(|e: T::Err| ConfigError::new(var, format!("cannot be parsed: {e}")))
}

/// Limits of the plain-HTTP server; under Lambda, API Gateway holds the connections instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// `HTTP_HEADER_TIMEOUT_MS`: how long a connection may go without a complete request head,
    /// whether it is new, sending its headers slowly, or kept alive between requests.
    pub header_timeout: Duration,
    /// `HTTP_BODY_TIMEOUT_MS`: how long a request's whole body may take to arrive.
    pub body_timeout: Duration,
    /// `HTTP_MAX_CONNECTIONS`: open connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// `HTTP_MAX_URI_BYTES`: longest request URI; longer ones get 414.
    pub max_uri_bytes: usize,
    /// `HTTP_MAX_HEADER_BYTES`: most bytes of request headers; more get 431.
    pub max_header_bytes: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
            max_connections: 512,
            max_uri_bytes: 8 * 1024,
            max_header_bytes: 64 * 1024,
        }
    }
}

impl HttpLimits {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let default = Self::default();
        Ok(Self {
            header_timeout: env.millis(
                "HTTP_HEADER_TIMEOUT_MS",
                default.header_timeout,
                100..=3_600_000,
            )?,
            body_timeout: env.millis(
                "HTTP_BODY_TIMEOUT_MS",
                default.body_timeout,
                100..=3_600_000,
            )?,
            max_connections: env.limit(
                "HTTP_MAX_CONNECTIONS",
                default.max_connections as u64,
                1..=1_000_000,
            )? as usize,
            // Below hyper's own limits (64 KiB URIs, a ~400 KiB head), which answer without
            // the JSON error shape.
            max_uri_bytes: env.limit(
                "HTTP_MAX_URI_BYTES",
                default.max_uri_bytes as u64,
                256..=60 * 1024,
            )? as usize,
            max_header_bytes: env.limit(
                "HTTP_MAX_HEADER_BYTES",
                default.max_header_bytes as u64,
                1024..=256 * 1024,
            )? as usize,
        })
    }
}

/// Whether this process runs inside AWS Lambda (the runtime API is only set there and by
/// `cargo lambda watch`).
pub fn in_lambda(env: &Env) -> bool {
    env.is_set("AWS_LAMBDA_RUNTIME_API")
}

/// The base URL of an HTTP API (an LLM's, an embeddings server's) from `var`'s value `raw`:
/// http(s) only, ending in a slash, because `Url::join` replaces the last path segment
/// otherwise (`.../v1` joined with `embeddings` would lose the `v1`). Messages leave the value
/// out: a URL may carry credentials.
pub fn api_base_url(var: &str, raw: &str) -> Result<url::Url, ConfigError> {
    let mut url =
        url::Url::parse(raw).map_err(|e| ConfigError::new(var, format!("is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ConfigError::new(var, "must be an http(s) URL"));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_base_url_ends_in_a_slash_and_is_http() {
        let url = api_base_url("X_URL", "https://api.example.com/v1").unwrap();
        assert_eq!(
            url.join("embeddings").unwrap().as_str(),
            "https://api.example.com/v1/embeddings"
        );
        let err = api_base_url("X_URL", "ftp://api.example.com").unwrap_err();
        assert_eq!(err.var, "X_URL");
        assert!(api_base_url("X_URL", "not a url").is_err());
    }

    #[test]
    fn a_missing_required_setting_names_the_variable() {
        let err = Env::default().required::<u32>("DATABASE_URL").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid setting DATABASE_URL: is required but not set"
        );
    }

    #[test]
    fn an_unparsable_setting_names_the_variable_but_not_the_value() {
        let env = Env::from_pairs([("DB_POOL_MAX_SIZE", "lots")]);
        let err = env.required::<u32>("DB_POOL_MAX_SIZE").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid setting DB_POOL_MAX_SIZE")
        );
        assert!(!err.to_string().contains("lots"));
    }

    #[test]
    fn limits_outside_their_range_are_refused() {
        let env = Env::from_pairs([("MAX_ROWS", "0")]);
        let err = env.limit("MAX_ROWS", 10, 1..=100).unwrap_err();
        assert_eq!(err.problem, "must be between 1 and 100, got 0");
        assert_eq!(env.limit("OTHER", 10, 1..=100).unwrap(), 10);
    }

    #[test]
    fn empty_values_count_as_unset() {
        let env = Env::from_pairs([("X", "  ")]);
        assert!(!env.is_set("X"));
        assert!(env.flag("X", true).unwrap());
    }

    #[test]
    fn lists_drop_blanks() {
        let env = Env::from_pairs([("HOSTS", "a.example, ,b.example,")]);
        assert_eq!(env.list("HOSTS"), vec!["a.example", "b.example"]);
    }

    #[test]
    fn an_overlay_replaces_values_and_keeps_the_rest() {
        let env = Env::from_pairs([("A", "1"), ("B", "2")]).overlay([("B", "3"), ("C", "4")]);
        assert_eq!(
            (env.get("A"), env.get("B"), env.get("C")),
            (Some("1"), Some("3"), Some("4"))
        );
    }

    #[test]
    fn debug_output_shows_names_only() {
        let env = Env::from_pairs([("MCP_AUTH_TOKEN", "s3cret")]);
        assert!(!format!("{env:?}").contains("s3cret"));
    }
}
