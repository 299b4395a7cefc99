//! One router, two runtimes: under Lambda (`AWS_LAMBDA_RUNTIME_API` set) the router is the
//! Lambda handler via lambda_http; otherwise it is served as plain HTTP on `LISTEN_ADDR`.
//!
//! Both paths run the same `Router`, so tests of the plain server test what Lambda runs.

use std::fmt::Display;
use std::future::Future;
use std::net::SocketAddr;
use std::process::ExitCode;

use axum::Router;
use axum::http::{HeaderName, Request};
use tokio::net::TcpListener;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::config::{ConfigError, Env, in_lambda};
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

/// Wraps a router so every request runs in a span carrying its request id: the Lambda
/// invocation id under Lambda, else `x-request-id` (kept from the caller or made up here and
/// echoed back).
pub fn traced(router: Router) -> Router {
    router
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
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
    tracing::info!(%addr, "serving plain HTTP");
    serve(listener, router).await
}

/// Plain HTTP on an already bound listener (tests bind `127.0.0.1:0` and read the port first).
pub async fn serve(listener: TcpListener, router: Router) -> Result<(), ServeError> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
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
