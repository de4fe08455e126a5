//! `duplicate_effect` (critical): two executions in one turn share an effect key (same tool,
//! same canonical arguments, same step), whatever their provider call ids.

use super::{Call, Rule, Scope};
use crate::finding::{Finding, FindingKind, Severity};

/// The rule.
pub(crate) const RULE: Rule = Rule {
    kind: FindingKind::DuplicateEffect,
    severity: Severity::Critical,
    scope: Scope::Tool,
    summary: "The same effect was executed twice in one turn (same tool and arguments under different call ids).",
};

/// `call` of `attempt` executed at `ts` with the effect key already executed by
/// `first_call` of `first_attempt`.
pub(crate) fn on_repeat(
    turn: &str,
    attempt: u32,
    call: Call<'_>,
    first_attempt: u32,
    first_call: &str,
    ts: i64,
) -> Finding {
    Finding::new(
        RULE.kind,
        turn,
        Some(attempt),
        format!("same effect as call {first_call} of attempt {first_attempt}"),
    )
    .with_call(call.tool, call.id, call.effect_key)
    .at(ts)
}
