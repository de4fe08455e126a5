//! The metric state: plain maps that are the single source of truth, exposed to the
//! prometheus registry through a custom [`Collector`], and snapshotted as they are.
//!
//! Keeping the values here (rather than in prometheus' atomic types) is what makes
//! [`super::Metrics::restore`] exact: histogram buckets and float sums cannot be set back
//! into `prometheus::Histogram`, but a map can.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus::core::{Collector, Desc};
use prometheus::proto;

use super::family::{FAMILIES, Kind};
use retryscope_core::fasthash::{FastMap, FastState};

/// One histogram series.
#[derive(Debug, Clone, PartialEq)]
pub struct Hist {
    /// Observations per bucket (not cumulative), one per upper bound.
    pub counts: Vec<u64>,
    /// Sum of observations.
    pub sum: f64,
    /// Number of observations (`+Inf` bucket).
    pub count: u64,
}

impl Hist {
    pub fn new(buckets: usize) -> Self {
        Hist {
            counts: vec![0; buckets],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, bounds: &[f64], v: f64) {
        if let Some(i) = bounds.iter().position(|b| v <= *b) {
            self.counts[i] += 1;
        }
        self.sum += v;
        self.count += 1;
    }
}

/// The value of one series.
#[derive(Debug, Clone, PartialEq)]
pub enum Series {
    /// Counter or gauge.
    Value(f64),
    /// Histogram.
    Hist(Hist),
}

impl Series {
    /// Whether it is exactly what a new series is (a gauge at `-0.0` is not).
    pub fn is_zero(&self) -> bool {
        match self {
            Series::Value(v) => v.to_bits() == 0,
            Series::Hist(h) => {
                h.count == 0 && h.sum.to_bits() == 0 && h.counts.iter().all(|c| *c == 0)
            }
        }
    }
}

/// Every series of every family, indexed like [`FAMILIES`].
#[derive(Debug, Clone)]
pub struct Table {
    pub families: Vec<BTreeMap<Vec<String>, Series>>,
    /// By family, the hash of a series' label values and its key, so that updating a series
    /// that exists allocates nothing: building an owned key for every update cost a busy
    /// collector a fifteenth of its time. A hash not found, or found naming other labels (a
    /// collision) or a series not in `families` (one a restore put there), takes the path
    /// that builds the key.
    index: Vec<FastMap<u64, Vec<String>>>,
}

impl PartialEq for Table {
    fn eq(&self, other: &Self) -> bool {
        self.families == other.families
    }
}

impl Table {
    pub fn new() -> Self {
        Table {
            families: FAMILIES.iter().map(|_| BTreeMap::new()).collect(),
            index: FAMILIES.iter().map(|_| FastMap::default()).collect(),
        }
    }

    fn entry(&mut self, fam: usize, labels: &[&str]) -> &mut Series {
        debug_assert_eq!(
            labels.len(),
            FAMILIES[fam].labels.len(),
            "{}",
            FAMILIES[fam].name
        );
        let hash = FastState::default().hash_one(labels);
        let series = &mut self.families[fam];
        if let Some(key) = self.index[fam].get(&hash)
            && key.iter().map(String::as_str).eq(labels.iter().copied())
            && series.contains_key(key)
        {
            return series.get_mut(key).expect("the series was just found");
        }
        let key: Vec<String> = labels.iter().map(|s| (*s).to_owned()).collect();
        self.index[fam].entry(hash).or_insert_with(|| key.clone());
        series
            .entry(key)
            .or_insert_with(|| match FAMILIES[fam].kind {
                Kind::Histogram(b) => Series::Hist(Hist::new(b.len())),
                Kind::Counter | Kind::Gauge => Series::Value(0.0),
            })
    }

    /// Create the series at zero if it does not exist.
    pub fn touch(&mut self, fam: usize, labels: &[&str]) {
        self.entry(fam, labels);
    }

    /// Add to a counter or gauge.
    pub fn add(&mut self, fam: usize, labels: &[&str], v: f64) {
        if let Series::Value(x) = self.entry(fam, labels) {
            *x += v;
        }
    }

    /// Set a gauge.
    pub fn set(&mut self, fam: usize, labels: &[&str], v: f64) {
        if let Series::Value(x) = self.entry(fam, labels) {
            *x = v;
        }
    }

    /// Observe into a histogram.
    pub fn observe(&mut self, fam: usize, labels: &[&str], v: f64) {
        let Kind::Histogram(bounds) = FAMILIES[fam].kind else {
            return;
        };
        if let Series::Hist(h) = self.entry(fam, labels) {
            h.observe(bounds, v);
        }
    }

    /// The value of a counter or gauge series.
    pub fn value(&self, fam: usize, labels: &[&str]) -> Option<f64> {
        let key: Vec<String> = labels.iter().map(|s| (*s).to_owned()).collect();
        match self.families[fam].get(&key)? {
            Series::Value(v) => Some(*v),
            Series::Hist(_) => None,
        }
    }

    /// A histogram series.
    pub fn hist(&self, fam: usize, labels: &[&str]) -> Option<&Hist> {
        let key: Vec<String> = labels.iter().map(|s| (*s).to_owned()).collect();
        match self.families[fam].get(&key)? {
            Series::Hist(h) => Some(h),
            Series::Value(_) => None,
        }
    }

