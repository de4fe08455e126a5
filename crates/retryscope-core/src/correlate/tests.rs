//! Unit tests of the correlator: every finding and edge, on native-format lines.

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

#[test]
fn bookstore_naive_splices_and_refunds_twice() {
    let (_, reports) = run(NAIVE);
    let r = &reports[0];
    assert_eq!(
        kinds(r),
        vec![
            FindingKind::AbandonedToolExecuted,
            FindingKind::UnfinishedToolExecuted,
            FindingKind::DuplicateEffect,
            FindingKind::SplicedText,
            FindingKind::EarlyExecution,
            FindingKind::EarlyExecution,
        ]
    );
    let spliced = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::SplicedText)
        .unwrap();
    assert_eq!(spliced.evidence, "output");
    assert_eq!(spliced.attempt, Some(0));
    let abandoned = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::AbandonedToolExecuted)
        .unwrap();
    assert_eq!(abandoned.call_id.as_deref(), Some("c1"));
    assert_eq!(abandoned.tool.as_deref(), Some("issue_refund"));
    // c1 and c7 have different ids and key orders but one effect key.
    let k1 = &r.attempts[0].tool_calls[0].effect_key;
    let k7 = &r.attempts[1].tool_calls[0].effect_key;
    assert_eq!(k1, k7);
    let dup = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::DuplicateEffect)
        .unwrap();
    assert_eq!(dup.call_id.as_deref(), Some("c7"));
    assert_eq!(dup.effect_key.as_ref(), Some(k1));
    assert_eq!(r.status, TurnStatus::Completed);
    assert_eq!(r.retries, 1);
    assert_eq!(r.attempts[0].outcome, Outcome::Abandoned);
    assert_eq!(r.attempts[1].outcome, Outcome::Completed);
}

#[test]
fn bookstore_reset_clean_text_but_refunds_twice() {
    let (_, reports) = run(RESET);
    assert_eq!(
        kinds(&reports[0]),
        vec![
            FindingKind::AbandonedToolExecuted,
            FindingKind::UnfinishedToolExecuted,
            FindingKind::DuplicateEffect,
            FindingKind::EarlyExecution,
            FindingKind::EarlyExecution,
        ]
    );
}

#[test]
fn bookstore_reset_late_exec_is_clean_with_one_refund_from_attempt_1() {
    let (_, reports) = run(LATE);
    let r = &reports[0];
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    let executed: Vec<(u32, &str)> = r
        .attempts
        .iter()
        .flat_map(|a| a.executed.iter().map(move |e| (a.attempt, e.id.as_str())))
        .collect();
    assert_eq!(executed, vec![(1, "c7")]);
}

#[test]
fn abandoned_attempt_is_billed_by_estimate_and_counted_as_waste() {
    let (_, reports) = run(LATE);
    let r = &reports[0];
    let a0 = &r.attempts[0];
    assert_eq!(a0.usage.source, UsageSource::Estimated);
    // Input from attempt 1's report; output from the 42 characters of text.
    assert_eq!(a0.usage.tokens.input_tokens, 1250);
    assert_eq!(a0.usage.tokens.cached_input_tokens, 1024);
    assert!(a0.usage.tokens.output_tokens >= 42 / 4);
    assert_eq!(r.attempts[1].usage.source, UsageSource::Reported);
    let c0 = a0.cost_usd.expect("claude-sonnet-4-5 is priced");
    let c1 = r.attempts[1].cost_usd.expect("priced");
    assert!(c0 > 0.0 && c1 > 0.0);
    assert!((r.cost_usd - (c0 + c1)).abs() < 1e-12);
    assert!((r.wasted_cost_usd - c0).abs() < 1e-12);
}

#[test]
fn execution_logged_after_the_retry_is_still_abandoned() {
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"send_email","args":{"to":"x"}}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"send_email"}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#);
    let f = &reports[0].findings;
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].kind, FindingKind::AbandonedToolExecuted);
    assert_eq!(f[0].evidence, "executed after the attempt was abandoned");
    assert_eq!(f[1].kind, FindingKind::UnfinishedToolExecuted);
    assert_eq!(
        f[0].effect_key.as_deref(),
        Some(reports[0].attempts[0].tool_calls[0].effect_key.as_str())
    );
}

