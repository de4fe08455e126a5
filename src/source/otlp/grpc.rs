//! OTLP/gRPC (`run --otlp-grpc-listen`): the logs, trace and metrics `Export` services
//! (opentelemetry-proto's tonic servers) over HTTP/2 without TLS (h2c) or with TLS.
//!
//! The token is checked on the headers before any byte of the body is read. Requests
//! compressed with `grpc-encoding: gzip` (gemini-cli's gRPC exporter compresses) are
//! decompressed here, all their messages together bounded like any request, and charged to
//! the queue with the estimate of what decoding builds before tonic decodes them
//! ([`super::intake`]).
//!
//! Owns: the gRPC status of every outcome: OK; UNAVAILABLE when the queue is full, the
//! collector is stopping or the spool cannot be written (retryable: the exporter retries);
//! RESOURCE_EXHAUSTED when a request is over the size limit or alone cannot fit in the queue
//! (checked here, before tonic reads it, with the limit in the message; not retried);
//! DEADLINE_EXCEEDED when the body does not arrive in time; INVALID_ARGUMENT for a body that
//! is not an export request; UNAUTHENTICATED for a missing or wrong bearer token.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::codegen::Service;
use tonic::{Request, Response, Status};

use super::accept::{Outcome, Protocol, Receiver, Rejection, Signal};
use super::http::stopped;
use super::intake::{self, ReadError};
use super::queue::Reservation;
use super::record;
use crate::listener::{Gate, Limits, Name, Reason};

/// The three services over one receiver.
#[derive(Clone)]
struct Services(Arc<Receiver>);

fn status(r: &Rejection) -> Status {
    match r.outcome {
        Outcome::Busy | Outcome::SpoolError => Status::unavailable(r.message.clone()),
        Outcome::TooLarge => Status::resource_exhausted(r.message.clone()),
        Outcome::Unauthorized => Status::unauthenticated(r.message.clone()),
        Outcome::TooSlow => Status::deadline_exceeded(r.message.clone()),
        _ => Status::invalid_argument(r.message.clone()),
    }
}

impl Services {
    fn authorize(&self, signal: Signal, header: Option<&[u8]>) -> Result<(), Status> {
        self.0.authorize(header).map_err(|r| {
            self.0.refused(signal, Protocol::Grpc, &r);
            status(&r)
        })
    }
}

/// A request's reservation, handed from [`route`] (which read the body under it) to the
/// service that queues the records.
#[derive(Clone)]
struct Held(Arc<std::sync::Mutex<Option<Reservation>>>);

fn held<T>(req: &Request<T>) -> Option<Reservation> {
    req.extensions()
        .get::<Held>()
        .and_then(|h| h.0.lock().ok()?.take())
}

