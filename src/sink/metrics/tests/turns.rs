//! What correlator outputs move: the bookstore examples' turn-level series, the retry counter
//! before the turn closes, the agent label.

use super::*;

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
