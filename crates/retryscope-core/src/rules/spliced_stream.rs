//! `spliced_stream` (high): a layer below the client (a gateway, a proxy) spliced a retried
//! generation into one recorded stream; the decoder saw the signal (a new message id while a
//! message was open, a new response before a terminal event, ...).

use super::{Rule, Scope};
use crate::finding::{Finding, FindingKind, Severity};

/// The rule.
pub(crate) const RULE: Rule = Rule {
    kind: FindingKind::SplicedStream,
    severity: Severity::High,
    scope: Scope::Attempt,
    summary: "One recorded stream carries two generations: something between the client and the model spliced a retry into it.",
};

/// The decoder reported `signal` starting attempt `attempt` at `ts`.
pub(crate) fn on_splice(turn: &str, attempt: u32, signal: &str, ts: i64) -> Finding {
    Finding::new(
        RULE.kind,
        turn,
        Some(attempt),
        format!("stream carries a retried generation: {signal}"),
    )
    .at(ts)
}
