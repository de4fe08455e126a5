//! Unit tests of the metrics sink, fed by the real correlator on the bookstore examples.

use std::sync::Arc;

use super::*;
use retryscope_core::correlate::{Correlator, CorrelatorConfig, TurnLabels};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::SkipCounts;
use retryscope_core::decode::native::{NativeLine, decode_line};
use retryscope_core::finding::Finding;

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

/// Turn-level series every bookstore example moves the same way.
fn assert_common(m: &Metrics, out: &[Output]) {
    let r = report(out);
    assert_eq!(v(m, "retryscope_turns_total", &[A, M, P, "completed"]), 1.0);
    assert_eq!(v(m, "retryscope_turns_total", &[A, M, P, "failed"]), 0.0);
    assert_eq!(
        v(m, "retryscope_turns_total", &[A, M, P, "incomplete"]),
        0.0
    );
    assert_eq!(
        v(
            m,
            "retryscope_retries_total",
            &[A, M, P, "connection_reset"]
        ),
        1.0
    );
    assert_eq!(v(m, "retryscope_attempts_total", &[M, P, "abandoned"]), 1.0);
    assert_eq!(v(m, "retryscope_attempts_total", &[M, P, "completed"]), 1.0);
    assert_eq!(v(m, "retryscope_attempts_total", &[M, P, "failed"]), 0.0);
    assert_eq!(v(m, "retryscope_attempts_total", &[M, P, "open"]), 0.0);
    assert_eq!(
        m.histogram("retryscope_attempts_per_turn", &[M, P]),
        Some((1, 2.0))
    );
    assert_eq!(
        m.histogram("retryscope_turn_duration_seconds", &[M, P]),
        Some((1, 4.6))
    );
    // Tokens: input excludes the 1024 cached tokens; the abandoned attempt's are estimated.
    let tok =
        |tt: &str, o: &str, us: &str| v(m, "retryscope_billed_tokens_total", &[M, P, tt, o, us]);
    assert_eq!(tok("input", "abandoned", "estimated"), 226.0);
    assert_eq!(tok("cached_input", "abandoned", "estimated"), 1024.0);
    assert_eq!(tok("cache_write", "abandoned", "estimated"), 0.0);
    assert_eq!(tok("output", "abandoned", "estimated"), 26.0);
    assert_eq!(tok("reasoning", "abandoned", "estimated"), 0.0);
    assert_eq!(tok("input", "completed", "reported"), 226.0);
    assert_eq!(tok("cached_input", "completed", "reported"), 1024.0);
    assert_eq!(tok("output", "completed", "reported"), 48.0);
    assert_eq!(
        m.value(
            "retryscope_billed_tokens_total",
            &[M, P, "input", "completed", "estimated"]
        ),
        None,
        "no zero series for combinations that never happened"
    );
    // Cost: exactly the report's per-attempt costs, summing to the turn's.
    let cost = |o: &str| v(m, "retryscope_billed_cost_usd_total", &[A, M, P, o]);
    assert_eq!(Some(cost("abandoned")), r.attempts[0].cost_usd);
    assert_eq!(Some(cost("completed")), r.attempts[1].cost_usd);
    assert!((cost("abandoned") + cost("completed") - r.cost_usd).abs() < 1e-15);
    assert_eq!(cost("failed"), 0.0);
    // Findings: one increment per Output::Finding, none from the report's copy.
    let live: usize = out
        .iter()
        .filter(|o| matches!(o, Output::Finding(..)))
        .count();
    assert_eq!(live, r.findings.len());
    let total: f64 = FindingKind::ALL
        .iter()
        .flat_map(|k| {
            ["", "issue_refund"].map(|t| {
                m.value(
                    "retryscope_findings_total",
                    &[A, k.as_str(), k.severity().as_str(), t],
                )
            })
        })
        .flatten()
        .sum();
    assert_eq!(total, live as f64);
}

