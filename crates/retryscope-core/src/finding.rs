//! Findings: what went wrong in a turn, as a closed set of kinds with fixed severities. When
//! each kind fires, and what its evidence says, is its rule's business ([`crate::rules`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How bad a finding is. Ordered: `Info < Warning < High < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing.
    Info,
    /// Risky client behaviour.
    Warning,
    /// The user saw something wrong.
    High,
    /// A side effect went wrong.
    Critical,
}

impl Severity {
    /// Every severity, lowest first.
    pub const ALL: [Severity; 4] = [
        Severity::Info,
        Severity::Warning,
        Severity::High,
        Severity::Critical,
    ];

    /// The wire and label name.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Severity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Severity::ALL
            .into_iter()
            .find(|sev| sev.as_str() == s)
            .ok_or_else(|| {
                format!("unknown severity `{s}` (expected info, warning, high or critical)")
            })
    }
}

/// The kinds of finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A call from an abandoned attempt was executed.
    AbandonedToolExecuted,
    /// A call was executed although its attempt never finished and was not retried (it failed,
    /// or was still streaming when the turn closed). An abandoned attempt's executions are
    /// `AbandonedToolExecuted` instead, never both.
    UnfinishedToolExecuted,
    /// Two executions in one turn share an effect key.
    DuplicateEffect,
    /// The user was shown an abandoned attempt's text together with the retry's.
    SplicedText,
    /// A lower layer spliced a retried generation into one recorded stream.
    SplicedStream,
    /// A tool executed before its attempt finished.
    EarlyExecution,
    /// More attempts than the configured cap.
    RetryCapExceeded,
    /// The turn closed with no finished attempt.
    IncompleteTurn,
}

impl FindingKind {
    /// Every kind, for pre-registering metric series.
    pub const ALL: [FindingKind; 8] = [
        FindingKind::AbandonedToolExecuted,
        FindingKind::UnfinishedToolExecuted,
        FindingKind::DuplicateEffect,
        FindingKind::SplicedText,
        FindingKind::SplicedStream,
        FindingKind::EarlyExecution,
        FindingKind::RetryCapExceeded,
        FindingKind::IncompleteTurn,
    ];

    /// The wire and label name.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingKind::AbandonedToolExecuted => "abandoned_tool_executed",
            FindingKind::UnfinishedToolExecuted => "unfinished_tool_executed",
            FindingKind::DuplicateEffect => "duplicate_effect",
            FindingKind::SplicedText => "spliced_text",
            FindingKind::SplicedStream => "spliced_stream",
            FindingKind::EarlyExecution => "early_execution",
            FindingKind::RetryCapExceeded => "retry_cap_exceeded",
            FindingKind::IncompleteTurn => "incomplete_turn",
        }
    }

    /// The fixed severity of this kind (its rule's).
    pub fn severity(self) -> Severity {
        crate::rules::rule(self).severity
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding about one turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// What kind.
    pub kind: FindingKind,
    /// How bad (always `kind.severity()`).
    pub severity: Severity,
    /// The turn id.
    pub turn: String,
    /// The attempt it concerns.
    pub attempt: Option<u32>,
    /// The tool, for tool findings.
    pub tool: Option<String>,
    /// The provider call id, for tool findings.
    pub call_id: Option<String>,
    /// The effect key, for tool findings.
    pub effect_key: Option<String>,
    /// A short, deterministic statement of what proves it.
    pub evidence: String,
    /// Text from the input that shows it (a tool's result), only with content capture: it
    /// leaves the process only when the user opted in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quote: Option<String>,
    /// Event time at which it became known.
    pub ts_ms: Option<i64>,
}

impl Finding {
    /// A finding of `kind` with its fixed severity.
    pub fn new(kind: FindingKind, turn: &str, attempt: Option<u32>, evidence: String) -> Self {
        Finding {
            kind,
            severity: kind.severity(),
            turn: turn.to_owned(),
            attempt,
            tool: None,
            call_id: None,
            effect_key: None,
            evidence,
            quote: None,
            ts_ms: None,
        }
    }

    /// Attach a quote from the input (callers pass one only with content capture).
    pub(crate) fn with_quote(mut self, quote: &str) -> Self {
        self.quote = Some(quote.to_owned());
        self
    }

    /// Attach the tool call this finding is about.
    pub fn with_call(mut self, tool: &str, call_id: &str, effect_key: Option<&str>) -> Self {
        self.tool = Some(tool.to_owned());
        self.call_id = Some(call_id.to_owned());
        self.effect_key = effect_key.map(str::to_owned);
        self
    }

    /// Attach the time it became known.
    pub(crate) fn at(mut self, ts_ms: i64) -> Self {
        self.ts_ms = Some(ts_ms);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_order_and_parse() {
        assert!(Severity::Critical > Severity::High);
        assert!(Severity::High > Severity::Warning);
        assert!(Severity::Warning > Severity::Info);
        assert_eq!("high".parse::<Severity>(), Ok(Severity::High));
        assert!("urgent".parse::<Severity>().is_err());
    }

    #[test]
    fn kind_names_match_serde() {
        for kind in FindingKind::ALL {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{}\"", kind.as_str()));
        }
    }
}
