//! The synthetic fleet, checked through the real native decoder and correlator.
//!
//! Expectations about findings come from an independent reading of the generated lines
//! (plain `serde_json`), not from the generator's internals: which attempts were retried,
//! which of their calls were executed, and whether the turn finished.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use retryscope::demo::{Fleet, FleetConfig, Policy};
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::SkipCounts;
use retryscope_core::decode::native::{NativeLine, decode_line};
use retryscope_core::finding::{FindingKind, Severity};
use retryscope_core::report::{CloseReason, Outcome, TurnReport};
use serde_json::Value;

fn generate(cfg: FleetConfig, turns: usize) -> (String, Fleet) {
    let mut fleet = Fleet::new(cfg);
    let mut out = Vec::new();
    fleet
        .write_turns(turns, &mut out)
        .expect("writing to a Vec");
    (String::from_utf8(out).expect("UTF-8"), fleet)
}

/// Every line through the native decoder (no bad line, no unknown field or type) and the
/// correlator, with event time as arrival time.
fn correlate(log: &str) -> Vec<TurnReport> {
    let cfg = CorrelatorConfig {
        idle_timeout_ms: None,
        ..CorrelatorConfig::default()
    };
    let mut c = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut skips = SkipCounts::default();
    let mut out = Vec::new();
    let mut reports = Vec::new();
    for (i, line) in log.lines().enumerate() {
        match decode_line(line.as_bytes(), &mut skips) {
            Ok(NativeLine::Event(ev)) => {
                let now = ev.ts_ms.expect("every generated event has a ts");
                c.observe(&ev, now, &mut out);
            }
            other => panic!(
                "line {} did not decode to an event: {other:?}\n{line}",
                i + 1
            ),
        }
        take_reports(&mut out, &mut reports);
    }
    c.close_all(&mut out);
    take_reports(&mut out, &mut reports);
    assert_eq!(skips, SkipCounts::default(), "unknown fields or types");
    reports
}

fn take_reports(out: &mut Vec<Output>, reports: &mut Vec<TurnReport>) {
    for o in out.drain(..) {
        if let Output::TurnClosed(r) = o {
            reports.push(*r);
        }
    }
}

/// What the lines themselves say about one turn.
#[derive(Debug, Default)]
struct Truth {
    agent: String,
    /// Highest attempt number seen.
    last_attempt: u32,
    /// (attempt, is a read) of every execution.
    execs: Vec<(u32, bool)>,
    finished: bool,
}

impl Truth {
    fn retried(&self) -> bool {
        self.last_attempt > 0
    }

    /// A write call of an attempt that a later attempt replaced was executed.
    fn abandoned_write_executed(&self) -> bool {
        self.execs
            .iter()
            .any(|&(a, read)| !read && a < self.last_attempt)
    }
}

fn truths(log: &str) -> HashMap<String, Truth> {
    let mut t: HashMap<String, Truth> = HashMap::new();
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).expect("JSON");
        let turn = v["turn"].as_str().expect("turn").to_owned();
        let e = t.entry(turn).or_default();
        let attempt = v["attempt"].as_u64().map(|a| a as u32);
        if let Some(a) = attempt {
            e.last_attempt = e.last_attempt.max(a);
        }
        match v["type"].as_str().expect("type") {
            "turn_start" => e.agent = v["agent"].as_str().expect("agent").to_owned(),
            "tool_exec" => e
                .execs
                .push((attempt.expect("attempt"), v["effect"] == "read")),
            "finish" => e.finished = true,
            _ => {}
        }
    }
    t
}

fn has(r: &TurnReport, kind: FindingKind) -> bool {
    r.findings.iter().any(|f| f.kind == kind)
}

