//! The checkpointable form of the metric state, and [`Metrics::snapshot`] /
//! [`Metrics::restore`], which copy the whole state out (less the zero series a restore
//! creates anyway) and back.
//!
//! Floats are written as text (Rust's shortest round-trip form) rather than JSON numbers, so
//! that a snapshot parsed back gives bit-identical values whatever the checkpoint format's
//! float parser does.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::family::{self, FAMILIES, Kind};
use super::state::{Hist, Series, lock};
use super::{Inner, Metrics, MetricsError, UNKNOWN};

/// Snapshot format version. Version 1 also carried per-source input baselines for a setter
/// nothing called; it is still read (the field is ignored). Versions before 3 had no `agent`
/// label on turns, retries, findings and cost; their series are restored as `agent="unknown"`.
pub const SNAPSHOT_VERSION: u32 = 3;
/// The oldest version this build restores.
pub const OLDEST_SNAPSHOT_VERSION: u32 = 1;

/// Everything needed to restore [`super::Metrics`] exactly: every series (but the
/// pre-registered ones at zero, which a restore creates), the label guards' admitted values,
/// and the baselines of the delta setters that are fed from checkpointed
/// state (correlator stats; not the process-local OTLP counters).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// Format version ([`SNAPSHOT_VERSION`]).
    pub version: u32,
    /// Counter and gauge series.
    pub values: Vec<ValueSnapshot>,
    /// Histogram series.
    pub histograms: Vec<HistogramSnapshot>,
    /// Admitted values per guarded label (`model`, `provider`, `tool`, `reason`).
    pub guards: BTreeMap<String, Vec<String>>,
    /// Last `late_events` passed to `set_correlator_stats`.
    pub last_late_events: u64,
    /// Last `evicted_turns` passed to `set_correlator_stats`.
    pub last_evicted_turns: u64,
    /// Last `after_close_events` passed to `set_correlator_stats`.
    #[serde(default)]
    pub last_after_close_events: u64,
}

/// One counter or gauge series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValueSnapshot {
    /// Family name.
    pub name: String,
    /// Label values, in the family's label order.
    pub labels: Vec<String>,
    /// Value.
    pub value: Float,
}

/// One histogram series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    /// Family name.
    pub name: String,
    /// Label values, in the family's label order.
    pub labels: Vec<String>,
    /// Observations per bucket, not cumulative, one per finite upper bound.
    pub buckets: Vec<u64>,
    /// Sum of observations.
    pub sum: Float,
    /// Number of observations.
    pub count: u64,
}

/// An `f64` that serializes as its shortest round-trip text (`"0.1"`); it also reads numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Float(pub f64);

impl Serialize for Float {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Float {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Float;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a float as text or number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Float, E> {
                v.parse::<f64>().map(Float).map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Float, E> {
                Ok(Float(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Float, E> {
                Ok(Float(v as f64))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Float, E> {
                Ok(Float(v as f64))
            }
        }
        d.deserialize_any(V)
    }
}

impl Metrics {
    /// Everything needed to restore this exact state (see [`MetricsSnapshot`]).
    pub fn snapshot(&self) -> MetricsSnapshot {
        let inner = lock(&self.inner);
        let mut values = Vec::new();
        let mut histograms = Vec::new();
        for (i, fam) in FAMILIES.iter().enumerate() {
            for (labels, s) in inner.table.series(i) {
                // A zero series a restore creates anyway: most of a fresh partition's state
                // (26 KB of JSON, written into every checkpoint) was these.
                if s.is_zero() && inner.recreated(i, labels) {
                    continue;
                }
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
    /// Series the snapshot lacks but this version pre-registers (the sink's own and those
    /// registered with [`Metrics::preregister`]) are present at zero. On error the state is
    /// unchanged.
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
            // The serving binary's own build (set by `Inner::new`), not the one that wrote the
            // snapshot, nor a sum: a collector serving 8 partitions' summed snapshots said
            // `retryscope_build_info 8`, and a checkpoint of an older version added its series.
            if fam == family::FamilyId::BuildInfo as usize {
                continue;
            }
            if matches!(FAMILIES[fam].kind, Kind::Histogram(_)) {
                return Err(MetricsError::Snapshot(format!(
                    "`{}` is a histogram",
                    v.name
                )));
            }
            fresh.table.insert(fam, labels, Series::Value(v.value.0));
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
            fresh.table.insert(
                fam,
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
        for (fam, key) in &inner.registered {
            let labels: Vec<&str> = key.iter().map(String::as_str).collect();
            fresh.table.touch(*fam, &labels);
        }
        fresh.registered = std::mem::take(&mut inner.registered);
        *inner = fresh;
        Ok(())
    }
}
