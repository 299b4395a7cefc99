//! Settings from AWS Secrets Manager: the secrets named in `SECRET_IDS` are fetched once per
//! instance before the first request and laid over the environment; [`Secrets`] fetches them
//! again, rate-limited, when a credential is refused, so a rotation needs no cold start, and
//! once they are older than `SECRETS_TTL_MS`, so a rotated-out credential stops being accepted
//! within that time. [`RotatingSecret`] is one such setting as its users see it.
//!
//! Two shapes of secret are understood. An RDS database secret (`username`, `password`, `host`,
//! `port`, `dbname`, `engine`) becomes `DATABASE_URL`, or the setting its `SECRET_IDS` entry
//! names (`SQL_DATABASE_URL=arn:...`: the SQL tools' login, rotated like the rest); any other
//! key that looks like a setting name (`LLM_API_KEY`, `MCP_AUTH_TOKEN`, ...) supplies that
//! setting. Secret values win over the environment: the secret is what rotation updates. Values
//! never reach errors, logs or Debug.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use secrecy::ExposeSecret;
use serde_json::Value;

use crate::config::{ConfigError, Env, SecretString};

/// The setting that lists the secrets: ids or ARNs, comma-separated, later ones winning. An
/// entry `SETTING=id` (the text before its first `=` a setting name) makes that RDS secret's
/// URL `SETTING` instead of `DATABASE_URL`.
pub const SECRET_IDS: &str = "SECRET_IDS";
/// Where an RDS secret's URL goes when its entry names no setting.
const DATABASE_URL: &str = "DATABASE_URL";
const MIN_REFRESH: &str = "SECRETS_MIN_REFRESH_MS";
const DEFAULT_MIN_REFRESH: Duration = Duration::from_secs(30);
const TTL: &str = "SECRETS_TTL_MS";
/// As AWS's secrets caching clients do, values are trusted for a while, then fetched again;
/// shorter than their default hour because it bounds how long a rotated-out token still works.
const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// The keys of an RDS database secret; see the module docs.
const RDS_KEYS: [&str; 6] = ["username", "password", "host", "port", "dbname", "engine"];

/// RFC 3986 unreserved characters stay; everything else in a user, password or database name
/// is percent-encoded, so `@`, `/`, `:` and `?` in a generated password cannot break the URL.
const URL_COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Why the secrets could not be loaded. Names the secret and the key, never a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("cannot fetch secret {id}: {reason}")]
    Fetch { id: String, reason: String },
    #[error("secret {id}: {problem}")]
    Invalid { id: String, problem: String },
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl SecretsError {
    fn invalid(id: &str, problem: impl Into<String>) -> Self {
        SecretsError::Invalid {
            id: id.to_owned(),
            problem: problem.into(),
        }
    }
}

/// Reads the secrets named in `SECRET_IDS` and returns the environment with their settings laid
/// over it, plus the handle that fetches them again. Without `SECRET_IDS` this is `env` itself
/// and no handle: the local-development path.
pub async fn load(env: &Env) -> Result<(Env, Option<Secrets>), SecretsError> {
    let ids = env.list(SECRET_IDS);
    if ids.is_empty() {
        return Ok((env.clone(), None));
    }
    for raw in &ids {
        check_entry(raw)?;
    }
    let min_refresh = env.millis(MIN_REFRESH, DEFAULT_MIN_REFRESH, 0..=86_400_000)?;
    let ttl = env.millis(TTL, DEFAULT_TTL, 1_000..=86_400_000)?;
    let source = AwsSource {
        client: client(env).await,
        ids,
    };
    let secrets = Secrets::start(env.clone(), Box::new(source), min_refresh, ttl).await?;
    let merged = (*secrets.env()).clone();
    Ok((merged, Some(secrets)))
}

/// The secrets of this instance: the current merged environment and a rate-limited way to fetch
/// it again. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Secrets {
    inner: Arc<Inner>,
}

struct Inner {
    base: Env,
    source: Box<dyn Source>,
    min_refresh: Duration,
    ttl: Duration,
    /// The merged environment and when it was fetched.
    current: RwLock<(Arc<Env>, Instant)>,
    /// When the last fetch ended (successful or not). Held across a fetch, so concurrent
    /// callers wait for it and share its result instead of fetching again.
    last_fetch: tokio::sync::Mutex<Instant>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Secrets")
            .field("ids", &self.inner.source.ids())
            .field("min_refresh", &self.inner.min_refresh)
            .finish_non_exhaustive()
    }
}

