//! The Prometheus metrics sink: turn-level series moved by correlator
//! [`Output`](retryscope_core::correlate::Output)s, collector
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
//!   value known up front: the sink's own (turn-level series, sources, every family without
//!   labels) and, through [`Metrics::preregister`], each subsystem's, registered by the code
//!   that counts them (see [`Metrics::new`]).
//! * **Model of an attempt.** Attempt-scoped series (`attempts_total`, `billed_*`,
//!   `attempt_duration_seconds`) use the attempt's own model (a fallback may differ), else the
//!   turn's; turn-scoped series use the turn's model.
//!
//! Modules: `family` (the table of families), `state` (the maps and the collector), `guard`
//! (bounded labels), `preregister` (zero series), `turns` (what correlator outputs move),
//! `health` (the collector's health setters), `components` (the receiver's, proxy's,
//! cluster's and listeners' setters), `snapshot` (snapshot and restore), `sum` (adding
//! snapshots).

mod components;
mod family;
mod guard;
mod health;
mod preregister;
mod snapshot;
mod state;
mod sum;
#[cfg(test)]
mod tests;
mod turns;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use prometheus::{Encoder, Registry, TextEncoder};

pub use components::ClusterStats;
pub use family::{
    ATTEMPTS_BUCKETS, DURATION_BUCKETS, FAMILIES, Family, FamilyId, Kind, PROXY_LATENCY_BUCKETS,
};
pub use guard::{Admitted, LabelGuard, MAX_LABEL_CHARS, OTHER, UNKNOWN, sanitize};
pub use snapshot::{
    Float, HistogramSnapshot, MetricsSnapshot, OLDEST_SNAPSHOT_VERSION, SNAPSHOT_VERSION,
    ValueSnapshot,
};
pub use sum::sum_snapshots;
pub use turns::{TOKEN_TYPES, UNSPECIFIED};

use family::FamilyId as F;
use state::{Baselines, StateCollector, Table, lock};

/// Where input comes from (the `source` label): the ingest path's bounded set.
pub use retryscope_core::ingest::Source;

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
    /// The series subsystems pre-registered ([`Metrics::preregister`]): process
    /// configuration, not state, so a restore keeps them.
    registered: BTreeSet<(usize, Vec<String>)>,
    /// Per family, the series [`Inner::preregister`] creates: a restore creates them again,
    /// so a snapshot leaves them out while they are zero.
    preregistered: Vec<BTreeSet<Vec<String>>>,
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
            registered: BTreeSet::new(),
            preregistered: Vec::new(),
        };
        inner.preregister();
        inner.preregistered = (0..FAMILIES.len())
            .map(|fam| inner.table.series(fam).map(|(k, _)| k.clone()).collect())
            .collect();
        inner
    }

    /// Whether a restore creates this series (pre-registered by the sink or a subsystem).
    fn recreated(&self, fam: usize, labels: &[String]) -> bool {
        self.preregistered
            .get(fam)
            .is_some_and(|keys| keys.contains(labels))
            // The family's few subsystem series, compared in place: a lookup by an owned
            // key cloned the labels of every zero series of every checkpoint.
            || self
                .registered
                .range((fam, Vec::new())..(fam + 1, Vec::new()))
                .any(|(_, key)| key.as_slice() == labels)
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

    fn add(&mut self, f: F, labels: &[&str], v: f64) {
        self.table.add(f as usize, labels, v);
    }
}

/// The metrics sink. Cheap to share: wrap it in an `Arc`; every method takes `&self`.
#[derive(Debug)]
pub struct Metrics {
    cfg: MetricsConfig,
    registry: Registry,
    inner: Arc<Mutex<Inner>>,
}

impl Metrics {
    /// A process's metrics: [`Metrics::without_subsystems`] with every subsystem's zero
    /// series registered too ([`crate::metric_labels`]). Every command exposes every family
    /// from its first scrape, whichever subsystems it runs: a family without a series is not
    /// exposed at all, and the dashboards and CI's scrape check (a `run` over files, with no
    /// proxy and no OTLP receiver) rely on every name.
    pub fn new(cfg: MetricsConfig) -> Result<Self, MetricsError> {
        let m = Self::without_subsystems(cfg)?;
        crate::metric_labels::preregister(&m);
        Ok(m)
    }

    /// A sink with every family registered and only its own zero series: model and provider
    /// `unknown` with every status, outcome, token type, usage source and reason
    /// `unspecified`; tool `unknown` with every attempt outcome; every finding kind with its
    /// fixed severity and `tool=""`; every source (and bad-line reason per source); every
    /// input kind's blind spots; every guarded label's overflow counter; every family without
    /// labels; and `build_info`. A subsystem's labelled series (the proxy's cut points, the
    /// tailer's error kinds, ...) exist once it registers them ([`Metrics::preregister`]).
    pub fn without_subsystems(cfg: MetricsConfig) -> Result<Self, MetricsError> {
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
}

const _: fn() = || {
    fn is<T: Send + Sync>() {}
    is::<Metrics>();
};