#[test]
fn every_line_decodes_and_a_seed_gives_identical_bytes() {
    for cfg in [FleetConfig::bench(42), FleetConfig::demo(42)] {
        let (a, _) = generate(cfg.clone(), 1_500);
        let (b, _) = generate(cfg.clone(), 1_500);
        assert!(a == b, "same seed, different output");
        let (c, _) = generate(FleetConfig { seed: 43, ..cfg }, 1_500);
        assert_ne!(a, c, "the seed must matter");
        let reports = correlate(&a);
        assert_eq!(reports.len(), 1_500);
        // Realism the decoder has to cope with: escapes and non-ASCII text.
        assert!(a.contains(r#"\""#) && a.contains(r"\n") && a.contains(r"\\"));
        assert!(a.contains('é') && a.contains('—') && a.contains("ノルウェイ"));
    }
}

#[test]
fn findings_follow_each_policy() {
    let cfg = FleetConfig {
        retry_rate: 0.3,
        tool_call_rate: 0.9,
        ..FleetConfig::demo(7)
    };
    let (log, fleet) = generate(cfg, 4_000);
    let policy: HashMap<String, Policy> = fleet
        .agents()
        .iter()
        .map(|a| (a.name.clone(), a.policy))
        .collect();
    let truth = truths(&log);
    let reports = correlate(&log);
    // (turns with retries, spliced, abandoned executed, duplicate) per policy.
    let mut seen: HashMap<Policy, [u32; 4]> = HashMap::new();
    for r in &reports {
        let t = &truth[&r.turn];
        let p = policy[&t.agent];
        assert_eq!(r.agent.as_deref(), Some(t.agent.as_str()));
        let spliced = has(r, FindingKind::SplicedText);
        let abandoned = has(r, FindingKind::AbandonedToolExecuted);
        let duplicate = has(r, FindingKind::DuplicateEffect);
        let counts = seen.entry(p).or_default();
        counts[0] += u32::from(t.retried());
        counts[1] += u32::from(spliced);
        counts[2] += u32::from(abandoned);
        counts[3] += u32::from(duplicate);
        let worst = r.findings.iter().map(|f| f.severity).max();
        if !t.retried() {
            assert!(worst < Some(Severity::High), "{p:?} without retry: {r:#?}");
        }
        match p {
            Policy::ResetLateExec => {
                assert!(worst < Some(Severity::Critical), "late exec: {r:#?}");
                assert!(!spliced, "late exec spliced: {r:#?}");
            }
            Policy::Naive => {
                if t.retried() && t.finished {
                    assert!(spliced, "naive retry without spliced_text: {r:#?}");
                }
                assert_eq!(abandoned, t.abandoned_write_executed(), "{r:#?}");
            }
            Policy::Reset => {
                assert!(!spliced, "reset spliced: {r:#?}");
                assert_eq!(abandoned, t.abandoned_write_executed(), "{r:#?}");
                if t.abandoned_write_executed() && t.finished {
                    assert!(duplicate, "reset: the retry repeats the write: {r:#?}");
                }
            }
        }
    }
    // Every policy actually met retries, and the findings the demo promises occurred.
    for p in Policy::ALL {
        let [retried, ..] = seen[&p];
        assert!(retried > 100, "{p:?}: only {retried} retried turns");
    }
    assert!(seen[&Policy::Naive][1] > 100, "{seen:?}");
    assert!(seen[&Policy::Naive][2] > 20, "{seen:?}");
    assert!(
        seen[&Policy::Reset][2] > 20 && seen[&Policy::Reset][3] > 20,
        "{seen:?}"
    );
}

/// Attempts that broke (abandoned by a retry, or failed at the end of a storm) / all attempts.
fn realized_retry_rate(reports: &[TurnReport]) -> f64 {
    let attempts: Vec<Outcome> = reports
        .iter()
        .flat_map(|r| r.attempts.iter().map(|a| a.outcome))
        .collect();
    let broken = attempts
        .iter()
        .filter(|o| matches!(o, Outcome::Abandoned | Outcome::Failed))
        .count();
    broken as f64 / attempts.len() as f64
}

#[test]
fn realized_retry_rate_is_near_the_configured_one() {
    for (cfg, tolerance) in [(FleetConfig::bench(3), 0.01), (FleetConfig::demo(3), 0.02)] {
        let (log, _) = generate(cfg.clone(), 10_000);
        let reports = correlate(&log);
        let rate = realized_retry_rate(&reports);
        assert!(
            (rate - cfg.retry_rate).abs() < tolerance,
            "configured {}, realized {rate:.4}",
            cfg.retry_rate
        );
        // Storms exceed the retry cap, but never the configured attempt limit.
        let storms = reports
            .iter()
            .filter(|r| has(r, FindingKind::RetryCapExceeded))
            .count();
        assert!(storms > 0, "no storm in 10k turns");
        assert!(
            reports
                .iter()
                .all(|r| r.attempts.len() <= cfg.max_attempts as usize)
        );
    }
}

#[test]
fn concurrent_turns_interleave_in_time_order() {
    let cfg = FleetConfig::bench(5);
    let interleave = cfg.interleave;
    let (log, _) = generate(cfg, 2_000);
    let mut open: HashSet<String> = HashSet::new();
    let mut max_open = 0;
    let mut last_ts = i64::MIN;
    let mut turn_last_ts: HashMap<String, i64> = HashMap::new();
    let mut alternations = 0;
    let mut prev: Option<String> = None;
    for line in log.lines() {
        let v: Value = serde_json::from_str(line).expect("JSON");
        let turn = v["turn"].as_str().expect("turn").to_owned();
        let ts = v["ts"].as_i64().expect("integer ms");
        assert!(ts >= last_ts, "event time went backwards: {line}");
        last_ts = ts;
        let t = turn_last_ts.entry(turn.clone()).or_insert(ts);
        assert!(ts >= *t);
        *t = ts;
        // A line of a turn that was already open, right after a line of another turn.
        if prev.as_ref().is_some_and(|p| *p != turn) && open.contains(&turn) {
            alternations += 1;
        }
        match v["type"].as_str() {
            Some("turn_start") => {
                open.insert(turn.clone());
            }
            Some("turn_end") => {
                open.remove(&turn);
            }
            _ => {}
        }
        max_open = max_open.max(open.len());
        prev = Some(turn);
    }
    assert!(
        max_open >= 2 && max_open <= interleave,
        "max open {max_open}"
    );
    assert!(max_open >= interleave / 2, "max open {max_open}");
    assert!(alternations > 10_000, "{alternations} alternations");
    assert!(open.is_empty(), "write_turns left turns open: {open:?}");
}

#[test]
fn bench_lines_and_fragments_have_realistic_sizes() {
    let (log, _) = generate(FleetConfig::bench(9), 3_000);
    let (mut lines, mut bytes, mut text_lines, mut text_bytes) = (0usize, 0usize, 0usize, 0usize);
    // Text fragments of each attempt that finished.
    let mut fragments: HashMap<(String, u64), usize> = HashMap::new();
    let mut finished: Vec<(String, u64)> = Vec::new();
    for line in log.lines() {
        lines += 1;
        bytes += line.len();
        let v: Value = serde_json::from_str(line).expect("JSON");
        let key = || {
            (
                v["turn"].as_str().expect("turn").to_owned(),
                v["attempt"].as_u64().expect("attempt"),
            )
        };
        match v["type"].as_str() {
            Some("text") => {
                text_lines += 1;
                text_bytes += line.len();
                *fragments.entry(key()).or_default() += 1;
            }
            Some("finish") => finished.push(key()),
            _ => {}
        }
    }
    let avg = bytes as f64 / lines as f64;
    let avg_text = text_bytes as f64 / text_lines as f64;
    assert!(
        (100.0..=140.0).contains(&avg),
        "average line {avg:.1} bytes"
    );
    assert!(
        (105.0..=130.0).contains(&avg_text),
        "average text line {avg_text:.1} bytes"
    );
    let per_attempt = finished
        .iter()
        .map(|k| fragments.get(k).copied().unwrap_or(0))
        .sum::<usize>() as f64
        / finished.len() as f64;
    assert!(
        (18.0..=22.0).contains(&per_attempt),
        "{per_attempt:.1} fragments per finished attempt"
    );
}

#[test]
fn write_turns_writes_whole_turns_and_continues_where_it_stopped() {
    let mut fleet = Fleet::new(FleetConfig::demo(1));
    let mut first = Vec::new();
    fleet.write_turns(50, &mut first).expect("write");
    // A few lines by hand leave turns in flight; the next batch completes them.
    let mut by_hand = String::new();
    for _ in 0..40 {
        assert!(fleet.next_line(&mut by_hand));
        by_hand.push('\n');
    }
    assert!(fleet.in_flight() > 0);
    let mut second = Vec::new();
    fleet.write_turns(100, &mut second).expect("write");
    assert_eq!(fleet.in_flight(), 0);
    let mut log = String::from_utf8(first).expect("UTF-8");
    log.push_str(&by_hand);
    log.push_str(&String::from_utf8(second).expect("UTF-8"));
    let reports = correlate(&log);
    assert_eq!(reports.len(), 150);
    assert!(reports.iter().all(|r| r.closed_by == CloseReason::TurnEnd));
    let ids: HashSet<&str> = reports.iter().map(|r| r.turn.as_str()).collect();
    assert_eq!(ids.len(), 150, "turn ids must be unique");
    let stats = fleet.stats();
    assert_eq!((stats.turns_started, stats.turns_completed), (150, 150));
    assert_eq!(stats.events as usize, log.lines().count());
}

#[test]
fn a_bounded_fleet_ends_and_odd_settings_are_clamped() {
    let mut fleet = Fleet::new(FleetConfig {
        agents: 0,
        interleave: 0,
        fragments_per_attempt: 0,
        retry_rate: f64::NAN,
        tool_call_rate: 7.0,
        max_attempts: 0,
        turn_gap_ms: -5,
        turn_limit: Some(20),
        ..FleetConfig::demo(2)
    });
    let mut log = String::new();
    while fleet.next_line(&mut log) {
        log.push('\n');
    }
    assert!(
        !fleet.next_line(&mut log),
        "an exhausted fleet stays exhausted"
    );
    assert_eq!(fleet.stats().turns_completed, 20);
    let reports = correlate(&log);
    assert_eq!(reports.len(), 20);
    assert!(reports.iter().all(|r| r.attempts.len() == 1));
}
