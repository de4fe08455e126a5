//! The Prometheus metrics sink: turn-level series moved by correlator [`Output`]s, collector
//! health series moved by the `run` command, rendered in the text exposition format 0.0.4.
//!
//! Design:
//! * **One source of truth.** All values live in plain maps behind one mutex (see `state`);
//!   a custom [`prometheus::core::Collector`] hands them to a [`Registry`] at scrape time, and
//!   [`Metrics::snapshot`] / [`Metrics::restore`] copy them out and back. A restored sink
//!   renders byte-identical text, which is what lets a checkpoint carry the metrics across a
//!   `kill -9`.
//! * **Bounded labels.** Model, provider, agent, tool and retry reason come from logs; each passes a
//!   [`LabelGuard`] with a cap on distinct values (beyond it: `other`, counted in
//!   `retryscope_label_overflow_total{label}`). Turn, attempt, call and file ids are never
//!   labels.
//! * **Every family from the first scrape.** Zero series are pre-registered for every label
//!   value known up front (see [`Metrics::new`]).
//! * **Model of an attempt.** Attempt-scoped series (`attempts_total`, `billed_*`,
//!   `attempt_duration_seconds`) use the attempt's own model (a fallback may differ), else the
//!   turn's; turn-scoped series use the turn's model.

mod components;
mod family;
mod guard;
mod snapshot;
mod state;
mod sum;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};

use prometheus::{Encoder, Registry, TextEncoder};

use retryscope_core::correlate::{CorrelatorStats, Output, TurnLabels};
use retryscope_core::decode::BadLineReason;
use retryscope_core::finding::{Finding, FindingKind};
use retryscope_core::report::{Outcome, TurnReport, TurnStatus, UsageSource};

pub use components::ClusterStats;
pub use family::{
    ATTEMPTS_BUCKETS, DURATION_BUCKETS, FAMILIES, Family, Kind, PROXY_LATENCY_BUCKETS,
};
pub use guard::{Admitted, LabelGuard, MAX_LABEL_CHARS, OTHER, UNKNOWN, sanitize};
pub use snapshot::{
    Float, HistogramSnapshot, MetricsSnapshot, OLDEST_SNAPSHOT_VERSION, SNAPSHOT_VERSION,
    ValueSnapshot,
};
pub use sum::sum_snapshots;

use family::F;
use state::{Baselines, Hist, Series, StateCollector, Table, delta, lock};

/// The bounded class of an open/list error: out of descriptors (per process, system-wide),
/// permission denied, or anything else.
pub fn file_error_class(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(24) => "emfile",
        Some(23) => "enfile",
        Some(13) | Some(1) => "eacces",
        _ => "read",
    }
}

/// The retry reason label when the client gave none.
pub const UNSPECIFIED: &str = "unspecified";

/// The `token_type` label values of `retryscope_billed_tokens_total`.
pub const TOKEN_TYPES: [&str; 5] = [
    "input",
    "cached_input",
    "cache_write",
    "output",
    "reasoning",
];

/// Where input comes from (the `source` label): the ingest path's bounded set.
pub use retryscope_core::ingest::Source;

/// The `kind` label values of `retryscope_file_errors_total`.
pub const FILE_ERROR_KINDS: [&str; 6] = [
    "emfile",
    "enfile",
    "eacces",
    "read",
    "checkpoint_mismatch",
    "checkpoint_orphaned",
];

/// Label caps (the config file's `[labels]` table).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Distinct `model` values before `other`.
    pub max_models: usize,
    /// Distinct `provider` values before `other`.
    pub max_providers: usize,
    /// Distinct `tool` values before `other`.
    pub max_tools: usize,
    /// Distinct retry `reason` values before `other`.
    pub max_reasons: usize,
    /// Distinct `agent` values (client kinds and names) before `other`.
    pub max_agents: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            max_models: 50,
            max_providers: 20,
            max_tools: 100,
            max_reasons: 30,
            max_agents: 20,
        }
    }
}

/// Errors of the metrics sink.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The prometheus registry refused a family (a bug in the family table).
    #[error("prometheus registry: {0}")]
    Prometheus(#[from] prometheus::Error),
    /// A snapshot does not fit this version's families.
    #[error("metrics snapshot: {0}")]
    Snapshot(String),
}

