//! Adding metric snapshots: the series of several partitions' metrics summed into one, so a
//! collector that owns some partitions serves exactly their total (every family is a counter,
//! a gauge of quantities, or a histogram, and all of them add).

use std::collections::{BTreeMap, BTreeSet};

use super::snapshot::{Float, HistogramSnapshot, MetricsSnapshot, SNAPSHOT_VERSION, ValueSnapshot};

/// A series' identity: family name and label values.
type Key = (String, Vec<String>);
/// A histogram being summed: buckets, sum, count.
type HistSum = (Vec<u64>, f64, u64);

/// The sum of `snaps`, series by series (matched by family name and label values).
pub fn sum_snapshots(snaps: &[MetricsSnapshot]) -> MetricsSnapshot {
    let mut values: BTreeMap<Key, f64> = BTreeMap::new();
    let mut hists: BTreeMap<Key, HistSum> = BTreeMap::new();
    let mut guards: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut sum = MetricsSnapshot {
        version: SNAPSHOT_VERSION,
        values: Vec::new(),
        histograms: Vec::new(),
        guards: BTreeMap::new(),
        last_late_events: 0,
        last_evicted_turns: 0,
        last_after_close_events: 0,
    };
    for s in snaps {
        for v in &s.values {
            *values
                .entry((v.name.clone(), v.labels.clone()))
                .or_default() += v.value.0;
        }
        for h in &s.histograms {
            let e = hists
                .entry((h.name.clone(), h.labels.clone()))
                .or_insert_with(|| (vec![0; h.buckets.len()], 0.0, 0));
            if e.0.len() < h.buckets.len() {
                e.0.resize(h.buckets.len(), 0);
            }
            for (acc, b) in e.0.iter_mut().zip(&h.buckets) {
                *acc += b;
            }
            e.1 += h.sum.0;
            e.2 += h.count;
        }
        for (label, admitted) in &s.guards {
            guards
                .entry(label.clone())
                .or_default()
                .extend(admitted.iter().cloned());
        }
        sum.last_late_events += s.last_late_events;
        sum.last_evicted_turns += s.last_evicted_turns;
        sum.last_after_close_events += s.last_after_close_events;
    }
    sum.values = values
        .into_iter()
        .map(|((name, labels), v)| ValueSnapshot {
            name,
            labels,
            value: Float(v),
        })
        .collect();
    sum.histograms = hists
        .into_iter()
        .map(|((name, labels), (buckets, s, count))| HistogramSnapshot {
            name,
            labels,
            buckets,
            sum: Float(s),
            count,
        })
        .collect();
    sum.guards = guards
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().collect()))
        .collect();
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(v: f64, h: u64) -> MetricsSnapshot {
        MetricsSnapshot {
            version: SNAPSHOT_VERSION,
            values: vec![ValueSnapshot {
                name: "a".into(),
                labels: vec!["x".into()],
                value: Float(v),
            }],
            histograms: vec![HistogramSnapshot {
                name: "h".into(),
                labels: vec![],
                buckets: vec![h, 1],
                sum: Float(2.0),
                count: h + 1,
            }],
            guards: BTreeMap::from([("model".into(), vec!["m".into()])]),
            last_late_events: 1,
            last_evicted_turns: 0,
            last_after_close_events: 0,
        }
    }

    #[test]
    fn series_add_up_and_guards_unite() {
        let s = sum_snapshots(&[snap(1.5, 2), snap(2.0, 3)]);
        assert_eq!(s.values[0].value, Float(3.5));
        assert_eq!(s.histograms[0].buckets, vec![5, 2]);
        assert_eq!(s.histograms[0].count, 7);
        assert_eq!(s.histograms[0].sum, Float(4.0));
        assert_eq!(s.guards["model"], vec!["m".to_string()]);
        assert_eq!(s.last_late_events, 2);
        assert!(sum_snapshots(&[]).values.is_empty());
    }
}
