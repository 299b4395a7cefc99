//! The MCP function's settings, read once at start-up (see `docs/settings.md`); of these only
//! `DATABASE_URL` and `MCP_AUTH_TOKEN` may be read again later, as
//! `parley_core::secrets::RotatingSecret`s (see `auth` for the token's `SECRETS_TTL_MS`).
//!
//! Holding a [`McpConfig`] proves every value was present and well-formed. Submodule
//! `tools_source`: where a tools file is (a path or an `s3://` URI) and reading it at start-up.

pub mod tools_source;

use parley_core::config::{ConfigError, Env, ExposeSecret, SecretString, in_lambda};
use parley_core::db::DbConfig;
use parley_core::jwt::JwtConfig;
use parley_embed::EmbedSettings;

use parley_tools::output::{HARD_MAX_ROWS, Limits};

pub use tools_source::{S3ReadLimits, ToolsSource};

/// Hosts accepted in the `Host` header when `MCP_ALLOWED_HOSTS` is not set: loopback only,
/// which keeps DNS-rebinding protection on for local use.
pub const DEFAULT_ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// How user JWTs are verified and where this function says so (RFC 9728).
#[derive(Debug, Clone)]
pub struct UserTokens {
    /// The same `JWT_*` and `JWKS_*` settings as the chat function's.
    pub jwt: JwtConfig,
    /// `MCP_RESOURCE_URL`: the public URL of the MCP endpoint (e.g. `https://api.example/mcp`),
    /// the `resource` of the protected resource metadata. Required with user tokens: behind a
    /// gateway the function cannot tell its public URL from a request, and a `Host` header is
    /// the caller's to choose.
    pub resource: url::Url,
}

#[derive(Debug, Clone)]
pub struct McpConfig {
    pub db: DbConfig,
    /// `MCP_AUTH_TOKEN`: the service's bearer token (a caller without a user). With neither it
    /// nor [`McpConfig::users`], auth is off (local development only).
    pub auth_token: Option<SecretString>,
    /// User tokens: present when `JWT_SECRET` or `JWT_JWKS_URL` is set.
    pub users: Option<UserTokens>,
    /// `MCP_CALLER_KEY`: verifies the caller assertions the chat function signs for its users
    /// (`parley_core::jwt::assertion`). Unset: only the service token and user tokens.
    pub caller_key: Option<SecretString>,
    /// `MCP_ALLOWED_HOSTS`: `None` means any Host (the value `*`), which only makes sense
    /// behind a gateway that fixes the Host itself.
    pub allowed_hosts: Option<Vec<String>>,
    /// `MCP_ALLOWED_ORIGINS`: browser origins allowed to call; empty means no Origin check.
    pub allowed_origins: Vec<String>,
    /// `MCP_MAX_BODY_BYTES`
    pub max_body_bytes: usize,
    /// `TOOLS_FILE`: the tools files served, comma-separated (required): paths (e.g.
    /// `domains/feedback/tools.toml`) or `s3://bucket/key` URIs, read at start-up. Their tools
    /// and prompts are merged.
    pub tools_files: Vec<ToolsSource>,
    /// `TOOLS_FILE_MAX_BYTES`, `TOOLS_FILE_TIMEOUT_MS`: how much a tools file read from S3 may
    /// hold and take.
    pub tools_s3: S3ReadLimits,
    /// `TOOL_MAX_ROWS`, `TOOL_MAX_RESULT_BYTES`, `TOOL_TIMEOUT_MS`
    pub limits: Limits,
    /// `EMBEDDINGS` and `EMBEDDINGS_*`: the embedder loaded at start-up when some tool embeds
    /// text. Read (and a bad value refused) whether or not one does.
    pub embeddings: EmbedSettings,
    /// `RERANK` and `RERANK_*`: the reranker of the tools that declare `rerank`; `None` when
    /// off (the default).
    pub rerank: Option<parley_tools::rerank::RerankSettings>,
    /// `SQL_DATABASE_URL` and `SQL_POOL_MAX_SIZE`: the login role the ad-hoc SQL tools run as
    /// and its pool; used only when a tools file has `[sql]`.
    pub sql_db: Option<DbConfig>,
    /// `AUDIT`, `AUDIT_QUEUE`
    pub audit: parley_tools::audit::AuditConfig,
    /// `MCP_STATEMENTS`: `unnamed` (default; safe behind a pooler) or `cached` (direct
    /// connections only).
    pub statements: parley_core::db::Statements,
}