#[derive(Debug, Clone, Copy)]
enum G {
    Model,
    Provider,
    Tool,
    Reason,
    Agent,
}

#[derive(Debug)]
struct Inner {
    table: Table,
    guards: [LabelGuard; 5],
    base: Baselines,
    /// (agent, model, provider) triples whose series [`Inner::touch_pair`] created already:
    /// it runs for every closed turn, and touching its 11 series again cost ~7% of the
    /// engine's instructions. Bounded by the label guards.
    touched: retryscope_core::fasthash::FastMap<
        String,
        retryscope_core::fasthash::FastMap<String, retryscope_core::fasthash::FastSet<String>>,
    >,
    /// Agents whose zero finding series (every kind, `tool=""`) exist.
    agents_touched: retryscope_core::fasthash::FastSet<String>,
    /// The input kinds read since start, for `retryscope_input_blind_spots`.
    coverage: retryscope_core::coverage::Coverage,
}

impl Inner {
    fn new(cfg: &MetricsConfig) -> Self {
        let mut inner = Inner {
            table: Table::new(),
            guards: [
                LabelGuard::new("model", cfg.max_models, UNKNOWN),
                LabelGuard::new("provider", cfg.max_providers, UNKNOWN),
                LabelGuard::new("tool", cfg.max_tools, UNKNOWN),
                LabelGuard::new("reason", cfg.max_reasons, UNSPECIFIED),
                LabelGuard::new("agent", cfg.max_agents, UNKNOWN),
            ],
            base: Baselines::default(),
            touched: Default::default(),
            agents_touched: Default::default(),
            coverage: Default::default(),
        };
        inner.preregister();
        inner
    }

    /// Zero series for every label value known up front.
    fn preregister(&mut self) {
        let t = &mut self.table;
        let (a, m, p) = (UNKNOWN, UNKNOWN, UNKNOWN);
        for s in TurnStatus::ALL {
            t.touch(F::Turns as usize, &[a, m, p, s.as_str()]);
        }
        t.touch(F::Retries as usize, &[a, m, p, UNSPECIFIED]);
        t.touch(F::AttemptsPerTurn as usize, &[m, p]);
        t.touch(F::TurnDuration as usize, &[m, p]);
        for o in Outcome::ALL {
            let o = o.as_str();
            t.touch(F::Attempts as usize, &[m, p, o]);
            t.touch(F::AttemptDuration as usize, &[m, p, o]);
            t.touch(F::BilledCost as usize, &[a, m, p, o]);
            t.touch(F::ToolExecutions as usize, &[UNKNOWN, o]);
            for tt in TOKEN_TYPES {
                for us in UsageSource::ALL {
                    t.touch(F::BilledTokens as usize, &[m, p, tt, o, us.as_str()]);
                }
            }
        }
        for kind in FILE_ERROR_KINDS {
            t.touch(F::FileErrors as usize, &[kind]);
        }
        for kind in retryscope_core::coverage::InputKind::ALL {
            for sight in kind.sights().missing() {
                t.touch(
                    F::InputBlindSpots as usize,
                    &[kind.as_str(), sight.as_str()],
                );
            }
        }
        for s in Source::ALL {
            let s = s.as_str();
            t.touch(F::EventsRead as usize, &[s]);
            t.touch(F::EventsDecoded as usize, &[s]);
            t.touch(F::UnknownEvents as usize, &[s]);
            t.touch(F::SourceLag as usize, &[s]);
            for r in BadLineReason::ALL {
                t.touch(F::BadLines as usize, &[s, r.as_str()]);
            }
        }
        for f in [
            F::OpenTurns,
            F::EvictedTurns,
            F::LateEvents,
            F::AfterCloseEvents,
            F::FilesWatched,
            F::FileRotations,
            F::FileTruncations,
            F::CheckpointWrites,
            F::CheckpointFailures,
            F::OtlpExported,
            F::OtlpDropped,
            F::OtlpFailures,
            F::ProxyUpstreamErrors,
            F::ProxyStreams,
            F::ProxyLatency,
            F::NatsPartitions,
            F::NatsOwned,
            F::NatsTakeovers,
            F::NatsCheckpointLag,
            F::NatsPublishFailures,
            F::NatsDeadLetters,
            F::ProxyUnobserved,
            F::ProxyFeedLost,
        ] {
            t.touch(f as usize, &[]);
        }
        // The OTLP receiver: accepted requests per signal and protocol (refusals appear when
        // they happen), records per signal, the queue.
        for signal in ["logs", "traces", "metrics"] {
            for protocol in ["http_json", "http_protobuf", "grpc"] {
                t.touch(F::OtlpReceived as usize, &[signal, protocol, "accepted"]);
            }
            t.touch(F::OtlpRecords as usize, &[signal]);
        }
        t.touch(F::OtlpQueueRecords as usize, &[]);
        t.touch(F::OtlpQueueBytes as usize, &[]);
        t.touch(F::OtlpSpoolBytes as usize, &[]);
        for l in crate::listener::Name::ALL {
            t.touch(F::ListenerOpen as usize, &[l.as_str()]);
            for r in crate::listener::Reason::ALL {
                t.touch(F::ListenerRefused as usize, &[l.as_str(), r.as_str()]);
            }
        }
        for p in crate::proxy::Point::ALL {
            for h in crate::proxy::How::ALL {
                for tools in ["true", "false"] {
                    t.touch(F::ProxyCuts as usize, &[p.as_str(), h.as_str(), tools]);
                }
            }
        }
        for g in &self.guards {
            t.touch(F::LabelOverflow as usize, &[g.name()]);
        }
        t.set(F::BuildInfo as usize, &[env!("CARGO_PKG_VERSION")], 1.0);
        self.touch_agent(UNKNOWN);
    }

