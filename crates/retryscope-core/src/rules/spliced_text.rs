//! `spliced_text` (high): the user was shown an abandoned attempt's text together with the
//! retry's. Judged at close: by the text the client logged as shown (`output`) when there is
//! one, else by a retry that came without a renderer reset.

use super::{Rule, Scope};
use crate::finding::{Finding, FindingKind, Severity};

/// The rule.
pub(crate) const RULE: Rule = Rule {
    kind: FindingKind::SplicedText,
    severity: Severity::High,
    scope: Scope::Attempt,
    summary: "The user was shown an abandoned attempt's text spliced together with the retry's.",
};

/// How the splice was proven.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Proof {
    /// The shown output carries the abandoned attempt's text.
    Output,
    /// A retry came without a renderer reset, so the abandoned text stayed on screen.
    NoReset,
    /// A continuation (asked to go on from the cut attempt's partial text) restarted its
    /// answer instead, and the client kept both: `overlap` is the text both openings share.
    Restart {
        /// The text both openings share.
        overlap: String,
    },
}

/// The evidence of a restarted continuation starts with this.
pub const RESTART_EVIDENCE: &str = "restart: ";

/// At close: attempt `attempt`'s text was spliced into what the user saw.
pub(crate) fn on_close(turn: &str, attempt: u32, proof: &Proof, ts: i64) -> Finding {
    let evidence = match proof {
        Proof::Output => "output".to_owned(),
        Proof::NoReset => "no_reset".to_owned(),
        Proof::Restart { overlap } => format!("{RESTART_EVIDENCE}{overlap}"),
    };
    Finding::new(RULE.kind, turn, Some(attempt), evidence).at(ts)
}
