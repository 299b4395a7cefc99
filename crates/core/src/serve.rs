//! One router, two runtimes: under Lambda (`AWS_LAMBDA_RUNTIME_API` set) the router is the
//! Lambda handler via lambda_http, its responses buffered or streamed
//! (`LAMBDA_RESPONSE_STREAMING`); otherwise it is served as plain HTTP on `LISTEN_ADDR`.
//!
//! Every path runs the same `Router`, so tests of the plain server test what Lambda runs.

use std::fmt::Display;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::http::header::SET_COOKIE;
use axum::http::{HeaderName, HeaderValue, Request, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use tokio::net::TcpListener;
use tower_http::request_id::{
    MakeRequestId, MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

use crate::config::{ConfigError, Env, HttpLimits, in_lambda};

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("Lambda runtime failed: {0}")]
    Lambda(String),
}

/// What a function's `main` needs to know about a start-up failure besides its text.
pub trait StartupFailure: Display {
    /// A setting (or a file or secret one names) is wrong: fixed by changing the
    /// configuration, not by trying again.
    fn is_bad_setting(&self) -> bool;
}

impl StartupFailure for ConfigError {
    fn is_bad_setting(&self) -> bool {
        true
    }
}

impl StartupFailure for ServeError {
    fn is_bad_setting(&self) -> bool {
        matches!(self, ServeError::Config(_))
    }
}

impl StartupFailure for crate::secrets::SecretsError {
    /// A secret that cannot be fetched may be fetched next time; one whose content is wrong
    /// will not be.
    fn is_bad_setting(&self) -> bool {
        !matches!(self, crate::secrets::SecretsError::Fetch { .. })
    }
}

/// Why a function did not start, or stopped: the failures every function shares, and `E`, the
/// function's own (its tools file, its HTTP client...).
#[derive(Debug, thiserror::Error)]
pub enum StartupError<E: StartupFailure + std::error::Error + 'static> {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Secrets(#[from] crate::secrets::SecretsError),
    #[error(transparent)]
    Db(#[from] crate::db::DbError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error(transparent)]
    Function(E),
}

impl<E: StartupFailure + std::error::Error + 'static> StartupFailure for StartupError<E> {
    fn is_bad_setting(&self) -> bool {
        use crate::db::DbError;
        match self {
            StartupError::Config(_) => true,
            StartupError::Secrets(e) => e.is_bad_setting(),
            StartupError::Db(e) => matches!(e, DbError::Url(_) | DbError::Tls(_)),
            StartupError::Serve(e) => e.is_bad_setting(),
            StartupError::Function(e) => e.is_bad_setting(),
        }
    }
}

/// The exit code of a process that stopped because a setting is wrong (as clap uses 2 for bad
/// arguments); any other failure exits with 1.
pub const EXIT_BAD_SETTING: u8 = 2;

/// A function's exit: success, or the failure printed once on stderr as `<name>: <error>` and
/// exit code [`EXIT_BAD_SETTING`] for a bad setting, 1 for anything else. Printed rather than
/// logged, so the line shows whatever `RUST_LOG` says.
pub fn exit<E: StartupFailure>(name: &str, outcome: Result<(), E>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e}");
            if e.is_bad_setting() {
                ExitCode::from(EXIT_BAD_SETTING)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// A function built and bound but not yet serving: what each function's `Application::build`
/// returns to `main`, the tests and the bench alike.
#[derive(Debug)]
pub struct Bound {
    router: Router,
    listener: Listener,
}

impl Bound {
    pub fn new(router: Router, listener: Listener) -> Self {
        Self { router, listener }
    }

    /// The bound address; `None` under Lambda.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr()
    }

    /// The router, for a caller that serves it itself (e.g. behind a test's own layer).
    pub fn into_router(self) -> Router {
        self.router
    }

    /// Serves until the process is told to stop, then exports the spans still waiting.
    pub async fn run_until_stopped(self) -> Result<(), ServeError> {
        let served = self.listener.serve(self.router).await;
        crate::telemetry::traces::shutdown().await;
        served
    }

    /// Serves plain HTTP on a task of its own and returns at once, for tests. `None` under
    /// Lambda, whose handler cannot run on a spawned task (its future is not `Send`).
    pub fn spawn(self) -> Option<tokio::task::JoinHandle<Result<(), ServeError>>> {
        match self.listener {
            Listener::Http(listener, limits) => {
                Some(tokio::spawn(serve(listener, self.router, limits)))
            }
            Listener::Lambda(_) => None,
        }
    }
}