    /// The bounded label value for `raw`, counting an overflow.
    fn label(&mut self, g: G, raw: Option<&str>) -> String {
        let guard = &mut self.guards[g as usize];
        match guard.admit(raw) {
            Admitted::Value(v) => v,
            Admitted::Overflow => {
                let name = guard.name();
                self.table.add(F::LabelOverflow as usize, &[name], 1.0);
                OTHER.to_owned()
            }
        }
    }

    /// Zero finding series (every kind with `tool=""`) for an agent, the first time it is
    /// seen: a later finding of another kind then moves a series that already exists.
    fn touch_agent(&mut self, a: &str) {
        if self.agents_touched.contains(a) {
            return;
        }
        self.agents_touched.insert(a.to_owned());
        for k in FindingKind::ALL {
            self.table.touch(
                F::Findings as usize,
                &[a, k.as_str(), k.severity().as_str(), ""],
            );
        }
    }

    /// Zero series for an agent/model/provider's status and outcome breakdowns of turns,
    /// attempts and cost, so that a `rate()` over one status (say, wasted spend of failed
    /// attempts) exists before the first turn with that status.
    fn touch_pair(&mut self, a: &str, m: &str, p: &str) {
        if self
            .touched
            .get(a)
            .and_then(|ms| ms.get(m))
            .is_some_and(|ps| ps.contains(p))
        {
            return;
        }
        self.touched
            .entry(a.to_owned())
            .or_default()
            .entry(m.to_owned())
            .or_default()
            .insert(p.to_owned());
        self.touch_agent(a);
        for s in TurnStatus::ALL {
            self.table.touch(F::Turns as usize, &[a, m, p, s.as_str()]);
        }
        for o in Outcome::ALL {
            self.table.touch(F::Attempts as usize, &[m, p, o.as_str()]);
            self.table
                .touch(F::BilledCost as usize, &[a, m, p, o.as_str()]);
        }
    }

    fn add(&mut self, f: F, labels: &[&str], v: f64) {
        self.table.add(f as usize, labels, v);
    }

    fn retry(&mut self, labels: &TurnLabels, reason: Option<&str>) {
        let a = self.label(G::Agent, labels.agent.as_deref());
        let m = self.label(G::Model, labels.model.as_deref());
        let p = self.label(G::Provider, labels.provider.as_deref());
        let r = self.label(G::Reason, reason);
        self.touch_pair(&a, &m, &p);
        self.add(F::Retries, &[&a, &m, &p, &r], 1.0);
    }

