//! The engine's [`Sink`]s over the root crate's outputs: the Prometheus metrics, the findings
//! output (a file, stdout, or the live view for a person), the trace exporter and the live
//! page. The NATS findings stream's sink is in `nats/publish.rs`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::sinks::{At, Sink, SinkNotDurable};
use crate::internal_events::{FindingWriteFailed, InternalEvent};
use crate::sink::findings::FindingsSink;
use crate::sink::live_page::SharedPage;
use crate::sink::metrics::Metrics;
use crate::sink::traces::TraceSink;
use retryscope_core::correlate::Output;

/// Counts every output into the metrics.
pub struct MetricsOut(pub Arc<Metrics>);

impl Sink for MetricsOut {
    fn name(&self) -> &'static str {
        "metrics"
    }

    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        self.0.observe(output);
    }
}

/// Findings to their output; its durable length is the checkpoint position (`findings`).
pub struct FindingsOut {
    /// The output.
    pub findings: FindingsSink,
    /// Where write failures are counted.
    pub metrics: Arc<Metrics>,
}

impl FindingsOut {
    fn failed(&self, error: &std::io::Error) {
        FindingWriteFailed { error }.emit(&self.metrics);
    }
}

impl Sink for FindingsOut {
    fn name(&self) -> &'static str {
        "findings"
    }

    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        self.findings.observe(output);
        if let Output::Finding(f, _) = output
            && let Err(error) = self.findings.write(f)
        {
            self.failed(&error);
        }
    }

    fn checkpoint(&mut self) -> Result<Option<serde_json::Value>, SinkNotDurable> {
        match self.findings.checkpoint_offset() {
            Ok(offset) => Ok(offset.map(serde_json::Value::from)),
            Err(e) => Err(SinkNotDurable {
                what: "findings not durably written yet (kept in memory and retried)",
                source: Box::new(e),
            }),
        }
    }

    fn round(&mut self, open_turns: usize) {
        if let Some(view) = self.findings.view()
            && let Err(error) = view.maybe_summary(open_turns)
        {
            self.failed(&error);
        }
    }

    fn stopping(&mut self) {
        if let Some(view) = self.findings.view() {
            view.stopping();
        }
    }

    fn finish(&mut self, open_turns: usize) {
        if let Err(error) = self.findings.flush() {
            self.failed(&error);
        }
        if let Some(view) = self.findings.view()
            && let Err(error) = view.summary(open_turns)
        {
            self.failed(&error);
        }
    }
}

/// Findings to an output shared by several engines (a collector's partitions write one local
/// file). It keeps no position: which partitions an instance owns changes, so the file is
/// appended to, and the findings stream is the exactly-once record.
pub struct SharedFindingsOut {
    /// The output.
    pub findings: Arc<Mutex<FindingsSink>>,
    /// Where write failures are counted.
    pub metrics: Arc<Metrics>,
}

impl Sink for SharedFindingsOut {
    fn name(&self) -> &'static str {
        "findings"
    }

    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        if let Output::Finding(f, _) = output
            && let Ok(mut findings) = self.findings.lock()
            && let Err(error) = findings.write(f)
        {
            FindingWriteFailed { error: &error }.emit(&self.metrics);
        }
    }
}

/// Closed turns exported as traces. With `stats`, the exporter's counters are set there each
/// round (a collector sets them on the instance's metrics instead).
pub struct TracesOut {
    /// The exporter.
    pub traces: Arc<TraceSink>,
    /// Where the exporter's counters go each round.
    pub stats: Option<Arc<Metrics>>,
}

impl Sink for TracesOut {
    fn name(&self) -> &'static str {
        "traces"
    }

    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        // A replay (a collector's takeover) closes the same turns again: the same trace and
        // span ids (`sink/traces/ids.rs`), so a backend sees a repeat, not a new trace.
        if let Output::TurnClosed(report) = output {
            self.traces.submit(report);
        }
    }

    fn round(&mut self, _open_turns: usize) {
        if let Some(metrics) = &self.stats {
            set_trace_stats(metrics, &self.traces);
        }
    }
}

/// The exporter's counters (spans exported, dropped, failed exports) into `metrics`.
pub fn set_trace_stats(metrics: &Metrics, traces: &TraceSink) {
    let s = traces.stats();
    metrics.set_otlp(
        s.spans_exported.load(Ordering::Relaxed),
        s.spans_dropped.load(Ordering::Relaxed),
        s.export_failures.load(Ordering::Relaxed),
    );
}

/// Closed turns on the live page (`/ui`).
pub struct LivePageOut(pub SharedPage);

impl Sink for LivePageOut {
    fn name(&self) -> &'static str {
        "live_page"
    }

    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        if let Output::TurnClosed(report) = output
            && let Ok(mut page) = self.0.lock()
        {
            page.add(report);
        }
    }
}