/// Where a function serves: the Lambda runtime (`AWS_LAMBDA_RUNTIME_API` set), or plain HTTP
/// on a listener bound before serving, so a port of 0 is known to tests before the first request.
#[derive(Debug)]
pub enum Listener {
    Lambda(LambdaResponseMode),
    Http(TcpListener, HttpLimits),
}

/// How the Lambda runtime hands a response back (`LAMBDA_RESPONSE_STREAMING`).
///
/// The front door decides which one works: API Gateway's HTTP API and a Function URL with
/// `InvokeMode: BUFFERED` read one JSON document per invocation and cannot read a streamed
/// one; a Function URL with `InvokeMode: RESPONSE_STREAM` (or a REST API integration with
/// `responseTransferMode: STREAM`) reads the streamed form and passes the body on as it is
/// written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LambdaResponseMode {
    /// `lambda_http::run`: the whole response is collected, then returned as one
    /// proxy-integration document, so a server-sent-events body reaches the caller at the end.
    Buffered,
    /// `lambda_http::run_with_streaming_response`: a JSON prelude with the status and headers,
    /// then the body's chunks as the router yields them, to the Runtime API in
    /// `Lambda-Runtime-Function-Response-Mode: streaming`. Each header has one value in the
    /// prelude ([`one_value_per_header`]).
    Streaming,
}

impl LambdaResponseMode {
    /// `LAMBDA_RESPONSE_STREAMING` (`true`/`false`, default `false`). Read whether or not the
    /// process runs under Lambda, so a misspelt value stops start-up on a laptop too.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(if env.flag("LAMBDA_RESPONSE_STREAMING", false)? {
            LambdaResponseMode::Streaming
        } else {
            LambdaResponseMode::Buffered
        })
    }
}

impl Listener {
    /// Binds `LISTEN_ADDR` (default `default_addr`: `127.0.0.1:3001` for mcp, `127.0.0.1:3000`
    /// for chat) unless this process runs under Lambda.
    /// Under Lambda, `LAMBDA_RESPONSE_STREAMING` picks the [`LambdaResponseMode`].
    pub async fn bind(env: &Env, default_addr: &str) -> Result<Self, ServeError> {
        let mode = LambdaResponseMode::from_env(env)?;
        if in_lambda(env) {
            return Ok(Listener::Lambda(mode));
        }
        let default: SocketAddr = default_addr
            .parse()
            .map_err(|_| ConfigError::new("LISTEN_ADDR", "built-in default is not an address"))?;
        let addr: SocketAddr = env.or("LISTEN_ADDR", default)?;
        let limits = HttpLimits::from_env(env)?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        Ok(Listener::Http(listener, limits))
    }

    /// The bound address; `None` under Lambda.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Lambda(_) => None,
            Listener::Http(listener, _) => listener.local_addr().ok(),
        }
    }

    /// Serves `router` until the process is told to stop.
    pub async fn serve(self, router: Router) -> Result<(), ServeError> {
        match self {
            Listener::Lambda(mode) => {
                tracing::info!(response_mode = ?mode, "serving as an AWS Lambda function");
                let outcome = match mode {
                    LambdaResponseMode::Buffered => lambda_http::run(router).await,
                    LambdaResponseMode::Streaming => {
                        let router =
                            router.layer(axum::middleware::map_response(one_value_per_header));
                        lambda_http::run_with_streaming_response(router).await
                    }
                };
                outcome.map_err(|e| ServeError::Lambda(e.to_string()))
            }
            Listener::Http(listener, limits) => {
                if let Ok(addr) = listener.local_addr() {
                    tracing::info!(%addr, "serving plain HTTP");
                }
                serve(listener, router, limits).await
            }
        }
    }
}