    fn finding(&mut self, f: &Finding, labels: &TurnLabels) {
        let a = self.label(G::Agent, labels.agent.as_deref());
        self.touch_agent(&a);
        let tool = match f.tool.as_deref() {
            None => String::new(),
            Some(t) => self.label(G::Tool, Some(t)),
        };
        self.add(
            F::Findings,
            &[&a, f.kind.as_str(), f.kind.severity().as_str(), &tool],
            1.0,
        );
    }

    fn turn_closed(&mut self, r: &TurnReport) {
        let ag = self.label(G::Agent, r.agent.as_deref());
        let m = self.label(G::Model, r.model.as_deref());
        let p = self.label(G::Provider, r.provider.as_deref());
        self.touch_pair(&ag, &m, &p);
        self.add(F::Turns, &[&ag, &m, &p, r.status.as_str()], 1.0);
        self.table.observe(
            F::AttemptsPerTurn as usize,
            &[&m, &p],
            r.attempts.len() as f64,
        );
        if let Some(secs) = seconds(r.started_ms, r.ended_ms) {
            self.table
                .observe(F::TurnDuration as usize, &[&m, &p], secs);
        }
        for a in &r.attempts {
            let am = match a.model.as_deref() {
                Some(own) if own.trim() != r.model.as_deref().unwrap_or("").trim() => {
                    self.label(G::Model, Some(own))
                }
                _ => m.clone(),
            };
            if am != m {
                self.touch_pair(&ag, &am, &p);
            }
            let o = a.outcome.as_str();
            self.add(F::Attempts, &[&am, &p, o], 1.0);
            let u = &a.usage.tokens;
            let input = u
                .input_tokens
                .saturating_sub(u.cached_input_tokens)
                .saturating_sub(u.cache_write_tokens);
            let counts = [
                input,
                u.cached_input_tokens,
                u.cache_write_tokens,
                u.output_tokens,
                u.reasoning_tokens,
            ];
            let us = a.usage.source.as_str();
            for (tt, n) in TOKEN_TYPES.iter().zip(counts) {
                self.add(F::BilledTokens, &[&am, &p, tt, o, us], n as f64);
            }
            if let Some(cost) = a.cost_usd
                && cost.is_finite()
                && cost >= 0.0
            {
                self.add(F::BilledCost, &[&ag, &am, &p, o], cost);
            }
            if let Some(secs) = seconds(a.started_ms, a.ended_ms) {
                self.table
                    .observe(F::AttemptDuration as usize, &[&am, &p, o], secs);
            }
            for e in &a.executed {
                let tool = self.label(G::Tool, Some(&e.name));
                self.add(F::ToolExecutions, &[&tool, o], 1.0);
            }
        }
    }
}

/// Seconds between two event times; `None` when either is missing or time went backwards.
fn seconds(start_ms: Option<i64>, end_ms: Option<i64>) -> Option<f64> {
    let d = end_ms?.checked_sub(start_ms?)?;
    (d >= 0).then(|| d as f64 / 1000.0)
}

/// The metrics sink. Cheap to share: wrap it in an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct Metrics {
    cfg: MetricsConfig,
    registry: Registry,
    inner: Arc<Mutex<Inner>>,
}

impl Metrics {
    /// A sink with every family registered and zero series pre-registered for: model and
    /// provider `unknown` with every status, outcome, token type, usage source and reason
    /// `unspecified`; tool `unknown` with every attempt outcome; every finding kind with its
    /// fixed severity and `tool=""`; every source (and bad-line reason per source); every
    /// guarded label's overflow counter; the unlabelled health series; and `build_info`.
    pub fn new(cfg: MetricsConfig) -> Result<Self, MetricsError> {
        let inner = Arc::new(Mutex::new(Inner::new(&cfg)));
        let registry = Registry::new();
        registry.register(Box::new(StateCollector::new(
            inner.clone(),
            |i: &Inner| &i.table,
        )?))?;
        Ok(Metrics {
            cfg,
            registry,
            inner,
        })
    }

    /// The registry the families are registered in (to add more collectors, e.g. process
    /// metrics).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Move the turn-level series for one correlator output: a retry and a finding move their
    /// counters at once; a closed turn moves turns, attempts, tokens, cost, tool executions
    /// and the histograms.
    pub fn observe(&self, out: &Output) {
        let mut inner = lock(&self.inner);
        match out {
            Output::Retry { labels, reason } => inner.retry(labels, reason.as_deref()),
            Output::Finding(f, labels) => inner.finding(f, labels),
            Output::TurnClosed(r) => inner.turn_closed(r),
        }
    }

