//! Property tests of the correlator over generated turns: the safe client policy never yields
//! a critical finding, replay is deterministic, and interleaving turns changes nothing.

use std::sync::Arc;

use proptest::prelude::*;
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::SkipCounts;
use retryscope_core::decode::native::{NativeLine, decode_line};
use retryscope_core::finding::Severity;
use retryscope_core::report::TurnReport;
use serde_json::json;

/// What happens in one attempt of a generated turn.
#[derive(Debug, Clone)]
struct AttemptPlan {
    fragments: Vec<String>,
    /// Tool calls: (tool, order number) — same meaning across attempts when equal.
    calls: Vec<(String, u8)>,
    /// Where the attempt breaks (fragment index), or `None` when it finishes.
    breaks_at: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Naive,
    Reset,
    ResetLateExec,
}

fn attempt_plan(last: bool) -> impl Strategy<Value = AttemptPlan> {
    (
        prop::collection::vec("[a-zA-Z ,.é]{1,12}", 1..8),
        prop::collection::vec(
            (
                prop::sample::select(vec!["issue_refund", "send_email", "update_case"]),
                0u8..3,
            ),
            0..3,
        ),
        any::<prop::sample::Index>(),
    )
        .prop_map(move |(fragments, calls, idx)| {
            let breaks_at = (!last).then(|| idx.index(fragments.len()));
            AttemptPlan {
                fragments,
                calls: calls.into_iter().map(|(t, n)| (t.to_string(), n)).collect(),
                breaks_at,
            }
        })
}

fn turn_plan() -> impl Strategy<Value = Vec<AttemptPlan>> {
    (0usize..4).prop_flat_map(|retries| {
        let mut v: Vec<BoxedStrategy<AttemptPlan>> = Vec::new();
        for i in 0..=retries {
            v.push(attempt_plan(i == retries).boxed());
        }
        v
    })
}

/// Native lines of one turn as a client of `policy` would log it.
fn lines_for(turn: &str, plan: &[AttemptPlan], policy: Policy) -> Vec<String> {
    let mut t = 1_700_000_000_000i64;
    let mut next = || {
        t += 10;
        t
    };
    let mut lines = vec![
        json!({"turn": turn, "type": "turn_start", "ts": next(), "model": "gpt-4.1", "provider": "openai"})
            .to_string(),
    ];
    let mut shown = String::new();
    for (n, a) in plan.iter().enumerate() {
        if n > 0 {
            lines.push(json!({"turn": turn, "type": "retry", "attempt": n, "ts": next(), "reason": "connection_reset"}).to_string());
            if policy != Policy::Naive {
                lines.push(
                    json!({"turn": turn, "type": "render_reset", "attempt": n, "ts": next()})
                        .to_string(),
                );
                shown.clear();
            }
        }
        let stop = a.breaks_at.unwrap_or(a.fragments.len());
        let mut pending = Vec::new();
        for (i, frag) in a.fragments.iter().enumerate().take(stop) {
            lines.push(
                json!({"turn": turn, "type": "text", "attempt": n, "ts": next(), "text": frag})
                    .to_string(),
            );
            shown.push_str(frag);
            if let Some((tool, order)) = a.calls.get(i) {
                let id = format!("call_{n}_{i}");
                let args = json!({"order": format!("ORD-{order}"), "attempt_hint": null});
                lines.push(json!({"turn": turn, "type": "tool_call", "attempt": n, "ts": next(), "id": id, "name": tool, "args": args}).to_string());
                if policy == Policy::ResetLateExec {
                    pending.push((id, tool.clone()));
                } else {
                    lines.push(json!({"turn": turn, "type": "tool_exec", "attempt": n, "ts": next(), "id": id, "name": tool}).to_string());
                }
            }
        }
        if a.breaks_at.is_some() {
            lines.push(json!({"turn": turn, "type": "error", "attempt": n, "ts": next(), "message": "reset"}).to_string());
            continue;
        }
        lines.push(json!({"turn": turn, "type": "usage", "attempt": n, "ts": next(), "input_tokens": 100, "output_tokens": 20}).to_string());
        lines.push(
            json!({"turn": turn, "type": "finish", "attempt": n, "ts": next(), "reason": "stop"})
                .to_string(),
        );
        // Late execution, de-duplicated by meaning like a careful client.
        let mut seen = std::collections::HashSet::new();
        for (id, tool) in pending {
            let call = a.calls.iter().find(|(t, _)| *t == tool).map(|c| c.1);
            if seen.insert((tool.clone(), call)) {
                lines.push(json!({"turn": turn, "type": "tool_exec", "attempt": n, "ts": next(), "id": id, "name": tool}).to_string());
            }
        }
    }
    lines.push(json!({"turn": turn, "type": "output", "ts": next(), "text": shown}).to_string());
    lines.push(json!({"turn": turn, "type": "turn_end", "ts": next()}).to_string());
    lines
}

