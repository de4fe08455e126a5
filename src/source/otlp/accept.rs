//! What the OTLP receiver does with one export request, whichever protocol carried it: check
//! the token, hand the records to the queue (all or none), count the outcome, and say how to
//! answer. The protocols only map the outcome to their status codes.

use std::sync::Arc;

use crate::internal_events::{InternalEvent, OtlpRequestRejected};
use crate::sink::metrics::Metrics;

use super::auth::Token;
use super::queue::{Queue, Refused};
use super::record::Record;

/// The signal of a request (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `/v1/logs`, `LogsService/Export`.
    Logs,
    /// `/v1/traces`, `TraceService/Export`.
    Traces,
    /// `/v1/metrics`, `MetricsService/Export` (acknowledged, counted, not decoded).
    Metrics,
}

impl Signal {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Logs => "logs",
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
        }
    }
}

/// How a request came (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with a JSON body.
    HttpJson,
    /// OTLP/HTTP with a protobuf body.
    HttpProtobuf,
    /// OTLP/gRPC.
    Grpc,
}

impl Protocol {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::HttpJson => "http_json",
            Protocol::HttpProtobuf => "http_protobuf",
            Protocol::Grpc => "grpc",
        }
    }
}

/// What became of a request (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted and acknowledged.
    Accepted,
    /// The queue is full or the collector is stopping: retry later (HTTP 429/503, gRPC
    /// UNAVAILABLE).
    Busy,
    /// Larger than the request size limit (HTTP 413, gRPC RESOURCE_EXHAUSTED).
    TooLarge,
    /// Not an export request (HTTP 400, gRPC INVALID_ARGUMENT).
    Malformed,
    /// Missing or wrong bearer token (HTTP 401, gRPC UNAUTHENTICATED).
    Unauthorized,
    /// Unsupported content type or encoding (HTTP 415).
    Unsupported,
    /// The spool could not be written (HTTP 503, gRPC UNAVAILABLE; nothing acknowledged).
    SpoolError,
}

impl Outcome {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "accepted",
            Outcome::Busy => "busy",
            Outcome::TooLarge => "too_large",
            Outcome::Malformed => "malformed",
            Outcome::Unauthorized => "unauthorized",
            Outcome::Unsupported => "unsupported",
            Outcome::SpoolError => "spool_error",
        }
    }
}

/// A refused request: why, in words the client can act on.
#[derive(Debug, Clone)]
pub struct Rejection {
    /// The outcome (never `Accepted`).
    pub outcome: Outcome,
    /// The message returned to the client and logged.
    pub message: String,
}

impl Rejection {
    /// A refusal.
    pub fn new(outcome: Outcome, message: impl Into<String>) -> Self {
        Rejection {
            outcome,
            message: message.into(),
        }
    }
}

/// Limits and credentials of the receiver.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// Largest request body, compressed or decompressed.
    pub max_request_bytes: usize,
    /// The bearer token clients must send, if any.
    pub token: Option<Token>,
}

/// The state both protocol servers share.
#[derive(Debug)]
pub struct Receiver {
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    cfg: ReceiverConfig,
}

impl Receiver {
    /// A receiver feeding `queue`.
    pub fn new(queue: Arc<Queue>, metrics: Arc<Metrics>, cfg: ReceiverConfig) -> Self {
        Receiver {
            queue,
            metrics,
            cfg,
        }
    }

    /// The request size limit.
    pub fn max_request_bytes(&self) -> usize {
        self.cfg.max_request_bytes
    }

    /// Check an `authorization` header value against the token (when one is required).
    pub fn authorize(&self, header: Option<&[u8]>) -> Result<(), Rejection> {
        match &self.cfg.token {
            None => Ok(()),
            Some(token) if token.matches_header(header) => Ok(()),
            Some(_) => Err(Rejection::new(
                Outcome::Unauthorized,
                "missing or wrong bearer token (send `authorization: Bearer <token>`)",
            )),
        }
    }

    /// Count and log a refused request.
    pub fn refused(&self, signal: Signal, protocol: Protocol, r: &Rejection) {
        OtlpRequestRejected {
            signal: signal.as_str(),
            protocol: protocol.as_str(),
            outcome: r.outcome.as_str(),
            message: &r.message,
        }
        .emit(&self.metrics);
    }

    /// Accept a request's records (or metric data points, which are only counted): all of
    /// them are queued, or the request is refused and none is.
    pub async fn accept(
        &self,
        signal: Signal,
        protocol: Protocol,
        records: Vec<Record>,
        metric_points: u64,
    ) -> Result<(), Rejection> {
        let n = records.len() as u64 + metric_points;
        let offered = if self.queue.durable() && !records.is_empty() {
            let queue = self.queue.clone();
            match tokio::task::spawn_blocking(move || queue.offer(records)).await {
                Ok(r) => r,
                Err(_) => Err(Refused::Closed),
            }
        } else {
            self.queue.offer(records)
        };
        match offered {
            Ok(()) => {
                self.metrics
                    .otlp_request(signal.as_str(), protocol.as_str(), "accepted", n);
                Ok(())
            }
            Err(e) => {
                let outcome = match e {
                    Refused::Spool(_) => Outcome::SpoolError,
                    Refused::Full { .. } | Refused::Closed => Outcome::Busy,
                };
                let r = Rejection::new(outcome, e.to_string());
                self.refused(signal, protocol, &r);
                Err(r)
            }
        }
    }
}
