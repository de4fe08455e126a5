//! The checkpointable form of the metric state.
//!
//! Floats are written as text (Rust's shortest round-trip form) rather than JSON numbers, so
//! that a snapshot parsed back gives bit-identical values whatever the checkpoint format's
//! float parser does.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Snapshot format version. Version 1 also carried per-source input baselines for a setter
/// nothing called; it is still read (the field is ignored). Versions before 3 had no `agent`
/// label on turns, retries, findings and cost; their series are restored as `agent="unknown"`.
pub const SNAPSHOT_VERSION: u32 = 3;
/// The oldest version this build restores.
pub const OLDEST_SNAPSHOT_VERSION: u32 = 1;

/// Everything needed to restore [`super::Metrics`] exactly: every series, the label guards'
/// admitted values, and the baselines of the delta setters that are fed from checkpointed
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
