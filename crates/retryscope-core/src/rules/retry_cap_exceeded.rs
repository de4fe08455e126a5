//! `retry_cap_exceeded` (warning): a turn reached more attempts than the configured cap (a
//! retry storm in one turn). Raised once per turn, when the attempt over the cap appears.

use super::{Rule, Scope};
use crate::finding::{Finding, FindingKind, Severity};

/// The rule.
pub(crate) const RULE: Rule = Rule {
    kind: FindingKind::RetryCapExceeded,
    severity: Severity::Warning,
    // On the model call whose retries went over the cap: that span covers them all.
    scope: Scope::Call,
    summary: "The turn was retried more often than the configured cap allows.",
};

/// Attempt `attempt` (numbered from 0) appeared at `ts`; `cap` is the most attempts allowed.
pub(crate) fn on_new_attempt(turn: &str, attempt: u32, cap: u32, ts: i64) -> Option<Finding> {
    (attempt >= cap).then(|| {
        Finding::new(
            RULE.kind,
            turn,
            Some(attempt),
            // Attempt numbers as logged, from 0, like every other report.
            format!(
                "attempt {attempt} is over the cap of {cap} attempt{}",
                if cap == 1 { "" } else { "s" }
            ),
        )
        .at(ts)
    })
}