#[tonic::async_trait]
impl LogsService for Services {
    async fn export(
        &self,
        req: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        let res = held(&req);
        let mut records = Vec::new();
        record::logs_from_proto(req.get_ref(), &mut records);
        drop(req);
        self.0
            .accept(Signal::Logs, Protocol::Grpc, records, 0, res)
            .await
            .map_err(|r| status(&r))?;
        Ok(Response::new(ExportLogsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl TraceService for Services {
    async fn export(
        &self,
        req: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let res = held(&req);
        let mut records = Vec::new();
        record::spans_from_proto(req.get_ref(), &mut records);
        drop(req);
        self.0
            .accept(Signal::Traces, Protocol::Grpc, records, 0, res)
            .await
            .map_err(|r| status(&r))?;
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Services {
    async fn export(
        &self,
        req: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        let res = held(&req);
        let points = record::metric_points_proto(req.get_ref());
        self.0
            .accept(Signal::Metrics, Protocol::Grpc, Vec::new(), points, res)
            .await
            .map_err(|r| status(&r))?;
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

type GrpcResponse = http::Response<tonic::body::Body>;

/// A trailers-only gRPC error response.
fn error_response(s: &Status) -> GrpcResponse {
    s.clone().into_http()
}

/// Route one HTTP/2 request to its service: the token checked before any byte of the body
/// is read, the body read within the deadline, decompressed and bounded (all its messages
/// together), its memory charged to the queue before tonic decodes it.
async fn route(
    services: Services,
    gate: Arc<Gate>,
    limit: usize,
    req: http::Request<Incoming>,
) -> Result<GrpcResponse, Infallible> {
    let signal = match req.uri().path().rsplit_once('/').map(|(s, _)| s) {
        Some("/opentelemetry.proto.collector.logs.v1.LogsService") => Signal::Logs,
        Some("/opentelemetry.proto.collector.trace.v1.TraceService") => Signal::Traces,
        Some("/opentelemetry.proto.collector.metrics.v1.MetricsService") => Signal::Metrics,
        _ => return Ok(error_response(&Status::unimplemented("unknown service"))),
    };
    let (mut parts, body) = req.into_parts();
    let auth = parts.headers.get("authorization").map(|v| v.as_bytes());
    if let Err(s) = services.authorize(signal, auth) {
        return Ok(error_response(&s));
    }
    let refuse = |r: Rejection| {
        services.0.refused(signal, Protocol::Grpc, &r);
        Ok(error_response(&status(&r)))
    };
    let mut res = services.0.reserve();
    // The messages with their 5-byte frame headers.
    let raw_limit = limit.saturating_add(64);
    let raw = match intake::read(body, raw_limit, services.0.body_timeout(), &mut res).await {
        Ok(b) => b,
        Err(ReadError::Refused(r)) => {
            let r = if r.outcome == Outcome::TooLarge {
                Rejection::new(
                    Outcome::TooLarge,
                    format!("the request message is larger than the limit of {limit} bytes"),
                )
            } else {
                r
            };
            return refuse(r);
        }
        Err(ReadError::TimedOut(r)) => {
            gate.count(Reason::BodyTimeout);
            return refuse(r);
        }
    };
    let gzip = parts
        .headers
        .remove("grpc-encoding")
        .is_some_and(|v| v.as_bytes() == b"gzip");
    // Inflating and scanning take CPU: off the async workers, one request per core at a time.
    let work = move || {
        let body = intake::grpc_frames(&raw, gzip, limit, &mut res)?;
        drop(raw);
        let estimate = intake::protobuf_estimate(body.get(5..).unwrap_or_default(), res.limit());
        res.grow(estimate).map_err(intake::refused)?;
        Ok((body, res))
    };
    let (body, res) = match services.0.on_cpu(work).await {
        Some(Ok(x)) => x,
        Some(Err(r)) => return refuse(r),
        None => return refuse(Rejection::new(Outcome::Busy, "shutting down; retry later")),
    };
    parts
        .extensions
        .insert(Held(Arc::new(std::sync::Mutex::new(Some(res)))));
    let req = http::Request::from_parts(parts, Full::new(body));
    let resp = match signal {
        Signal::Logs => {
            LogsServiceServer::new(services)
                .max_decoding_message_size(limit)
                .call(req)
                .await
        }
        Signal::Traces => {
            TraceServiceServer::new(services)
                .max_decoding_message_size(limit)
                .call(req)
                .await
        }
        Signal::Metrics => {
            MetricsServiceServer::new(services)
                .max_decoding_message_size(limit)
                .call(req)
                .await
        }
    };
    Ok(resp.unwrap_or_else(|e| match e {}))
}

/// Serve OTLP/gRPC on `listener` until `stop` turns true, with the default listener limits
/// (its connections uncounted: `serve_gated` with a counting gate counts them).
pub async fn serve(
    listener: TcpListener,
    tls: super::http::Tls,
    rx: Arc<Receiver>,
    stop: watch::Receiver<bool>,
) {
    let gate = Gate::new(Name::OtlpGrpc, Limits::default(), None);
    serve_gated(listener, tls, rx, gate, stop).await;
}

/// Serve OTLP/gRPC on `listener` until `stop` turns true, connections capped and timed out
/// by `gate` (and their HTTP/2 streams capped).
pub async fn serve_gated(
    listener: TcpListener,
    tls: super::http::Tls,
    rx: Arc<Receiver>,
    gate: Arc<Gate>,
    stop: watch::Receiver<bool>,
) {
    let limit = rx.max_request_bytes();
    let services = Services(rx);
    let streams = gate.limits().max_streams_per_connection;
    let mut accept_stop = stop.clone();
    let stopping = async move { stopped(&mut accept_stop).await };
    crate::listener::serve(listener, gate, stopping, DRAIN, move |stream, conn| {
        let services = services.clone();
        let tls = tls.clone();
        let mut stop = stop.clone();
        async move {
            let Some(io) = conn.tls(stream, tls).await else {
                return;
            };
            let gate = conn.gate().clone();
            let svc = conn.track(hyper::service::service_fn(move |req| {
                route(services.clone(), gate.clone(), limit, req)
            }));
            let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .max_concurrent_streams(streams)
                .max_header_list_size(64 * 1024);
            let served = builder.serve_connection(TokioIo::new(io), svc);
            let stop = async move { stopped(&mut stop).await };
            if let Some(Err(e)) = conn.run(served, |c| c.graceful_shutdown(), stop).await {
                tracing::debug!(error = %e, "OTLP/gRPC connection ended with an error");
            }
        }
    })
    .await;
}

/// After stop, open connections get this long to finish their current request.
const DRAIN: Duration = Duration::from_secs(5);
