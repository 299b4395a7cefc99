//! One router, two runtimes: under Lambda (`AWS_LAMBDA_RUNTIME_API` set) the router is the
//! Lambda handler via lambda_http; otherwise it is served as plain HTTP on `LISTEN_ADDR`.
//!
//! Both paths run the same `Router`, so tests of the plain server test what Lambda runs.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;

use axum::Router;
use axum::body::{Body, HttpBody};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderName, HeaderValue, Request, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use tokio::net::TcpListener;
use tower_http::request_id::{
    MakeRequestId, MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

use crate::config::{ConfigError, Env, HttpLimits, in_lambda};
use crate::secrets::Secrets;

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

/// A function's whole `main`: logging from the process environment, then the secrets in
/// `SECRET_IDS` laid over it, then `build` with that environment (and the handle that fetches
/// the secrets again), then serving until told to stop. `name` prefixes the one line printed
/// when start-up fails; the exit code is 2 for a bad logging setting, 1 for anything else.
pub async fn main<F, Fut, E>(name: &str, default_addr: &str, build: F) -> ExitCode
where
    F: FnOnce(Env, Option<Secrets>) -> Fut,
    Fut: Future<Output = Result<Router, E>>,
    E: Display,
{
    let env = Env::from_process();
    if let Err(e) = crate::telemetry::init(&env) {
        eprintln!("{name}: {e}");
        return ExitCode::from(2);
    }
    let result = async {
        let (env, secrets) = crate::secrets::load(&env)
            .await
            .map_err(|e| e.to_string())?;
        let router = build(env.clone(), secrets)
            .await
            .map_err(|e| e.to_string())?;
        run(router, &env, default_addr)
            .await
            .map_err(|e| e.to_string())
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Wraps a router so every request runs in a span carrying its request id, `x-request-id` is
/// echoed on every response (the caller's, else the Lambda invocation id, else a new UUID), and
/// an unknown path or method gets the JSON error shape instead of axum's empty body.
pub fn traced(router: Router) -> Router {
    router
        .layer(axum::middleware::from_fn(json_routing_errors))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .layer(SetRequestIdLayer::new(REQUEST_ID, InvocationId))
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
    let (mut parts, _) = response.into_parts();
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let body = serde_json::json!({"error": {"code": code, "message": message}});
    Response::from_parts(parts, Body::from(body.to_string()))
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
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = %request_id,
    )
}

/// Runs `router` until the process is told to stop. `default_addr` is the function's own
/// plain-HTTP default (`127.0.0.1:3001` for mcp, `127.0.0.1:3000` for chat).
pub async fn run(router: Router, env: &Env, default_addr: &str) -> Result<(), ServeError> {
    if in_lambda(env) {
        tracing::info!("serving as an AWS Lambda function");
        return lambda_http::run(router)
            .await
            .map_err(|e| ServeError::Lambda(e.to_string()));
    }
    let addr: SocketAddr = env.or(
        "LISTEN_ADDR",
        default_addr
            .parse()
            .map_err(|_| ConfigError::new("LISTEN_ADDR", "built-in default is not an address"))?,
    )?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let limits = HttpLimits::from_env(env)?;
    tracing::info!(%addr, "serving plain HTTP");
    serve_with(listener, router, limits).await
}

/// Plain HTTP on an already bound listener (tests bind `127.0.0.1:0` and read the port first).
pub async fn serve(listener: TcpListener, router: Router) -> Result<(), ServeError> {
    serve_with(listener, router, HttpLimits::default()).await
}

/// [`serve`] with the given connection limits.
pub async fn serve_with(
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

#[cfg(test)]
mod tests {
    use axum::routing::post;
    use lambda_http::RequestExt;
    use tower::ServiceExt;

    use axum::http::header::ALLOW;

    use super::*;

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
