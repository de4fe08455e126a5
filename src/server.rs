//! The HTTP endpoint: `/metrics` for Prometheus, `/healthz` for liveness, `/-/ready` for
//! readiness, and with `run`, the live page for people at `/` and `/ui`. Plain hyper 1,
//! HTTP/1.1 only.
//!
//! The caller binds the listener (default [`DEFAULT_METRICS_ADDR`]) so that a bind error is
//! reported before anything starts, and so tests can bind port 0. Nothing a client sends can
//! panic the server: bad requests get a 4xx from hyper or from the router, connection errors
//! are logged at debug level, and accept errors back off and retry.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::sink::live_page::SharedPage;
use crate::sink::metrics::Metrics;

/// Where `retryscope run` serves metrics unless told otherwise.
pub const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9464";

/// A client must send its request headers within this time.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// After shutdown, connections get this long to finish their current response.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

const TEXT: &str = "text/plain; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";

/// Serve `/metrics`, `/healthz` and `/-/ready` on `listener` until `shutdown` completes.
///
/// * `GET /metrics`: 200, `text/plain; version=0.0.4`, the current exposition.
/// * `GET /healthz`: 200 `ok` while the process serves.
/// * `GET /-/ready`: 200 `ready` when `ready` is true, else 503 `not ready`.
/// * Any other path: 404. A known path with a method other than GET (or HEAD): 405 with
///   `Allow: GET, HEAD`.
///
/// On shutdown it stops accepting, asks open connections to close after their current
/// response, and returns once they have (or after a few seconds).
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    shutdown: impl Future<Output = ()>,
) {
    serve_with_page(listener, metrics, ready, None, shutdown).await;
}

/// [`serve`], with the live page ([`crate::sink::live_page`]) at `GET /` and `GET /ui`.
pub async fn serve_with_page(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    page: Option<SharedPage>,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
            // Reap finished connection tasks so the set does not grow without bound.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                // Typically EMFILE: back off instead of spinning.
                tracing::warn!(error = %e, "metrics endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let metrics = metrics.clone();
        let ready = ready.clone();
        let page = page.clone();
        let mut stop = stop_rx.clone();
        conns.spawn(async move {
            let svc = service_fn(move |req| {
                let resp = route(&req, &metrics, &ready, page.as_ref());
                async move { Ok::<_, Infallible>(resp) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                () = async { drop(stop.wait_for(|s| *s).await) } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "metrics endpoint: connection error");
            }
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while conns.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        conns.abort_all();
    }
}

/// The response to one request.
fn route(
    req: &Request<Incoming>,
    metrics: &Metrics,
    ready: &AtomicBool,
    page: Option<&SharedPage>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let is_page = page.is_some() && matches!(path, "/" | "/ui");
    if !is_page && !matches!(path, "/metrics" | "/healthz" | "/-/ready") {
        return reply(StatusCode::NOT_FOUND, TEXT, "not found\n");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = reply(StatusCode::METHOD_NOT_ALLOWED, TEXT, "method not allowed\n");
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return resp;
    }
    match path {
        "/" | "/ui" => {
            let html = page
                .and_then(|p| p.lock().ok().map(|p| p.render()))
                .unwrap_or_default();
            reply(StatusCode::OK, HTML, html)
        }
        "/metrics" => {
            let (content_type, body) = metrics.render();
            reply(StatusCode::OK, content_type, body)
        }
        "/healthz" => reply(StatusCode::OK, TEXT, "ok\n"),
        _ if ready.load(Ordering::Acquire) => reply(StatusCode::OK, TEXT, "ready\n"),
        _ => reply(StatusCode::SERVICE_UNAVAILABLE, TEXT, "not ready\n"),
    }
}

fn reply(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
