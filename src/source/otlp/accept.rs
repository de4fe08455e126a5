//! What the OTLP receiver does with one export request, whichever protocol carried it: check
//! the token, hand the records to the queue (all or none), count the outcome, and say how to
//! answer. The protocols only map the outcome to their status codes.

use std::sync::Arc;

use super::auth::Token;
use super::events::ReceiverEvents;
use super::queue::{Queue, Refused, Reservation};
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
    /// Every signal.
    pub const ALL: [Signal; 3] = [Signal::Logs, Signal::Traces, Signal::Metrics];

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
    /// Every protocol.
    pub const ALL: [Protocol; 3] = [Protocol::HttpJson, Protocol::HttpProtobuf, Protocol::Grpc];

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
    /// The body did not arrive within the body-read deadline (HTTP 408, gRPC
    /// DEADLINE_EXCEEDED).
    TooSlow,
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
            Outcome::TooSlow => "too_slow",
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
    /// Time for a whole request body to arrive.
    pub body_timeout: std::time::Duration,
}

impl ReceiverConfig {
    /// `max_request_bytes` and `token`, with the default body-read deadline.
    pub fn new(max_request_bytes: usize, token: Option<Token>) -> Self {
        ReceiverConfig {
            max_request_bytes,
            token,
            body_timeout: crate::listener::Limits::default().body_timeout(),
        }
    }
}

/// The state both protocol servers share.
#[derive(Debug)]
pub struct Receiver {
    queue: Arc<Queue>,
    events: Arc<dyn ReceiverEvents>,
    cfg: ReceiverConfig,
    /// Inflating and scanning a body are CPU work on blocking threads: at most one per core
    /// at a time. Without the bound, every concurrent request took a thread of its own, and
    /// each thread's allocator kept its freed inflation buffers (16 gzip bombs at once: +212
    /// MiB resident, back-to-back bursts +332 MiB).
    cpu: Arc<tokio::sync::Semaphore>,
}

impl Receiver {
    /// A receiver feeding `queue`, telling `events` what becomes of each request.
    pub fn new(queue: Arc<Queue>, events: Arc<dyn ReceiverEvents>, cfg: ReceiverConfig) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Receiver {
            queue,
            events,
            cfg,
            cpu: Arc::new(tokio::sync::Semaphore::new(cores)),
        }
    }

    /// Runs `work` (CPU-bound: inflating, scanning) on a blocking thread once a core's slot is
    /// free, so at most one such job per core runs at a time; the wait counts against nothing
    /// but the caller's own deadline. `None` when shutting down.
    pub async fn on_cpu<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let slot = self.cpu.clone().acquire_owned().await.ok()?;
        tokio::task::spawn_blocking(move || {
            let out = work();
            drop(slot);
            out
        })
        .await
        .ok()
    }

    /// The request size limit.
    pub fn max_request_bytes(&self) -> usize {
        self.cfg.max_request_bytes
    }

    /// The body-read deadline.
    pub fn body_timeout(&self) -> std::time::Duration {
        self.cfg.body_timeout
    }

    /// A reservation under the queue's bound for a request about to be read.
    pub fn reserve(&self) -> Reservation {
        self.queue.reserve()
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

    /// Report a refused request.
    pub fn refused(&self, signal: Signal, protocol: Protocol, r: &Rejection) {
        self.events.refused(signal, protocol, r);
    }

    /// Accept a request's records (or metric data points, which are only counted): all of
    /// them are queued, or the request is refused and none is.
    pub async fn accept(
        &self,
        signal: Signal,
        protocol: Protocol,
        records: Vec<Record>,
        metric_points: u64,
        reservation: Option<Reservation>,
    ) -> Result<(), Rejection> {
        let n = records.len() as u64 + metric_points;
        let own = reservation.as_ref().map_or(0, Reservation::bytes);
        let offered = if self.queue.durable() && !records.is_empty() {
            let queue = self.queue.clone();
            match tokio::task::spawn_blocking(move || queue.offer_reserved(records, own)).await {
                Ok(r) => r,
                Err(_) => Err(Refused::Closed),
            }
        } else {
            self.queue.offer_reserved(records, own)
        };
        drop(reservation);
        match offered {
            Ok(()) => {
                self.events.accepted(signal, protocol, n);
                Ok(())
            }
            Err(e) => {
                let r = super::intake::refused(e);
                self.refused(signal, protocol, &r);
                Err(r)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// What the receiver reported, in order.
    #[derive(Debug, Default)]
    struct Recorded(Mutex<Vec<String>>);

    impl ReceiverEvents for Recorded {
        fn accepted(&self, signal: Signal, protocol: Protocol, items: u64) {
            let line = format!("accepted {} {} {items}", signal.as_str(), protocol.as_str());
            self.0.lock().expect("lock").push(line);
        }
        fn refused(&self, signal: Signal, protocol: Protocol, r: &Rejection) {
            let line = format!(
                "refused {} {} {}",
                signal.as_str(),
                protocol.as_str(),
                r.outcome.as_str()
            );
            self.0.lock().expect("lock").push(line);
        }
    }

    fn record(n: usize) -> Record {
        Record {
            stream: "otlp:agent/s1".into(),
            line: vec![b'x'; n],
        }
    }

    /// The receiver tells its events what became of each request (and nothing else does):
    /// records and metric points accepted, a request over the queue's bound refused whole.
    #[tokio::test]
    async fn each_request_is_reported_to_the_events_not_counted_by_the_receiver() {
        let events = Arc::new(Recorded::default());
        let rx = Receiver::new(
            Arc::new(Queue::new(1_000)),
            events.clone(),
            ReceiverConfig::new(1 << 20, None),
        );
        let logs = vec![record(300), record(300)];
        rx.accept(Signal::Logs, Protocol::HttpJson, logs, 0, None)
            .await
            .expect("room for two records");
        rx.accept(Signal::Metrics, Protocol::Grpc, Vec::new(), 7, None)
            .await
            .expect("metric points are only counted");
        // Small enough for an empty queue, too much beside what is queued.
        let too_many = vec![record(200), record(200)];
        let refused = rx
            .accept(Signal::Traces, Protocol::HttpProtobuf, too_many, 0, None)
            .await
            .expect_err("over the queue's bound");
        assert_eq!(refused.outcome, Outcome::Busy);
        assert_eq!(
            *events.0.lock().expect("lock"),
            [
                "accepted logs http_json 2",
                "accepted metrics grpc 7",
                "refused traces http_protobuf busy",
            ]
        );
    }
}
