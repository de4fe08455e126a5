//! The batching worker behind [`TraceSink`] (its configuration and exporter are
//! [`crate::otlp_client`]'s).
//!
//! ```text
//! submit(&report) ──try_send──▶ bounded queue (turns) ──▶ worker task ──export(batch)──▶ OTLP
//!        │ full: drop + count                               │ error: count, warn ≤ 1/10 s
//! ```
//!
//! The exporter (opentelemetry-otlp) retries retryable errors itself within its timeout, so
//! one export call never takes much longer than [`TraceExportConfig::timeout`]. While it
//! runs, the queue absorbs up to `queue_capacity` turns; beyond that turns are dropped, so a
//! slow or dead backend costs bounded memory and never blocks ingestion.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::spans::{SpanOptions, span_count, turn_spans};
use crate::otlp_client::{TraceError, TraceExportConfig, build_exporter};
use retryscope_core::report::TurnReport;

/// Export counters, shared with the metrics sink. Every submitted span ends up exported or
/// dropped: after [`TraceSink::shutdown`], `spans_submitted == spans_exported + spans_dropped`.
#[derive(Debug, Default)]
pub struct TraceStats {
    /// Spans of every turn passed to [`TraceSink::submit`] while export is on.
    pub spans_submitted: AtomicU64,
    /// Spans the backend accepted.
    pub spans_exported: AtomicU64,
    /// Spans lost: queue full, export failed, or not sent by the shutdown deadline.
    pub spans_dropped: AtomicU64,
    /// Export calls that failed (after the exporter's own retries).
    pub export_failures: AtomicU64,
}

impl TraceStats {
    fn add(counter: &AtomicU64, n: usize) {
        counter.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Exports closed turns as OTLP traces in the background. See the module docs.
#[derive(Debug)]
pub struct TraceSink {
    running: Option<Running>,
    stats: Arc<TraceStats>,
    opts: SpanOptions,
}

#[derive(Debug)]
struct Running {
    tx: mpsc::Sender<Vec<SpanData>>,
    deadline: watch::Sender<Option<Instant>>,
    worker: JoinHandle<()>,
    /// Spans handed to the queue and not yet counted as exported or dropped.
    pending: Arc<AtomicU64>,
}

impl TraceSink {
    /// Start exporting with `cfg`; a sink that does nothing when no endpoint is configured.
    ///
    /// Must be called inside a tokio runtime: it builds the exporter and spawns the worker.
    pub fn start(cfg: TraceExportConfig) -> Result<TraceSink, TraceError> {
        let stats = Arc::new(TraceStats::default());
        let opts = SpanOptions {
            capture_content: cfg.capture_content,
        };
        let Some(target) = cfg.prepare()? else {
            return Ok(TraceSink {
                running: None,
                stats,
                opts,
            });
        };
        if cfg.queue_capacity == 0 || cfg.max_batch == 0 {
            return Err(TraceError::Config(
                "queue_capacity and max_batch must be at least 1".to_owned(),
            ));
        }
        let handle = tokio::runtime::Handle::try_current()?;
        let mut exporter = {
            // tonic's lazy channel spawns onto the current runtime while it is built.
            let _guard = handle.enter();
            // The worker is a tokio task, so hyper's client can run on it directly.
            let http_client = target.http_client(cfg.timeout)?;
            build_exporter(&cfg, &target, http_client)?
        };
        exporter.set_resource(
            &Resource::builder()
                .with_service_name(cfg.service_name.clone())
                .build(),
        );
        let (tx, rx) = mpsc::channel(cfg.queue_capacity);
        let (deadline, deadline_rx) = watch::channel(None);
        let pending = Arc::new(AtomicU64::new(0));
        let worker = Worker {
            exporter,
            rx,
            deadline: deadline_rx,
            max_batch: cfg.max_batch,
            stats: stats.clone(),
            pending: pending.clone(),
        };
        let worker = handle.spawn(worker.run());
        tracing::info!(
            endpoint = %target.endpoint.url,
            tls = target.tls.is_some(),
            protocol = %cfg.protocol.as_str(),
            "exporting turn traces"
        );
        Ok(TraceSink {
            running: Some(Running {
                tx,
                deadline,
                worker,
                pending,
            }),
            stats,
            opts,
        })
    }

    /// Whether export is on.
    pub fn is_enabled(&self) -> bool {
        self.running.is_some()
    }

    /// The export counters.
    pub fn stats(&self) -> Arc<TraceStats> {
        self.stats.clone()
    }

    /// Queue one closed turn for export. Never blocks and needs no runtime: when the queue
    /// is full the turn's spans are dropped and counted.
    pub fn submit(&self, report: &TurnReport) {
        let Some(running) = &self.running else {
            return;
        };
        let n = span_count(report);
        TraceStats::add(&self.stats.spans_submitted, n);
        // Skip building spans that could not be queued anyway.
        if running.tx.capacity() == 0 {
            self.drop_turn(n);
            return;
        }
        let spans = turn_spans(report, &self.opts);
        running.pending.fetch_add(n as u64, Ordering::Relaxed);
        if running.tx.try_send(spans).is_err() {
            running.pending.fetch_sub(n as u64, Ordering::Relaxed);
            self.drop_turn(n);
        }
    }

    /// Queue one closed turn, waiting for room when the queue is full instead of dropping,
    /// as long as no export has failed yet; after a failure it behaves like
    /// [`TraceSink::submit`], so a dead backend costs at most one export timeout.
    ///
    /// For offline callers (`check`) that would rather slow down than lose turns. Call it
    /// from a thread outside the tokio runtime: waiting inside an async task would panic.
    pub fn submit_blocking(&self, report: &TurnReport) {
        let Some(running) = &self.running else {
            return;
        };
        if self.stats.export_failures.load(Ordering::Relaxed) > 0 {
            self.submit(report);
            return;
        }
        let n = span_count(report);
        TraceStats::add(&self.stats.spans_submitted, n);
        let spans = turn_spans(report, &self.opts);
        running.pending.fetch_add(n as u64, Ordering::Relaxed);
        if running.tx.blocking_send(spans).is_err() {
            running.pending.fetch_sub(n as u64, Ordering::Relaxed);
            self.drop_turn(n);
        }
    }

    fn drop_turn(&self, spans: usize) {
        TraceStats::add(&self.stats.spans_dropped, spans);
        // Rate-limited per call site by the log layer (`telemetry::logs`).
        tracing::warn!("trace export queue full or closed; dropping turns (backend slow or down?)");
    }

    /// Export what is queued within `timeout`, then shut the exporter down. Spans not sent
    /// by then are counted as dropped.
    pub async fn shutdown(self, timeout: Duration) {
        let Some(running) = self.running else {
            return;
        };
        let deadline = Instant::now() + timeout;
        // The worker bounds every export by the deadline; close the queue so it finishes.
        let _ = running.deadline.send(Some(deadline));
        drop(running.tx);
        let mut worker = running.worker;
        // A little grace past the deadline for the worker to count and return.
        let grace = deadline + Duration::from_millis(50);
        if tokio::time::timeout_at(grace, &mut worker).await.is_err() {
            worker.abort();
            let lost = running.pending.swap(0, Ordering::Relaxed);
            self.stats.spans_dropped.fetch_add(lost, Ordering::Relaxed);
            tracing::warn!(
                spans = lost,
                "trace export did not finish by the shutdown deadline"
            );
        }
    }
}

struct Worker {
    exporter: opentelemetry_otlp::SpanExporter,
    rx: mpsc::Receiver<Vec<SpanData>>,
    deadline: watch::Receiver<Option<Instant>>,
    max_batch: usize,
    stats: Arc<TraceStats>,
    pending: Arc<AtomicU64>,
}

impl Worker {
    async fn run(mut self) {
        let mut batch: Vec<SpanData> = Vec::new();
        'recv: while let Some(spans) = self.rx.recv().await {
            batch.extend(spans);
            while batch.len() < self.max_batch {
                match self.rx.try_recv() {
                    Ok(spans) => batch.extend(spans),
                    Err(_) => break,
                }
            }
            while !batch.is_empty() {
                let chunk: Vec<SpanData> = batch.drain(..batch.len().min(self.max_batch)).collect();
                if !self.export(chunk).await {
                    // Past the shutdown deadline: give up on everything still here.
                    self.lose(batch.len());
                    batch.clear();
                    self.rx.close();
                    while let Ok(spans) = self.rx.try_recv() {
                        self.lose(spans.len());
                    }
                    break 'recv;
                }
            }
        }
        let remaining = self
            .deadline
            .borrow()
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_secs(1));
        if let Err(e) = self.exporter.shutdown_with_timeout(remaining) {
            tracing::debug!(error = %e, "trace exporter shutdown");
        }
    }