/// A streamed response's headers, one value per name, for its prelude: `{"statusCode",
/// "headers", "cookies"}`, 8 NUL bytes, then the body. API Gateway's format for streamed Lambda
/// proxy responses maps each name in `headers` to one value and keeps repeated ones in
/// `multiValueHeaders`, which lambda_http's prelude has not: it writes a repeated header as an
/// array under `headers`. So repeated values are joined with ", ", as RFC 9110 (5.3) allows for
/// list-valued fields. `Set-Cookie`, which must not be joined, lambda_http moves to `cookies`.
async fn one_value_per_header(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let repeated: Vec<HeaderName> = headers
        .keys()
        .filter(|name| *name != SET_COOKIE && headers.get_all(*name).iter().nth(1).is_some())
        .cloned()
        .collect();
    for name in repeated {
        let joined = headers
            .get_all(&name)
            .iter()
            .map(HeaderValue::as_bytes)
            .collect::<Vec<_>>()
            .join(&b", "[..]);
        // Joined visible values are a visible value; anything else stays as it was.
        if let Ok(value) = HeaderValue::from_bytes(&joined) {
            headers.insert(name, value);
        }
    }
    response
}

/// Wraps a router so every request runs in a span carrying its request id, `x-request-id` is
/// echoed on every response (the caller's, else the Lambda invocation id, else a new UUID), and
/// an unknown path or method gets the JSON error shape instead of axum's empty body.
///
/// With OpenTelemetry traces on (`OTEL_TRACES=otlp`, installed before the router is built),
/// the request span takes a trusted caller's `traceparent` as its parent, and a response's body
/// ends only once the request's spans are exported ([`flushed_at_the_end`]); off, neither
/// layer exists.
pub fn traced(router: Router) -> Router {
    let router = router
        .layer(axum::middleware::from_fn(json_routing_errors))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(TraceLayer::new_for_http().make_span_with(request_span));
    let router = if crate::telemetry::traces::enabled() {
        router.layer(axum::middleware::map_response(flushed_at_the_end))
    } else {
        router
    };
    router.layer(SetRequestIdLayer::new(REQUEST_ID, InvocationId))
}

/// The response with a body that, once its last frame is out, drops what it wraps (ending
/// the request span) and exports the request's spans before it reports its end. Lambda
/// freezes an instance once the invocation's response is complete, buffered or streamed, so
/// spans left for later might never leave; the person asking has every byte by then.
async fn flushed_at_the_end(response: Response) -> Response {
    response.map(|body| Body::new(Flushed::new(body)))
}

/// A body that exports the spans when the one it wraps ends ([`flushed_at_the_end`]).
struct Flushed(Stage);

enum Stage {
    Sending(Body),
    Exporting(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>),
    Done,
}

impl Flushed {
    fn new(body: Body) -> Self {
        Flushed(Stage::Sending(body))
    }
}

impl HttpBody for Flushed {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        use std::task::Poll;
        loop {
            match &mut self.0 {
                Stage::Sending(body) => match std::pin::Pin::new(body).poll_frame(cx) {
                    Poll::Ready(None) => {
                        // Dropping the inner body closes the request span, so it is exported too.
                        self.0 = Stage::Exporting(Box::pin(crate::telemetry::traces::flush()));
                    }
                    other => return other,
                },
                Stage::Exporting(export) => {
                    std::task::ready!(export.as_mut().poll(cx));
                    self.0 = Stage::Done;
                }
                Stage::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.0, Stage::Done)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match &self.0 {
            Stage::Sending(body) => body.size_hint(),
            _ => hyper::body::SizeHint::with_exact(0),
        }
    }
}

impl Drop for Flushed {
    /// A body dropped before its end (the client left) still has its spans exported, on a
    /// task of their own when there is a runtime to run it (the inner body, and with it the
    /// request span, is dropped right after this).
    fn drop(&mut self) {
        if !matches!(self.0, Stage::Done)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(crate::telemetry::traces::flush());
        }
    }
}

/// Under Lambda the invocation id, which is what CloudWatch shows beside the function's log
/// lines; elsewhere a new UUID.
#[derive(Clone, Copy)]
struct InvocationId;

impl MakeRequestId for InvocationId {
    fn make_request_id<B>(&mut self, request: &Request<B>) -> Option<RequestId> {
        use lambda_http::RequestExt;
        request
            .lambda_context_ref()
            .and_then(|ctx| HeaderValue::from_str(&ctx.request_id).ok())
            .filter(|id| !id.is_empty())
            .map(RequestId::new)
            .or_else(|| MakeRequestUuid.make_request_id(request))
    }
}

