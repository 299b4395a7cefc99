//! OpenTelemetry traces (docs/tracing.md), off unless `OTEL_TRACES=otlp`: the settings, the
//! tracer installed beside the log output, and what the rest of Parley asks of it (is it on,
//! a request's parent from `traceparent`, the `traceparent` of an outgoing request, and
//! [`flush`], which exports what the request's spans left before its invocation ends).
//!
//! Off, nothing is installed: spans of [`TARGET`] are switched off in the log filter, so each
//! is `Span::none()` at its call site, and no layer, processor or header work runs. On, the
//! spans go through `tracing-opentelemetry` to a processor that only keeps them ([`Kept`]);
//! [`flush`] exports them over OTLP/HTTP (protobuf) in the request's own task, so under Lambda
//! they are sent before the response is done and the instance frozen (docs/tracing.md quotes
//! AWS on why nothing may be left for later).
//!
//! Only spans reach the exporter, never events (log lines may quote Postgres messages), and
//! only Parley's own: [`TARGET`] and the request span. No span field carries user text,
//! credentials or argument values unless a setting allows it ([`TraceSettings::sql_text`],
//! [`TraceSettings::content`]).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::config::{ConfigError, Env};

/// The `tracing` target of every span made for the trace (the request span aside): switched
/// off in the log output, so the JSON lines keep showing the request span's fields.
pub const TARGET: &str = "parley_otel";

/// Where the exporter posts when neither endpoint variable is set: the OTLP/HTTP port of a
/// collector on the same host, as the ADOT Lambda layer runs one.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318/v1/traces";

/// `OTEL_TRACES`: whether spans are exported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TracesMode {
    /// The default: no tracer, no layer, nothing sent.
    Off,
    /// OTLP over HTTP (protobuf) to [`TraceSettings::endpoint`].
    Otlp,
    /// The same, to CloudWatch's OTLP traces endpoint, each request signed with SigV4 for the
    /// `xray` service with the function's credentials.
    CloudWatch,
}

/// What a function that exports traces is by default: its service name and whether the
/// `traceparent` of a request it serves is taken as the parent of its spans.
#[derive(Debug, Clone, Copy)]
pub struct FunctionTraces {
    pub service_name: &'static str,
    /// The default of `OTEL_TRUST_TRACEPARENT`: true for mcp (its callers hold its token),
    /// false for the chat (its callers are browsers: anyone could pick the trace id).
    pub trust_traceparent: bool,
}

/// The trace settings, read once at start-up (docs/settings.md, "Tracing").
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// `OTEL_TRACES`: `off` (default), `otlp` or `cloudwatch`.
    pub mode: TracesMode,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else `OTEL_EXPORTER_OTLP_ENDPOINT` with
    /// `/v1/traces` appended, else [`DEFAULT_ENDPOINT`] (`otlp`) or
    /// `https://xray.<AWS_REGION>.amazonaws.com/v1/traces` (`cloudwatch`).
    pub endpoint: url::Url,
    /// `AWS_REGION` (else `AWS_DEFAULT_REGION`): the region a `cloudwatch` export is signed for.
    pub region: Option<String>,
    /// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds,
    /// default 3000): one export, retries included; under Lambda a response may wait this long.
    pub timeout: Duration,
    /// `OTEL_SERVICE_NAME`: default `parley-chat` or `parley-mcp`.
    pub service_name: String,
    /// `OTEL_TRACES_SAMPLE_RATIO` (0-1, default 1): the share of traces started here that are
    /// recorded; a request with a trusted `traceparent` follows its caller's decision.
    pub sample_ratio: f64,
    /// `OTEL_TRUST_TRACEPARENT`: take a request's `traceparent` as the parent.
    pub trust_traceparent: bool,
    /// `OTEL_SQL_TEXT` (default false): the statement text of a tool's SQL span
    /// (`db.query.text`). A declared tool's text is the tools file's; an ad-hoc SQL call's is
    /// the model's, which may quote the user.
    pub sql_text: bool,
    /// `OTEL_GENAI_CONTENT` (default false): a tool call's arguments and result on its span
    /// (`gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`): user data.
    pub content: bool,
    /// `OTEL_MAX_QUEUED_SPANS` (default 2048): spans kept between exports; more are dropped
    /// and counted, so an unreachable collector cannot fill the instance's memory.
    pub max_queued: usize,
}