    /// Export one chunk; false when the shutdown deadline passed before it finished.
    async fn export(&mut self, chunk: Vec<SpanData>) -> bool {
        let n = chunk.len();
        let fut = self.exporter.export(chunk);
        tokio::pin!(fut);
        let result = loop {
            let deadline = *self.deadline.borrow_and_update();
            match deadline {
                Some(d) => match tokio::time::timeout_at(d, &mut fut).await {
                    Ok(r) => break r,
                    Err(_) => {
                        self.lose(n);
                        return false;
                    }
                },
                None => {
                    tokio::select! {
                        r = &mut fut => break r,
                        changed = self.deadline.changed() => {
                            if changed.is_err() {
                                // The sink was dropped without shutdown: no deadline will come.
                                break (&mut fut).await;
                            }
                        }
                    }
                }
            }
        };
        match result {
            Ok(()) => {
                TraceStats::add(&self.stats.spans_exported, n);
                self.pending.fetch_sub(n as u64, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats.export_failures.fetch_add(1, Ordering::Relaxed);
                self.lose(n);
                tracing::warn!(error = %e, "trace export failed; spans dropped");
            }
        }
        true
    }

    fn lose(&self, n: usize) {
        TraceStats::add(&self.stats.spans_dropped, n);
        self.pending.fetch_sub(n as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn disabled_sink_accepts_and_ignores_turns() {
        let sink = TraceSink::start(TraceExportConfig::default()).unwrap();
        assert!(!sink.is_enabled());
        let stats = sink.stats();
        sink.shutdown(Duration::from_millis(10)).await;
        assert_eq!(stats.spans_submitted.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn start_outside_a_runtime_is_an_error() {
        let cfg = TraceExportConfig {
            endpoint: Some("http://127.0.0.1:9".to_owned()),
            ..TraceExportConfig::default()
        };
        assert!(matches!(
            TraceSink::start(cfg),
            Err(TraceError::NoRuntime(_))
        ));
    }

    #[tokio::test]
    async fn invalid_settings_are_rejected() {
        let base = TraceExportConfig {
            endpoint: Some("http://127.0.0.1:9".to_owned()),
            ..TraceExportConfig::default()
        };
        let mut cfg = base.clone();
        cfg.queue_capacity = 0;
        assert!(matches!(TraceSink::start(cfg), Err(TraceError::Config(_))));
        let mut cfg = base;
        cfg.headers = vec![("bad header".to_owned(), "v".to_owned())];
        assert!(matches!(TraceSink::start(cfg), Err(TraceError::Config(_))));
    }
}