    /// Add to `retryscope_events_read_total{source}`.
    pub fn add_events_read(&self, source: Source, n: u64) {
        lock(&self.inner).add(F::EventsRead, &[source.as_str()], n as f64);
    }

    /// Add to `retryscope_events_decoded_total{source}`.
    pub fn add_events_decoded(&self, source: Source, n: u64) {
        lock(&self.inner).add(F::EventsDecoded, &[source.as_str()], n as f64);
    }

    /// Add to `retryscope_bad_lines_total{source,reason}`.
    pub fn add_bad_lines(&self, source: Source, reason: BadLineReason, n: u64) {
        lock(&self.inner).add(F::BadLines, &[source.as_str(), reason.as_str()], n as f64);
    }

    /// Add to `retryscope_unknown_events_total{source}`.
    pub fn add_unknown_events(&self, source: Source, n: u64) {
        lock(&self.inner).add(F::UnknownEvents, &[source.as_str()], n as f64);
    }

    /// Set `retryscope_open_turns` and move `retryscope_evicted_turns_total`,
    /// `retryscope_late_events_total` and `retryscope_after_close_events_total` by the growth of the correlator's cumulative stats since
    /// the last call. Call it on every tick (and after each batch of events).
    pub fn set_correlator_stats(&self, stats: &CorrelatorStats, open_turns: usize) {
        let mut inner = lock(&self.inner);
        let inner = &mut *inner;
        let late = delta(&mut inner.base.late_events, stats.late_events);
        let evicted = delta(&mut inner.base.evicted_turns, stats.evicted_turns);
        let after_close = delta(&mut inner.base.after_close_events, stats.after_close_events);
        inner.add(F::AfterCloseEvents, &[], after_close as f64);
        inner.add(F::LateEvents, &[], late as f64);
        inner.add(F::EvictedTurns, &[], evicted as f64);
        inner
            .table
            .set(F::OpenTurns as usize, &[], open_turns as f64);
    }

    /// A stream of `kind` was read: `retryscope_input_blind_spots` counts, per kind and sight
    /// it cannot show, the streams of that kind read since start, unless another kind read
    /// shows that sight (then 0).
    pub fn saw_input_kind(&self, kind: retryscope_core::coverage::InputKind) {
        let mut inner = lock(&self.inner);
        let inner = &mut *inner;
        inner.coverage.add(kind);
        let all = inner.coverage.sights();
        for k in retryscope_core::coverage::InputKind::ALL {
            let n = inner.coverage.streams(k);
            for sight in k.sights().missing() {
                let v = if all.has(sight) { 0 } else { n };
                inner.table.set(
                    F::InputBlindSpots as usize,
                    &[k.as_str(), sight.as_str()],
                    v as f64,
                );
            }
        }
    }

    /// Set `retryscope_files_watched`.
    pub fn set_files_watched(&self, n: u64) {
        lock(&self.inner)
            .table
            .set(F::FilesWatched as usize, &[], n as f64);
    }

    /// Count one file rotation.
    pub fn inc_file_rotations(&self) {
        lock(&self.inner).add(F::FileRotations, &[], 1.0);
    }

    /// Count one file truncation.
    pub fn inc_file_truncations(&self) {
        lock(&self.inner).add(F::FileTruncations, &[], 1.0);
    }

    /// Count one problem with a tailed file (`kind`: one of [`FILE_ERROR_KINDS`]).
    pub fn inc_file_errors(&self, kind: &'static str) {
        lock(&self.inner).add(F::FileErrors, &[kind], 1.0);
    }

    /// Set `retryscope_source_lag_bytes{source}`.
    pub fn set_source_lag_bytes(&self, source: Source, bytes: u64) {
        lock(&self.inner)
            .table
            .set(F::SourceLag as usize, &[source.as_str()], bytes as f64);
    }

    /// Count a stream cut on purpose by `retryscope proxy`.
    /// `tools`: whether the request cut offered the model tools.
    pub fn inc_proxy_cut(&self, point: &'static str, how: &'static str, tools: bool) {
        let tools = if tools { "true" } else { "false" };
        lock(&self.inner).add(F::ProxyCuts, &[point, how, tools], 1.0);
    }