#[test]
fn bookstore_naive_moves_expected_series() {
    let (m, out) = fed(NAIVE);
    assert_common(&m, &out);
    let f = |k: &str, s: &str, t: &str| v(&m, "retryscope_findings_total", &[A, k, s, t]);
    assert_eq!(
        f("abandoned_tool_executed", "critical", "issue_refund"),
        1.0
    );
    assert_eq!(f("duplicate_effect", "critical", "issue_refund"), 1.0);
    assert_eq!(f("spliced_text", "high", ""), 1.0);
    assert_eq!(f("early_execution", "warning", "issue_refund"), 2.0);
    assert_eq!(f("incomplete_turn", "info", ""), 0.0);
    let exec = |o: &str| m.value("retryscope_tool_executions_total", &["issue_refund", o]);
    assert_eq!(exec("abandoned"), Some(1.0));
    assert_eq!(exec("completed"), Some(1.0));
    assert_eq!(
        m.histogram("retryscope_attempt_duration_seconds", &[M, P, "abandoned"]),
        Some((1, 2.45))
    );
    assert_eq!(
        m.histogram("retryscope_attempt_duration_seconds", &[M, P, "completed"]),
        Some((1, 1.6))
    );
    let t = text(&m);
    for line in [
        "retryscope_retries_total{agent=\"help-desk\",model=\"claude-sonnet-4-5\",provider=\"anthropic\",reason=\"connection_reset\"} 1\n",
        "retryscope_findings_total{agent=\"help-desk\",kind=\"abandoned_tool_executed\",severity=\"critical\",tool=\"issue_refund\"} 1\n",
        "retryscope_tool_executions_total{tool=\"issue_refund\",attempt_outcome=\"abandoned\"} 1\n",
        "retryscope_billed_tokens_total{model=\"claude-sonnet-4-5\",provider=\"anthropic\",token_type=\"input\",attempt_outcome=\"completed\",usage_source=\"reported\"} 226\n",
        "retryscope_attempts_per_turn_bucket{model=\"claude-sonnet-4-5\",provider=\"anthropic\",le=\"1\"} 0\n",
        "retryscope_attempts_per_turn_bucket{model=\"claude-sonnet-4-5\",provider=\"anthropic\",le=\"2\"} 1\n",
        "retryscope_turn_duration_seconds_bucket{model=\"claude-sonnet-4-5\",provider=\"anthropic\",le=\"5\"} 1\n",
    ] {
        assert!(t.contains(line), "missing {line:?} in\n{t}");
    }
}

#[test]
fn bookstore_reset_refunds_twice_without_splice() {
    let (m, out) = fed(RESET);
    assert_common(&m, &out);
    let f = |k: &str, s: &str, t: &str| v(&m, "retryscope_findings_total", &[A, k, s, t]);
    assert_eq!(
        f("abandoned_tool_executed", "critical", "issue_refund"),
        1.0
    );
    assert_eq!(f("duplicate_effect", "critical", "issue_refund"), 1.0);
    assert_eq!(f("spliced_text", "high", ""), 0.0);
    assert_eq!(f("early_execution", "warning", "issue_refund"), 2.0);
    let exec = |o: &str| m.value("retryscope_tool_executions_total", &["issue_refund", o]);
    assert_eq!(exec("abandoned"), Some(1.0));
    assert_eq!(exec("completed"), Some(1.0));
}

#[test]
fn bookstore_reset_late_exec_is_clean_with_one_refund() {
    let (m, out) = fed(LATE);
    assert_common(&m, &out);
    for k in FindingKind::ALL {
        assert_eq!(
            v(
                &m,
                "retryscope_findings_total",
                &[A, k.as_str(), k.severity().as_str(), ""]
            ),
            0.0
        );
    }
    assert!(!text(&m).contains("tool=\"issue_refund\",attempt_outcome=\"abandoned\""));
    assert_eq!(
        m.value(
            "retryscope_tool_executions_total",
            &["issue_refund", "completed"]
        ),
        Some(1.0)
    );
    assert_eq!(
        m.histogram("retryscope_attempt_duration_seconds", &[M, P, "completed"]),
        Some((1, 1.8))
    );
}

