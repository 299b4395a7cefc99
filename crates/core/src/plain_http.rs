//! The plain-HTTP server (everything but Lambda, where API Gateway holds the connections): hyper
//! HTTP/1 connections with a head timeout, a body deadline and a cap on open connections.
//!
//! It also says `Connection: close` on any answer given before the request's body was read
//! (an early 413, say): hyper closes such a connection, and a client must not reuse it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::header::{CONNECTION, HOST};
use axum::http::{HeaderValue, Request, StatusCode};
use axum::response::Response;
use hyper::body::{Body as _, Bytes, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

use crate::config::HttpLimits;

/// Serves `router` on `listener` until `shutdown` completes, then lets open requests finish.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop, stopped) = watch::channel(false);
    let mut builder = hyper::server::conn::http1::Builder::new();
    // hyper's head timer also runs while a kept-alive connection waits for its next request,
    // so one setting bounds slow headers and idle connections alike.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    tokio::pin!(shutdown);
    loop {
        // Past the cap, new connections wait in the listen backlog (not accepted, so they hold
        // no descriptor here) until an open one closes.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = &mut shutdown => break,
        };
        let Ok(slot) = slot else { break };
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or memory: nothing is answered, so wait a little
                    // rather than spin on the same error.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Answers are small and written whole; Nagle would only delay them.
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            respond(router.clone(), request, limits)
        });
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let _slot = slot;
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = stopped.wait_for(|stop| *stop) => connection.as_mut().graceful_shutdown(),
            }
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stop.send(true);
    // Every open connection holds a slot: having them all back means all have finished.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
    Ok(())
}

async fn respond(
    router: Router,
    request: Request<Incoming>,
    limits: HttpLimits,
) -> Result<Response, std::convert::Infallible> {
    if let Some(refusal) = refuse(&request, &limits) {
        return Ok(refusal);
    }
    let body_timeout = limits.body_timeout;
    if request.body().is_end_stream() {
        return router.oneshot(request.map(Body::new)).await;
    }
    let finished = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| {
        Body::new(Deadline {
            body,
            finished: finished.clone(),
            deadline: Instant::now() + body_timeout,
            timeout: body_timeout,
            sleep: None,
        })
    });
    let mut response = router.oneshot(request).await?;
    if !finished.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
    }
    Ok(response)
}

/// Requests refused before routing, with the JSON error shape. hyper itself still answers,
/// with an empty body, a head past its buffer (about 400 KiB), more than 100 headers or a URI
/// past 64 KiB: these limits sit below those.
fn refuse<B>(request: &Request<B>, limits: &HttpLimits) -> Option<Response> {
    let uri = request.uri();
    let uri_bytes = uri.path_and_query().map_or(0, |p| p.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len());
    if uri_bytes > limits.max_uri_bytes {
        return Some(json_error(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!(
                "the request's URI is longer than {} bytes",
                limits.max_uri_bytes
            ),
        ));
    }
    let headers = request.headers();
    let header_bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 4)
        .sum();
    if header_bytes > limits.max_header_bytes {
        return Some(json_error(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!(
                "the request's headers take more than {} bytes",
                limits.max_header_bytes
            ),
        ));
    }
    // Two Host headers name two sites; which one a check or a route reads would be a guess.
    if headers.get_all(HOST).iter().nth(1).is_some() {
        return Some(json_error(
            StatusCode::BAD_REQUEST,
            "duplicate_host",
            "the request has more than one Host header; send exactly one".into(),
        ));
    }
    None
}

fn json_error(status: StatusCode, code: &str, message: String) -> Response {
    let mut response = crate::http::error_response(status, code, &message);
    // The request's body, if any, is left unread.
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Why a request body stopped before its end.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} ms", .0.as_millis())]
pub struct BodyTimeout(Duration);

/// A request body that must arrive whole by its deadline, and tells whether it was read to the
/// end. The timer is only started when a read has to wait, so a body that arrives with its
/// head costs no timer.
struct Deadline {
    body: Incoming,
    finished: Arc<AtomicBool>,
    deadline: Instant,
    timeout: Duration,
    sleep: Option<std::pin::Pin<Box<Sleep>>>,
}

impl hyper::body::Body for Deadline {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        match std::pin::Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(None) => {
                this.finished.store(true, Ordering::Release);
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                if this.body.is_end_stream() {
                    this.finished.store(true, Ordering::Release);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Pending => {
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(this.deadline)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimeout(this.timeout).into()))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