/// axum answers an unknown path (404) or a method a route does not serve (405) with an empty
/// body; clients get `{"error": {"code", "message"}}` like every other refusal.
async fn json_routing_errors(request: Request<Body>, next: Next) -> Response {
    // Reference-counted clones, not a copied path: this runs on every request, and almost all
    // of them succeed.
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let response = next.run(request).await;
    let path = uri.path();
    let (code, message) = match response.status() {
        StatusCode::NOT_FOUND => ("not_found", format!("nothing is served at {path}")),
        // axum adds the `Allow` header after this layer has run.
        StatusCode::METHOD_NOT_ALLOWED => (
            "method_not_allowed",
            format!("{method} is not served at {path}; the Allow header lists what is"),
        ),
        _ => return response,
    };
    if response.body().size_hint().exact() != Some(0) {
        return response;
    }
    let (parts, _) = response.into_parts();
    crate::http::with_error_body(parts, code, &message)
}

fn request_span<B>(request: &Request<B>) -> tracing::Span {
    use lambda_http::RequestExt;
    let request_id = match request.lambda_context_ref() {
        Some(ctx) => ctx.request_id.clone(),
        None => request
            .headers()
            .get(REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned(),
    };
    let span = tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %request_id,
    );
    crate::telemetry::traces::adopt_parent(&span, request.headers());
    span
}

/// Plain HTTP on an already bound listener with `limits`, until Ctrl-C or SIGTERM.
async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
) -> Result<(), ServeError> {
    crate::plain_http::serve(listener, router, limits, shutdown_signal()).await?;
    Ok(())
}

/// Ctrl-C locally, SIGTERM from Lambda or a process manager.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}

/// 2001-09-09 in milliseconds since the epoch: no deadline Lambda sends is earlier.
const EPOCH_DEADLINES_FROM: u64 = 1_000_000_000_000;

/// What remains of an invocation whose runtime deadline is `deadline_ms`. Lambda sends the
/// deadline in milliseconds since the epoch; `cargo lambda watch` (1.9) sends its timeout
/// instead (`600000`), which read as a time is long past: a value too small to be a time is
/// taken as what is left.
pub fn time_left(deadline_ms: u64, now: SystemTime) -> Duration {
    if deadline_ms < EPOCH_DEADLINES_FROM {
        return Duration::from_millis(deadline_ms);
    }
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    Duration::from_millis(deadline_ms).saturating_sub(now)
}

#[cfg(test)]
mod tests {
    use axum::routing::post;
    use lambda_http::RequestExt;
    use tower::ServiceExt;

    use axum::http::header::{ALLOW, CONTENT_TYPE};

    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn time_left_reads_lambdas_epoch_deadline_and_the_emulators_timeout() {
        let now = UNIX_EPOCH + Duration::from_millis(1_795_762_213_458);
        assert_eq!(
            time_left(1_795_762_213_458 + 900_000, now),
            Duration::from_secs(900)
        );
        assert_eq!(
            time_left(1_795_762_213_000, now),
            Duration::ZERO,
            "already past"
        );
        assert_eq!(
            time_left(600_000, now),
            Duration::from_secs(600),
            "cargo lambda watch"
        );
    }

    fn app() -> Router {
        traced(Router::new().route("/api/chat", post(|| async { "ok" })))
    }

