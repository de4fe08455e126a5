//! OTLP/HTTP (`run --otlp-listen`): `POST /v1/logs`, `/v1/traces`, `/v1/metrics` with
//! `application/x-protobuf` or `application/json` bodies, chunked or not, optionally
//! `content-encoding: gzip`; HTTP/1.1 on plain TCP or TLS.
//!
//! Owns: the HTTP status of every outcome. 200 with an empty export response (protobuf or
//! JSON, as the request); 400 malformed, 401 token (checked before the body is read), 404
//! path, 405 method, 408 body not received within the deadline, 413 over the size limit
//! (compressed and decompressed both bounded; the limit is in the message) or alone too large
//! for the queue, 415 content type or encoding, 429 (`Retry-After`) when the queue is full, 503 (`Retry-After`) when
//! stopping or the spool cannot be written. Error bodies are a `google.rpc.Status` in the
//! request's encoding.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::accept::{Outcome, Protocol, Receiver, Rejection, Signal};
use super::intake::{self, ReadError};
use super::queue::Reservation;
use super::record::{self, Record};
use crate::listener::{Gate, Limits, Name, Reason};

/// After stop, open connections get this long to finish their current request.
const DRAIN: Duration = Duration::from_secs(5);

/// What a client retrying a refused request should wait, in seconds.
pub const RETRY_AFTER_SECS: u64 = 1;

/// `google.rpc.Status`, the body of OTLP error responses.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

fn signal_of(path: &str) -> Option<Signal> {
    match path {
        "/v1/logs" => Some(Signal::Logs),
        "/v1/traces" => Some(Signal::Traces),
        "/v1/metrics" => Some(Signal::Metrics),
        _ => None,
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text.to_owned())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn error(protocol: Protocol, r: &Rejection) -> Response<Full<Bytes>> {
    let status = match r.outcome {
        Outcome::Accepted => StatusCode::OK,
        Outcome::Busy if r.message.starts_with("shutting down") => StatusCode::SERVICE_UNAVAILABLE,
        Outcome::Busy => StatusCode::TOO_MANY_REQUESTS,
        Outcome::SpoolError => StatusCode::SERVICE_UNAVAILABLE,
        Outcome::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Outcome::Malformed => StatusCode::BAD_REQUEST,
        Outcome::Unauthorized => StatusCode::UNAUTHORIZED,
        Outcome::Unsupported => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Outcome::TooSlow => StatusCode::REQUEST_TIMEOUT,
    };
    // gRPC codes in the Status body: UNAVAILABLE 14, RESOURCE_EXHAUSTED 8, INVALID_ARGUMENT 3,
    // UNAUTHENTICATED 16, DEADLINE_EXCEEDED 4.
    let code = match r.outcome {
        Outcome::Busy | Outcome::SpoolError => 14,
        Outcome::TooSlow => 4,
        Outcome::TooLarge => 8,
        Outcome::Unauthorized => 16,
        _ => 3,
    };
    let (body, ct) = match protocol {
        Protocol::HttpProtobuf => (
            RpcStatus {
                code,
                message: r.message.clone(),
            }
            .encode_to_vec(),
            "application/x-protobuf",
        ),
        _ => (
            serde_json::to_vec(&serde_json::json!({"code": code, "message": r.message}))
                .unwrap_or_default(),
            "application/json",
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    ) {
        resp.headers_mut()
            .insert("retry-after", HeaderValue::from(RETRY_AFTER_SECS));
    }
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut()
            .insert("www-authenticate", HeaderValue::from_static("Bearer"));
    }
    resp
}

fn ok(protocol: Protocol) -> Response<Full<Bytes>> {
    // An empty Export*ServiceResponse: zero bytes in protobuf, `{}` in JSON.
    let (body, ct): (&'static [u8], _) = match protocol {
        Protocol::HttpProtobuf => (b"", "application/x-protobuf"),
        _ => (b"{}", "application/json"),
    };
    let mut resp = Response::new(Full::new(Bytes::from_static(body)));
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    resp
}

fn too_large(limit: usize, what: &str) -> Rejection {
    Rejection::new(
        Outcome::TooLarge,
        format!("the request body is larger than the limit of {limit} bytes ({what})"),
    )
}

/// The body, decompressed when gzip, at most `limit` bytes either way, read within the
/// deadline and charged to `res` (raw, inflated, and what decoding it will build).
async fn read_body(
    req: Request<Incoming>,
    protocol: Protocol,
    rx: &Receiver,
    gate: &Gate,
    mut res: Reservation,
) -> Result<(Bytes, Reservation), Rejection> {
    let limit = rx.max_request_bytes();
    let gzip = match req.headers().get(CONTENT_ENCODING).map(|v| v.as_bytes()) {
        None | Some(b"identity") => false,
        Some(b"gzip") => true,
        Some(other) => {
            return Err(Rejection::new(
                Outcome::Unsupported,
                format!(
                    "content-encoding `{}` is not supported (gzip or none)",
                    String::from_utf8_lossy(other)
                ),
            ));
        }
    };
    if let Some(len) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(too_large(limit, "content-length"));
    }
    let body = match intake::read(req.into_body(), limit, rx.body_timeout(), &mut res).await {
        Ok(b) => b,
        Err(ReadError::Refused(r)) => return Err(r),
        Err(ReadError::TimedOut(r)) => {
            gate.count(Reason::BodyTimeout);
            return Err(r);
        }
    };
    // Inflating and scanning take CPU: off the async workers (so `/metrics` and other
    // clients are served meanwhile), one request per core at a time.
    let work = move || {
        let body = if gzip {
            Bytes::from(intake::gunzip(&body, limit, &mut res)?)
        } else {
            body
        };
        let estimate = match protocol {
            Protocol::HttpProtobuf => intake::protobuf_estimate(&body, res.limit()),
            _ => intake::json_estimate(&body),
        };
        res.grow(estimate).map_err(intake::refused)?;
        Ok((body, res))
    };
    rx.on_cpu(work)
        .await
        .unwrap_or_else(|| Err(Rejection::new(Outcome::Busy, "shutting down; retry later")))
}

