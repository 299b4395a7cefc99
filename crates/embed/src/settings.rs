//! `EMBEDDINGS_*` settings: which embedder, and its knobs, read once at start-up.

use std::path::PathBuf;
use std::time::Duration;

use parley_core::config::{ConfigError, Env, SecretString};
use parley_core::retry::{RetryDefaults, RetrySettings};

/// Texts per forward pass (built-in) or per request (http) unless `EMBEDDINGS_BATCH` says.
pub const DEFAULT_BATCH: usize = 32;

#[derive(Debug, Clone)]
pub struct EmbedSettings {
    pub backend: Backend,
    /// `EMBEDDINGS_BATCH`: texts per forward pass or request (default 32).
    pub batch: usize,
}

/// `EMBEDDINGS`: `builtin` (default) or `http`.
#[derive(Debug, Clone)]
pub enum Backend {
    /// all-MiniLM-L6-v2 from `EMBEDDINGS_MODEL_DIR` (default [`crate::default_model_dir`]).
    BuiltIn {
        model_dir: PathBuf,
    },
    Http(HttpSettings),
}

/// An OpenAI-compatible embeddings endpoint.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// `EMBEDDINGS_URL`: the base, e.g. `https://api.openai.com/v1`; requests go to
    /// `{url}/embeddings`. Stored ending in `/`.
    pub url: url::Url,
    /// `EMBEDDINGS_MODEL`: sent as `model`.
    pub model: String,
    /// `EMBEDDINGS_API_KEY`: sent as `Authorization: Bearer` when set.
    pub api_key: Option<SecretString>,
    /// `EMBEDDINGS_DIMENSIONS`: sent as `dimensions`; every vector must have this many.
    pub dimensions: usize,
    /// `EMBEDDINGS_TIMEOUT_MS`: one request (default 10000); `EMBEDDINGS_MAX_RETRIES`: retries
    /// after a 429, a 5xx or a transport failure (default 2); `EMBEDDINGS_RETRY_BUDGET_MS`:
    /// waiting between one request's retries (default 2000).
    pub retry: RetrySettings,
}

/// The embeddings server's [`RetrySettings`] before a deployment sets them.
const RETRY_DEFAULTS: RetryDefaults = RetryDefaults {
    timeout: Duration::from_secs(10),
    timeout_ms: 100..=900_000,
    max_retries: 2,
    retry_budget: Duration::from_secs(2),
    retry_budget_ms: 0..=300_000,
};

impl EmbedSettings {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let batch = env.limit("EMBEDDINGS_BATCH", DEFAULT_BATCH as u64, 1..=2048)? as usize;
        let backend = match env.get("EMBEDDINGS").unwrap_or("builtin") {
            "builtin" => Backend::BuiltIn {
                model_dir: env
                    .get("EMBEDDINGS_MODEL_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(crate::default_model_dir),
            },
            "http" => Backend::Http(HttpSettings::from_env(env)?),
            other => {
                return Err(ConfigError::new(
                    "EMBEDDINGS",
                    format!("must be builtin or http, got {other:?}"),
                ));
            }
        };
        Ok(Self { backend, batch })
    }

    /// The built-in model from `model_dir`, with the default batch size.
    pub fn built_in(model_dir: PathBuf) -> Self {
        Self {
            backend: Backend::BuiltIn { model_dir },
            batch: DEFAULT_BATCH,
        }
    }
}

impl HttpSettings {
    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let raw: String = env.required("EMBEDDINGS_URL")?;
        let url = parley_core::config::api_base_url("EMBEDDINGS_URL", &raw)?;
        Ok(Self {
            url,
            model: env.required("EMBEDDINGS_MODEL")?,
            api_key: env.secret("EMBEDDINGS_API_KEY"),
            dimensions: env
                .limit("EMBEDDINGS_DIMENSIONS", 0, 1..=16_000)
                .map_err(|e| {
                    if env.is_set("EMBEDDINGS_DIMENSIONS") {
                        e
                    } else {
                        ConfigError::new(
                            "EMBEDDINGS_DIMENSIONS",
                            "is required when EMBEDDINGS=http",
                        )
                    }
                })? as usize,
            retry: RetrySettings::from_env(env, "EMBEDDINGS", RETRY_DEFAULTS)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn the_built_in_model_is_the_default() {
        let settings = EmbedSettings::from_env(&env(&[])).unwrap();
        assert!(
            matches!(&settings.backend, Backend::BuiltIn { model_dir } if *model_dir == crate::default_model_dir())
        );
        assert_eq!(settings.batch, DEFAULT_BATCH);
        let settings = EmbedSettings::from_env(&env(&[
            ("EMBEDDINGS_MODEL_DIR", "/opt/m"),
            ("EMBEDDINGS_BATCH", "8"),
        ]))
        .unwrap();
        assert!(
            matches!(&settings.backend, Backend::BuiltIn { model_dir } if model_dir.as_os_str() == "/opt/m")
        );
        assert_eq!(settings.batch, 8);
    }

    #[test]
    fn http_needs_a_url_a_model_and_dimensions() {
        let full = [
            ("EMBEDDINGS", "http"),
            ("EMBEDDINGS_URL", "http://localhost:8080/v1"),
            ("EMBEDDINGS_MODEL", "text-embedding-3-small"),
            ("EMBEDDINGS_DIMENSIONS", "512"),
            ("EMBEDDINGS_API_KEY", "sk-secret"),
        ];
        let settings = EmbedSettings::from_env(&env(&full)).unwrap();
        let Backend::Http(http) = settings.backend else {
            panic!("not http");
        };
        assert_eq!(http.url.as_str(), "http://localhost:8080/v1/");
        assert_eq!(http.dimensions, 512);
        assert_eq!(http.retry.timeout, Duration::from_secs(10));
        assert_eq!(http.retry.max_retries, 2);
        assert_eq!(http.retry.retry_budget, Duration::from_secs(2));
        for missing in [
            "EMBEDDINGS_URL",
            "EMBEDDINGS_MODEL",
            "EMBEDDINGS_DIMENSIONS",
        ] {
            let pairs: Vec<_> = full
                .iter()
                .filter(|(k, _)| *k != missing)
                .copied()
                .collect();
            let err = EmbedSettings::from_env(&env(&pairs)).unwrap_err();
            assert_eq!(err.var, missing);
        }
    }

    #[test]
    fn a_bad_setting_is_named_without_its_value() {
        let err = EmbedSettings::from_env(&env(&[("EMBEDDINGS", "onnx")])).unwrap_err();
        assert_eq!(err.var, "EMBEDDINGS");
        let err = EmbedSettings::from_env(&env(&[
            ("EMBEDDINGS", "http"),
            ("EMBEDDINGS_URL", "ftp://user:pw@host/"),
            ("EMBEDDINGS_MODEL", "m"),
            ("EMBEDDINGS_DIMENSIONS", "8"),
        ]))
        .unwrap_err();
        assert_eq!(err.var, "EMBEDDINGS_URL");
        assert!(!err.to_string().contains("pw"), "{err}");
        let err = EmbedSettings::from_env(&env(&[("EMBEDDINGS_BATCH", "0")])).unwrap_err();
        assert_eq!(err.var, "EMBEDDINGS_BATCH");
    }
}