impl McpConfig {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let defaults = Limits::default();
        let hosts = env.list("MCP_ALLOWED_HOSTS");
        let allowed_hosts = match hosts.as_slice() {
            // Set but blank is most likely a template parameter that came out empty: starting
            // with the loopback default would refuse every request through a gateway.
            [] if env.is_present("MCP_ALLOWED_HOSTS") => {
                return Err(ConfigError::new(
                    "MCP_ALLOWED_HOSTS",
                    "is set but names no host; list the Host header values to accept, \
                     `*` to turn the check off, or leave it unset for loopback only",
                ));
            }
            [] => Some(DEFAULT_ALLOWED_HOSTS.map(str::to_owned).to_vec()),
            [star] if star == "*" => None,
            list if list.iter().any(|h| h == "*") => {
                return Err(ConfigError::new(
                    "MCP_ALLOWED_HOSTS",
                    "`*` cannot be mixed with host names",
                ));
            }
            list => Some(list.to_vec()),
        };
        let auth_token = env.secret("MCP_AUTH_TOKEN");
        let users = user_tokens(env)?;
        let caller_key = parley_core::jwt::assertion::key_from_env(env)?;
        let auth_off = env
            .get("MCP_AUTH")
            .is_some_and(|v| v.eq_ignore_ascii_case("none"));
        // A deployment that forgot its token must not come up as an open endpoint.
        if auth_token.is_none() && users.is_none() && in_lambda(env) && !auth_off {
            return Err(ConfigError::new(
                "MCP_AUTH_TOKEN",
                "is required under Lambda unless user tokens are configured (JWT_SECRET or \
                 JWT_JWKS_URL); set MCP_AUTH=none to run without auth on purpose",
            ));
        }
        Ok(Self {
            db: DbConfig::from_env(env)?,
            auth_token,
            users,
            caller_key,
            allowed_hosts,
            allowed_origins: env.list("MCP_ALLOWED_ORIGINS"),
            max_body_bytes: env.limit("MCP_MAX_BODY_BYTES", 1024 * 1024, 1024..=64 * 1024 * 1024)?
                as usize,
            tools_files: tools_files(env)?,
            tools_s3: S3ReadLimits {
                max_bytes: env.limit(
                    "TOOLS_FILE_MAX_BYTES",
                    tools_source::DEFAULT_MAX_BYTES,
                    1024..=16 * 1024 * 1024,
                )?,
                timeout: env.millis(
                    "TOOLS_FILE_TIMEOUT_MS",
                    tools_source::DEFAULT_TIMEOUT,
                    100..=60_000,
                )?,
            },
            limits: Limits {
                max_rows: env.limit("TOOL_MAX_ROWS", defaults.max_rows, 1..=HARD_MAX_ROWS)?,
                max_bytes: env.limit(
                    "TOOL_MAX_RESULT_BYTES",
                    defaults.max_bytes,
                    1024..=16 * 1024 * 1024,
                )?,
                timeout: env.millis("TOOL_TIMEOUT_MS", defaults.timeout, 10..=300_000)?,
            },
            embeddings: EmbedSettings::from_env(env)?,
            rerank: parley_tools::rerank::RerankSettings::from_env(env)?,
            sql_db: sql_db(env)?,
            audit: parley_tools::audit::AuditConfig::from_env(env)?,
            statements: match env.get("MCP_STATEMENTS") {
                None => parley_core::db::Statements::default(),
                Some(v) => parley_core::db::Statements::parse(v.trim()).ok_or_else(|| {
                    ConfigError::new(
                        "MCP_STATEMENTS",
                        format!("must be unnamed or cached, not {v:?}"),
                    )
                })?,
            },
        })
    }
}

/// The SQL tools' own pool: `SQL_DATABASE_URL` with the main pool's timeouts and TLS, and
/// `SQL_POOL_MAX_SIZE` connections (default 2).
fn sql_db(env: &Env) -> Result<Option<DbConfig>, ConfigError> {
    let Some(url) = env.secret("SQL_DATABASE_URL") else {
        return Ok(None);
    };
    let sql_env = env.overlay([("DATABASE_URL", url.expose_secret())]);
    let mut config = DbConfig::from_env(&sql_env).map_err(|e| ConfigError {
        var: if e.var == "DATABASE_URL" {
            "SQL_DATABASE_URL".into()
        } else {
            e.var
        },
        ..e
    })?;
    config.pool_max_size = env.limit("SQL_POOL_MAX_SIZE", 2, 1..=64)? as usize;
    config.url_setting = "SQL_DATABASE_URL";
    Ok(Some(config))
}

/// `TOOLS_FILE`: one path or `s3://bucket/key` URI, or several, comma-separated; required,
/// since the function ships no tools of its own. A bad entry is named by its place in the
/// list, not quoted (see [`ToolsSource::parse`]).
fn tools_files(env: &Env) -> Result<Vec<ToolsSource>, ConfigError> {
    let entries = env.list("TOOLS_FILE");
    if entries.is_empty() {
        return Err(ConfigError::new(
            "TOOLS_FILE",
            "is required: the tools file(s) to serve, comma-separated, e.g. \
             domains/feedback/tools.toml or /opt/tools/tasks.toml,/opt/tools/feedback.toml \
             or s3://my-bucket/parley/tools.toml",
        ));
    }
    entries
        .iter()
        .enumerate()
        .map(|(i, entry)| {
            ToolsSource::parse(entry).map_err(|problem| {
                ConfigError::new("TOOLS_FILE", format!("entry {} {problem}", i + 1))
            })
        })
        .collect()
}