    /// Count an upstream failure of `retryscope proxy`.
    pub fn inc_proxy_upstream_errors(&self) {
        lock(&self.inner).add(F::ProxyUpstreamErrors, &[], 1.0);
    }

    /// Count a non-streaming answer `retryscope proxy` passed through unobserved.
    pub fn inc_proxy_unobserved(&self) {
        lock(&self.inner).add(F::ProxyUnobserved, &[], 1.0);
    }

    /// Count one successful checkpoint write.
    pub fn inc_checkpoint_writes(&self) {
        lock(&self.inner).add(F::CheckpointWrites, &[], 1.0);
    }

    /// Count one failed checkpoint write.
    pub fn inc_checkpoint_failures(&self) {
        lock(&self.inner).add(F::CheckpointFailures, &[], 1.0);
    }

    /// Move the OTLP counters by the growth of the exporter's absolute counters since the
    /// last call. These baselines are process-local (not in the snapshot): after a restart
    /// the exporter's atomics begin at zero again, and so does the baseline.
    pub fn set_otlp(&self, exported: u64, dropped: u64, failures: u64) {
        let mut inner = lock(&self.inner);
        let inner = &mut *inner;
        let d = [
            delta(&mut inner.base.otlp[0], exported),
            delta(&mut inner.base.otlp[1], dropped),
            delta(&mut inner.base.otlp[2], failures),
        ];
        inner.add(F::OtlpExported, &[], d[0] as f64);
        inner.add(F::OtlpDropped, &[], d[1] as f64);
        inner.add(F::OtlpFailures, &[], d[2] as f64);
    }

    /// Count one OTLP request received (`signal`, `protocol` and `outcome` come from closed
    /// sets in `source::otlp`) and the records it carried when accepted.
    pub fn otlp_request(&self, signal: &str, protocol: &str, outcome: &str, records: u64) {
        let mut inner = lock(&self.inner);
        inner.add(F::OtlpReceived, &[signal, protocol, outcome], 1.0);
        if records > 0 {
            inner.add(F::OtlpRecords, &[signal], records as f64);
        }
    }

    /// The OTLP receiver's queue depth.
    pub fn set_otlp_queue(&self, records: u64, bytes: u64) {
        let mut inner = lock(&self.inner);
        inner
            .table
            .set(F::OtlpQueueRecords as usize, &[], records as f64);
        inner
            .table
            .set(F::OtlpQueueBytes as usize, &[], bytes as f64);
    }

    /// The current value of a counter or gauge series (`labels` in the family's label
    /// order); `None` for an unknown family, a histogram or a series that does not exist.
    pub fn value(&self, name: &str, labels: &[&str]) -> Option<f64> {
        let fam = family::by_name(name)?;
        if labels.len() != FAMILIES[fam].labels.len() {
            return None;
        }
        lock(&self.inner).table.value(fam, labels)
    }

    /// The `(count, sum)` of a histogram series.
    pub fn histogram(&self, name: &str, labels: &[&str]) -> Option<(u64, f64)> {
        let fam = family::by_name(name)?;
        if labels.len() != FAMILIES[fam].labels.len() {
            return None;
        }
        lock(&self.inner)
            .table
            .hist(fam, labels)
            .map(|h| (h.count, h.sum))
    }