impl Secrets {
    async fn start(
        base: Env,
        source: Box<dyn Source>,
        min_refresh: Duration,
        ttl: Duration,
    ) -> Result<Self, SecretsError> {
        let fetched = source.fetch().await?;
        let merged = merge(&base, &fetched)?;
        tracing::info!(
            secrets = fetched.len(),
            settings = ?supplied_names(&fetched),
            "settings loaded from Secrets Manager"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                base,
                source,
                min_refresh,
                ttl,
                current: RwLock::new((Arc::new(merged), Instant::now())),
                last_fetch: tokio::sync::Mutex::new(Instant::now()),
            }),
        })
    }

    /// The environment with the secrets' settings as last fetched.
    pub fn env(&self) -> Arc<Env> {
        // A poisoned lock only means a panic elsewhere while swapping an Arc: the value is whole.
        self.inner
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }

    /// [`Secrets::env`], fetched again first when older than `SECRETS_TTL_MS`. A failed fetch
    /// is logged and the last values kept (and, per `SECRETS_MIN_REFRESH_MS`, not retried at
    /// once), so an outage of Secrets Manager does not become an outage of the function.
    pub async fn fresh_env(&self) -> Arc<Env> {
        let (env, fetched) = self
            .inner
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if fetched.elapsed() < self.inner.ttl {
            return env;
        }
        match self.refresh().await {
            Ok(env) => env,
            Err(e) => {
                tracing::warn!(error = %e, "cannot fetch the secrets again; keeping the last values");
                self.env()
            }
        }
    }

    /// Fetches the secrets again, unless a fetch ended after this call began (its result is
    /// shared) or less than `SECRETS_MIN_REFRESH_MS` ago (the current values are returned, so a
    /// stream of bad tokens cannot turn into a stream of Secrets Manager calls). Returns the
    /// environment to use now.
    pub async fn refresh(&self) -> Result<Arc<Env>, SecretsError> {
        let asked = Instant::now();
        let mut last = self.inner.last_fetch.lock().await;
        if *last >= asked {
            return Ok(self.env());
        }
        if last.elapsed() < self.inner.min_refresh {
            tracing::debug!("secrets fetched moments ago; not fetching them again yet");
            return Ok(self.env());
        }
        let result = self.inner.source.fetch().await;
        // A failed fetch counts too: a Secrets Manager outage must not be hammered.
        *last = Instant::now();
        let merged = merge(&self.inner.base, &result?)?;
        let merged = Arc::new(merged);
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(|p| p.into_inner()) = (merged.clone(), Instant::now());
        tracing::info!("secrets fetched again from Secrets Manager");
        Ok(merged)
    }
}

/// One setting that Secrets Manager may rotate (`MCP_AUTH_TOKEN`, `DATABASE_URL`), as its
/// users see it: the value now, with a generation that tells whether it changed since a caller
/// read it, so after a refusal only a caller whose value is out of date tries again.
/// Without [`Secrets`] (settings from the environment only) the value is fixed.
pub struct RotatingSecret {
    setting: &'static str,
    secrets: Option<Secrets>,
    current: RwLock<(u64, Option<SecretString>)>,
}

impl fmt::Debug for RotatingSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RotatingSecret")
            .field("setting", &self.setting)
            .field("generation", &self.peek().0)
            .finish_non_exhaustive()
    }
}

impl RotatingSecret {
    /// `value` is the setting as read at start-up (from `secrets`' environment when there are
    /// secrets).
    pub fn new(
        setting: &'static str,
        value: Option<SecretString>,
        secrets: Option<Secrets>,
    ) -> Self {
        Self {
            setting,
            secrets,
            current: RwLock::new((0, value)),
        }
    }