/// User tokens are on when a key to verify them is configured; then the resource URL is needed.
fn user_tokens(env: &Env) -> Result<Option<UserTokens>, ConfigError> {
    let jwt = JwtConfig::from_env(env)?;
    if !jwt.has_keys() {
        return Ok(None);
    }
    let resource: url::Url = env.optional("MCP_RESOURCE_URL")?.ok_or_else(|| {
        ConfigError::new(
            "MCP_RESOURCE_URL",
            "is required with user tokens (JWT_SECRET or JWT_JWKS_URL): the public URL of \
             this function's /mcp endpoint, e.g. https://api.example.com/mcp",
        )
    })?;
    if !matches!(resource.scheme(), "http" | "https")
        || resource.query().is_some()
        || resource.fragment().is_some()
    {
        return Err(ConfigError::new(
            "MCP_RESOURCE_URL",
            "must be an http(s) URL without query or fragment (RFC 9728 §1.2)",
        ));
    }
    Ok(Some(UserTokens { jwt, resource }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(extra: &[(&str, &str)]) -> Env {
        let mut pairs = vec![
            ("DATABASE_URL", "postgres://u@localhost/db"),
            ("TOOLS_FILE", "tools.toml"),
        ];
        pairs.extend_from_slice(extra);
        Env::from_pairs(pairs)
    }

    #[test]
    fn loopback_hosts_are_the_default() {
        let c = McpConfig::from_env(&env(&[])).unwrap();
        assert_eq!(c.allowed_hosts.unwrap(), DEFAULT_ALLOWED_HOSTS);
        assert!(c.auth_token.is_none());
    }

    #[test]
    fn a_star_alone_turns_the_host_check_off() {
        let c = McpConfig::from_env(&env(&[("MCP_ALLOWED_HOSTS", "*")])).unwrap();
        assert!(c.allowed_hosts.is_none());
        let e = McpConfig::from_env(&env(&[("MCP_ALLOWED_HOSTS", "*,a.example")])).unwrap_err();
        assert_eq!(e.var, "MCP_ALLOWED_HOSTS");
    }

    #[test]
    fn a_blank_host_list_stops_start_up_naming_the_variable() {
        for blank in ["", " ", ","] {
            let e = McpConfig::from_env(&env(&[("MCP_ALLOWED_HOSTS", blank)])).unwrap_err();
            assert_eq!(e.var, "MCP_ALLOWED_HOSTS", "{blank:?}");
        }
    }

    #[test]
    fn under_lambda_a_missing_token_stops_start_up_unless_auth_is_off_on_purpose() {
        let lambda = env(&[("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001")]);
        assert_eq!(
            McpConfig::from_env(&lambda).unwrap_err().var,
            "MCP_AUTH_TOKEN"
        );
        let off = env(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("MCP_AUTH", "none"),
        ]);
        assert!(McpConfig::from_env(&off).unwrap().auth_token.is_none());
    }

    #[test]
    fn user_tokens_are_off_without_jwt_keys_and_need_the_resource_url_with_them() {
        assert!(McpConfig::from_env(&env(&[])).unwrap().users.is_none());
        let secret = ("JWT_SECRET", "a-test-secret-that-is-at-least-32-bytes-long");
        let e = McpConfig::from_env(&env(&[secret])).unwrap_err();
        assert_eq!(e.var, "MCP_RESOURCE_URL");
        for bad in [
            "not a url",
            "ftp://h/mcp",
            "https://h/mcp?x=1",
            "https://h/mcp#f",
        ] {
            let e = McpConfig::from_env(&env(&[secret, ("MCP_RESOURCE_URL", bad)])).unwrap_err();
            assert_eq!(e.var, "MCP_RESOURCE_URL", "{bad}");
        }
        let c = McpConfig::from_env(&env(&[
            secret,
            ("MCP_RESOURCE_URL", "https://api.example/mcp"),
            ("JWT_ISSUER", "https://idp.example"),
        ]))
        .unwrap();
        let users = c.users.unwrap();
        assert_eq!(users.resource.as_str(), "https://api.example/mcp");
        assert_eq!(users.jwt.issuer.as_deref(), Some("https://idp.example"));
    }

    #[test]
    fn under_lambda_user_tokens_alone_are_enough() {
        let c = McpConfig::from_env(&env(&[
            ("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001"),
            ("JWT_JWKS_URL", "https://idp.example/jwks.json"),
            ("MCP_RESOURCE_URL", "https://api.example/mcp"),
        ]))
        .unwrap();
        assert!(c.auth_token.is_none() && c.users.is_some());
    }

    #[test]
    fn tools_file_is_required_and_may_list_several_files() {
        let e = McpConfig::from_env(&Env::from_pairs([(
            "DATABASE_URL",
            "postgres://u@localhost/db",
        )]))
        .unwrap_err();
        assert_eq!(e.var, "TOOLS_FILE");
        assert!(e.to_string().contains("comma-separated"), "{e}");
        let c = McpConfig::from_env(&env(&[("TOOLS_FILE", "a/tools.toml, b/tools.toml")])).unwrap();
        assert_eq!(
            c.tools_files,
            [
                ToolsSource::Path("a/tools.toml".into()),
                ToolsSource::Path("b/tools.toml".into())
            ]
        );
    }

    #[test]
    fn tools_files_may_be_s3_objects_beside_paths() {
        let c = McpConfig::from_env(&env(&[(
            "TOOLS_FILE",
            "s3://team-config/parley/tools.toml,/opt/tools/extra.toml",
        )]))
        .unwrap();
        assert_eq!(
            c.tools_files
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
            [
                "s3://team-config/parley/tools.toml",
                "/opt/tools/extra.toml"
            ]
        );
        assert_eq!(c.tools_s3, S3ReadLimits::default());
        assert_eq!(c.tools_s3.max_bytes, 1024 * 1024);
    }

    #[test]
    fn a_malformed_s3_entry_stops_start_up_naming_its_place_not_its_value() {
        let e = McpConfig::from_env(&env(&[(
            "TOOLS_FILE",
            "a/tools.toml,s3://team-config/,https://x.example/t.toml?sig=SECRET",
        )]))
        .unwrap_err();
        assert_eq!(e.var, "TOOLS_FILE");
        assert!(e.to_string().contains("entry 2 names no object"), "{e}");
        let e = McpConfig::from_env(&env(&[(
            "TOOLS_FILE",
            "https://x.example/t.toml?sig=SECRET",
        )]))
        .unwrap_err();
        assert!(e.to_string().contains("entry 1 is a URL"), "{e}");
        assert!(!e.to_string().contains("SECRET"), "{e}");
    }

    #[test]
    fn s3_read_limits_are_read_and_bounded() {
        let c = McpConfig::from_env(&env(&[
            ("TOOLS_FILE_MAX_BYTES", "4096"),
            ("TOOLS_FILE_TIMEOUT_MS", "250"),
        ]))
        .unwrap();
        assert_eq!(c.tools_s3.max_bytes, 4096);
        assert_eq!(c.tools_s3.timeout.as_millis(), 250);
        for (var, bad) in [
            ("TOOLS_FILE_MAX_BYTES", "10"),
            ("TOOLS_FILE_TIMEOUT_MS", "0"),
            ("TOOLS_FILE_TIMEOUT_MS", "600000"),
        ] {
            assert_eq!(
                McpConfig::from_env(&env(&[(var, bad)])).unwrap_err().var,
                var
            );
        }
    }

    #[test]
    fn a_bad_embeddings_setting_stops_start_up_naming_the_variable() {
        let e = McpConfig::from_env(&env(&[("EMBEDDINGS", "magic")])).unwrap_err();
        assert_eq!(e.var, "EMBEDDINGS");
    }

    #[test]
    fn statements_are_unnamed_unless_cached_is_asked_for() {
        use parley_core::db::Statements;
        let c = McpConfig::from_env(&env(&[])).unwrap();
        assert_eq!(c.statements, Statements::Unnamed);
        let c = McpConfig::from_env(&env(&[("MCP_STATEMENTS", "cached")])).unwrap();
        assert_eq!(c.statements, Statements::Cached);
        let e = McpConfig::from_env(&env(&[("MCP_STATEMENTS", "named")])).unwrap_err();
        assert_eq!(e.var, "MCP_STATEMENTS");
        assert!(e.to_string().contains("unnamed or cached"), "{e}");
    }

    #[test]
    fn a_missing_database_url_stops_start_up() {
        let e = McpConfig::from_env(&Env::default()).unwrap_err();
        assert_eq!(e.var, "DATABASE_URL");
    }

    #[test]
    fn limits_are_read_and_bounded() {
        let c = McpConfig::from_env(&env(&[("TOOL_TIMEOUT_MS", "250"), ("TOOL_MAX_ROWS", "7")]))
            .unwrap();
        assert_eq!(c.limits.timeout.as_millis(), 250);
        assert_eq!(c.limits.max_rows, 7);
        let e = McpConfig::from_env(&env(&[("TOOL_MAX_ROWS", "0")])).unwrap_err();
        assert_eq!(e.var, "TOOL_MAX_ROWS");
    }
}
