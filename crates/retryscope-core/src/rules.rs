//! Findings as rules: one module per finding kind, each owning when its finding fires, the
//! evidence it states, and its [`Rule`] facts (severity, the span it belongs on, the sentence a
//! person reads). The correlator calls a rule at the moment its facts become known (an
//! execution, an abandonment, a new attempt, a turn's close) and emits what it returns, so a
//! finding is reported as soon as it is certain. A new kind is a new module here, a
//! [`FindingKind`] variant, and one call from the correlator hook that sees its facts.

pub(crate) mod abandoned_tool_executed;
pub(crate) mod duplicate_effect;
pub(crate) mod early_execution;
pub(crate) mod incomplete_turn;
pub(crate) mod retry_cap_exceeded;
pub(crate) mod spliced_stream;
pub mod spliced_text;
pub(crate) mod unfinished_tool_executed;

use crate::finding::{FindingKind, Severity};

/// Which span of a turn's trace a finding belongs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The root: a property of the whole turn (even when it names an attempt).
    Turn,
    /// The model call (the logical operation, covering its retries) of the attempt it names,
    /// else the root.
    Call,
    /// The attempt it names.
    Attempt,
    /// The execution of the call it names (else its attempt, else the root).
    Tool,
}

/// What a rule declares about its findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The kind it raises.
    pub kind: FindingKind,
    /// How bad its findings are (fixed per kind).
    pub severity: Severity,
    /// Where its findings go in a trace.
    pub scope: Scope,
    /// One plain sentence saying what happened, for people reading a report.
    pub summary: &'static str,
}

/// The rule of `kind`.
pub fn rule(kind: FindingKind) -> &'static Rule {
    match kind {
        FindingKind::AbandonedToolExecuted => &abandoned_tool_executed::RULE,
        FindingKind::UnfinishedToolExecuted => &unfinished_tool_executed::RULE,
        FindingKind::DuplicateEffect => &duplicate_effect::RULE,
        FindingKind::SplicedText => &spliced_text::RULE,
        FindingKind::SplicedStream => &spliced_stream::RULE,
        FindingKind::EarlyExecution => &early_execution::RULE,
        FindingKind::RetryCapExceeded => &retry_cap_exceeded::RULE,
        FindingKind::IncompleteTurn => &incomplete_turn::RULE,
    }
}

/// The tool call a tool finding is about.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'a> {
    /// Tool name.
    pub tool: &'a str,
    /// Provider call id.
    pub id: &'a str,
    /// Effect key, once known.
    pub effect_key: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_rule() {
        for kind in FindingKind::ALL {
            let r = rule(kind);
            assert_eq!(r.kind, kind);
            assert!(r.summary.ends_with('.'), "{kind}: {}", r.summary);
        }
    }
}
