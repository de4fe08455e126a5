//! The metric state: plain maps that are the single source of truth, exposed to the
//! prometheus registry through a custom [`Collector`], and snapshotted as they are.
//!
//! Keeping the values here (rather than in prometheus' atomic types) is what makes
//! [`super::Metrics::restore`] exact: histogram buckets and float sums cannot be set back
//! into `prometheus::Histogram`, but a map can.

use std::collections::HashMap;
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
    families: Vec<Family>,
}

/// One family's series.
///
/// Updating a series is one hash lookup that allocates nothing: a map keyed by owned label
/// values cost an owned key per update (a fifteenth of a busy collector's time), and a
/// `BTreeMap` of them, found through a hash index, still cost two ordered searches of
/// string comparisons per update (6–8% of `run`'s and a collector's samples, `perf`,
/// `bench_nats`).
#[derive(Debug, Clone, Default)]
struct Family {
    /// The series, as they were created: label values and value.
    slots: Vec<(Vec<String>, Series)>,
    /// The slots in label order (the exposition's and the snapshot's order).
    order: Vec<usize>,
    /// A hash of a series' label values → the first slot created with that hash. Every
    /// slot's hash is here: a hash not found is a series that does not exist; one found
    /// naming other labels (a collision) is looked for among the slots.
    index: FastMap<u64, usize>,
}

fn hash_labels<S: AsRef<str>>(labels: &[S]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = FastState::default().build_hasher();
    labels.len().hash(&mut h);
    for l in labels {
        l.as_ref().hash(&mut h);
    }
    h.finish()
}

fn same<S: AsRef<str>>(key: &[String], labels: &[S]) -> bool {
    key.len() == labels.len() && key.iter().zip(labels).all(|(k, l)| k == l.as_ref())
}

impl Family {
    /// The slot of the series with these label values.
    fn find<S: AsRef<str>>(&self, hash: u64, labels: &[S]) -> Option<usize> {
        let first = *self.index.get(&hash)?;
        if self.slots.get(first).is_some_and(|(k, _)| same(k, labels)) {
            return Some(first);
        }
        // A collision: another series has this hash.
        self.slots.iter().position(|(k, _)| same(k, labels))
    }

    /// Add a series (not there yet) and return its slot.
    fn push(&mut self, hash: u64, key: Vec<String>, series: Series) -> usize {
        let slot = self.slots.len();
        let at = self
            .order
            .partition_point(|&i| self.slots.get(i).is_some_and(|(k, _)| *k < key));
        self.order.insert(at, slot);
        self.index.entry(hash).or_insert(slot);
        self.slots.push((key, series));
        slot
    }

    /// The series in label order.
    fn iter(&self) -> impl Iterator<Item = (&Vec<String>, &Series)> {
        self.order
            .iter()
            .filter_map(|&i| self.slots.get(i).map(|(k, s)| (k, s)))
    }
}

impl PartialEq for Table {
    fn eq(&self, other: &Self) -> bool {
        self.families.len() == other.families.len()
            && self
                .families
                .iter()
                .zip(&other.families)
                .all(|(a, b)| a.slots.len() == b.slots.len() && a.iter().eq(b.iter()))
    }
}

impl Table {
    pub fn new() -> Self {
        Table {
            families: FAMILIES.iter().map(|_| Family::default()).collect(),
        }
    }

    fn entry(&mut self, fam: usize, labels: &[&str]) -> &mut Series {
        debug_assert_eq!(
            labels.len(),
            FAMILIES[fam].labels.len(),
            "{}",
            FAMILIES[fam].name
        );
        let hash = hash_labels(labels);
        let family = &mut self.families[fam];
        let slot = match family.find(hash, labels) {
            Some(slot) => slot,
            None => {
                let key = labels.iter().map(|s| (*s).to_owned()).collect();
                let series = match FAMILIES[fam].kind {
                    Kind::Histogram(b) => Series::Hist(Hist::new(b.len())),
                    Kind::Counter | Kind::Gauge => Series::Value(0.0),
                };
                family.push(hash, key, series)
            }
        };
        &mut family.slots[slot].1
    }