    /// The families as prometheus protos, in [`FAMILIES`] order.
    pub fn to_protos(&self) -> Vec<proto::MetricFamily> {
        FAMILIES
            .iter()
            .zip(&self.families)
            .map(|(fam, series)| {
                let mut mf = proto::MetricFamily::default();
                mf.set_name(fam.name.to_owned());
                mf.set_help(fam.help.to_owned());
                mf.set_field_type(match fam.kind {
                    Kind::Counter => proto::MetricType::COUNTER,
                    Kind::Gauge => proto::MetricType::GAUGE,
                    Kind::Histogram(_) => proto::MetricType::HISTOGRAM,
                });
                let metrics = series
                    .iter()
                    .map(|(labels, s)| {
                        let mut m = proto::Metric::default();
                        m.set_label(
                            fam.labels
                                .iter()
                                .zip(labels)
                                .map(|(name, value)| {
                                    let mut lp = proto::LabelPair::default();
                                    lp.set_name((*name).to_owned());
                                    lp.set_value(value.clone());
                                    lp
                                })
                                .collect(),
                        );
                        match (s, fam.kind) {
                            (Series::Value(v), Kind::Gauge) => {
                                let mut g = proto::Gauge::default();
                                g.set_value(*v);
                                m.set_gauge(g);
                            }
                            (Series::Value(v), _) => {
                                let mut c = proto::Counter::default();
                                c.set_value(*v);
                                m.set_counter(c);
                            }
                            (Series::Hist(h), kind) => {
                                let bounds = match kind {
                                    Kind::Histogram(b) => b,
                                    _ => &[],
                                };
                                let mut ph = proto::Histogram::default();
                                let mut cum = 0;
                                ph.set_bucket(
                                    bounds
                                        .iter()
                                        .zip(&h.counts)
                                        .map(|(ub, n)| {
                                            cum += n;
                                            let mut b = proto::Bucket::default();
                                            b.set_upper_bound(*ub);
                                            b.set_cumulative_count(cum);
                                            b
                                        })
                                        .collect(),
                                );
                                ph.set_sample_sum(h.sum);
                                ph.set_sample_count(h.count);
                                m.set_histogram(ph);
                            }
                        }
                        m
                    })
                    .collect();
                mf.set_metric(metrics);
                mf
            })
            .collect()
    }
}

/// Last absolute values seen by the delta setters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Baselines {
    /// `CorrelatorStats::late_events` at the last call.
    pub late_events: u64,
    /// `CorrelatorStats::evicted_turns` at the last call.
    pub evicted_turns: u64,
    /// `CorrelatorStats::after_close_events` at the last call.
    pub after_close_events: u64,
    /// OTLP exporter counters at the last call (process-local: never snapshotted).
    pub otlp: [u64; 3],
}

/// Move a counter by the growth of an absolute value. A value below the baseline means its
/// source restarted from zero, so all of it is new.
pub fn delta(last: &mut u64, now: u64) -> u64 {
    let d = if now >= *last { now - *last } else { now };
    *last = now;
    d
}

/// Lock, recovering from a poisoned mutex (a panic elsewhere must not stop scrapes).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Exposes a shared [`Table`] to a prometheus registry.
pub struct StateCollector<S: Send + 'static> {
    descs: Vec<Desc>,
    state: Arc<Mutex<S>>,
    read: fn(&S) -> &Table,
}

impl<S: Send + 'static> StateCollector<S> {
    pub fn new(state: Arc<Mutex<S>>, read: fn(&S) -> &Table) -> prometheus::Result<Self> {
        let descs = FAMILIES
            .iter()
            .map(|f| {
                Desc::new(
                    f.name.to_owned(),
                    f.help.to_owned(),
                    f.labels.iter().map(|l| (*l).to_owned()).collect(),
                    HashMap::new(),
                )
            })
            .collect::<prometheus::Result<Vec<_>>>()?;
        Ok(StateCollector { descs, state, read })
    }
}

impl<S: Send + 'static> Collector for StateCollector<S> {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<proto::MetricFamily> {
        let state = lock(&self.state);
        (self.read)(&state).to_protos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter() -> usize {
        FAMILIES
            .iter()
            .position(|f| matches!(f.kind, Kind::Counter) && f.labels.len() == 2)
            .expect("a counter with two labels")
    }

    #[test]
    fn a_series_is_found_again_whatever_put_it_there() {
        let fam = counter();
        let mut t = Table::new();
        t.add(fam, &["a", "b"], 1.0);
        t.add(fam, &["a", "b"], 2.0);
        // Label values that join to the same text are other series.
        t.add(fam, &["ab", ""], 5.0);
        assert_eq!(t.value(fam, &["a", "b"]), Some(3.0));
        assert_eq!(t.value(fam, &["ab", ""]), Some(5.0));
        // A series put in the map directly (as a restore does), and one whose index entry
        // names other labels (as a hash collision would): both updated in place.
        t.families[fam].insert(vec!["c".into(), "d".into()], Series::Value(10.0));
        t.add(fam, &["c", "d"], 1.0);
        assert_eq!(t.value(fam, &["c", "d"]), Some(11.0));
        let hash = FastState::default().hash_one(["e", "f"].as_slice());
        t.index[fam].insert(hash, vec!["x".into(), "y".into()]);
        t.add(fam, &["e", "f"], 1.0);
        t.add(fam, &["e", "f"], 1.0);
        assert_eq!(t.value(fam, &["e", "f"]), Some(2.0));
        assert_eq!(t.value(fam, &["x", "y"]), None);
        // A map emptied under the index (a restore starting afresh): created again.
        t.families[fam].clear();
        t.add(fam, &["a", "b"], 1.0);
        assert_eq!(t.value(fam, &["a", "b"]), Some(1.0));
    }
}
