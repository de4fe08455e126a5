//! `early_execution` (warning): a side-effecting call ran before its attempt finished. Safe
//! only if the attempt then finishes; risky because a cut would leave the effect behind.

use super::{Call, Rule, Scope};
use crate::finding::{Finding, FindingKind, Severity};

/// The rule.
pub(crate) const RULE: Rule = Rule {
    kind: FindingKind::EarlyExecution,
    severity: Severity::Warning,
    scope: Scope::Tool,
    summary: "A tool call was executed before its attempt finished streaming; had the stream broken, the effect would have stayed.",
};

/// `call` of a still-open `attempt` was executed at `ts`.
pub(crate) fn on_exec_while_open(turn: &str, attempt: u32, call: Call<'_>, ts: i64) -> Finding {
    Finding::new(
        RULE.kind,
        turn,
        Some(attempt),
        "executed before its attempt finished".to_owned(),
    )
    .with_call(call.tool, call.id, call.effect_key)
    .at(ts)
}