    /// Put `series` under label values `key`, replacing what was there (a restore).
    pub fn insert(&mut self, fam: usize, key: Vec<String>, series: Series) {
        let hash = hash_labels(&key);
        let family = &mut self.families[fam];
        match family.find(hash, &key) {
            Some(slot) => family.slots[slot].1 = series,
            None => {
                family.push(hash, key, series);
            }
        }
    }

    /// Family `fam`'s series, in label order.
    pub fn series(&self, fam: usize) -> impl Iterator<Item = (&Vec<String>, &Series)> {
        self.families.get(fam).into_iter().flat_map(Family::iter)
    }

    /// The series with these label values.
    fn get(&self, fam: usize, labels: &[&str]) -> Option<&Series> {
        let family = self.families.get(fam)?;
        let slot = family.find(hash_labels(labels), labels)?;
        family.slots.get(slot).map(|(_, s)| s)
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
        match self.get(fam, labels)? {
            Series::Value(v) => Some(*v),
            Series::Hist(_) => None,
        }
    }

    /// A histogram series.
    pub fn hist(&self, fam: usize, labels: &[&str]) -> Option<&Hist> {
        match self.get(fam, labels)? {
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
                let series = series.iter();
                let mut mf = proto::MetricFamily::default();
                mf.set_name(fam.name.to_owned());
                mf.set_help(fam.help.to_owned());
                mf.set_field_type(match fam.kind {
                    Kind::Counter => proto::MetricType::COUNTER,
                    Kind::Gauge => proto::MetricType::GAUGE,
                    Kind::Histogram(_) => proto::MetricType::HISTOGRAM,
                });
                let metrics = series
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
        // A series a restore put there: updated in place, not doubled.
        t.insert(fam, vec!["c".into(), "d".into()], Series::Value(10.0));
        t.add(fam, &["c", "d"], 1.0);
        assert_eq!(t.value(fam, &["c", "d"]), Some(11.0));
        t.insert(fam, vec!["c".into(), "d".into()], Series::Value(4.0));
        assert_eq!(t.value(fam, &["c", "d"]), Some(4.0));
        // Listed once each, in label order whatever the order they came in.
        let keys: Vec<_> = t.series(fam).map(|(k, _)| k.join("|")).collect();
        assert_eq!(keys, ["a|b", "ab|", "c|d"]);
        assert_eq!(t.value(fam, &["x", "y"]), None);
    }

    #[test]
    fn series_whose_label_values_hash_alike_stay_apart() {
        // Every series under one hash, as colliding hashes would put them.
        let fam = counter();
        let mut family = Family::default();
        for (i, k) in ["b", "a", "c"].iter().enumerate() {
            assert_eq!(family.find(7, &[*k, "x"]), None);
            let slot = family.push(7, vec![(*k).into(), "x".into()], Series::Value(0.0));
            assert_eq!(slot, i);
        }
        for (i, k) in ["b", "a", "c"].iter().enumerate() {
            assert_eq!(family.find(7, &[*k, "x"]), Some(i));
        }
        assert_eq!(family.find(7, &["d", "x"]), None);
        let keys: Vec<_> = family.iter().map(|(k, _)| k[0].clone()).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        // Tables are equal by their series, whatever order they were created in.
        let (mut one, mut two) = (Table::new(), Table::new());
        one.add(fam, &["a", "b"], 1.0);
        one.add(fam, &["c", "d"], 2.0);
        two.add(fam, &["c", "d"], 2.0);
        two.add(fam, &["a", "b"], 1.0);
        assert_eq!(one, two);
        two.add(fam, &["a", "b"], 1.0);
        assert_ne!(one, two);
    }
}
