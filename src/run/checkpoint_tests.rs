//! Checkpoint format versions: what this build writes reads back whole, and older versions
//! still read.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::sink::metrics::{Metrics, MetricsConfig};
use retryscope_core::correlate::{Correlator, CorrelatorConfig};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::gemini_join::{SessionJoiner, Source};
use retryscope_core::event::{Event, EventKind};

fn checkpoint(joined: Option<JoinerSnapshot>) -> Checkpoint {
    let correlator = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
    Checkpoint::new(
        BTreeMap::new(),
        BTreeMap::from([("findings".to_owned(), 0.into())]),
        correlator.snapshot(),
        InputCounters::default(),
        7,
        Metrics::new(MetricsConfig::default())
            .expect("metrics")
            .snapshot(),
        joined,
        Vec::new(),
    )
}

#[test]
fn a_version_4_checkpoint_keeps_its_positions_under_the_names_of_the_sources_and_sinks() {
    let mut json = serde_json::to_value(checkpoint(None)).expect("json");
    let fields = json.as_object_mut().expect("an object");
    fields.remove("sources");
    fields.remove("sinks");
    fields.insert("version".into(), 4.into());
    let file = serde_json::json!({"path": "/var/log/a.jsonl", "dev": 1, "ino": 2,
        "fingerprint": 3, "fingerprint_len": 4, "offset": 5});
    fields.insert("files".into(), serde_json::json!([file]));
    fields.insert("findings_offset".into(), 12.into());
    fields.insert(
        "otlp_spool".into(),
        serde_json::json!({"segment": 3, "offset": 99}),
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(CHECKPOINT_FILE);
    std::fs::write(&path, serde_json::to_vec(&json).expect("bytes")).expect("write");
    let back = Checkpoint::load(&path).expect("load").expect("present");
    assert_eq!(back.sources.get("files"), Some(&serde_json::json!([file])));
    assert_eq!(
        back.otlp_spool(),
        Some(crate::source::otlp::SpoolPos {
            segment: 3,
            offset: 99
        })
    );
    assert_eq!(back.sinks.get("findings"), Some(&12.into()));
    // Written again, it is a version 5 checkpoint without the old fields.
    let again = serde_json::to_value(Checkpoint::new(
        back.sources.clone(),
        back.sinks.clone(),
        back.correlator.clone(),
        back.counters.clone(),
        back.clock_ms,
        back.metrics.clone(),
        None,
        Vec::new(),
    ))
    .expect("json");
    assert_eq!(again["version"], VERSION);
    for old in ["files", "findings_offset", "otlp_spool"] {
        assert!(again.get(old).is_none(), "{old} is not written");
    }
    assert_eq!(again["sources"]["otlp"]["segment"], 3);
}

#[test]
fn held_gemini_cli_events_survive_a_checkpoint() {
    let mut j = SessionJoiner::default();
    j.push(
        Source::Telemetry,
        &mut vec![Event::owned("s", Some(0), Some(5), EventKind::RenderReset)],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(CHECKPOINT_FILE);
    checkpoint(Some(j.snapshot())).write(&path).expect("write");
    let back = Checkpoint::load(&path).expect("load").expect("present");
    assert_eq!(back.joined, Some(j.snapshot()));
}

#[test]
fn a_version_2_checkpoint_without_held_events_still_reads() {
    let mut json = serde_json::to_value(checkpoint(None)).expect("json");
    json["version"] = 2.into();
    assert!(json.get("joined").is_none());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(CHECKPOINT_FILE);
    std::fs::write(&path, serde_json::to_vec(&json).expect("bytes")).expect("write");
    let back = Checkpoint::load(&path).expect("load").expect("present");
    assert_eq!((back.version, back.joined), (2, None));
}

#[test]
fn a_version_3_checkpoint_without_routes_still_reads_its_turns_as_native() {
    use retryscope_core::correlate::Output;
    let mut c = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
    let mut out: Vec<Output> = Vec::new();
    c.set_route(7);
    c.observe(
        &Event::owned("t", Some(0), Some(5), EventKind::RenderReset),
        5,
        &mut out,
    );
    let mut cp = checkpoint(None);
    cp.correlator = c.snapshot();
    let mut json = serde_json::to_value(&cp).expect("json");
    assert_eq!(
        json["correlator"]["turns"][0]["route"], 7,
        "routes are written"
    );
    json["version"] = 3.into();
    json["correlator"]["turns"][0]
        .as_object_mut()
        .expect("a turn")
        .remove("route");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(CHECKPOINT_FILE);
    std::fs::write(&path, serde_json::to_vec(&json).expect("bytes")).expect("write");
    let back = Checkpoint::load(&path).expect("load").expect("present");
    assert!(back.version < ROUTES_SINCE);
    let parts = back.correlator.split(2, |_, route| usize::from(route != 0));
    assert_eq!(
        (parts[0].open_turns(), parts[1].open_turns()),
        (1, 0),
        "route 0"
    );
}
