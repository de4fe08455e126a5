//! OTLP/gRPC (`run --otlp-grpc-listen`): the logs, trace and metrics `Export` services
//! (opentelemetry-proto's tonic servers) over HTTP/2 without TLS (h2c) or with TLS.
//!
//! Requests compressed with `grpc-encoding: gzip` (gemini-cli's gRPC exporter compresses) are
//! decompressed here, bounded like any request.
//!
//! Owns: the gRPC status of every outcome: OK; UNAVAILABLE when the queue is full, the
//! collector is stopping or the spool cannot be written (retryable: the exporter retries);
//! RESOURCE_EXHAUSTED when a message is over the size limit (checked here, before tonic reads
//! it, with the limit in the message; not retried); INVALID_ARGUMENT for a body that is not an
//! export request; UNAUTHENTICATED for a missing or wrong bearer token.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
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
use tokio::task::JoinSet;
use tonic::codegen::Service;
use tonic::{Request, Response, Status};

use super::accept::{Outcome, Protocol, Receiver, Rejection, Signal};
use super::http::stopped;
use super::listen::accept_tls;
use super::record;

/// The three services over one receiver.
#[derive(Clone)]
struct Services(Arc<Receiver>);

fn status(r: &Rejection) -> Status {
    match r.outcome {
        Outcome::Busy | Outcome::SpoolError => Status::unavailable(r.message.clone()),
        Outcome::TooLarge => Status::resource_exhausted(r.message.clone()),
        Outcome::Unauthorized => Status::unauthenticated(r.message.clone()),
        _ => Status::invalid_argument(r.message.clone()),
    }
}

impl Services {
    fn authorize<T>(&self, signal: Signal, req: &Request<T>) -> Result<(), Status> {
        let header = req.metadata().get("authorization").map(|v| v.as_bytes());
        self.0.authorize(header).map_err(|r| {
            self.0.refused(signal, Protocol::Grpc, &r);
            status(&r)
        })
    }
}

#[tonic::async_trait]
impl LogsService for Services {
    async fn export(
        &self,
        req: Request<ExportLogsServiceRequest>,
    ) -> Result<Response<ExportLogsServiceResponse>, Status> {
        self.authorize(Signal::Logs, &req)?;
        let mut records = Vec::new();
        record::logs_from_proto(req.get_ref(), &mut records);
        drop(req);
        self.0
            .accept(Signal::Logs, Protocol::Grpc, records, 0)
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
        self.authorize(Signal::Traces, &req)?;
        let mut records = Vec::new();
        record::spans_from_proto(req.get_ref(), &mut records);
        drop(req);
        self.0
            .accept(Signal::Traces, Protocol::Grpc, records, 0)
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
        self.authorize(Signal::Metrics, &req)?;
        let points = record::metric_points_proto(req.get_ref());
        self.0
            .accept(Signal::Metrics, Protocol::Grpc, Vec::new(), points)
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

/// Route one HTTP/2 request to its service, after bounding its size.
async fn route(
    services: Services,
    limit: usize,
    req: http::Request<Incoming>,
) -> Result<GrpcResponse, Infallible> {
    let signal = match req.uri().path().rsplit_once('/').map(|(s, _)| s) {
        Some("/opentelemetry.proto.collector.logs.v1.LogsService") => Signal::Logs,
        Some("/opentelemetry.proto.collector.trace.v1.TraceService") => Signal::Traces,
        Some("/opentelemetry.proto.collector.metrics.v1.MetricsService") => Signal::Metrics,
        _ => return Ok(error_response(&Status::unimplemented("unknown service"))),
    };
    let (parts, body) = req.into_parts();
    // One gRPC message: 5 bytes of framing, then at most `limit` bytes.
    let body = match Limited::new(body, limit + 5).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let r = if e.is::<http_body_util::LengthLimitError>() {
                Rejection::new(
                    Outcome::TooLarge,
                    format!("the request message is larger than the limit of {limit} bytes"),
                )
            } else {
                Rejection::new(Outcome::Malformed, format!("cannot read the request: {e}"))
            };
            services.0.refused(signal, Protocol::Grpc, &r);
            return Ok(error_response(&status(&r)));
        }
    };
    let (mut parts, body) = (parts, body);
    let gzip = parts
        .headers
        .get("grpc-encoding")
        .is_some_and(|v| v.as_bytes() == b"gzip");
    let body = if gzip {
        parts.headers.remove("grpc-encoding");
        match inflate(&body, limit) {
            Ok(b) => b,
            Err(r) => {
                services.0.refused(signal, Protocol::Grpc, &r);
                return Ok(error_response(&status(&r)));
            }
        }
    } else {
        body
    };
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

/// Decompress the gzip'd messages of a gRPC body (`grpc-encoding: gzip`), each at most `limit`
/// bytes decompressed, and frame them uncompressed (so a small body cannot expand without
/// bound, and tonic needs no compression support).
fn inflate(body: &[u8], limit: usize) -> Result<bytes::Bytes, Rejection> {
    use std::io::Read;
    let mut out = Vec::with_capacity(body.len() * 4);
    let mut rest = body;
    while !rest.is_empty() {
        let bad = || Rejection::new(Outcome::Malformed, "a truncated gRPC message");
        let (head, tail) = rest.split_at_checked(5).ok_or_else(bad)?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let (msg, tail) = tail.split_at_checked(len).ok_or_else(bad)?;
        rest = tail;
        let plain: std::borrow::Cow<'_, [u8]> = if head[0] == 1 {
            let mut v = Vec::new();
            flate2::read::GzDecoder::new(msg)
                .take(limit as u64 + 1)
                .read_to_end(&mut v)
                .map_err(|e| {
                    Rejection::new(
                        Outcome::Malformed,
                        format!("the gzip message cannot be decompressed: {e}"),
                    )
                })?;
            v.into()
        } else {
            msg.into()
        };
        if plain.len() > limit {
            return Err(Rejection::new(
                Outcome::TooLarge,
                format!(
                    "the request message is larger than the limit of {limit} bytes (decompressed)"
                ),
            ));
        }
        out.push(0);
        out.extend_from_slice(&(plain.len() as u32).to_be_bytes());
        out.extend_from_slice(&plain);
    }
    Ok(out.into())
}

/// Serve OTLP/gRPC on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    tls: super::http::Tls,
    rx: Arc<Receiver>,
    mut stop: watch::Receiver<bool>,
) {
    let limit = rx.max_request_bytes();
    let services = Services(rx);
    let mut conns = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            () = stopped(&mut stop) => break,
            accepted = listener.accept() => accepted,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "OTLP/gRPC: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let services = services.clone();
        let tls = tls.clone();
        let mut stop = stop.clone();
        conns.spawn(async move {
            let svc = hyper::service::service_fn(move |req| route(services.clone(), limit, req));
            let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
            let Some(io) = accept_tls(stream, tls, "OTLP/gRPC").await else {
                return;
            };
            let conn = builder.serve_connection(TokioIo::new(io), svc);
            tokio::pin!(conn);
            let served = tokio::select! {
                r = conn.as_mut() => r,
                () = stopped(&mut stop) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "OTLP/gRPC connection ended with an error");
            }
        });
    }
}
