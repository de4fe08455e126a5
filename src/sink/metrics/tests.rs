//! Unit tests of the metrics sink, fed by the real correlator on the bookstore examples.

use std::sync::Arc;

use super::*;
use retryscope_core::correlate::{
    Correlator, CorrelatorConfig, CorrelatorStats, Output, TurnLabels,
};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::native::{NativeLine, decode_line};
use retryscope_core::decode::{BadLineReason, SkipCounts};
use retryscope_core::finding::{Finding, FindingKind};
use retryscope_core::report::TurnReport;

mod health;
mod labels;
mod preregister;
mod snapshot;
mod turns;

const NAIVE: &str = include_str!("../../../examples/bookstore/naive.jsonl");
const RESET: &str = include_str!("../../../examples/bookstore/reset.jsonl");
const LATE: &str = include_str!("../../../examples/bookstore/reset-late-exec.jsonl");

const M: &str = "claude-sonnet-4-5";
const P: &str = "anthropic";
/// The bookstore examples' `agent`.
const A: &str = "help-desk";

/// Correlator outputs of a log, as in `correlate/tests.rs`.
fn outputs(lines: &str) -> Vec<Output> {
    let cfg = CorrelatorConfig {
        idle_timeout_ms: None,
        ..CorrelatorConfig::default()
    };
    let mut c = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    for (i, line) in lines.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        match decode_line(line.as_bytes(), &mut skips) {
            Ok(NativeLine::Event(ev)) => c.observe(&ev, 1_000 + i as i64, &mut out),
            other => panic!("line {i} did not decode: {other:?}"),
        }
    }
    c.close_all(&mut out);
    out
}

fn report(out: &[Output]) -> &TurnReport {
    out.iter()
        .find_map(|o| match o {
            Output::TurnClosed(r) => Some(&**r),
            _ => None,
        })
        .expect("a closed turn")
}

fn metrics() -> Metrics {
    Metrics::new(MetricsConfig::default()).unwrap()
}

fn fed(lines: &str) -> (Metrics, Vec<Output>) {
    let m = metrics();
    let out = outputs(lines);
    for o in &out {
        m.observe(o);
    }
    (m, out)
}

fn v(m: &Metrics, name: &str, labels: &[&str]) -> f64 {
    m.value(name, labels)
        .unwrap_or_else(|| panic!("no series {name}{labels:?}"))
}

fn text(m: &Metrics) -> String {
    String::from_utf8(m.render().1).unwrap()
}

fn retry(model: &str, reason: Option<&str>) -> Output {
    Output::Retry {
        labels: TurnLabels {
            model: Some(model.to_owned()),
            provider: Some(P.to_owned()),
            agent: None,
        },
        reason: reason.map(str::to_owned),
    }
}

fn busy() -> Metrics {
    let m = Metrics::new(MetricsConfig {
        max_models: 1,
        ..MetricsConfig::default()
    })
    .unwrap();
    for log in [NAIVE, RESET, LATE] {
        for o in outputs(log) {
            m.observe(&o);
        }
    }
    m.observe(&retry("overflowing-model", Some("overloaded")));
    m.set_correlator_stats(
        &CorrelatorStats {
            late_events: 2,
            ..CorrelatorStats::default()
        },
        1,
    );
    m.set_source_lag_bytes(Source::Stdin, 12);
    m
}