    /// The exposition: content type (`text/plain; version=0.0.4`) and body.
    pub fn render(&self) -> (&'static str, Vec<u8>) {
        let encoder = TextEncoder::new();
        let mut body = Vec::new();
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut body) {
            tracing::error!(error = %e, "encoding metrics failed");
        }
        (prometheus::TEXT_FORMAT, body)
    }

    /// Everything needed to restore this exact state (see [`MetricsSnapshot`]).
    pub fn snapshot(&self) -> MetricsSnapshot {
        let inner = lock(&self.inner);
        let mut values = Vec::new();
        let mut histograms = Vec::new();
        for (fam, series) in FAMILIES.iter().zip(&inner.table.families) {
            for (labels, s) in series {
                match s {
                    Series::Value(v) => values.push(ValueSnapshot {
                        name: fam.name.to_owned(),
                        labels: labels.clone(),
                        value: Float(*v),
                    }),
                    Series::Hist(h) => histograms.push(HistogramSnapshot {
                        name: fam.name.to_owned(),
                        labels: labels.clone(),
                        buckets: h.counts.clone(),
                        sum: Float(h.sum),
                        count: h.count,
                    }),
                }
            }
        }
        MetricsSnapshot {
            version: SNAPSHOT_VERSION,
            values,
            histograms,
            guards: inner
                .guards
                .iter()
                .map(|g| {
                    (
                        g.name().to_owned(),
                        g.admitted().map(str::to_owned).collect(),
                    )
                })
                .collect(),
            last_late_events: inner.base.late_events,
            last_evicted_turns: inner.base.evicted_turns,
            last_after_close_events: inner.base.after_close_events,
        }
    }

    /// Replace the whole state with a snapshot's (series, admitted label values, baselines).
    /// Series the snapshot lacks but this version pre-registers are present at zero. On error
    /// the state is unchanged.
    pub fn restore(&self, snap: &MetricsSnapshot) -> Result<(), MetricsError> {
        if !(OLDEST_SNAPSHOT_VERSION..=SNAPSHOT_VERSION).contains(&snap.version) {
            return Err(MetricsError::Snapshot(format!(
                "version {} (expected {SNAPSHOT_VERSION})",
                snap.version
            )));
        }
        let mut fresh = Inner::new(&self.cfg);
        let find = |name: &str, labels: &mut Vec<String>| -> Result<usize, MetricsError> {
            let fam = family::by_name(name)
                .ok_or_else(|| MetricsError::Snapshot(format!("unknown family `{name}`")))?;
            // Before version 3 the turn, retry, finding and cost families had no `agent`
            // (their first label now): their series become `agent="unknown"`.
            if snap.version < 3
                && FAMILIES[fam].labels.first() == Some(&"agent")
                && labels.len() + 1 == FAMILIES[fam].labels.len()
            {
                labels.insert(0, UNKNOWN.to_owned());
            }
            if labels.len() != FAMILIES[fam].labels.len() {
                return Err(MetricsError::Snapshot(format!(
                    "`{name}` has {} labels, the snapshot gives {}",
                    FAMILIES[fam].labels.len(),
                    labels.len()
                )));
            }
            Ok(fam)
        };
        for v in &snap.values {
            let mut labels = v.labels.clone();
            let fam = find(&v.name, &mut labels)?;
            if matches!(FAMILIES[fam].kind, Kind::Histogram(_)) {
                return Err(MetricsError::Snapshot(format!(
                    "`{}` is a histogram",
                    v.name
                )));
            }
            fresh.table.families[fam].insert(labels, Series::Value(v.value.0));
        }
        for h in &snap.histograms {
            let mut labels = h.labels.clone();
            let fam = find(&h.name, &mut labels)?;
            let Kind::Histogram(bounds) = FAMILIES[fam].kind else {
                return Err(MetricsError::Snapshot(format!(
                    "`{}` is not a histogram",
                    h.name
                )));
            };
            if h.buckets.len() != bounds.len() {
                return Err(MetricsError::Snapshot(format!(
                    "`{}` has {} buckets, the snapshot gives {}",
                    h.name,
                    bounds.len(),
                    h.buckets.len()
                )));
            }
            fresh.table.families[fam].insert(
                labels,
                Series::Hist(Hist {
                    counts: h.buckets.clone(),
                    sum: h.sum.0,
                    count: h.count,
                }),
            );
        }
        for g in &mut fresh.guards {
            if let Some(values) = snap.guards.get(g.name()) {
                g.restore(values.iter().cloned());
            }
        }
        fresh.base.late_events = snap.last_late_events;
        fresh.base.evicted_turns = snap.last_evicted_turns;
        fresh.base.after_close_events = snap.last_after_close_events;
        // Keep the process-local OTLP baseline: the exporter did not restart with the snapshot.
        let mut inner = lock(&self.inner);
        fresh.base.otlp = inner.base.otlp;
        *inner = fresh;
        Ok(())
    }
}

const _: fn() = || {
    fn is<T: Send + Sync>() {}
    is::<Metrics>();
};