impl TraceSettings {
    pub fn from_env(env: &Env, function: FunctionTraces) -> Result<Self, ConfigError> {
        let mode = match env
            .get("OTEL_TRACES")
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("off") => TracesMode::Off,
            Some("otlp") => TracesMode::Otlp,
            Some("cloudwatch") => TracesMode::CloudWatch,
            Some(_) => {
                return Err(ConfigError::new(
                    "OTEL_TRACES",
                    "must be off, otlp or cloudwatch",
                ));
            }
        };
        let region = env
            .get("AWS_REGION")
            .or(env.get("AWS_DEFAULT_REGION"))
            .map(str::to_owned);
        if mode == TracesMode::CloudWatch && region.is_none() {
            return Err(ConfigError::new(
                "AWS_REGION",
                "must be set with OTEL_TRACES=cloudwatch (the region the traces are signed for)",
            ));
        }
        let endpoint = match (
            env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => endpoint_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)?,
            (None, Some(base)) => {
                let joined = format!("{}/v1/traces", base.trim_end_matches('/'));
                endpoint_url("OTEL_EXPORTER_OTLP_ENDPOINT", &joined)?
            }
            (None, None) => {
                let default = match (&mode, &region) {
                    (TracesMode::CloudWatch, Some(region)) => {
                        format!("https://xray.{region}.amazonaws.com/v1/traces")
                    }
                    _ => DEFAULT_ENDPOINT.to_owned(),
                };
                endpoint_url("AWS_REGION", &default)?
            }
        };
        let timeout_var = if env.is_set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") {
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
        } else {
            "OTEL_EXPORTER_OTLP_TIMEOUT"
        };
        let sample_ratio: f64 = env.or("OTEL_TRACES_SAMPLE_RATIO", 1.0)?;
        if !(0.0..=1.0).contains(&sample_ratio) {
            return Err(ConfigError::new(
                "OTEL_TRACES_SAMPLE_RATIO",
                "must be between 0 and 1",
            ));
        }
        let service_name = env
            .get("OTEL_SERVICE_NAME")
            .unwrap_or(function.service_name)
            .to_owned();
        Ok(Self {
            mode,
            endpoint,
            region,
            timeout: env.millis(timeout_var, Duration::from_secs(3), 1..=60_000)?,
            service_name,
            sample_ratio,
            trust_traceparent: env.flag("OTEL_TRUST_TRACEPARENT", function.trust_traceparent)?,
            sql_text: env.flag("OTEL_SQL_TEXT", false)?,
            content: env.flag("OTEL_GENAI_CONTENT", false)?,
            max_queued: usize::try_from(env.limit("OTEL_MAX_QUEUED_SPANS", 2048, 1..=1_000_000)?)
                .unwrap_or(usize::MAX),
        })
    }
}

