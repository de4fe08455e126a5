//! The engine: one ingest path, the sources that feed it and the sinks that take what it
//! produces. Every driver runs the same [`Core`]:
//! - `run` and `proxy` run one over their sources on a blocking thread (`run.rs`: files,
//!   stdin, the demo fleet, the OTLP receiver, the proxy's feed);
//! - `run --nats` runs one per owned partition (`nats/owned.rs`), whose source is the
//!   partition's messages and whose sinks include the findings stream.
//!
//! [`source::LiveSource`] is what produces lines with a position: it polls into the core and
//! gives its position for the checkpoint. [`sinks::Sink`] is what takes outputs: it delivers
//! each one and gives its position (the findings file's durable length) for the checkpoint.
//! [`Core::tick`] is the once-a-second step (streams that went quiet while sniffing are
//! decided, quiet gemini-cli sessions' joined outputs correlated, idle turns timed out), the
//! same for every driver, on whatever clock the driver passes (wall time for `run`, the
//! partition's publish times for `run --nats`).

pub mod outputs;
pub mod sharded;
pub mod sinks;
pub mod source;

use std::sync::Arc;

use crate::internal_events::{Ingested, InternalEvent};
use crate::sink::metrics::Metrics;
use retryscope_core::correlate::{CorrelatorConfig, Output};
use retryscope_core::ingest::{Source, StreamId};

pub use sharded::{IngestState, MAX_WORKERS, Restored, ShardedIngest, WorkerDied, WorkerSpawn};
pub use sinks::{Sink, SinkList, Sinks};
pub use source::{LiveSource, Polled};

/// Ticks (seconds, of the driver's clock) a gemini-cli session must be quiet before its held
/// telemetry and stream-json events are joined and correlated: its telemetry outfile is
/// written in batches, so a shorter wait could correlate a stream-json before the attempts it
/// belongs to.
pub const JOIN_QUIET_TICKS: u32 = 10;