fn correlate(lines: &[String]) -> Vec<TurnReport> {
    let mut c = Correlator::new(
        CorrelatorConfig {
            idle_timeout_ms: None,
            ..CorrelatorConfig::default()
        },
        Arc::new(PriceTable::builtin()),
    );
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    for line in lines {
        match decode_line(line.as_bytes(), &mut skips) {
            Ok(NativeLine::Event(ev)) => c.observe(&ev, 0, &mut out),
            other => panic!("generated line did not decode: {other:?}: {line}"),
        }
    }
    c.close_all(&mut out);
    let mut reports: Vec<TurnReport> = out
        .into_iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .collect();
    reports.sort_by(|a, b| a.turn.cmp(&b.turn));
    // Where a turn opened in the stream only orders output; it is not part of what happened.
    for r in &mut reports {
        r.opened_seq = 0;
    }
    reports
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn reset_late_exec_never_critical(plan in turn_plan()) {
        let reports = correlate(&lines_for("t", &plan, Policy::ResetLateExec));
        prop_assert_eq!(reports.len(), 1);
        for f in &reports[0].findings {
            prop_assert!(f.severity < Severity::High, "unexpected finding {:?}", f);
        }
        prop_assert_eq!(reports[0].attempts.len(), plan.len());
    }

    #[test]
    fn naive_with_an_executed_abandoned_call_is_critical(plan in turn_plan()) {
        let abandoned_exec = plan.iter().any(|a| {
            a.breaks_at.is_some_and(|stop| a.calls.len().min(stop) > 0)
        });
        let reports = correlate(&lines_for("t", &plan, Policy::Naive));
        let critical = reports[0].findings.iter().any(|f| f.severity == Severity::Critical);
        prop_assert_eq!(critical, abandoned_exec || has_repeat(&plan));
    }

    #[test]
    fn replay_is_deterministic(plan in turn_plan(), policy in prop::sample::select(vec![Policy::Naive, Policy::Reset, Policy::ResetLateExec])) {
        let lines = lines_for("t", &plan, policy);
        prop_assert_eq!(correlate(&lines), correlate(&lines));
    }

    #[test]
    fn interleaving_turns_changes_nothing(
        plans in prop::collection::vec(turn_plan(), 2..5),
        seed in any::<u64>(),
    ) {
        let per_turn: Vec<Vec<String>> = plans
            .iter()
            .enumerate()
            .map(|(i, p)| lines_for(&format!("turn-{i}"), p, Policy::Reset))
            .collect();
        let sequential: Vec<String> = per_turn.iter().flatten().cloned().collect();
        // Interleave, keeping each turn's own order.
        let mut cursors = vec![0usize; per_turn.len()];
        let mut state = seed | 1;
        let mut interleaved = Vec::with_capacity(sequential.len());
        while interleaved.len() < sequential.len() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let live: Vec<usize> = (0..per_turn.len()).filter(|&i| cursors[i] < per_turn[i].len()).collect();
            let pick = live[(state % live.len() as u64) as usize];
            interleaved.push(per_turn[pick][cursors[pick]].clone());
            cursors[pick] += 1;
        }
        prop_assert_eq!(correlate(&interleaved), correlate(&sequential));
    }
}

/// Whether the naive client executed the same meaning twice across all attempts' executed calls.
fn has_repeat(plan: &[AttemptPlan]) -> bool {
    let mut seen = std::collections::HashSet::new();
    for a in plan {
        let stop = a.breaks_at.unwrap_or(a.fragments.len());
        for (tool, order) in a.calls.iter().take(a.fragments.len().min(stop)) {
            if !seen.insert((tool.clone(), *order)) {
                return true;
            }
        }
    }
    false
}
