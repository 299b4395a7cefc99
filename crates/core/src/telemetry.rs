//! Logging with tracing-subscriber: JSON lines under Lambda (CloudWatch parses them) or when
//! `LOG_FORMAT=json`, readable text locally. The filter comes from `RUST_LOG` (default `info`).
//!
//! Nothing here logs values of settings: secrets reach logs only if someone logs them on purpose.
//! The MCP library (rmcp) logs whole tool arguments and results at debug level, so its own
//! logs stay at info unless `RUST_LOG` names it; colour codes only go to a terminal.
//!
//! The chat and mcp also export OpenTelemetry traces when `OTEL_TRACES=otlp` ([`traces`],
//! [`init_with_traces`]); their spans ([`traces::TARGET`]) never reach the log lines.

mod export;
pub mod traces;

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub use traces::{FunctionTraces, TraceSettings, TracesMode};

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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter(env)?)
        .with_ansi(std::io::stderr().is_terminal())
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

/// [`init`], and OpenTelemetry traces when `OTEL_TRACES=otlp` (a bad trace setting stops
/// start-up like any other). Off, the subscriber is exactly [`init`]'s.
pub fn init_with_traces(env: &Env, function: FunctionTraces) -> Result<(), ConfigError> {
    let settings = TraceSettings::from_env(env, function)?;
    if settings.mode == TracesMode::Off {
        return init(env);
    }
    let format = LogFormat::from_env(env)?;
    let http = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(2))
        .build()
        .map_err(|e| {
            ConfigError::new("OTEL_TRACES", format!("cannot build the HTTP client: {e}"))
        })?;
    let Some(tracer) = traces::install(&settings, env, http)? else {
        return init(env);
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let fmt: Box<dyn Layer<_> + Send + Sync> = match format {
        LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .without_time()
            .boxed(),
        LogFormat::Text => fmt.compact().boxed(),
    };
    // Spans only, never events (a log line may quote Postgres), and only Parley's.
    let exported = tracing_subscriber::filter::filter_fn(traces::is_exported);
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_filter(exported);
    let _ = tracing_subscriber::registry()
        .with(fmt.with_filter(filter(env)?))
        .with(otel)
        .try_init();
    tracing::info!(
        endpoint = %settings.endpoint,
        service = %settings.service_name,
        "exporting OpenTelemetry traces"
    );
    Ok(())
}

/// `RUST_LOG` (default `info`), with `rmcp=info` added when its default level is debug or
/// trace and it does not name rmcp itself: rmcp's debug lines carry whole tool arguments and
/// results, which may be personal data.
fn filter(env: &Env) -> Result<EnvFilter, ConfigError> {
    let directives = env.get("RUST_LOG").unwrap_or("info");
    let mut filter =
        EnvFilter::try_new(directives).map_err(|e| ConfigError::new("RUST_LOG", e.to_string()))?;
    let default_level = directives
        .split(',')
        .map(str::trim)
        .rfind(|d| !d.contains(['=', '[', ':']) && !d.is_empty())
        .map(str::to_ascii_lowercase);
    let verbose = matches!(
        default_level.as_deref(),
        Some("debug" | "trace" | "4" | "5")
    );
    // The trace's own spans are for the exporter: in the log they would hide the request
    // span (and its id) that JSON lines show.
    if !directives.contains(traces::TARGET) {
        filter = filter.add_directive(
            format!("{}=off", traces::TARGET)
                .parse()
                .map_err(|_| ConfigError::new("RUST_LOG", "cannot switch the trace spans off"))?,
        );
    }
    if verbose && !directives.contains("rmcp") {
        filter = filter.add_directive(
            "rmcp=info"
                .parse()
                .map_err(|_| ConfigError::new("RUST_LOG", "cannot add rmcp=info"))?,
        );
    }
    Ok(filter)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What a subscriber built with `filter(RUST_LOG=directives)` writes for one debug line
    /// from rmcp and one from Parley.
    fn logged(directives: &str) -> String {
        let out = Arc::new(Mutex::new(Vec::<u8>::new()));
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter(&Env::from_pairs([("RUST_LOG", directives)])).unwrap())
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "rmcp::service", "tool arguments: secret-ish");
            tracing::debug!(target: "parley_mcp::server", "parley detail");
        });
        let bytes = out.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn at_debug_level_rmcp_logs_no_tool_arguments_unless_named() {
        let debug = logged("debug");
        assert!(debug.contains("parley detail"), "{debug}");
        assert!(!debug.contains("tool arguments"), "{debug}");

        let named = logged("debug,rmcp=debug");
        assert!(named.contains("tool arguments"), "{named}");

        let quiet = logged("warn");
        assert!(quiet.is_empty(), "{quiet}");
    }

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