/// An http(s) URL without credentials: the endpoint is printed in the warning of a failed
/// export, and a password in it would end up in the log.
fn endpoint_url(var: &str, raw: &str) -> Result<url::Url, ConfigError> {
    let url = url::Url::parse(raw).map_err(|_| ConfigError::new(var, "must be an http(s) URL"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(ConfigError::new(var, "must be an http(s) URL"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ConfigError::new(
            var,
            "must not hold credentials (they would be logged with a failed export)",
        ));
    }
    Ok(url)
}

/// Whether a span goes to the exporter: spans only, never events (a log line may quote
/// Postgres), and only Parley's: [`TARGET`] and the request span.
pub(super) fn is_exported(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_span()
        && (meta.target() == TARGET
            || (meta.target() == "parley_core::serve" && meta.name() == "request"))
}

/// The nearest span around the current one that is exported, for a span to name as its
/// parent when spans the exporter does not see stand between (rmcp runs a request's handler
/// on a task of its own, in a span of its own): OpenTelemetry would otherwise make it the
/// root of a trace of its own. `None` when traces are off or no exported span is around.
pub fn exported_parent() -> Option<tracing::Id> {
    use tracing_subscriber::registry::LookupSpan;
    ACTIVE.get()?;
    let current = tracing::Span::current().id()?;
    tracing::dispatcher::get_default(|dispatch| {
        let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
        registry
            .span(&current)?
            .scope()
            .find(|span| is_exported(span.metadata()))
            .map(|span| span.id())
    })
}

/// The installed tracer's state: set once, when `OTEL_TRACES=otlp`.
struct Active {
    provider: SdkTracerProvider,
    kept: Arc<Kept>,
    /// One export at a time: the SDK's exporters may not be called concurrently.
    exporter: tokio::sync::Mutex<opentelemetry_otlp::SpanExporter>,
    trust_traceparent: bool,
    sql_text: bool,
    content: bool,
}

static ACTIVE: OnceLock<Active> = OnceLock::new();

/// Whether spans are exported (`OTEL_TRACES=otlp` and the tracer installed).
pub fn enabled() -> bool {
    ACTIVE.get().is_some()
}

/// Whether a SQL span may carry its statement text (`OTEL_SQL_TEXT`).
pub fn sql_text() -> bool {
    ACTIVE.get().is_some_and(|a| a.sql_text)
}

/// Whether a tool call's span may carry its arguments and result (`OTEL_GENAI_CONTENT`).
pub fn content() -> bool {
    ACTIVE.get().is_some_and(|a| a.content)
}

/// The span processor: ended spans wait here, up to `max`, for [`flush`].
#[derive(Debug)]
struct Kept {
    spans: Mutex<Vec<SpanData>>,
    max: usize,
    dropped: std::sync::atomic::AtomicU64,
}

#[derive(Debug)]
struct KeepProcessor(Arc<Kept>);

impl SpanProcessor for KeepProcessor {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        let mut spans = self.0.spans.lock().unwrap_or_else(|p| p.into_inner());
        if spans.len() < self.0.max {
            spans.push(span);
        } else {
            self.0
                .dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Exports happen in [`flush`], awaited by the request; nothing runs here.
    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

/// The tracer for `settings`, or `None` when traces are off. Called once by
/// `telemetry::init_with_traces`; a second call (tests) keeps the first tracer.
pub(super) fn install(
    settings: &TraceSettings,
    env: &Env,
    http: reqwest::Client,
) -> Result<Option<opentelemetry_sdk::trace::Tracer>, ConfigError> {
    if settings.mode == TracesMode::Off || ACTIVE.get().is_some() {
        return Ok(None);
    }
    let signer = match (settings.mode, &settings.region) {
        (TracesMode::CloudWatch, Some(region)) => {
            Some(super::export::Signer::new(env.clone(), region.clone()))
        }
        _ => None,
    };
    let resource = Resource::builder_empty()
        .with_service_name(settings.service_name.clone())
        .with_attributes([opentelemetry::KeyValue::new(
            "telemetry.sdk.language",
            "rust",
        )])
        .build();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(super::export::Client::new(http, settings.timeout, signer))
        .with_endpoint(settings.endpoint.as_str())
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(settings.timeout)
        .build()
        .map_err(|e| ConfigError::new("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e.to_string()))?;
    exporter.set_resource(&resource);
    let kept = Arc::new(Kept {
        spans: Mutex::new(Vec::new()),
        max: settings.max_queued,
        dropped: std::sync::atomic::AtomicU64::new(0),
    });
    let provider = SdkTracerProvider::builder()
        .with_span_processor(KeepProcessor(kept.clone()))
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            settings.sample_ratio,
        ))))
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("parley");
    let active = Active {
        provider,
        kept,
        exporter: tokio::sync::Mutex::new(exporter),
        trust_traceparent: settings.trust_traceparent,
        sql_text: settings.sql_text,
        content: settings.content,
    };
    if ACTIVE.set(active).is_err() {
        return Ok(None);
    }
    Ok(Some(tracer))
}

/// Sends every span ended so far, in the caller's task; returns when the collector has
/// answered or the export timed out (a failure is logged, the spans dropped). Does nothing
/// when traces are off.
pub async fn flush() {
    let Some(active) = ACTIVE.get() else {
        return;
    };
    let exporter = active.exporter.lock().await;
    let batch = std::mem::take(&mut *active.kept.spans.lock().unwrap_or_else(|p| p.into_inner()));
    let dropped = active
        .kept
        .dropped
        .swap(0, std::sync::atomic::Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "spans were dropped: more than OTEL_MAX_QUEUED_SPANS waited for an export"
        );
    }
    if batch.is_empty() {
        return;
    }
    let count = batch.len();
    if let Err(e) = exporter.export(batch).await {
        tracing::warn!(spans = count, error = %e, "spans could not be exported");
    }
}

/// Exports what is left and stops the tracer: the last thing a plain-HTTP server does.
pub async fn shutdown() {
    flush().await;
    if let Some(active) = ACTIVE.get() {
        let _ = active.provider.shutdown();
    }
}

/// Makes the caller's trace, from a `traceparent` (and `tracestate`) in `headers`, the parent
/// of `span`, when traces are on and `OTEL_TRUST_TRACEPARENT` allows it. A missing or
/// malformed header leaves `span` the root of a new trace.
pub fn adopt_parent(span: &tracing::Span, headers: &axum::http::HeaderMap) {
    let Some(active) = ACTIVE.get() else {
        return;
    };
    if !active.trust_traceparent || !headers.contains_key("traceparent") {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// Adds the current span's `traceparent` (and `tracestate`) to an outgoing request's
/// `headers`, when traces are on and the current span is recorded in one.
pub fn inject_current(headers: &mut axum::http::HeaderMap) {
    if ACTIVE.get().is_none() {
        return;
    }
    let cx = tracing::Span::current().context();
    if !cx.span().span_context().is_valid() {
        return;
    }
    TraceContextPropagator::new()
        .inject_context(&cx, &mut opentelemetry_http::HeaderInjector(headers));
}

/// The span of one SQL statement a tool call sends (OpenTelemetry's database conventions;
/// docs/tracing.md), named by its `operation` (`db.operation.name`, e.g. `SELECT`, when the
/// caller knows it: see [`operation_of`]) else `postgresql`; its text is `db.query.text`
/// only with `OTEL_SQL_TEXT`. Record its end with [`sql_ended`].
pub fn sql_span(statement: &str, operation: Option<&'static str>) -> tracing::Span {
    let span = tracing::info_span!(
        target: TARGET,
        "sql",
        otel.name = operation.unwrap_or("postgresql"),
        otel.kind = "client",
        db.system.name = "postgresql",
        db.operation.name = operation,
        db.query.text = tracing::field::Empty,
        db.response.returned_rows = tracing::field::Empty,
        "error.type" = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if sql_text() {
        span.record("db.query.text", statement);
    }
    span
}

/// Records how a statement of [`sql_span`] ended: its rows, or the kind of its failure (a
/// stable code, never the server's message, which may quote values).
pub fn sql_ended(span: &tracing::Span, outcome: Result<u64, &str>) {
    if span.is_disabled() {
        return;
    }
    match outcome {
        Ok(rows) => {
            span.record("db.response.returned_rows", rows);
        }
        Err(kind) => {
            span.record("error.type", kind);
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// The keywords a statement's operation is named by; anything else (a model's SQL may start
/// with any word) leaves `db.operation.name` out rather than quote it.
const OPERATIONS: [&str; 10] = [
    "SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES", "TABLE", "EXPLAIN", "CALL",
];

/// The leading keyword of `statement`, past whitespace, `--` comments and `/* */` comments,
/// when it is one of the operations Parley names (a model's SQL may start with any word).
pub fn operation_of(statement: &str) -> Option<&'static str> {
    let mut rest = statement;
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .take(8)
        .collect::<String>()
        .to_ascii_uppercase();
    OPERATIONS.into_iter().find(|op| *op == word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function() -> FunctionTraces {
        FunctionTraces {
            service_name: "parley-mcp",
            trust_traceparent: true,
        }
    }

    #[test]
    fn traces_are_off_by_default_and_a_bad_value_names_its_variable() {
        let off = TraceSettings::from_env(&Env::default(), function()).unwrap();
        assert_eq!(off.mode, TracesMode::Off);
        assert_eq!(off.endpoint.as_str(), DEFAULT_ENDPOINT);
        assert_eq!(off.service_name, "parley-mcp");
        assert!(!off.sql_text && !off.content && off.trust_traceparent);
        for (var, value) in [
            ("OTEL_TRACES", "jaeger"),
            ("OTEL_TRACES_SAMPLE_RATIO", "2"),
            ("OTEL_SQL_TEXT", "maybe"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://user:pw@collector/v1/traces",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
        ] {
            let err =
                TraceSettings::from_env(&Env::from_pairs([(var, value)]), function()).unwrap_err();
            assert_eq!(err.var, var, "{value}");
            assert!(!err.to_string().contains("pw@"), "{err}");
        }
    }

    #[test]
    fn the_endpoint_is_the_traces_one_else_the_base_with_v1_traces() {
        let env = Env::from_pairs([
            ("OTEL_TRACES", "OTLP"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "https://xray.eu-west-1.amazonaws.com/",
            ),
        ]);
        let settings = TraceSettings::from_env(&env, function()).unwrap();
        assert_eq!(settings.mode, TracesMode::Otlp);
        assert_eq!(
            settings.endpoint.as_str(),
            "https://xray.eu-west-1.amazonaws.com/v1/traces"
        );
        let env = env.overlay([("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/x")]);
        let settings = TraceSettings::from_env(&env, function()).unwrap();
        assert_eq!(settings.endpoint.as_str(), "http://127.0.0.1:9/x");
    }

    #[test]
    fn cloudwatch_needs_a_region_and_defaults_to_its_traces_endpoint() {
        let env = Env::from_pairs([("OTEL_TRACES", "cloudwatch")]);
        let err = TraceSettings::from_env(&env, function()).unwrap_err();
        assert_eq!(err.var, "AWS_REGION");
        let env = env.overlay([("AWS_REGION", "eu-west-2")]);
        let settings = TraceSettings::from_env(&env, function()).unwrap();
        assert_eq!(settings.mode, TracesMode::CloudWatch);
        assert_eq!(
            settings.endpoint.as_str(),
            "https://xray.eu-west-2.amazonaws.com/v1/traces"
        );
        assert_eq!(settings.region.as_deref(), Some("eu-west-2"));
    }

    #[test]
    fn a_statements_operation_is_a_known_keyword_or_nothing() {
        assert_eq!(
            operation_of("/* parley */ -- x\n  select 1"),
            Some("SELECT")
        );
        assert_eq!(
            operation_of("WITH q AS (SELECT 1) SELECT * FROM q"),
            Some("WITH")
        );
        assert_eq!(operation_of("my secret words"), None);
        assert_eq!(operation_of(""), None);
    }
}
