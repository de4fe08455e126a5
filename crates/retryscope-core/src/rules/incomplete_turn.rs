//! `incomplete_turn` (info): the turn closed with no finished attempt.

use super::{Rule, Scope};
use crate::finding::{Finding, FindingKind, Severity};
use crate::report::CloseReason;

/// The rule.
pub(crate) const RULE: Rule = Rule {
    kind: FindingKind::IncompleteTurn,
    severity: Severity::Info,
    scope: Scope::Turn,
    summary: "The turn ended without any attempt finishing.",
};

/// At close: a finding when no attempt completed.
pub(crate) fn on_close(
    turn: &str,
    any_completed: bool,
    last_attempt: Option<u32>,
    closed_by: CloseReason,
    ts: i64,
) -> Option<Finding> {
    if any_completed {
        return None;
    }
    let evidence = match closed_by {
        CloseReason::TurnEnd => "turn ended with no finished attempt",
        CloseReason::IdleTimeout => "idle timeout with no finished attempt",
        CloseReason::EndOfInput => "input ended with no finished attempt",
        CloseReason::Evicted => "evicted with no finished attempt",
    };
    Some(Finding::new(RULE.kind, turn, last_attempt, evidence.to_owned()).at(ts))
}