#[test]
fn findings_known_early_are_emitted_before_the_turn_closes() {
    let (out, _) = run(NAIVE);
    let first_close = out
        .iter()
        .position(|o| matches!(o, Output::TurnClosed(_)))
        .unwrap();
    let abandoned = out
        .iter()
        .position(
            |o| matches!(o, Output::Finding(f, _) if f.kind == FindingKind::AbandonedToolExecuted),
        )
        .unwrap();
    let retry = out
        .iter()
        .position(|o| matches!(o, Output::Retry { .. }))
        .unwrap();
    assert!(retry < abandoned && abandoned < first_close);
    match &out[retry] {
        Output::Retry { labels, reason } => {
            assert_eq!(labels.model.as_deref(), Some("claude-sonnet-4-5"));
            assert_eq!(reason.as_deref(), Some("connection_reset"));
        }
        _ => unreachable!(),
    }
}

#[test]
fn duplicate_needs_same_meaning_and_respects_steps_and_client_keys() {
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"pay","args":{"n":1}}
{"turn":"t","type":"tool_call","attempt":0,"id":"b","name":"pay","args":{"n":2}}
{"turn":"t","type":"finish","attempt":0,"reason":"tool_calls"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"pay"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"pay"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"x","name":"pay","args":{"n":1},"step":2}
{"turn":"t","type":"tool_exec","attempt":0,"id":"y","name":"pay","args":{"n":1},"step":3}
{"turn":"t","type":"tool_exec","attempt":0,"id":"k1","name":"pay","effect_key":"idem-1"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"k2","name":"other","effect_key":"idem-1"}
"#);
    let f = &reports[0].findings;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, FindingKind::DuplicateEffect);
    assert_eq!(f[0].call_id.as_deref(), Some("k2"));
    assert_eq!(f[0].effect_key.as_deref(), Some("idem-1"));
}

#[test]
fn reads_are_never_effects() {
    let lines = r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"lookup_order","args":{"o":1}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"lookup_order","effect":"read"}
{"turn":"t","type":"tool_call","attempt":0,"id":"b","name":"search","args":{"q":1}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"search"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"tool_call","attempt":1,"id":"c","name":"lookup_order","args":{"o":1}}
{"turn":"t","type":"tool_exec","attempt":1,"id":"c","name":"lookup_order","effect":"read"}
{"turn":"t","type":"tool_exec","attempt":1,"id":"d","name":"search","args":{"q":1}}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#;
    let mut c = cfg();
    c.read_only_tools.insert("search".into());
    let (_, reports, _) = run_with(c, lines);
    assert!(reports[0].findings.is_empty(), "{:?}", reports[0].findings);
    let execs: usize = reports[0].attempts.iter().map(|a| a.executed.len()).sum();
    assert_eq!(execs, 4, "reads are still counted");
    // Without the read-only setting, `search` is an effect.
    let (_, reports) = run(lines);
    assert!(reports[0].findings.iter().any(
        |f| f.kind == FindingKind::AbandonedToolExecuted && f.tool.as_deref() == Some("search")
    ));
}

#[test]
fn early_execution_only_before_finish() {
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"write","args":{}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"write"}
{"turn":"t","type":"tool_call","attempt":0,"id":"b","name":"write2","args":{}}
{"turn":"t","type":"finish","attempt":0,"reason":"tool_calls"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"write2"}
"#);
    let f = &reports[0].findings;
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::EarlyExecution);
    assert_eq!(f[0].call_id.as_deref(), Some("a"));
}