    /// The value and its generation as last adopted, without any fetch.
    pub fn peek(&self) -> (u64, Option<SecretString>) {
        // A poisoned lock only means a panic elsewhere while swapping the value: it is whole.
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The value now: when the secrets are older than `SECRETS_TTL_MS` they are fetched again
    /// first, so a rotated-out value stops being used within that time even if nothing is
    /// refused.
    pub async fn current(&self) -> (u64, Option<SecretString>) {
        if let Some(secrets) = &self.secrets {
            let env = secrets.fresh_env().await;
            self.adopt(&env);
        }
        self.peek()
    }

    /// After the value of generation `used` was refused: whether a different value is current
    /// now, fetching the secrets again (rate-limited, shared with concurrent callers) if need be.
    pub async fn renew(&self, used: u64) -> bool {
        if self.peek().0 != used {
            return true; // another caller renewed it meanwhile
        }
        let Some(secrets) = &self.secrets else {
            return false;
        };
        match secrets.refresh().await {
            Ok(env) => self.adopt(&env),
            Err(e) => {
                tracing::warn!(setting = self.setting, error = %e, "cannot fetch the secrets again")
            }
        }
        self.peek().0 != used
    }

    /// Takes the setting's value from `env` when it differs from the current one. A setting
    /// that disappeared keeps the last value: dropping a token must not open an endpoint.
    fn adopt(&self, env: &Env) {
        let Some(fresh) = env.secret(self.setting) else {
            tracing::warn!(
                setting = self.setting,
                "the refreshed secrets no longer hold this setting; keeping its last value"
            );
            return;
        };
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        let same = current
            .1
            .as_ref()
            .is_some_and(|v| v.expose_secret() == fresh.expose_secret());
        if !same {
            *current = (current.0 + 1, Some(fresh));
            tracing::info!(setting = self.setting, "using the rotated value");
        }
    }
}

/// One entry of `SECRET_IDS`: the secret's id or ARN, and the setting an RDS secret's URL
/// supplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry<'a> {
    id: &'a str,
    url_setting: &'a str,
}

/// `SETTING=id` when the text before the first `=` is a setting name, else `id` for
/// `DATABASE_URL`. (Secret names may hold `=`; one whose text before it is a setting name is
/// read as this form.)
fn entry(raw: &str) -> Entry<'_> {
    match raw.split_once('=') {
        Some((setting, id)) if is_setting_name(setting.trim()) => Entry {
            id: id.trim(),
            url_setting: setting.trim(),
        },
        _ => Entry {
            id: raw,
            url_setting: DATABASE_URL,
        },
    }
}

/// An entry that cannot be used: no id after `SETTING=`, or a setting a secret may not supply.
fn check_entry(raw: &str) -> Result<(), ConfigError> {
    let Entry { id, url_setting } = entry(raw);
    if id.is_empty() {
        return Err(ConfigError::new(
            SECRET_IDS,
            format!("`{url_setting}=` names no secret; write {url_setting}=<secret id or ARN>"),
        ));
    }
    if [SECRET_IDS, MIN_REFRESH, TTL].contains(&url_setting) {
        return Err(ConfigError::new(
            SECRET_IDS,
            format!("`{url_setting}` cannot come from a secret"),
        ));
    }
    Ok(())
}

/// Where secrets come from: Secrets Manager in production, a stand-in in unit tests.
trait Source: Send + Sync {
    /// The `SECRET_IDS` entries, as written (see [`entry`]).
    fn ids(&self) -> &[String];
    /// Every secret's text with its entry, in `SECRET_IDS` order.
    fn fetch(&self) -> Pin<Box<dyn Future<Output = Result<Fetched, SecretsError>> + Send + '_>>;
}

/// `(SECRET_IDS entry, SecretString)` pairs. Only ever handled whole, never printed.
type Fetched = Vec<(String, SecretString)>;

struct AwsSource {
    client: aws_sdk_secretsmanager::Client,
    ids: Vec<String>,
}

impl Source for AwsSource {
    fn ids(&self) -> &[String] {
        &self.ids
    }

    fn fetch(&self) -> Pin<Box<dyn Future<Output = Result<Fetched, SecretsError>> + Send + '_>> {
        Box::pin(async move {
            // All at once: each is a round trip, and a cold start waits for the slowest only.
            let mut tasks = tokio::task::JoinSet::new();
            for (i, id) in self.ids.iter().enumerate() {
                let client = self.client.clone();
                let id = id.clone();
                tasks.spawn(async move { (i, fetch_one(&client, entry(&id).id).await) });
            }
            let mut fetched: Vec<Option<(String, SecretString)>> = vec![None; self.ids.len()];
            while let Some(joined) = tasks.join_next().await {
                let (i, result) = joined.map_err(|e| SecretsError::Fetch {
                    id: SECRET_IDS.to_owned(),
                    reason: format!("the fetch task failed: {e}"),
                })?;
                fetched[i] = Some((self.ids[i].clone(), result?));
            }
            Ok(fetched.into_iter().flatten().collect())
        })
    }
}

