//! Zero series: every family on the first scrape, and each subsystem's label values registered
//! by that subsystem.

use super::*;

#[test]
fn every_family_is_present_on_the_first_scrape() {
    let t = text(&metrics());
    for fam in FAMILIES {
        let kind = match fam.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram(_) => "histogram",
        };
        assert!(
            t.contains(&format!("# TYPE {} {kind}\n", fam.name)),
            "{} missing",
            fam.name
        );
    }
    assert!(t.contains(&format!(
        "retryscope_build_info{{version=\"{}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    )));
    assert!(t.contains(
        "retryscope_findings_total{agent=\"unknown\",kind=\"spliced_text\",severity=\"high\",tool=\"\"} 0\n"
    ));
    assert!(t.contains("retryscope_bad_lines_total{source=\"stdin\",reason=\"too_long\"} 0\n"));
    // A cut of a request with or without tools: a counter Prometheus first sees at 1 shows no
    // increase (the e2e dashboard check found the tools="false" panel empty).
    for tools in ["true", "false"] {
        assert!(t.contains(&format!(
            "retryscope_proxy_injected_cuts_total{{point=\"mid-word\",how=\"reset\",tools=\"{tools}\"}} 0\n"
        )));
    }
    assert!(t.contains(
        "retryscope_turns_total{agent=\"unknown\",model=\"unknown\",provider=\"unknown\",status=\"failed\"} 0\n"
    ));
    // Nothing but zeros (and build_info) before any input.
    for line in t.lines().filter(|l| !l.starts_with('#')) {
        if !line.starts_with("retryscope_build_info") {
            assert!(line.ends_with(" 0"), "{line}");
        }
    }
}

#[test]
fn each_subsystem_registers_its_own_labels() {
    let bare = || Metrics::without_subsystems(MetricsConfig::default()).unwrap();
    let m = bare();
    let cuts = "retryscope_proxy_injected_cuts_total";
    let cut = ["mid-word", "reset", "false"];
    assert_eq!(m.value(cuts, &cut), None);
    assert!(
        !text(&m).contains(cuts),
        "a family without series is not exposed"
    );
    // The sink's own series are there: every family without labels, the turn-level ones.
    assert_eq!(m.value("retryscope_proxy_streams_total", &[]), Some(0.0));
    assert_eq!(
        m.value("retryscope_bad_lines_total", &["file", "too_long"]),
        Some(0.0)
    );

    crate::internal_events::ProxyCut::preregister(&m);
    assert_eq!(m.value(cuts, &cut), Some(0.0));
    let prefix = format!("{cuts}{{");
    assert_eq!(
        text(&m).lines().filter(|l| l.starts_with(&prefix)).count(),
        18,
        "3 points, 3 ways, with and without tools"
    );
    // Only the proxy's: the other subsystems have not registered theirs.
    assert_eq!(m.value("retryscope_file_errors_total", &["read"]), None);
    assert_eq!(
        m.value("retryscope_otlp_receiver_records_total", &["logs"]),
        None
    );
    assert_eq!(m.value("retryscope_listener_connections", &["proxy"]), None);

    // A checkpoint does not store them while they are zero: a restore creates them.
    let stored = |m: &Metrics| -> Vec<Vec<String>> {
        let snap = m.snapshot();
        let v = snap.values.into_iter().filter(|v| v.name == cuts);
        v.map(|v| v.labels).collect()
    };
    assert_eq!(stored(&m), Vec::<Vec<String>>::new());
    m.restore(&m.snapshot()).unwrap();
    assert_eq!(m.value(cuts, &cut), Some(0.0));

    // A restore keeps what was registered, even from a snapshot that lacks it.
    m.restore(&bare().snapshot()).unwrap();
    assert_eq!(m.value(cuts, &cut), Some(0.0));

    // Every subsystem's registration together is what a process's metrics expose.
    crate::internal_events::TailerReport::preregister(&m);
    crate::internal_events::OtlpReport::preregister(&m);
    crate::listener::Gate::preregister(&m);
    assert_eq!(text(&m), text(&metrics()));
}