#[test]
fn retry_cap_is_raised_once_when_exceeded() {
    let mut lines = String::new();
    for n in 0..7 {
        lines.push_str(&format!(
            "{{\"turn\":\"t\",\"type\":\"retry\",\"attempt\":{n},\"reason\":\"overloaded\"}}\n"
        ));
    }
    lines.push_str(r#"{"turn":"t","type":"finish","attempt":6,"reason":"stop"}"#);
    let (out, reports) = run(&lines);
    let caps: Vec<_> = reports[0]
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::RetryCapExceeded)
        .collect();
    assert_eq!(caps.len(), 1);
    assert_eq!(
        caps[0].attempt,
        Some(4),
        "the fifth attempt exceeds a cap of 4"
    );
    assert_eq!(reports[0].retries, 6);
    let retries = out
        .iter()
        .filter(|o| matches!(o, Output::Retry { .. }))
        .count();
    assert_eq!(retries, 6);
    // At the cap exactly: no finding.
    let (_, reports) = run(r#"
{"turn":"t","type":"retry","attempt":3}
{"turn":"t","type":"finish","attempt":3,"reason":"stop"}
"#);
    assert!(reports[0].findings.is_empty());
}

#[test]
fn incomplete_and_failed_turns() {
    let (_, reports) = run(r#"
{"turn":"a","type":"text","attempt":0,"text":"hel"}
{"turn":"b","type":"text","attempt":0,"text":"hel"}
{"turn":"b","type":"error","attempt":0,"message":"overloaded","code":"529"}
{"turn":"b","type":"turn_end"}
"#);
    let by_id = |id: &str| reports.iter().find(|r| r.turn == id).unwrap();
    assert_eq!(by_id("a").status, TurnStatus::Incomplete);
    assert_eq!(by_id("a").closed_by, CloseReason::EndOfInput);
    assert_eq!(by_id("a").attempts[0].outcome, Outcome::Open);
    assert_eq!(kinds(by_id("a")), vec![FindingKind::IncompleteTurn]);
    assert_eq!(by_id("b").status, TurnStatus::Failed);
    // Issue 11.8: without content capture, the error's text stays in the process; its
    // length does not.
    assert_eq!(by_id("b").attempts[0].error, None);
    assert_eq!(by_id("b").attempts[0].error_chars, Some(15));
    assert_eq!(kinds(by_id("b")), vec![FindingKind::IncompleteTurn]);
}

#[test]
fn no_reset_splice_without_output() {
    let base = r#"
{"turn":"t","type":"text","attempt":0,"text":"Refunding the dam"}
{"turn":"t","type":"retry","attempt":1}
RESET
{"turn":"t","type":"text","attempt":1,"text":"The book arrived damaged."}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#;
    let (_, reports) = run(&base.replace("RESET", ""));
    let f = &reports[0].findings;
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::SplicedText);
    assert_eq!(f[0].evidence, "no_reset");
    let (_, reports) =
        run(&base.replace("RESET", r#"{"turn":"t","type":"render_reset","attempt":1}"#));
    assert!(reports[0].findings.is_empty());
    // A reset logged before the retry line (after the last abandoned text) also counts.
    let (_, reports) = run(r#"
{"turn":"t","type":"text","attempt":0,"text":"Refunding the dam"}
{"turn":"t","type":"render_reset"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"text","attempt":1,"text":"The book arrived damaged."}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#);
    assert!(reports[0].findings.is_empty());
}

#[test]
fn wire_only_turn_has_no_no_reset_splice_but_output_still_proves_one() {
    // Proxy defect 2: a proxy sees the wire, never the display, so text of two attempts with
    // no render reset between proves nothing there; only the output (the history the client
    // sent back) does.
    let base = r#"
{"turn":"t","type":"turn_start","provider":"openai","wire_only":true}
{"turn":"t","type":"text","attempt":0,"text":"Refunding the dam"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"text","attempt":1,"text":"The book arrived damaged."}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
OUTPUT
"#;
    let (_, reports) = run(&base.replace("OUTPUT", ""));
    assert!(reports[0].findings.is_empty(), "{:?}", reports[0].findings);
    let (_, reports) = run(&base.replace(
        "OUTPUT",
        r#"{"turn":"t","type":"output","text":"Refunding the damThe book arrived damaged."}"#,
    ));
    let f = &reports[0].findings;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, FindingKind::SplicedText);
    assert_eq!(f[0].evidence, "output");
    // `wire_only: false` (and absent) keeps the reset proof.
    let (_, reports) = run(&base
        .replace("OUTPUT", "")
        .replace(r#""wire_only":true"#, r#""wire_only":false"#));
    assert_eq!(reports[0].findings[0].evidence, "no_reset");
}

#[test]
fn wire_only_turn_with_a_response_in_flight_is_not_idle_closed() {
    // Proxy: with `--idle-timeout-secs 1` a turn was closed during the upstream's 1 s silence
    // after a tool call, while the stream was still open, and the attempt's execution (read
    // from the next request) was then dropped. An open attempt of a wire-only turn is a
    // response in flight.
    let cfg = CorrelatorConfig {
        idle_timeout_ms: Some(1_000),
        ..CorrelatorConfig::default()
    };
    let mut c = Correlator::new(cfg.clone(), Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    let feed = |c: &mut Correlator, line: &str, now: i64, out: &mut Vec<Output>| match decode_line(
        line.as_bytes(),
        &mut SkipCounts::default(),
    ) {
        Ok(NativeLine::Event(ev)) => c.observe(&ev, now, out),
        other => panic!("{line} did not decode: {other:?}"),
    };
    let closed = |out: &[Output]| out.iter().any(|o| matches!(o, Output::TurnClosed(_)));
    feed(
        &mut c,
        r#"{"turn":"t","type":"turn_start","provider":"anthropic","wire_only":true}"#,
        0,
        &mut out,
    );
    feed(
        &mut c,
        r#"{"turn":"t","type":"attempt_start","attempt":0}"#,
        0,
        &mut out,
    );
    feed(
        &mut c,
        r#"{"turn":"t","type":"tool_call","attempt":0,"id":"c1","name":"issue_refund","args":{}}"#,
        100,
        &mut out,
    );
    c.tick(1_500, &mut out);
    c.tick(60_000, &mut out);
    assert!(!closed(&out), "stream in flight: not idle");
    feed(
        &mut c,
        r#"{"turn":"t","type":"finish","attempt":0,"reason":"tool_use"}"#,
        60_100,
        &mut out,
    );
    feed(
        &mut c,
        r#"{"turn":"t","type":"tool_exec","attempt":0,"id":"c1","name":"issue_refund"}"#,
        60_200,
        &mut out,
    );
    c.tick(60_500, &mut out);
    assert!(!closed(&out));
    c.tick(61_300, &mut out);
    assert!(
        closed(&out),
        "ended attempt: the idle timeout applies again"
    );
    let report = out
        .iter()
        .find_map(|o| match o {
            Output::TurnClosed(r) => Some(r),
            _ => None,
        })
        .expect("report");
    assert_eq!(report.attempts[0].outcome, Outcome::Completed);
    assert!(report.findings.is_empty(), "{:?}", report.findings);

    // Without `wire_only` (an agent's log), an open attempt is idle as any other; and a lost
    // stream of a wire-only turn still closes at the safety net.
    for (start, at) in [
        (r#"{"turn":"u","type":"turn_start"}"#, 1_000),
        (
            r#"{"turn":"u","type":"turn_start","wire_only":true}"#,
            IN_FLIGHT_MIN_IDLE_MS,
        ),
    ] {
        let mut c = Correlator::new(cfg.clone(), Arc::new(PriceTable::builtin()));
        let mut out = Vec::new();
        feed(&mut c, start, 0, &mut out);
        feed(
            &mut c,
            r#"{"turn":"u","type":"text","attempt":0,"text":"Checking"}"#,
            0,
            &mut out,
        );
        c.tick(at - 1, &mut out);
        assert!(!closed(&out));
        c.tick(at, &mut out);
        assert!(closed(&out), "{start}");
    }
}

#[test]
fn output_rule_overrides_reset_rule() {
    // No reset, but the client's committed output is the final text only: clean.
    let (_, reports) = run(r#"
{"turn":"t","type":"text","attempt":0,"text":"Refunding the dam"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"text","attempt":1,"text":"The book arrived damaged."}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
{"turn":"t","type":"output","text":"The book arrived damaged."}
"#);
    assert!(reports[0].findings.is_empty(), "{:?}", reports[0].findings);
}

#[test]
fn implicit_retry_and_interleaved_turns() {
    let (out, reports) = run(r#"
{"turn":"x","type":"text","attempt":0,"text":"a"}
{"turn":"y","type":"text","attempt":0,"text":"b"}
{"turn":"x","type":"text","attempt":1,"text":"c"}
{"turn":"y","type":"finish","attempt":0,"reason":"stop"}
{"turn":"x","type":"finish","attempt":1,"reason":"stop"}
"#);
    let x = reports.iter().find(|r| r.turn == "x").unwrap();
    assert_eq!(x.attempts[0].outcome, Outcome::Abandoned);
    assert_eq!(x.retries, 1);
    assert_eq!(
        out.iter()
            .filter(|o| matches!(o, Output::Retry { reason: None, .. }))
            .count(),
        1
    );
    let y = reports.iter().find(|r| r.turn == "y").unwrap();
    assert!(y.findings.is_empty());
}

#[test]
fn execution_before_its_call_is_keyed_when_the_call_arrives() {
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"refund"}
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"refund","args":{"o":1}}
{"turn":"t","type":"finish","attempt":0,"reason":"tool_calls"}
{"turn":"t","type":"tool_call","attempt":0,"id":"b","name":"refund","args":{"o":1}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"refund"}
"#);
    let r = &reports[0];
    assert_eq!(
        r.attempts[0].executed[0].effect_key,
        r.attempts[0].tool_calls[0].effect_key
    );
    assert!(kinds(r).contains(&FindingKind::DuplicateEffect));
}

#[test]
fn unresolved_executions_do_not_collide() {
    let (_, reports) = run(r#"
{"turn":"t","type":"finish","attempt":0,"reason":"stop"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"refund"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"refund"}
"#);
    let r = &reports[0];
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_ne!(
        r.attempts[0].executed[0].effect_key,
        r.attempts[0].executed[1].effect_key
    );
    assert!(!r.attempts[0].executed[0].effect_key.is_empty());
}

#[test]
fn late_events_are_counted() {
    let (_, _, c) = run_with(
        cfg(),
        r#"
{"turn":"t","type":"text","attempt":0,"text":"a"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"text","attempt":0,"text":"late"}
{"turn":"t","type":"finish","attempt":0,"reason":"stop"}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#,
    );
    assert_eq!(c.stats().late_events, 2);
}

#[test]
fn idle_timeout_eviction_and_events_after_close() {
    let prices = Arc::new(PriceTable::builtin());
    let mut c = Correlator::new(
        CorrelatorConfig {
            idle_timeout_ms: Some(10_000),
            max_open_turns: 2,
            ..CorrelatorConfig::default()
        },
        prices,
    );
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    let mut feed = |c: &mut Correlator, line: &str, now: i64, out: &mut Vec<Output>| {
        if let Ok(NativeLine::Event(ev)) = decode_line(line.as_bytes(), &mut skips) {
            c.observe(&ev, now, out);
        }
    };
    feed(
        &mut c,
        r#"{"turn":"a","type":"text","attempt":0,"text":"x"}"#,
        0,
        &mut out,
    );
    feed(
        &mut c,
        r#"{"turn":"b","type":"text","attempt":0,"text":"x"}"#,
        5_000,
        &mut out,
    );
    c.tick(9_999, &mut out);
    assert_eq!(c.open_turns(), 2);
    // A third turn evicts the least recently active one (a).
    feed(
        &mut c,
        r#"{"turn":"c","type":"text","attempt":0,"text":"x"}"#,
        6_000,
        &mut out,
    );
    assert_eq!(c.open_turns(), 2);
    assert_eq!(c.stats().evicted_turns, 1);
    let evicted = out.iter().find_map(|o| match o {
        Output::TurnClosed(r) => Some(r),
        _ => None,
    });
    assert_eq!(
        evicted.map(|r| (r.turn.as_str(), r.closed_by)),
        Some(("a", CloseReason::Evicted))
    );
    c.tick(15_000, &mut out);
    assert_eq!(c.open_turns(), 1, "b idled out");
    feed(
        &mut c,
        r#"{"turn":"a","type":"text","attempt":0,"text":"late"}"#,
        15_001,
        &mut out,
    );
    assert_eq!(c.stats().after_close_events, 1);
    assert_eq!(c.open_turns(), 1);
}

/// NAIVE's reports when a checkpoint is taken after `split` lines, passed through `edit` as
/// JSON, and restored for the rest.
fn resumed_at(split: usize, edit: &mut dyn FnMut(&mut serde_json::Value)) -> Vec<TurnReport> {
    let lines: Vec<&str> = NAIVE.lines().collect();
    let prices = Arc::new(PriceTable::builtin());
    let mut c = Correlator::new(cfg(), prices.clone());
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    for (i, l) in lines[..split].iter().enumerate() {
        if let Ok(NativeLine::Event(ev)) = decode_line(l.as_bytes(), &mut skips) {
            c.observe(&ev, 1_000 + i as i64, &mut out);
        }
    }
    let mut snap = serde_json::to_value(c.snapshot()).unwrap();
    edit(&mut snap);
    let mut c = Correlator::restore(cfg(), prices, serde_json::from_value(snap).unwrap());
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(split) {
        if let Ok(NativeLine::Event(ev)) = decode_line(l.as_bytes(), &mut skips) {
            c.observe(&ev, 1_000 + i as i64, &mut out);
        }
    }
    c.close_all(&mut out);
    out.into_iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .collect()
}

#[test]
fn snapshot_restore_resumes_exactly() {
    let (_, whole) = run(NAIVE);
    for split in 0..NAIVE.lines().count() {
        assert_eq!(resumed_at(split, &mut |_| {}), whole, "split at {split}");
    }
}

#[test]
fn stream_splice_is_a_retry_and_a_finding() {
    let (_, reports) = run(r#"
{"turn":"t","type":"text","attempt":0,"text":"a"}
{"turn":"t","type":"stream_splice","attempt":1,"signal":"message_start id changed"}
{"turn":"t","type":"finish","attempt":1,"reason":"end_turn"}
"#);
    let r = &reports[0];
    assert_eq!(r.attempts[0].outcome, Outcome::Abandoned);
    assert_eq!(kinds(r), vec![FindingKind::SplicedStream]);
}

#[test]
fn a_splice_of_a_generation_that_left_no_event_still_makes_two_attempts() {
    // The replaced generation streamed only reasoning: nothing of attempt 0 reached us.
    let (out, reports) = run(r#"
{"turn":"t","type":"turn_start","ts":1000,"provider":"anthropic"}
{"turn":"t","type":"stream_splice","attempt":1,"ts":1500,"signal":"message_start id changed"}
{"turn":"t","type":"finish","attempt":1,"ts":1900,"reason":"end_turn"}
"#);
    let r = &reports[0];
    let got: Vec<(u32, Outcome, Option<i64>)> = r
        .attempts
        .iter()
        .map(|a| (a.attempt, a.outcome, a.started_ms))
        .collect();
    assert_eq!(
        got,
        [
            (0, Outcome::Abandoned, Some(1000)),
            (1, Outcome::Completed, Some(1500))
        ]
    );
    assert_eq!(r.retries, 1);
    let retries = out
        .iter()
        .filter(|o| matches!(o, Output::Retry { .. }))
        .count();
    assert_eq!(retries, 1);
}

#[test]
fn no_wasted_spend_is_positive_zero_not_negative_zero() {
    let (_, reports) = run(r#"
{"turn":"t","type":"finish","attempt":0,"reason":"stop"}
"#);
    let r = &reports[0];
    assert!(
        r.wasted_cost_usd.is_sign_positive(),
        "{}",
        r.wasted_cost_usd
    );
    assert!(r.cost_usd.is_sign_positive(), "{}", r.cost_usd);
}

/// Open turns are the correlator's memory: keep its per-turn structs from creeping up
/// unnoticed (the benchmark reports the resulting bytes per open turn).
#[test]
fn per_turn_state_stays_small() {
    assert!(std::mem::size_of::<turn::TurnState>() <= 384);
    // 312: one pointer for a continuation's texts (issue 21), boxed so that it costs 8 bytes.
    assert!(std::mem::size_of::<attempt::AttemptState>() <= 312);
    assert!(std::mem::size_of::<attempt::CallState>() <= 88);
}

#[test]
fn executions_without_call_ids_are_attributed_by_content() {
    // gemini-cli: the retry's stream ended, then both attempts' calls ran; the telemetry names
    // each execution by tool and arguments only.
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"g1","name":"run_shell_command","args":{"command":"touch a0"}}
{"turn":"t","type":"error","attempt":0,"message":"ECONNRESET"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"tool_call","attempt":1,"id":"g2","name":"run_shell_command","args":{"command":"touch a1"}}
{"turn":"t","type":"finish","attempt":1,"reason":"STOP"}
{"turn":"t","type":"tool_exec","id":"t#1","name":"run_shell_command","args":{"command":"touch a0"}}
{"turn":"t","type":"tool_exec","id":"t#2","name":"run_shell_command","args":{ "command" : "touch a1" }}
"#);
    let r = &reports[0];
    let ran: Vec<(u32, &str)> = r
        .attempts
        .iter()
        .flat_map(|a| a.executed.iter().map(move |e| (a.attempt, e.id.as_str())))
        .collect();
    assert_eq!(ran, [(0, "g1"), (1, "g2")]);
    assert_eq!(
        kinds(r),
        vec![
            FindingKind::AbandonedToolExecuted,
            FindingKind::UnfinishedToolExecuted
        ]
    );
    assert!(
        r.findings
            .iter()
            .all(|f| f.call_id.as_deref() == Some("g1"))
    );
}

#[test]
fn a_continuation_is_judged_against_its_partial_text_plus_its_own() {
    // Issue 21: the retry request carries the cut attempt's partial text (`prefill`). A
    // continuation kept after it is clean, with no render reset needed (the client keeps the
    // partial text on screen by design); one that restarted its answer is spliced_text with
    // the shared opening as evidence (Qwen Code 0.24.4 after a cut).
    let log = |cont: &str| {
        format!(
            r#"{{"turn":"q","type":"turn_start","ts":1,"provider":"openai","model":"gpt-4o"}}
{{"turn":"q","type":"text","attempt":0,"ts":2,"text":"[A1] I will now cr"}}
{{"turn":"q","type":"error","attempt":0,"ts":3,"message":"reset"}}
{{"turn":"q","type":"retry","attempt":1,"ts":4,"reason":"eof","prefill":"[A1] I will now cr"}}
{{"turn":"q","type":"text","attempt":1,"ts":5,"text":"{cont}"}}
{{"turn":"q","type":"finish","attempt":1,"ts":6,"reason":"stop"}}
{{"turn":"q","type":"output","ts":7,"text":"[A1] I will now cr{cont}"}}
{{"turn":"q","type":"turn_end","ts":8}}
"#
        )
    };
    let (_, reports) = run(&log("eate the marker file (A2)."));
    assert_eq!(reports[0].retries, 1);
    assert!(reports[0].findings.is_empty(), "{:?}", reports[0].findings);
    let (_, reports) = run(&log("[A2] I will now create the marker file (A2)."));
    assert_eq!(kinds(&reports[0]), vec![FindingKind::SplicedText]);
    assert_eq!(reports[0].findings[0].attempt, Some(0));
    assert_eq!(reports[0].findings[0].evidence, "restart: ] I will now cr");
    // Without the prefill (a plain resend), the same kept text is an ordinary splice.
    let (_, reports) =
        run(&log("eate the marker file (A2).").replace(r#","prefill":"[A1] I will now cr""#, ""));
    assert_eq!(kinds(&reports[0]), vec![FindingKind::SplicedText]);
    assert_eq!(reports[0].findings[0].evidence, "output");
}

/// An abandoned attempt's call that the client started and then aborted (modelled on a
/// client answering the model "User aborted the command" for a call it cancelled after a
/// retry): still `abandoned_tool_executed`, with the abort as evidence, and its words
/// quoted only with content capture.
const STARTED_THEN_ABORTED: &str = r#"
{"turn":"t","type":"turn_start","ts":1000,"model":"claude-sonnet-4-5"}
{"turn":"t","type":"tool_call","attempt":0,"ts":1100,"id":"c1","name":"Bash","args":{"command":"touch /m/a1"}}
{"turn":"t","type":"error","attempt":0,"ts":1200,"message":"reset"}
{"turn":"t","type":"retry","attempt":1,"ts":1300}
{"turn":"t","type":"tool_call","attempt":1,"ts":1400,"id":"c7","name":"Bash","args":{"command":"touch /m/a2"}}
{"turn":"t","type":"finish","attempt":1,"ts":1500,"reason":"tool_use"}
{"turn":"t","type":"tool_exec","ts":1600,"id":"c1","name":"Bash","status":"error","result":"User aborted the command"}
{"turn":"t","type":"tool_exec","ts":1600,"id":"c7","name":"Bash","status":"success","result":"done"}
{"turn":"t","type":"turn_end","ts":1700}
"#;

#[test]
fn started_then_aborted_is_reported_with_its_result_as_evidence() {
    let (out, reports) = run(STARTED_THEN_ABORTED);
    let r = &reports[0];
    let abandoned: Vec<&Finding> = r
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::AbandonedToolExecuted)
        .collect();
    assert_eq!(abandoned.len(), 1, "{:?}", r.findings);
    let f = abandoned[0];
    assert_eq!((f.attempt, f.call_id.as_deref()), (Some(0), Some("c1")));
    assert!(
        f.evidence.contains("aborted or cancelled") && f.evidence.contains("check whether"),
        "{}",
        f.evidence
    );
    assert_eq!(f.quote, None, "no text without content capture");
    // the live finding says the same
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Finding(x, _) if x == f))
    );
    // The retry's successful execution is no finding.
    assert!(
        r.findings
            .iter()
            .all(|f| f.call_id.as_deref() != Some("c7"))
    );

    let (_, reports, _) = run_with(
        CorrelatorConfig {
            capture_content: true,
            ..cfg()
        },
        STARTED_THEN_ABORTED,
    );
    let f = reports[0]
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::AbandonedToolExecuted)
        .expect("finding");
    assert_eq!(f.quote.as_deref(), Some("User aborted the command"));

    // An error result (no abort words): the same finding, "its result is an error".
    let failed = STARTED_THEN_ABORTED.replace("User aborted the command", "exit status 1");
    let (_, reports) = run(&failed);
    let f = reports[0]
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::AbandonedToolExecuted)
        .expect("finding");
    assert!(
        f.evidence.contains("its result is an error"),
        "{}",
        f.evidence
    );
}

#[test]
fn an_open_turn_its_attempt_and_call_fit_their_allocation_size_classes() {
    // Open turns are `check`'s and `run`'s memory (issue 24: at most 1 KiB each). The
    // allocator's size classes step from 256 to 320 bytes: one field more costs 64 per turn.
    assert!(std::mem::size_of::<super::turn::TurnState>() <= 256);
    assert!(std::mem::size_of::<super::attempt::AttemptState>() <= 256);
    assert!(std::mem::size_of::<super::attempt::CallState>() <= 64);
}

#[test]
fn an_open_turn_checkpointed_by_the_previous_version_reads_back() {
    // Before `StreamHash` lost its `tail_len` and the turn's times their `Option` (both kept
    // their serialised form), a checkpoint carried `tail_len`: such a checkpoint, taken with
    // texts of every length mod 8 open, must resume exactly as the current one does.
    let (_, whole) = run(NAIVE);
    let mut total = 0;
    for split in 1..NAIVE.lines().count() {
        let mut hashes = 0;
        let resumed = resumed_at(split, &mut |snap| add_tail_len(snap, &mut hashes));
        assert_eq!(resumed, whole, "split at {split} ({hashes} hashes)");
        total += hashes;
    }
    assert!(total > 0, "no open text was checkpointed");
}

/// Puts the old `tail_len` (`len % 8`) into every serialised `StreamHash`.
fn add_tail_len(v: &mut serde_json::Value, n: &mut usize) {
    match v {
        serde_json::Value::Object(o) => {
            if let (Some(len), true, true) = (
                o.get("len").and_then(serde_json::Value::as_u64),
                o.contains_key("acc"),
                o.contains_key("tail"),
            ) {
                o.insert("tail_len".into(), (len % 8).into());
                *n += 1;
            }
            o.values_mut().for_each(|v| add_tail_len(v, n));
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|v| add_tail_len(v, n)),
        _ => {}
    }
}
