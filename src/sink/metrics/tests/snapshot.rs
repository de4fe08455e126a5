//! Snapshot and restore: byte-identical renders, old versions, refusals, exact floats.

use super::*;

#[test]
fn snapshot_json_restore_renders_identically() {
    let m = busy();
    let json = serde_json::to_string(&m.snapshot()).unwrap();
    let snap: MetricsSnapshot = serde_json::from_str(&json).unwrap();
    let fresh = Metrics::new(MetricsConfig {
        max_models: 1,
        ..MetricsConfig::default()
    })
    .unwrap();
    fresh.restore(&snap).unwrap();
    assert_eq!(text(&fresh), text(&m));
    assert_eq!(fresh.snapshot(), m.snapshot());
    // The restored guards and baselines behave like the original's.
    for target in [&m, &fresh] {
        target.observe(&retry("yet-another-model", None));
        target.set_correlator_stats(
            &CorrelatorStats {
                late_events: 5,
                ..CorrelatorStats::default()
            },
            0,
        );
    }
    assert_eq!(text(&fresh), text(&m));
    assert_eq!(fresh.value("retryscope_late_events_total", &[]), Some(5.0));
}

#[test]
fn kill_and_restore_mid_stream_ends_like_an_uninterrupted_run() {
    let all: Vec<Output> = [NAIVE, RESET, LATE]
        .iter()
        .flat_map(|l| outputs(l))
        .collect();
    let straight = metrics();
    for o in &all {
        straight.observe(o);
    }
    for cut in [1, all.len() / 2, all.len() - 1] {
        let first = metrics();
        for o in &all[..cut] {
            first.observe(o);
        }
        let json = serde_json::to_vec(&first.snapshot()).unwrap();
        drop(first);
        let second = metrics();
        second
            .restore(&serde_json::from_slice(&json).unwrap())
            .unwrap();
        for o in &all[cut..] {
            second.observe(o);
        }
        assert_eq!(text(&second), text(&straight), "cut at {cut}");
    }
}

#[test]
fn a_version_1_snapshot_with_its_unused_input_baselines_still_restores() {
    let m = busy();
    let mut v1 = serde_json::to_value(m.snapshot()).unwrap();
    v1["version"] = 1.into();
    v1["last_input"] = serde_json::json!({"file": {"lines": 3}});
    if let Some(o) = v1.as_object_mut() {
        o.remove("last_after_close_events");
    }
    let snap: MetricsSnapshot = serde_json::from_value(v1).unwrap();
    let fresh = metrics();
    fresh.restore(&snap).unwrap();
    assert_eq!(text(&fresh), text(&m));
}

#[test]
fn restore_rejects_snapshots_that_do_not_fit() {
    let m = busy();
    let before = text(&m);
    let mut bad = m.snapshot();
    bad.values[0].labels.push("extra".into());
    assert!(matches!(m.restore(&bad), Err(MetricsError::Snapshot(_))));
    let mut bad = m.snapshot();
    bad.histograms[0].buckets.pop();
    assert!(m.restore(&bad).is_err());
    let mut bad = m.snapshot();
    bad.values[0].name = "retryscope_nope_total".into();
    assert!(m.restore(&bad).is_err());
    let mut bad = m.snapshot();
    bad.version = 99;
    assert!(m.restore(&bad).is_err());
    assert_eq!(text(&m), before, "a failed restore changes nothing");
}

#[test]
fn floats_survive_the_snapshot_bit_for_bit() {
    for x in [
        0.1 + 0.2,
        0.0030803999999999996,
        1e-300,
        123_456_789.123_456_79,
    ] {
        let s = serde_json::to_string(&Float(x)).unwrap();
        let back: Float = serde_json::from_str(&s).unwrap();
        assert_eq!(back.0.to_bits(), x.to_bits(), "{s}");
    }
    let n: Float = serde_json::from_str("2.5").unwrap();
    assert_eq!(n.0, 2.5);
}

#[test]
fn a_version_2_snapshot_without_agents_restores_as_agent_unknown() {
    let m = busy();
    let mut v2 = m.snapshot();
    v2.version = 2;
    let agent_first =
        |name: &str| FAMILIES[family::by_name(name).unwrap()].labels.first() == Some(&"agent");
    // One agent (help-desk) plus the pre-registered unknown ones: keep help-desk's, as a
    // version 2 collector would have counted them without the label.
    v2.values
        .retain(|v| !agent_first(&v.name) || v.labels[0] != UNKNOWN);
    for v in &mut v2.values {
        if agent_first(&v.name) {
            v.labels.remove(0);
        }
    }
    v2.guards.remove("agent");
    let fresh = metrics();
    fresh.restore(&v2).unwrap();
    let turns = |m: &Metrics, a: &str| {
        m.value("retryscope_turns_total", &[a, M, P, "completed"])
            .unwrap_or(0.0)
    };
    assert!(turns(&m, A) > 0.0);
    assert_eq!(turns(&fresh, UNKNOWN), turns(&m, A));
    assert!(
        !text(&fresh).contains("agent=\"help-desk\""),
        "a pre-agent snapshot knows no agent"
    );
}

#[test]
fn a_snapshot_leaves_out_the_zero_series_a_restore_creates_and_keeps_the_others() {
    // A fresh partition's state was 26 KB of zero series, in every checkpoint.
    let fresh = metrics();
    let snap = fresh.snapshot();
    let json = serde_json::to_vec(&snap).unwrap();
    assert!(json.len() < 2_000, "{} bytes", json.len());
    assert!(
        snap.values.iter().all(|v| v.value.0 != 0.0),
        "{:?}",
        snap.values
    );
    assert!(snap.histograms.is_empty());
    let restored = metrics();
    restored
        .restore(&serde_json::from_slice(&json).unwrap())
        .unwrap();
    assert_eq!(text(&restored), text(&fresh));

    // A zero series created by use (a model's) is kept: a restore would not create it.
    let (m, _) = fed(NAIVE);
    m.set_source_lag_bytes(Source::Stdin, 12);
    m.set_source_lag_bytes(Source::Stdin, 0);
    let snap = m.snapshot();
    assert!(
        snap.values
            .iter()
            .any(|v| v.value.0 == 0.0 && v.labels.iter().any(|l| l == M)),
        "no zero series of model {M} kept"
    );
    // A pre-registered gauge back at zero is left out, and restored the same.
    let restored = metrics();
    restored.restore(&snap).unwrap();
    assert_eq!(text(&restored), text(&m));
    assert_eq!(restored.snapshot(), snap);
}

#[test]
fn a_restore_keeps_the_serving_builds_info_whatever_the_snapshot_says() {
    let me = env!("CARGO_PKG_VERSION");
    // A sum of eight partitions' snapshots (a NATS collector), and one an older build wrote.
    let eight = super::super::sum_snapshots(&vec![metrics().snapshot(); 8]);
    let mut older = metrics().snapshot();
    for v in &mut older.values {
        if v.name == "retryscope_build_info" {
            v.labels = vec!["0.0.1".into()];
        }
    }
    for snap in [eight, older] {
        let m = metrics();
        m.restore(&snap).unwrap();
        assert_eq!(m.value("retryscope_build_info", &[me]), Some(1.0));
        assert_eq!(m.value("retryscope_build_info", &["0.0.1"]), None);
        assert_eq!(text(&m).matches("retryscope_build_info{").count(), 1);
    }
}
