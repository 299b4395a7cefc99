//! Logging with tracing-subscriber: JSON lines under Lambda (CloudWatch parses them) or when
//! `LOG_FORMAT=json`, readable text locally. The filter comes from `RUST_LOG` (default `info`).
//!
//! Nothing here logs values of settings: secrets reach logs only if someone logs them on purpose.

use tracing_subscriber::EnvFilter;

use crate::config::{ConfigError, Env, in_lambda};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

impl LogFormat {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        match env
            .get("LOG_FORMAT")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None if in_lambda(env) => Ok(LogFormat::Json),
            None => Ok(LogFormat::Text),
            Some("json") => Ok(LogFormat::Json),
            Some("text") => Ok(LogFormat::Text),
            Some(_) => Err(ConfigError::new("LOG_FORMAT", "must be json or text")),
        }
    }
}

/// Installs the global subscriber. Call once, first thing in `main`.
pub fn init(env: &Env) -> Result<(), ConfigError> {
    let format = LogFormat::from_env(env)?;
    let filter = match env.get("RUST_LOG") {
        Some(directives) => EnvFilter::try_new(directives)
            .map_err(|e| ConfigError::new("RUST_LOG", e.to_string()))?,
        None => EnvFilter::new("info"),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        // Lambda stamps each line itself; CloudWatch wants one JSON object per line.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .without_time()
            .try_init(),
        LogFormat::Text => builder.compact().try_init(),
    };
    // A second init (tests) keeps the first subscriber; that is fine.
    let _ = result;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambda_defaults_to_json_and_local_to_text() {
        let lambda = Env::from_pairs([("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001")]);
        assert_eq!(LogFormat::from_env(&lambda).unwrap(), LogFormat::Json);
        assert_eq!(
            LogFormat::from_env(&Env::default()).unwrap(),
            LogFormat::Text
        );
    }

    #[test]
    fn an_unknown_format_is_refused() {
        let env = Env::from_pairs([("LOG_FORMAT", "xml")]);
        assert_eq!(LogFormat::from_env(&env).unwrap_err().var, "LOG_FORMAT");
    }
}
