//! `abandoned_tool_executed` (critical): a side-effecting call of an attempt that was later
//! abandoned (a retry replaced it) was executed, whether it ran before the retry or after.
//!
//! Started, then aborted: some clients start an abandoned attempt's call and abort it, and
//! answer the model with a result that says so ("User aborted the command"), or with an
//! error. Whether the effect landed is then a race: the finding stands, its evidence says the
//! result was an abort or an error so a person knows to check the effect, and (with content
//! capture only) it quotes the start of that result.

use serde::{Deserialize, Serialize};

use super::{Call, Rule, Scope};
use crate::finding::{Finding, FindingKind, Severity};

/// The rule.
pub(crate) const RULE: Rule = Rule {
    kind: FindingKind::AbandonedToolExecuted,
    severity: Severity::Critical,
    scope: Scope::Tool,
    summary: "A tool call from an abandoned attempt was executed: its effect happened although the retry replaced that answer.",
};

/// How an execution's result says it ended, when not in success.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Stopped {
    /// Started, then aborted or cancelled (by the user or the client).
    Aborted,
    /// The result is an error.
    Failed,
}

/// Words that say an execution was stopped, looked for at the start of its result (results
/// of OpenAI and Gemini tools carry no error flag: the text is all there is).
const ABORT_WORDS: [&str; 5] = ["aborted", "cancelled", "canceled", "interrupted", "killed"];

/// How the client's `status` and result text say an execution ended, when not in success.
pub(crate) fn stopped(status: Option<&str>, result: Option<&str>) -> Option<Stopped> {
    let head = |t: &str| {
        let mut cut = t.len().min(160);
        while !t.is_char_boundary(cut) {
            cut -= 1;
        }
        t[..cut].to_ascii_lowercase()
    };
    let said_abort = |t: &str| {
        let h = head(t);
        ABORT_WORDS.iter().any(|w| h.contains(w))
    };
    let status = status.map(|s| s.to_ascii_lowercase());
    match status.as_deref() {
        Some("aborted" | "cancelled" | "canceled" | "interrupted" | "killed") => {
            Some(Stopped::Aborted)
        }
        _ if result.is_some_and(said_abort) => Some(Stopped::Aborted),
        Some("error" | "failed" | "failure" | "errored") => Some(Stopped::Failed),
        _ => None,
    }
}

/// An attempt that had executed `call` (not a read) was abandoned at `ts`; `stopped` and
/// `quote` are what its result said (the quote only with content capture).
pub(crate) fn on_abandon(
    turn: &str,
    attempt: u32,
    call: Call<'_>,
    stopped: Option<Stopped>,
    quote: Option<&str>,
    ts: i64,
) -> Finding {
    finding(
        turn,
        attempt,
        call,
        ts,
        "executed before the attempt was abandoned",
        stopped,
        quote,
    )
}

/// `call` of an already abandoned attempt was executed at `ts`.
pub(crate) fn on_exec_after(
    turn: &str,
    attempt: u32,
    call: Call<'_>,
    stopped: Option<Stopped>,
    quote: Option<&str>,
    ts: i64,
) -> Finding {
    finding(
        turn,
        attempt,
        call,
        ts,
        "executed after the attempt was abandoned",
        stopped,
        quote,
    )
}

fn finding(
    turn: &str,
    attempt: u32,
    call: Call<'_>,
    ts: i64,
    when: &str,
    stopped: Option<Stopped>,
    quote: Option<&str>,
) -> Finding {
    let evidence = match stopped {
        None => when.to_owned(),
        Some(Stopped::Aborted) => {
            format!(
                "{when}; its result says it was aborted or cancelled: check whether its effect landed"
            )
        }
        Some(Stopped::Failed) => {
            format!("{when}; its result is an error: check whether its effect landed")
        }
    };
    let f = Finding::new(RULE.kind, turn, Some(attempt), evidence)
        .with_call(call.tool, call.id, call.effect_key)
        .at(ts);
    match (stopped, quote) {
        (Some(_), Some(q)) => f.with_quote(q),
        _ => f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_result_says() {
        assert_eq!(stopped(Some("success"), Some("done")), None);
        assert_eq!(stopped(None, Some("Output: (empty)")), None);
        assert_eq!(
            stopped(Some("error"), Some("User aborted the command")),
            Some(Stopped::Aborted)
        );
        assert_eq!(
            stopped(None, Some("[Operation Cancelled] Reason: user cancelled")),
            Some(Stopped::Aborted)
        );
        assert_eq!(stopped(Some("CANCELLED"), None), Some(Stopped::Aborted));
        assert_eq!(
            stopped(Some("error"), Some("exit code 1")),
            Some(Stopped::Failed)
        );
        assert_eq!(stopped(Some("failed"), None), Some(Stopped::Failed));
        // only the start of a result is read: a long output that mentions a word later on
        // is not an abort
        let long = format!("{}order cancelled", "x".repeat(200));
        assert_eq!(stopped(Some("success"), Some(&long)), None);
    }

    #[test]
    fn evidence_and_quote() {
        let call = Call {
            tool: "Bash",
            id: "c1",
            effect_key: None,
        };
        let f = on_exec_after(
            "t",
            0,
            call,
            Some(Stopped::Aborted),
            Some("User aborted"),
            5,
        );
        assert!(f.evidence.starts_with(
            "executed after the attempt was abandoned; its result says it was aborted"
        ));
        assert_eq!(f.quote.as_deref(), Some("User aborted"));
        let f = on_abandon("t", 0, call, None, Some("ignored"), 5);
        assert_eq!(f.evidence, "executed before the attempt was abandoned");
        assert_eq!(f.quote, None, "only a stopped execution's result is quoted");
    }
}