async fn fetch_one(
    client: &aws_sdk_secretsmanager::Client,
    id: &str,
) -> Result<SecretString, SecretsError> {
    let output = client
        .get_secret_value()
        .secret_id(id)
        .send()
        .await
        .map_err(|e| SecretsError::Fetch {
            id: id.to_owned(),
            reason: describe_sdk_error(&e),
        })?;
    output.secret_string.map(SecretString::from).ok_or_else(|| {
        SecretsError::invalid(
            id,
            "holds no SecretString (binary secrets are not supported)",
        )
    })
}

/// The text of one secret (`id`: a name or ARN), fetched with the client [`load`] uses, for
/// callers that read a secret's fields themselves rather than as settings (the admin function
/// reads the login roles' secrets it sets up).
pub async fn fetch(env: &Env, id: &str) -> Result<SecretString, SecretsError> {
    fetch_one(&client(env).await, id).await
}

/// `AccessDeniedException: User ... is not authorized ...` for a refusal, else the chain of
/// causes (`dispatch failure: ... Connection refused`). Requests carry no secret, so neither can
/// these.
fn describe_sdk_error<E, R>(e: &SdkError<E, R>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: fmt::Debug + 'static,
{
    if let SdkError::ServiceError(service) = e {
        let err = service.err();
        match (err.code(), err.message()) {
            (Some(code), Some(message)) => return format!("{code}: {message}"),
            (Some(code), None) => return code.to_owned(),
            _ => {}
        }
    }
    crate::error::chain(e)
}

/// The Secrets Manager client ([`crate::aws::sdk_config`]).
async fn client(env: &Env) -> aws_sdk_secretsmanager::Client {
    aws_sdk_secretsmanager::Client::new(
        &crate::aws::sdk_config(env, "AWS_ENDPOINT_URL_SECRETS_MANAGER").await,
    )
}

/// `base` with every secret's settings laid over it, later secrets winning.
fn merge(base: &Env, fetched: &Fetched) -> Result<Env, SecretsError> {
    let mut settings: BTreeMap<String, String> = BTreeMap::new();
    for (id, text) in fetched {
        settings.extend(settings_of(base, id, text)?);
    }
    Ok(base.overlay(settings))
}

/// The settings one secret supplies; `raw` is its `SECRET_IDS` entry.
fn settings_of(
    base: &Env,
    raw: &str,
    text: &SecretString,
) -> Result<BTreeMap<String, String>, SecretsError> {
    let Entry { id, url_setting } = entry(raw);
    // Only the position is kept from a parse error: serde's messages may quote the text.
    let json: Value = serde_json::from_str(text.expose_secret()).map_err(|e| {
        SecretsError::invalid(
            id,
            format!(
                "is not JSON (line {}, column {}); expected an object of settings or an RDS secret",
                e.line(),
                e.column()
            ),
        )
    })?;
    let Value::Object(object) = json else {
        return Err(SecretsError::invalid(
            id,
            "is not a JSON object; expected an object of settings or an RDS secret",
        ));
    };
    let mut settings = BTreeMap::new();
    for (key, value) in &object {
        if !is_setting_name(key) {
            // RDS secrets also carry e.g. dbInstanceIdentifier; nothing here needs those.
            if !RDS_KEYS.contains(&key.as_str()) {
                tracing::debug!(secret = id, key = %key, "ignoring a key that names no setting");
            }
            continue;
        }
        if [SECRET_IDS, MIN_REFRESH, TTL].contains(&key.as_str()) {
            return Err(SecretsError::invalid(
                id,
                format!("`{key}` cannot come from a secret"),
            ));
        }
        let value = match value {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            // e.g. MCP_SERVERS stored as a JSON list rather than as a string holding one.
            other => other.to_string(),
        };
        settings.insert(key.clone(), value);
    }
    if RDS_KEYS.iter().any(|k| object.contains_key(*k)) {
        if settings.contains_key(url_setting) {
            return Err(SecretsError::invalid(
                id,
                format!("holds both {url_setting} and RDS keys; keep one of them"),
            ));
        }
        settings.insert(url_setting.into(), database_url(base, id, &object)?);
    } else if url_setting != DATABASE_URL {
        return Err(SecretsError::invalid(
            id,
            format!(
                "is named for {url_setting} in SECRET_IDS, but is not an RDS database secret \
                 (username, password, host, port, dbname)"
            ),
        ));
    }
    Ok(settings)
}

/// `SCREAMING_SNAKE_CASE`, as environment settings are named.
fn is_setting_name(key: &str) -> bool {
    let mut chars = key.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// `postgres://user:password@host:port/dbname?sslmode=...` from an RDS secret. `DATABASE_HOST`,
/// `DATABASE_PORT` and `DATABASE_NAME` in the environment say where to connect (e.g. an RDS
/// Proxy endpoint); the secret supplies the credentials.
fn database_url(
    base: &Env,
    id: &str,
    object: &serde_json::Map<String, Value>,
) -> Result<String, SecretsError> {
    let text = |key: &str| -> Result<Option<&str>, SecretsError> {
        match object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(SecretsError::invalid(
                id,
                format!("key `{key}` must be a string"),
            )),
        }
    };
    let required = |key: &str| -> Result<&str, SecretsError> {
        text(key)?.ok_or_else(|| SecretsError::invalid(id, format!("missing key `{key}`")))
    };
    if let Some(engine) = text("engine")?
        && !matches!(engine, "postgres" | "postgresql" | "aurora-postgresql")
    {
        return Err(SecretsError::invalid(
            id,
            format!("engine `{engine}` is not Postgres"),
        ));
    }
    let username = required("username")?;
    let password = required("password")?;
    let host = match base.get("DATABASE_HOST") {
        Some(host) => host,
        None => text("host")?.ok_or_else(|| {
            SecretsError::invalid(id, "missing key `host` (or set DATABASE_HOST)")
        })?,
    };
    if host.contains(['/', '@', '?', '#', ' ']) {
        return Err(SecretsError::invalid(id, "key `host` is not a host name"));
    }
    let port = match base.get("DATABASE_PORT") {
        // Like DATABASE_HOST: where to connect is the deployment's, e.g. an RDS-managed master
        // secret holds only `username` and `password`.
        Some(raw) => match raw.trim().parse::<u64>() {
            Ok(port) if (1..=65535).contains(&port) => port,
            _ => {
                return Err(
                    ConfigError::new("DATABASE_PORT", "must be a port number (1-65535)").into(),
                );
            }
        },
        None => match object.get("port") {
            None | Some(Value::Null) => 5432,
            Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
            Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
            Some(_) => 0,
        },
    };
    if !(1..=65535).contains(&port) {
        return Err(SecretsError::invalid(
            id,
            "key `port` must be a port number (1-65535)",
        ));
    }
    let dbname = match base.get("DATABASE_NAME") {
        Some(name) => Some(name),
        None => text("dbname")?,
    };
    let sslmode = base.get("DB_SSLMODE").unwrap_or("verify-full");
    if !matches!(
        sslmode,
        "disable" | "allow" | "prefer" | "require" | "verify-ca" | "verify-full"
    ) {
        return Err(ConfigError::new(
            "DB_SSLMODE",
            "must be disable, allow, prefer, require, verify-ca or verify-full",
        )
        .into());
    }
    let host = if host.contains(':') {
        format!("[{host}]") // an IPv6 address
    } else {
        host.to_owned()
    };
    let encode = |s: &str| utf8_percent_encode(s, URL_COMPONENT).to_string();
    // Without a database name Postgres uses the user's name, as libpq does.
    let path = dbname.map(encode).unwrap_or_default();
    Ok(format!(
        "postgres://{}:{}@{host}:{port}/{path}?sslmode={sslmode}",
        encode(username),
        encode(password),
    ))
}

/// The names of the settings the secrets supply, for the start-up log line.
fn supplied_names(fetched: &Fetched) -> Vec<String> {
    let mut names: Vec<String> = fetched
        .iter()
        .filter_map(|(raw, text)| {
            let value = serde_json::from_str::<Value>(text.expose_secret()).ok()?;
            Some((entry(raw).url_setting, value.as_object()?.clone()))
        })
        .flat_map(|(url_setting, o)| {
            let rds = RDS_KEYS.iter().any(|k| o.contains_key(*k));
            o.keys()
                .filter(|k| is_setting_name(k))
                .cloned()
                .chain(rds.then(|| url_setting.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use secrecy::ExposeSecret;
    use serde_json::json;

    use super::*;

    fn fetched(pairs: &[(&str, Value)]) -> Fetched {
        pairs
            .iter()
            .map(|(id, v)| ((*id).to_owned(), SecretString::from(v.to_string())))
            .collect()
    }

    fn rds() -> Value {
        json!({"engine": "postgres", "host": "db.internal", "port": 5432,
               "username": "parley_mcp", "password": "pw", "dbname": "parley",
               "dbInstanceIdentifier": "parley-db"})
    }

    #[test]
    fn database_host_and_name_from_the_environment_say_where_to_connect() {
        let base = Env::from_pairs([
            ("DATABASE_HOST", "proxy.internal"),
            ("DATABASE_NAME", "app"),
            ("DB_SSLMODE", "require"),
        ]);
        let env = merge(&base, &fetched(&[("db", rds())])).unwrap();
        assert_eq!(
            env.get("DATABASE_URL"),
            Some("postgres://parley_mcp:pw@proxy.internal:5432/app?sslmode=require")
        );
    }

    #[test]
    fn database_port_from_the_environment_wins_over_the_secret_and_is_checked() {
        let base = Env::from_pairs([("DATABASE_PORT", "6543"), ("DB_SSLMODE", "disable")]);
        let env = merge(&base, &fetched(&[("db", rds())])).unwrap();
        assert_eq!(
            env.get("DATABASE_URL"),
            Some("postgres://parley_mcp:pw@db.internal:6543/parley?sslmode=disable")
        );
        let bad = Env::from_pairs([("DATABASE_PORT", "70000")]);
        assert_eq!(
            merge(&bad, &fetched(&[("db", rds())]))
                .unwrap_err()
                .to_string(),
            "invalid setting DATABASE_PORT: must be a port number (1-65535)"
        );
    }

    #[test]
    fn an_rds_secret_with_only_credentials_needs_a_host_from_the_environment() {
        let creds = json!({"username": "u", "password": "p"});
        let e = merge(&Env::default(), &fetched(&[("rds!db-1", creds.clone())])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "secret rds!db-1: missing key `host` (or set DATABASE_HOST)"
        );
        let env = merge(
            &Env::from_pairs([("DATABASE_HOST", "h")]),
            &fetched(&[("rds!db-1", creds)]),
        )
        .unwrap();
        assert_eq!(
            env.get("DATABASE_URL"),
            Some("postgres://u:p@h:5432/?sslmode=verify-full")
        );
    }

    #[test]
    fn later_secrets_win_and_non_string_values_become_json_text() {
        let env = merge(
            &Env::default(),
            &fetched(&[
                ("a", json!({"LLM_MODEL": "a", "HISTORY_LIMIT": 5})),
                (
                    "b",
                    json!({"LLM_MODEL": "b", "MCP_SERVERS": [{"name": "x"}]}),
                ),
            ]),
        )
        .unwrap();
        assert_eq!(env.get("LLM_MODEL"), Some("b"));
        assert_eq!(env.get("HISTORY_LIMIT"), Some("5"));
        assert_eq!(env.get("MCP_SERVERS"), Some(r#"[{"name":"x"}]"#));
    }

    #[test]
    fn a_secret_that_is_not_an_object_is_refused_without_echoing_it() {
        let text = vec![("s".to_owned(), SecretString::from("hunter2-not-json"))];
        let e = merge(&Env::default(), &text).unwrap_err().to_string();
        assert!(e.starts_with("secret s: is not JSON"), "{e}");
        assert!(!e.contains("hunter2"));
    }

    #[test]
    fn other_engines_and_bad_ports_are_refused() {
        let mysql = json!({"engine": "mysql", "username": "u", "password": "p", "host": "h"});
        assert_eq!(
            merge(&Env::default(), &fetched(&[("m", mysql)]))
                .unwrap_err()
                .to_string(),
            "secret m: engine `mysql` is not Postgres"
        );
        let port = json!({"username": "u", "password": "p", "host": "h", "port": "x"});
        assert!(
            merge(&Env::default(), &fetched(&[("p", port)]))
                .unwrap_err()
                .to_string()
                .contains("key `port`")
        );
    }

    #[test]
    fn an_entry_naming_a_setting_puts_that_rds_secret_in_it() {
        let sql = json!({"engine": "postgres", "host": "db.internal", "port": 5432,
                         "username": "parley_sql", "password": "p@ss/w:rd?", "dbname": "parley"});
        let env = merge(
            &Env::from_pairs([("DATABASE_HOST", "proxy.internal")]),
            &fetched(&[
                ("arn:aws:secretsmanager:eu-west-1:1:secret:owner", rds()),
                (
                    "SQL_DATABASE_URL=arn:aws:secretsmanager:eu-west-1:1:secret:sql",
                    sql,
                ),
            ]),
        )
        .unwrap();
        assert_eq!(
            env.get("DATABASE_URL"),
            Some("postgres://parley_mcp:pw@proxy.internal:5432/parley?sslmode=verify-full")
        );
        // Same URL building: the environment's host, the password percent-encoded.
        assert_eq!(
            env.get("SQL_DATABASE_URL"),
            Some(
                "postgres://parley_sql:p%40ss%2Fw%3Ard%3F@proxy.internal:5432/parley?sslmode=verify-full"
            )
        );
        assert_eq!(
            supplied_names(&fetched(&[(" SQL_DATABASE_URL = sql", rds())])),
            ["SQL_DATABASE_URL"]
        );
    }

    #[test]
    fn entries_are_split_only_at_a_setting_name() {
        assert_eq!(
            entry("SQL_DATABASE_URL=parley/sql"),
            Entry {
                id: "parley/sql",
                url_setting: "SQL_DATABASE_URL"
            }
        );
        // Secret names may hold `=`: only a setting name before it makes it this form.
        for raw in ["parley/a=b", "arn:aws:secretsmanager:r:1:secret:x=y", "=x"] {
            assert_eq!(
                entry(raw),
                Entry {
                    id: raw,
                    url_setting: "DATABASE_URL"
                }
            );
        }
        assert!(check_entry("SQL_DATABASE_URL=").is_err());
        assert_eq!(
            check_entry("SECRET_IDS=x").unwrap_err().to_string(),
            "invalid setting SECRET_IDS: `SECRET_IDS` cannot come from a secret"
        );
        check_entry("SQL_DATABASE_URL=arn:aws:secretsmanager:r:1:secret:sql").unwrap();
    }

    #[test]
    fn a_secret_named_for_a_setting_must_be_an_rds_secret() {
        let e = merge(
            &Env::default(),
            &fetched(&[("SQL_DATABASE_URL=app", json!({"LLM_MODEL": "x"}))]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "secret app: is named for SQL_DATABASE_URL in SECRET_IDS, but is not an RDS \
             database secret (username, password, host, port, dbname)"
        );
        let both = json!({"username": "u", "password": "p", "host": "h",
                          "SQL_DATABASE_URL": "postgres://x"});
        let e = merge(&Env::default(), &fetched(&[("SQL_DATABASE_URL=s", both)])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "secret s: holds both SQL_DATABASE_URL and RDS keys; keep one of them"
        );
    }

    #[tokio::test]
    async fn a_refresh_rebuilds_the_named_setting_from_the_rotated_secret() {
        struct Rotating(Arc<AtomicUsize>, Vec<String>);
        impl Source for Rotating {
            fn ids(&self) -> &[String] {
                &self.1
            }
            fn fetch(
                &self,
            ) -> Pin<Box<dyn Future<Output = Result<Fetched, SecretsError>> + Send + '_>>
            {
                let n = self.0.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    Ok(fetched(&[(
                        "SQL_DATABASE_URL=sql",
                        json!({"username": "parley_sql", "password": format!("pw{n}"),
                               "host": "h", "dbname": "d"}),
                    )]))
                })
            }
        }
        let source = Rotating(
            Arc::new(AtomicUsize::new(0)),
            vec!["SQL_DATABASE_URL=sql".into()],
        );
        let secrets = Secrets::start(
            Env::default(),
            Box::new(source),
            Duration::ZERO,
            DEFAULT_TTL,
        )
        .await
        .unwrap();
        let sql = RotatingSecret::new(
            "SQL_DATABASE_URL",
            secrets.env().secret("SQL_DATABASE_URL"),
            Some(secrets.clone()),
        );
        let (generation, url) = sql.peek();
        assert!(url.unwrap().expose_secret().contains(":pw0@"));
        assert!(
            sql.renew(generation).await,
            "the refresh brought a new password"
        );
        assert!(sql.peek().1.unwrap().expose_secret().contains(":pw1@"));
        assert_eq!(secrets.env().get("DATABASE_URL"), None);
    }

    #[test]
    fn secret_ids_cannot_come_from_a_secret() {
        let e = merge(
            &Env::default(),
            &fetched(&[("s", json!({"SECRET_IDS": "x"}))]),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "secret s: `SECRET_IDS` cannot come from a secret"
        );
    }

    /// A source that counts fetches and holds each one after start-up's until the test
    /// releases it (a semaphore permit).
    struct Counting {
        ids: Vec<String>,
        fetches: Arc<AtomicUsize>,
        gate: Arc<tokio::sync::Semaphore>,
    }

    impl Source for Counting {
        fn ids(&self) -> &[String] {
            &self.ids
        }

        fn fetch(
            &self,
        ) -> Pin<Box<dyn Future<Output = Result<Fetched, SecretsError>> + Send + '_>> {
            Box::pin(async move {
                let n = self.fetches.fetch_add(1, Ordering::SeqCst);
                if n > 0 {
                    self.gate.acquire().await.expect("gate open").forget();
                }
                Ok(fetched(&[(
                    "app",
                    json!({"MCP_AUTH_TOKEN": format!("token-{n}")}),
                )]))
            })
        }
    }

    struct Harness {
        secrets: Secrets,
        fetches: Arc<AtomicUsize>,
        gate: Arc<tokio::sync::Semaphore>,
    }

    async fn harness(min_refresh: Duration) -> Harness {
        let fetches = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let source = Counting {
            ids: vec!["app".into()],
            fetches: fetches.clone(),
            gate: gate.clone(),
        };
        let secrets = Secrets::start(Env::default(), Box::new(source), min_refresh, DEFAULT_TTL)
            .await
            .unwrap();
        Harness {
            secrets,
            fetches,
            gate,
        }
    }

    fn token(env: &Env) -> &str {
        env.get("MCP_AUTH_TOKEN").unwrap_or_default()
    }

    #[tokio::test]
    async fn a_refresh_within_the_minimum_interval_reuses_the_last_values() {
        let h = harness(Duration::from_secs(3600)).await;
        let env = h.secrets.refresh().await.unwrap();
        assert_eq!(token(&env), "token-0");
        assert_eq!(h.fetches.load(Ordering::SeqCst), 1, "only start-up fetched");
    }

    #[tokio::test]
    async fn a_refresh_past_the_minimum_interval_fetches_again() {
        let h = harness(Duration::ZERO).await;
        h.gate.add_permits(1);
        let env = h.secrets.refresh().await.unwrap();
        assert_eq!(token(&env), "token-1");
        assert_eq!(token(&h.secrets.env()), "token-1");
    }

    #[tokio::test]
    async fn concurrent_refreshes_share_one_fetch() {
        let h = harness(Duration::ZERO).await;
        let release = async {
            // Both refreshes are polled first: one fetches (and waits here), one waits for it.
            tokio::task::yield_now().await;
            h.gate.add_permits(1);
        };
        let (a, b, ()) = tokio::join!(h.secrets.refresh(), h.secrets.refresh(), release);
        assert_eq!(token(&a.unwrap()), "token-1");
        assert_eq!(token(&b.unwrap()), "token-1");
        assert_eq!(
            h.fetches.load(Ordering::SeqCst),
            2,
            "start-up plus one refresh"
        );
    }

    #[test]
    fn debug_output_names_the_secrets_but_shows_no_value() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let h = rt.block_on(harness(Duration::ZERO));
        let debug = format!("{:?}", h.secrets);
        assert!(debug.contains("app"), "{debug}");
        assert!(!debug.contains("token-0"), "{debug}");
        assert_eq!(
            h.secrets
                .env()
                .secret("MCP_AUTH_TOKEN")
                .map(|s| s.expose_secret().len()),
            Some(7)
        );
    }
}