/// The records (and metric data points) of a body.
fn decode(
    signal: Signal,
    protocol: Protocol,
    body: &[u8],
) -> Result<(Vec<Record>, u64), Rejection> {
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    let malformed = |what: String| Rejection::new(Outcome::Malformed, what);
    let bad_proto = |e: prost::DecodeError| {
        malformed(format!(
            "the body is not a valid protobuf export request: {e}"
        ))
    };
    let mut records = Vec::new();
    let mut points = 0;
    match (protocol, signal) {
        (Protocol::HttpProtobuf, Signal::Logs) => {
            let req = ExportLogsServiceRequest::decode(body).map_err(bad_proto)?;
            record::logs_from_proto(&req, &mut records);
        }
        (Protocol::HttpProtobuf, Signal::Traces) => {
            let req = ExportTraceServiceRequest::decode(body).map_err(bad_proto)?;
            record::spans_from_proto(&req, &mut records);
        }
        (Protocol::HttpProtobuf, Signal::Metrics) => {
            let req = ExportMetricsServiceRequest::decode(body).map_err(bad_proto)?;
            points = record::metric_points_proto(&req);
        }
        (_, Signal::Logs) => {
            super::json::logs(body, &mut records).map_err(|e| malformed(e.0))?;
        }
        (_, Signal::Traces) => {
            super::json::spans(body, &mut records).map_err(|e| malformed(e.0))?;
        }
        (_, Signal::Metrics) => {
            points = super::json::metric_points(body).map_err(|e| malformed(e.0))?;
        }
    }
    Ok((records, points))
}

async fn handle(rx: &Receiver, gate: &Gate, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let Some(signal) = signal_of(req.uri().path()) else {
        return plain(
            StatusCode::NOT_FOUND,
            "not found: POST OTLP to /v1/logs, /v1/traces or /v1/metrics\n",
        );
    };
    if req.method() != Method::POST {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed: use POST\n",
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("POST"));
        return r;
    }
    let ct = req
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let protocol = match ct.as_deref() {
        Some("application/x-protobuf") => Protocol::HttpProtobuf,
        Some("application/json") => Protocol::HttpJson,
        other => {
            let r = Rejection::new(
                Outcome::Unsupported,
                format!(
                    "content-type `{}` is not supported (application/x-protobuf or application/json)",
                    other.unwrap_or("")
                ),
            );
            rx.refused(signal, Protocol::HttpJson, &r);
            return error(Protocol::HttpJson, &r);
        }
    };
    let auth = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .map(|v| v.as_bytes().to_vec());
    if let Err(r) = rx.authorize(auth.as_deref()) {
        rx.refused(signal, protocol, &r);
        return error(protocol, &r);
    }
    let (body, res) = match read_body(req, protocol, rx, gate, rx.reserve()).await {
        Ok(b) => b,
        Err(r) => {
            rx.refused(signal, protocol, &r);
            return error(protocol, &r);
        }
    };
    let (records, points) = match decode(signal, protocol, &body) {
        Ok(x) => x,
        Err(r) => {
            rx.refused(signal, protocol, &r);
            return error(protocol, &r);
        }
    };
    drop(body);
    match rx
        .accept(signal, protocol, records, points, Some(res))
        .await
    {
        Ok(()) => ok(protocol),
        Err(r) => error(protocol, &r),
    }
}

/// A TLS acceptor, when the listener speaks TLS.
pub type Tls = Option<tokio_rustls::TlsAcceptor>;

/// Serve OTLP/HTTP on `listener` until `stop` turns true, with the default listener limits
/// (its connections uncounted: `serve_gated` with a counting gate counts them).
pub async fn serve(
    listener: TcpListener,
    tls: Tls,
    rx: Arc<Receiver>,
    stop: watch::Receiver<bool>,
) {
    let gate = Gate::new(Name::OtlpHttp, Limits::default(), None);
    serve_gated(listener, tls, rx, gate, stop).await;
}

/// Serve OTLP/HTTP on `listener` until `stop` turns true, connections capped and timed out
/// by `gate`.
pub async fn serve_gated(
    listener: TcpListener,
    tls: Tls,
    rx: Arc<Receiver>,
    gate: Arc<Gate>,
    stop: watch::Receiver<bool>,
) {
    let header_timeout = gate.limits().header_timeout();
    let mut accept_stop = stop.clone();
    let stopping = async move { stopped(&mut accept_stop).await };
    crate::listener::serve(listener, gate, stopping, DRAIN, move |stream, conn| {
        let rx = rx.clone();
        let tls = tls.clone();
        let mut stop = stop.clone();
        async move {
            let Some(io) = conn.tls(stream, tls).await else {
                return;
            };
            let gate = conn.gate().clone();
            let svc = conn.track(service_fn(move |req| {
                let (rx, gate) = (rx.clone(), gate.clone());
                async move { Ok::<_, Infallible>(handle(&rx, &gate, req).await) }
            }));
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let served = builder.serve_connection(TokioIo::new(io), svc);
            let stop = async move { stopped(&mut stop).await };
            if let Some(Err(e)) = conn.run(served, |c| c.graceful_shutdown(), stop).await {
                conn.note_error(&e);
                tracing::debug!(error = %e, "OTLP/HTTP connection ended with an error");
            }
        }
    })
    .await;
}

/// Completes when `stop` turns true (or its sender is gone).
pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
