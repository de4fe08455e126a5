//! A real OTLP trace receiver for integration tests, built from `opentelemetry-proto` on
//! 127.0.0.1: gRPC is the generated tonic service served by hyper's HTTP/2 (no tonic router),
//! HTTP is `POST /v1/traces` decoded with prost. It records every request it accepts.
#![allow(dead_code)] // each test crate uses a different part of it

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::net::TcpListener;

#[derive(Clone, Default)]
pub struct Seen {
    /// Every accepted request, in arrival order.
    pub requests: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    /// Values of the `x-retryscope-test` header (gRPC metadata), when sent.
    pub test_headers: Arc<Mutex<Vec<String>>>,
}

impl Seen {
    pub fn record(&self, req: ExportTraceServiceRequest, header: Option<&[u8]>) {
        if let Some(h) = header {
            self.test_headers
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(h).into_owned());
        }
        self.requests.lock().unwrap().push(req);
    }

    /// Every received span with its resource's `service.name` and its scope name.
    pub fn spans(&self) -> Vec<(String, String, Span)> {
        let mut out = Vec::new();
        for req in self.requests.lock().unwrap().iter() {
            for rs in &req.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| attrs(&r.attributes).get("service.name").cloned())
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    let scope = ss
                        .scope
                        .as_ref()
                        .map(|s| s.name.clone())
                        .unwrap_or_default();
                    for span in &ss.spans {
                        out.push((service.clone(), scope.clone(), span.clone()));
                    }
                }
            }
        }
        out
    }
}

pub struct Grpc(pub Seen);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let header = req
            .metadata()
            .get("x-retryscope-test")
            .map(|v| v.as_bytes().to_vec());
        self.0.record(req.into_inner(), header.as_deref());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

pub async fn serve_grpc(seen: Seen) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let svc = TraceServiceServer::new(Grpc(seen));
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let svc = hyper_util::service::TowerToHyperService::new(svc.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

pub async fn handle_http(
    seen: Seen,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, body: Vec<u8>| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            "content-type",
            hyper::header::HeaderValue::from_static("application/x-protobuf"),
        );
        Ok(r)
    };
    if req.method() != hyper::Method::POST || req.uri().path() != "/v1/traces" {
        return reply(StatusCode::NOT_FOUND, Vec::new());
    }
    let header = req
        .headers()
        .get("x-retryscope-test")
        .map(|v| v.as_bytes().to_vec());
    let Ok(body) = req.into_body().collect().await else {
        return reply(StatusCode::BAD_REQUEST, Vec::new());
    };
    let Ok(decoded) = ExportTraceServiceRequest::decode(body.to_bytes()) else {
        return reply(StatusCode::BAD_REQUEST, Vec::new());
    };
    seen.record(decoded, header.as_deref());
    reply(
        StatusCode::OK,
        ExportTraceServiceResponse {
            partial_success: None,
        }
        .encode_to_vec(),
    )
}

pub async fn serve_http(seen: Seen) -> SocketAddr {
    serve_http_slow(seen, Duration::ZERO).await
}

/// The HTTP receiver, answering each request only after `delay`.
pub async fn serve_http_slow(seen: Seen, delay: Duration) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let seen = seen.clone();
                    async move {
                        tokio::time::sleep(delay).await;
                        handle_http(seen, req).await
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// Accepts connections and never answers (nor closes them).
pub async fn serve_hanging() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}

/// A port nothing listens on.
pub async fn dead_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

pub fn any_to_string(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::ArrayValue(a)) => format!(
            "[{}]",
            a.values
                .iter()
                .map(any_to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => format!("{other:?}"),
    }
}

pub fn attrs(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(any_to_string).unwrap_or_default(),
            )
        })
        .collect()
}