/// The correlator's settings for a live driver's configuration (`run`, `proxy`, `run --nats`);
/// `timeline`: turns keep their timelines (for the live page).
pub fn correlator_config(cfg: &crate::config::RunConfig, timeline: bool) -> CorrelatorConfig {
    CorrelatorConfig {
        retry_cap: cfg.max_attempts,
        read_only_tools: cfg.read_only_tools.iter().cloned().collect(),
        idle_timeout_ms: Some(
            i64::try_from(cfg.idle_timeout_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
        ),
        max_open_turns: cfg.max_open_turns,
        capture_content: cfg.otlp.capture_content,
        timeline,
        ..CorrelatorConfig::default()
    }
}

/// The ingest path and the sinks, with the outputs between them.
pub struct Core {
    /// Decoding and correlation (on worker threads with `--workers`).
    pub ingest: ShardedIngest,
    /// Where outputs go.
    pub sinks: Sinks,
    /// Where the ingest path's notes (bad lines, unknown events) are counted.
    pub metrics: Arc<Metrics>,
    out: Vec<Output>,
}

impl Core {
    /// A core over `ingest`, delivering to `sinks`, counting notes into `metrics`.
    pub fn new(ingest: ShardedIngest, sinks: Sinks, metrics: Arc<Metrics>) -> Self {
        Core {
            ingest,
            sinks,
            metrics,
            out: Vec::new(),
        }
    }

    /// The stream `name` of `source` (its format sniffed, or the forced one).
    pub fn stream(&mut self, source: Source, name: &str) -> StreamId {
        self.ingest.stream(source, name)
    }

    /// The stream `name` of `source`, read as `format`.
    pub fn stream_as(
        &mut self,
        source: Source,
        name: &str,
        format: retryscope_core::decode::Format,
    ) -> StreamId {
        self.ingest.stream_as(source, name, format)
    }

    /// One line of `stream`, arriving at `now` (ms).
    pub fn line(&mut self, stream: StreamId, bytes: &[u8], now: i64) {
        let metrics = &*self.metrics;
        self.ingest
            .line(stream, None, bytes, Some(now), &mut self.out, &mut |n| {
                Ingested(n).emit(metrics)
            });
    }

    /// [`Core::line`] of a line the source can read again at `place` (a cluster partition's
    /// message and line): a turn hold checkpoints what it keeps of it by reference.
    pub fn line_at(
        &mut self,
        stream: StreamId,
        bytes: &[u8],
        now: i64,
        place: retryscope_core::reorder::Place,
    ) {
        self.ingest.place_next_line(place);
        self.line(stream, bytes, now);
    }

    /// A line of `stream` skipped for its length.
    pub fn too_long(&mut self, stream: StreamId, len: u64) {
        let metrics = &*self.metrics;
        self.ingest
            .too_long(stream, None, len, &mut |n| Ingested(n).emit(metrics));
    }

    /// `stream` ended at `now`.
    pub fn end(&mut self, stream: StreamId, now: i64) {
        let metrics = &*self.metrics;
        self.ingest.end(stream, Some(now), &mut self.out, &mut |n| {
            Ingested(n).emit(metrics)
        });
    }

    /// `stream`, a session's, went quiet at `now`: ended, its decoder's state kept for its next
    /// line ([`retryscope_core::ingest::Ingest::park`]).
    pub fn park(&mut self, stream: StreamId, now: i64) {
        let metrics = &*self.metrics;
        self.ingest.park(stream, now, &mut self.out, &mut |n| {
            Ingested(n).emit(metrics)
        });
    }

    /// End the OTLP receiver's session streams (`otlp:<service>/<session>`, read as OTLP)
    /// quiet for longer than `quiet_ms` at `now`, as `run`'s receiver ends its own: a cluster
    /// partition keeps a stream per session it has seen, and cannot tell when one is over.
    pub fn end_quiet_sessions(&mut self, now: i64, quiet_ms: i64) {
        let metrics = &*self.metrics;
        let session = |name: &str, format: Option<retryscope_core::decode::Format>| {
            name.starts_with("otlp:") && format == Some(retryscope_core::decode::Format::Otlp)
        };
        self.ingest
            .end_quiet(now, quiet_ms, session, &mut self.out, &mut |n| {
                Ingested(n).emit(metrics)
            });
    }

    /// Once a second of the driver's clock: decide the format of streams that went quiet while
    /// sniffing, correlate the joined outputs of gemini-cli sessions quiet for
    /// [`JOIN_QUIET_TICKS`], and let idle turns time out.
    pub fn tick(&mut self, now: i64) {
        let metrics = &*self.metrics;
        self.ingest
            .settle_idle(Some(now), &mut self.out, &mut |n| Ingested(n).emit(metrics));
        self.ingest.release_joined(JOIN_QUIET_TICKS, &mut self.out);
        self.ingest
            .tick(now, &mut self.out, &mut |n| Ingested(n).emit(metrics));
    }

    /// The end of all input: every stream ends and every turn closes.
    pub fn close_all(&mut self) {
        let metrics = &*self.metrics;
        self.ingest
            .close_all(&mut self.out, &mut |n| Ingested(n).emit(metrics));
    }

    /// A clean stop that keeps open turns for the next run: the held gemini-cli session
    /// events are correlated now rather than carried over.
    pub fn release_all_joined(&mut self) {
        self.ingest.release_joined(0, &mut self.out);
    }

    /// Hand what the ingest path produced to the sinks; `batch` names the input that produced
    /// it where a sink needs a deterministic id per output (a NATS partition's message).
    pub fn deliver(&mut self, batch: Option<&str>) {
        self.ingest.flush(&mut self.out);
        self.sinks.deliver(&mut self.out, batch);
    }

    /// What a checkpoint holds of the ingest path, after every line handed in so far; what it
    /// produced is delivered first (so the sinks' positions and the metric values cover it).
    pub fn checkpoint(&mut self, batch: Option<&str>) -> Result<IngestState, WorkerDied> {
        let state = self.ingest.checkpoint(&mut self.out)?;
        self.sinks.deliver(&mut self.out, batch);
        Ok(state)
    }

    /// The correlator's own counters (late events, evictions, open turns) into the metrics.
    pub fn publish_stats(&self) {
        self.metrics
            .set_correlator_stats(&self.ingest.stats(), self.ingest.open_turns());
    }
}