    async fn json(response: Response) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn unknown_paths_and_methods_get_json_errors() {
        let response = app()
            .oneshot(Request::get("/nope").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/json");
        let body = json(response).await;
        assert_eq!(body["error"]["code"], "not_found");
        assert_eq!(body["error"]["message"], "nothing is served at /nope");

        let response = app()
            .oneshot(Request::get("/api/chat").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(response.headers()[ALLOW], "POST");
        let body = json(response).await;
        assert_eq!(body["error"]["code"], "method_not_allowed");
        assert_eq!(
            body["error"]["message"],
            "GET is not served at /api/chat; the Allow header lists what is"
        );
    }

    #[tokio::test]
    async fn lambda_response_streaming_picks_the_mode_and_a_bad_value_stops_start_up() {
        let lambda = |streaming: Option<&str>| {
            let mut pairs = vec![("AWS_LAMBDA_RUNTIME_API", "127.0.0.1:9001")];
            pairs.extend(streaming.map(|v| ("LAMBDA_RESPONSE_STREAMING", v)));
            Env::from_pairs(pairs)
        };
        for (value, mode) in [
            (None, LambdaResponseMode::Buffered),
            (Some(""), LambdaResponseMode::Buffered),
            (Some("false"), LambdaResponseMode::Buffered),
            (Some("true"), LambdaResponseMode::Streaming),
            (Some("TRUE"), LambdaResponseMode::Streaming),
        ] {
            let bound = Listener::bind(&lambda(value), "127.0.0.1:0").await.unwrap();
            assert!(
                matches!(bound, Listener::Lambda(m) if m == mode),
                "{value:?}: {bound:?}"
            );
        }

        let err = Listener::bind(&lambda(Some("streaming")), "127.0.0.1:0")
            .await
            .unwrap_err();
        assert!(err.is_bad_setting());
        assert_eq!(
            err.to_string(),
            "invalid setting LAMBDA_RESPONSE_STREAMING: must be true or false"
        );

        // Checked outside Lambda too, where it has no effect: a typo shows on the first run.
        let plain = Env::from_pairs([("LAMBDA_RESPONSE_STREAMING", "yes please")]);
        let err = Listener::bind(&plain, "127.0.0.1:0").await.unwrap_err();
        assert!(
            err.to_string().contains("LAMBDA_RESPONSE_STREAMING"),
            "{err}"
        );
    }

    /// What lambda_runtime writes before the 8 NUL bytes, for a response of `app`.
    async fn prelude(app: Router, request: Request<Body>) -> serde_json::Value {
        use lambda_http::lambda_runtime::MetadataPrelude;
        let response = app.oneshot(request).await.unwrap();
        // As lambda_http's streaming adapter builds it: Set-Cookie to `cookies`.
        let (parts, _) = response.into_parts();
        let mut headers = parts.headers;
        let cookies = headers
            .get_all(SET_COOKIE)
            .iter()
            .map(|c| c.to_str().unwrap().to_owned())
            .collect();
        headers.remove(SET_COOKIE);
        serde_json::to_value(MetadataPrelude {
            status_code: parts.status,
            headers,
            cookies,
        })
        .unwrap()
    }

    #[tokio::test]
    async fn a_streamed_prelude_holds_one_value_per_header_as_api_gateway_reads_it() {
        use axum::http::header::{SET_COOKIE, VARY};
        use axum::routing::get;
        let repeats = || {
            Router::new().route(
                "/",
                get(|| async {
                    let repeated = axum::response::AppendHeaders([
                        (VARY, "origin"),
                        (VARY, "accept-encoding"),
                        (SET_COOKIE, "a=1"),
                        (SET_COOKIE, "b=2"),
                    ]);
                    (repeated, "ok")
                }),
            )
        };
        let request = || Request::get("/").body(Body::empty()).unwrap();

        // Without the layer, lambda_http would write an array where API Gateway reads one value.
        let raw = prelude(repeats(), request()).await;
        assert_eq!(
            raw["headers"]["vary"],
            serde_json::json!(["origin", "accept-encoding"])
        );

        let app = repeats().layer(axum::middleware::map_response(one_value_per_header));
        let prelude = prelude(app, request()).await;
        assert_eq!(prelude["statusCode"], 200);
        assert_eq!(prelude["headers"]["vary"], "origin, accept-encoding");
        assert_eq!(prelude["cookies"], serde_json::json!(["a=1", "b=2"]));
        let headers = prelude["headers"].as_object().unwrap();
        assert!(
            headers.values().all(serde_json::Value::is_string),
            "{headers:?}"
        );
    }

    #[tokio::test]
    async fn the_request_id_is_the_callers_else_the_invocation_id_else_new() {
        let mut invocation = lambda_http::lambda_runtime::Context::default();
        invocation.request_id = "8476a536-e9f4-11e8-9739-2dfe598c3fcd".into();
        let under_lambda = Request::post("/api/chat")
            .body(Body::empty())
            .unwrap()
            .with_lambda_context(invocation.clone());
        let response = app().oneshot(under_lambda).await.unwrap();
        assert_eq!(
            response.headers()[REQUEST_ID],
            "8476a536-e9f4-11e8-9739-2dfe598c3fcd"
        );

        let with_callers = Request::post("/api/chat")
            .header(REQUEST_ID, "from-the-caller")
            .body(Body::empty())
            .unwrap()
            .with_lambda_context(invocation);
        let response = app().oneshot(with_callers).await.unwrap();
        assert_eq!(response.headers()[REQUEST_ID], "from-the-caller");

        let plain = Request::post("/api/chat").body(Body::empty()).unwrap();
        let response = app().oneshot(plain).await.unwrap();
        let made = response.headers()[REQUEST_ID].to_str().unwrap();
        assert_eq!(made.len(), 36, "a UUID: {made}");
    }
}
