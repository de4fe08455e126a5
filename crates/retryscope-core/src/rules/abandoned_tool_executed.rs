//! `abandoned_tool_executed` (critical): a side-effecting call of an attempt that was later
//! abandoned (a retry replaced it) was executed, whether it ran before the retry or after.

use super::{Call, Rule, Scope};
use crate::finding::{Finding, FindingKind, Severity};

/// The rule.
pub const RULE: Rule = Rule {
    kind: FindingKind::AbandonedToolExecuted,
    severity: Severity::Critical,
    scope: Scope::Tool,
    summary: "A tool call from an abandoned attempt was executed: its effect happened although the retry replaced that answer.",
};

/// An attempt that had executed `call` (not a read) was abandoned at `ts`.
pub fn on_abandon(turn: &str, attempt: u32, call: Call<'_>, ts: i64) -> Finding {
    finding(
        turn,
        attempt,
        call,
        ts,
        "executed before the attempt was abandoned",
    )
}

/// `call` of an already abandoned attempt was executed at `ts`.
pub fn on_exec_after(turn: &str, attempt: u32, call: Call<'_>, ts: i64) -> Finding {
    finding(
        turn,
        attempt,
        call,
        ts,
        "executed after the attempt was abandoned",
    )
}

fn finding(turn: &str, attempt: u32, call: Call<'_>, ts: i64, evidence: &str) -> Finding {
    Finding::new(RULE.kind, turn, Some(attempt), evidence.to_owned())
        .with_call(call.tool, call.id, call.effect_key)
        .at(ts)
}