#[test]
fn retry_counter_moves_before_the_turn_closes() {
    let m = metrics();
    let out = outputs(NAIVE);
    let retry_at = out
        .iter()
        .position(|o| matches!(o, Output::Retry { .. }))
        .unwrap();
    let closed_at = out
        .iter()
        .position(|o| matches!(o, Output::TurnClosed(_)))
        .unwrap();
    assert!(retry_at < closed_at);
    for o in &out[..=retry_at] {
        m.observe(o);
    }
    assert_eq!(
        m.value("retryscope_retries_total", &[A, M, P, "connection_reset"]),
        Some(1.0)
    );
    assert_eq!(
        m.value("retryscope_turns_total", &[A, M, P, "completed"]),
        Some(0.0)
    );
    assert_eq!(
        m.value("retryscope_attempts_total", &[M, P, "abandoned"]),
        Some(0.0)
    );
    // A finding known before the retry (the first early execution) is already counted too.
    assert_eq!(
        m.value(
            "retryscope_findings_total",
            &[A, "early_execution", "warning", "issue_refund"]
        ),
        Some(1.0)
    );
    for o in &out[retry_at + 1..] {
        m.observe(o);
    }
    assert_eq!(
        m.value("retryscope_retries_total", &[A, M, P, "connection_reset"]),
        Some(1.0),
        "the closed turn does not count its retry again"
    );
    assert_eq!(
        m.value("retryscope_turns_total", &[A, M, P, "completed"]),
        Some(1.0)
    );
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

#[test]
fn label_cap_overflow_goes_to_other_and_is_counted() {
    let m = Metrics::new(MetricsConfig {
        max_models: 2,
        max_tools: 1,
        ..MetricsConfig::default()
    })
    .unwrap();
    for model in ["a", "b", "c", "d", "a", "c"] {
        m.observe(&retry(model, None));
    }
    let r = |model: &str| {
        m.value(
            "retryscope_retries_total",
            &[UNKNOWN, model, P, UNSPECIFIED],
        )
    };
    assert_eq!(r("a"), Some(2.0));
    assert_eq!(r("b"), Some(1.0));
    assert_eq!(r("c"), None);
    assert_eq!(r("other"), Some(3.0));
    assert_eq!(
        m.value("retryscope_label_overflow_total", &["model"]),
        Some(3.0)
    );
    assert_eq!(
        m.value("retryscope_label_overflow_total", &["tool"]),
        Some(0.0)
    );

    // Missing and empty values are "unknown" (reason: "unspecified"); long ones are cut.
    m.observe(&Output::Retry {
        labels: TurnLabels {
            model: None,
            provider: Some(String::new()),
            agent: Some(" ".into()),
        },
        reason: Some("x".repeat(200)),
    });
    let cut = "x".repeat(MAX_LABEL_CHARS);
    assert_eq!(
        m.value(
            "retryscope_retries_total",
            &[UNKNOWN, UNKNOWN, UNKNOWN, &cut]
        ),
        Some(1.0)
    );

    // Tools: one admitted, the next overflows (findings and executions alike).
    let finding = |tool: &str| {
        Output::Finding(
            Finding::new(FindingKind::EarlyExecution, "t", Some(0), "e".into())
                .with_call(tool, "c1", None),
            TurnLabels {
                model: None,
                provider: None,
                agent: Some("codex".into()),
            },
        )
    };
    m.observe(&finding("refund"));
    m.observe(&finding("delete_everything"));
    let f = |t: &str| {
        m.value(
            "retryscope_findings_total",
            &["codex", "early_execution", "warning", t],
        )
    };
    assert_eq!(f("refund"), Some(1.0));
    assert_eq!(f("other"), Some(1.0));
    assert_eq!(
        m.value("retryscope_label_overflow_total", &["tool"]),
        Some(1.0)
    );
    assert!(!text(&m).contains("delete_everything"));
}

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
fn health_deltas_move_counters_by_growth_only() {
    let m = metrics();
    let mut stats = CorrelatorStats {
        late_events: 3,
        evicted_turns: 1,
        ..CorrelatorStats::default()
    };
    m.set_correlator_stats(&stats, 7);
    m.set_correlator_stats(&stats, 5);
    stats.late_events = 4;
    m.set_correlator_stats(&stats, 2);
    assert_eq!(m.value("retryscope_late_events_total", &[]), Some(4.0));
    assert_eq!(m.value("retryscope_evicted_turns_total", &[]), Some(1.0));
    assert_eq!(m.value("retryscope_open_turns", &[]), Some(2.0));

    m.set_otlp(10, 1, 0);
    m.set_otlp(15, 1, 2);
    m.set_otlp(4, 0, 0); // the exporter restarted: its counters began again at zero
    assert_eq!(
        m.value("retryscope_otlp_spans_exported_total", &[]),
        Some(19.0)
    );
    assert_eq!(
        m.value("retryscope_otlp_spans_dropped_total", &[]),
        Some(1.0)
    );
    assert_eq!(
        m.value("retryscope_otlp_export_failures_total", &[]),
        Some(2.0)
    );

    m.add_events_read(Source::File, 10);
    m.add_events_decoded(Source::File, 8);
    m.add_bad_lines(Source::File, BadLineReason::InvalidJson, 2);
    m.add_unknown_events(Source::File, 1);
    m.add_events_read(Source::File, 2);
    m.add_events_decoded(Source::File, 2);
    m.add_events_read(Source::Stdin, 5);
    m.add_bad_lines(Source::Stdin, BadLineReason::TooLong, 1);
    assert_eq!(
        m.value("retryscope_events_read_total", &["file"]),
        Some(12.0)
    );
    assert_eq!(
        m.value("retryscope_events_decoded_total", &["file"]),
        Some(10.0)
    );
    assert_eq!(
        m.value("retryscope_bad_lines_total", &["file", "invalid_json"]),
        Some(2.0)
    );
    assert_eq!(
        m.value("retryscope_unknown_events_total", &["file"]),
        Some(1.0)
    );
    assert_eq!(
        m.value("retryscope_events_read_total", &["stdin"]),
        Some(5.0)
    );
    assert_eq!(
        m.value("retryscope_bad_lines_total", &["stdin", "too_long"]),
        Some(1.0)
    );

    m.inc_file_errors("checkpoint_orphaned");
    assert_eq!(
        m.value("retryscope_file_errors_total", &["checkpoint_orphaned"]),
        Some(1.0)
    );
    assert_eq!(
        m.value("retryscope_file_errors_total", &["read"]),
        Some(0.0)
    );

    m.set_files_watched(3);
    m.inc_file_rotations();
    m.inc_file_truncations();
    m.set_source_lag_bytes(Source::File, 4096);
    m.inc_checkpoint_writes();
    m.inc_checkpoint_writes();
    m.inc_checkpoint_failures();
    assert_eq!(m.value("retryscope_files_watched", &[]), Some(3.0));
    assert_eq!(m.value("retryscope_file_rotations_total", &[]), Some(1.0));
    assert_eq!(m.value("retryscope_file_truncations_total", &[]), Some(1.0));
    assert_eq!(
        m.value("retryscope_source_lag_bytes", &["file"]),
        Some(4096.0)
    );
    assert_eq!(
        m.value("retryscope_checkpoint_writes_total", &[]),
        Some(2.0)
    );
    assert_eq!(
        m.value("retryscope_checkpoint_failures_total", &[]),
        Some(1.0)
    );
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
fn the_agent_labels_turns_retries_findings_and_cost() {
    let (m, _) = fed(NAIVE);
    let t = text(&m);
    for line in [
        "retryscope_turns_total{agent=\"help-desk\",model=\"claude-sonnet-4-5\",provider=\"anthropic\",status=\"completed\"} 1\n",
        "retryscope_findings_total{agent=\"help-desk\",kind=\"duplicate_effect\",severity=\"critical\",tool=\"issue_refund\"} 1\n",
        // The agent's first finding created its zero series of every other kind (tool=""),
        // so increase() sees that agent's first spliced output or incomplete turn.
        "retryscope_findings_total{agent=\"help-desk\",kind=\"incomplete_turn\",severity=\"info\",tool=\"\"} 0\n",
    ] {
        assert!(t.contains(line), "missing {line:?} in\n{t}");
    }
    assert!(
        m.value("retryscope_billed_cost_usd_total", &[A, M, P, "abandoned"])
            .is_some_and(|c| c > 0.0)
    );
    // Not on the families the issue does not ask it for (their cardinality stays).
    assert!(t.contains("retryscope_attempts_total{model=\"claude-sonnet-4-5\""));
}

#[test]
fn agents_are_capped_like_every_guarded_label() {
    let m = Metrics::new(MetricsConfig {
        max_agents: 1,
        ..MetricsConfig::default()
    })
    .unwrap();
    for agent in ["gemini-cli", "codex", "gemini-cli"] {
        m.observe(&Output::Retry {
            labels: TurnLabels {
                model: None,
                provider: None,
                agent: Some(agent.into()),
            },
            reason: None,
        });
    }
    let r = |a: &str| {
        m.value(
            "retryscope_retries_total",
            &[a, UNKNOWN, UNKNOWN, UNSPECIFIED],
        )
    };
    assert_eq!(r("gemini-cli"), Some(2.0));
    assert_eq!(r("codex"), None);
    assert_eq!(r(OTHER), Some(1.0));
    assert_eq!(
        m.value("retryscope_label_overflow_total", &["agent"]),
        Some(1.0)
    );
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
