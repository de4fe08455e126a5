//! Unit tests of the correlator: every finding and edge, on native-format lines. The helpers
//! are here, the tests in one module per theme.

use std::sync::Arc;

use super::*;
use crate::decode::SkipCounts;
use crate::decode::native::{NativeLine, decode_line};
use crate::finding::{Finding, FindingKind};
use crate::report::{Outcome, TurnStatus, UsageSource};

fn cfg() -> CorrelatorConfig {
    CorrelatorConfig {
        idle_timeout_ms: None,
        ..CorrelatorConfig::default()
    }
}

fn run_with(cfg: CorrelatorConfig, lines: &str) -> (Vec<Output>, Vec<TurnReport>, Correlator) {
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
    let reports = out
        .iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some((**r).clone()),
            _ => None,
        })
        .collect();
    (out, reports, c)
}

fn run(lines: &str) -> (Vec<Output>, Vec<TurnReport>) {
    let (o, r, _) = run_with(cfg(), lines);
    (o, r)
}

fn kinds(r: &TurnReport) -> Vec<FindingKind> {
    let mut k: Vec<FindingKind> = r.findings.iter().map(|f| f.kind).collect();
    k.sort();
    k
}

const NAIVE: &str = include_str!("../../../../examples/bookstore/naive.jsonl");
const RESET: &str = include_str!("../../../../examples/bookstore/reset.jsonl");
const LATE: &str = include_str!("../../../../examples/bookstore/reset-late-exec.jsonl");

mod billing;
mod bookstore;
mod executions;
mod findings;
mod lifecycle;
mod splice;
mod state;
