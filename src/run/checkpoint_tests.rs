//! Checkpoint format versions: what this build writes reads back whole, and older versions
//! still read.

use std::sync::Arc;

use super::*;
use crate::correlate::{Correlator, CorrelatorConfig};
use crate::cost::PriceTable;
use crate::decode::gemini_join::{SessionJoiner, Source};
use crate::event::{Event, EventKind};
use crate::sink::metrics::{Metrics, MetricsConfig};

fn checkpoint(joined: Option<JoinerSnapshot>) -> Checkpoint {
    let correlator = Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin()));
    Checkpoint {
        version: VERSION,
        files: Vec::new(),
        correlator: correlator.snapshot(),
        counters: InputCounters::default(),
        clock_ms: 7,
        metrics: Metrics::new(MetricsConfig::default())
            .expect("metrics")
            .snapshot(),
        findings_offset: Some(0),
        otlp_spool: None,
        joined,
    }
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
