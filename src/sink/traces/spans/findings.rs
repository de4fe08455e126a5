//! Findings and errors on spans: each finding placed on the span its rule's scope names (a
//! tool finding on its execution, in its attempt first), as a `retryscope.finding` event, and
//! each span's status (its own error, then its high and critical findings' kinds).

use std::ops::Range;

use opentelemetry::KeyValue;
use opentelemetry::trace::{Event, Status};

use retryscope_core::finding::{Finding, FindingKind, Severity};
use retryscope_core::report::{Outcome, TurnReport};
use retryscope_core::rules::Scope;

use super::attributes::push_opt;
use super::{FINDING_EVENT, attr, time};

/// Findings sorted onto the spans they concern, by position in the report.
pub(super) struct Placed<'a> {
    pub(super) root: Vec<&'a Finding>,
    pub(super) calls: Vec<Vec<&'a Finding>>,
    pub(super) attempts: Vec<Vec<&'a Finding>>,
    pub(super) execs: Vec<Vec<Vec<&'a Finding>>>,
}

pub(super) fn place_findings<'a>(report: &'a TurnReport, calls: &[Range<usize>]) -> Placed<'a> {
    let mut placed = Placed {
        root: Vec::new(),
        calls: vec![Vec::new(); calls.len()],
        attempts: vec![Vec::new(); report.attempts.len()],
        execs: report
            .attempts
            .iter()
            .map(|a| vec![Vec::new(); a.executed.len()])
            .collect(),
    };
    for f in &report.findings {
        let scope = scope(f.kind);
        let attempt = f
            .attempt
            .filter(|_| scope != Scope::Turn)
            .and_then(|n| report.attempts.iter().position(|a| a.attempt == n));
        let call = attempt.and_then(|i| calls.iter().position(|c| c.contains(&i)));
        let exec = match (scope, f.call_id.as_deref()) {
            (Scope::Tool, Some(call)) => find_exec(report, attempt, call, f.ts_ms),
            _ => None,
        };
        match (scope, exec, attempt, call) {
            (Scope::Tool, Some((i, j)), _, _) => placed.execs[i][j].push(f),
            (Scope::Call, _, _, Some(k)) => placed.calls[k].push(f),
            (Scope::Tool | Scope::Attempt, None, Some(i), _) => placed.attempts[i].push(f),
            _ => placed.root.push(f),
        }
    }
    placed
}

fn scope(kind: FindingKind) -> Scope {
    retryscope_core::rules::rule(kind).scope
}

/// The execution a tool finding is about: in its attempt first (the one at the finding's
/// time when the call ran more than once), then anywhere in the turn.
fn find_exec(
    report: &TurnReport,
    attempt: Option<usize>,
    call: &str,
    ts_ms: Option<i64>,
) -> Option<(usize, usize)> {
    let in_attempt = |i: usize| -> Option<(usize, usize)> {
        let execs = &report.attempts[i].executed;
        let mut matching = execs.iter().enumerate().filter(|(_, e)| e.id == call);
        let first = matching.clone().next()?.0;
        let at_time = matching.find(|(_, e)| ts_ms.is_some() && e.ts_ms == ts_ms);
        Some((i, at_time.map_or(first, |(j, _)| j)))
    };
    attempt
        .and_then(in_attempt)
        .or_else(|| (0..report.attempts.len()).find_map(in_attempt))
}

pub(super) fn finding_event(f: &Finding, ts_ms: i64, quotes: bool) -> Event {
    let mut kv = vec![
        KeyValue::new(attr::FINDING_KIND, f.kind.as_str()),
        KeyValue::new(attr::FINDING_SEVERITY, f.severity.as_str()),
        KeyValue::new(attr::FINDING_EVIDENCE, f.evidence.clone()),
    ];
    if let Some(n) = f.attempt {
        kv.push(KeyValue::new(attr::ATTEMPT_NUMBER, i64::from(n)));
    }
    push_opt(&mut kv, attr::TOOL_NAME, f.tool.as_deref());
    push_opt(&mut kv, attr::TOOL_CALL_ID, f.call_id.as_deref());
    push_opt(&mut kv, attr::EFFECT_KEY, f.effect_key.as_deref());
    if quotes {
        push_opt(&mut kv, attr::FINDING_QUOTE, f.quote.as_deref());
    }
    Event::new(FINDING_EVENT, time(ts_ms), kv, 0)
}

/// Error when the span has its own error (`base`) or a high or critical finding; the message
/// names the error first, then each such finding kind once, most severe first.
pub(super) fn status(base: Option<String>, findings: &[&Finding]) -> Status {
    let mut serious: Vec<&Finding> = findings
        .iter()
        .copied()
        .filter(|f| f.severity >= Severity::High)
        .collect();
    serious.sort_by_key(|f| std::cmp::Reverse(f.severity));
    let mut parts: Vec<String> = base.into_iter().collect();
    for f in serious {
        let kind = f.kind.as_str();
        if !parts.iter().any(|p| p == kind) {
            parts.push(kind.to_owned());
        }
    }
    if parts.is_empty() {
        Status::Unset
    } else {
        Status::error(parts.join("; "))
    }
}

/// Why the model call whose last attempt is `last` is an error: that attempt failed.
pub(super) fn call_error(r: &TurnReport, last: usize) -> Option<String> {
    (r.attempts[last].outcome == Outcome::Failed)
        .then(|| attempt_error(r, last))
        .flatten()
}

/// Why attempt `i` is an error, when it is one.
pub(super) fn attempt_error(r: &TurnReport, i: usize) -> Option<String> {
    let a = &r.attempts[i];
    let reason = a.error.clone().or_else(|| match a.outcome {
        Outcome::Abandoned => r
            .attempts
            .get(i + 1)
            .and_then(|next| next.retry_reason.clone()),
        _ => None,
    });
    match (a.outcome, reason) {
        (Outcome::Abandoned | Outcome::Failed, Some(reason)) => {
            Some(format!("{}: {reason}", a.outcome.as_str()))
        }
        (Outcome::Abandoned | Outcome::Failed, None) => Some(a.outcome.as_str().to_owned()),
        _ => None,
    }
}
