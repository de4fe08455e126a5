//! `unfinished_tool_executed` (high): a side-effecting call ran although the attempt that
//! produced it never finished (the stream was cut, failed or errored before its finish event),
//! whether or not a retry followed.
//!
//! The article's rule is to hold tool calls until their attempt's finish event; this rule says
//! the client broke it, in every case:
//!
//! - the attempt failed (a transport or stream error before its finish) and was not retried:
//!   Claude Code printing "API Error" yet running the `tool_use` of the unfinished message,
//!   Codex running a command before `response.completed` and carrying on after the reconnect;
//! - the attempt was still open when the turn closed: the stream was cut and nothing followed;
//! - a retry replaced the attempt: its execution is also `abandoned_tool_executed` (critical,
//!   raised as soon as the retry is seen), which says what the retry made of it; this finding
//!   says why it should never have run.
//!
//! Whether an attempt is replaced is only known when the turn closes, so the rule runs at
//! close. Each finding carries the execution's own time, so trace sinks place it on that
//! execution's span.

use super::{Call, Rule, Scope};
use crate::finding::{Finding, FindingKind, Severity};
use crate::report::{CloseReason, Outcome};

/// The rule.
pub(crate) const RULE: Rule = Rule {
    kind: FindingKind::UnfinishedToolExecuted,
    severity: Severity::High,
    scope: Scope::Tool,
    summary: "A tool call was executed although the attempt that requested it never finished (cut, failed or errored before its finish event).",
};

/// At close: a finding for `call` (not a read), executed at `exec_ts` from `attempt`, when
/// that attempt never completed.
pub(crate) fn on_close(
    turn: &str,
    attempt: u32,
    outcome: Outcome,
    call: Call<'_>,
    exec_ts: i64,
    closed_by: CloseReason,
) -> Option<Finding> {
    let why = match outcome {
        Outcome::Failed => "its attempt failed before finishing and was not retried",
        Outcome::Open => match closed_by {
            CloseReason::TurnEnd => "its attempt was still unfinished at turn end",
            CloseReason::IdleTimeout => "its attempt was still unfinished at the idle timeout",
            CloseReason::EndOfInput => "its attempt was still unfinished at end of input",
            CloseReason::Evicted => "its attempt was still unfinished when evicted",
        },
        Outcome::Abandoned => "its attempt never finished (a retry replaced it)",
        Outcome::Completed => return None,
    };
    Some(
        Finding::new(
            RULE.kind,
            turn,
            Some(attempt),
            format!("executed although {why}"),
        )
        .with_call(call.tool, call.id, call.effect_key)
        .at(exec_ts),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_failed_and_open_attempts_report() {
        let call = Call {
            tool: "shell",
            id: "c",
            effect_key: Some("k"),
        };
        let at = |o| on_close("t", 2, o, call, 100, CloseReason::TurnEnd);
        assert!(at(Outcome::Completed).is_none());
        let f = at(Outcome::Abandoned).expect("abandoned");
        assert!(f.evidence.contains("retry replaced"), "{}", f.evidence);
        let f = at(Outcome::Failed).expect("failed");
        assert_eq!(f.kind, FindingKind::UnfinishedToolExecuted);
        assert_eq!(
            (f.attempt, f.call_id.as_deref(), f.ts_ms),
            (Some(2), Some("c"), Some(100))
        );
        assert!(f.evidence.contains("failed"), "{}", f.evidence);
        let f = at(Outcome::Open).expect("open");
        assert!(f.evidence.ends_with("at turn end"), "{}", f.evidence);
    }

    /// Native lines through a whole correlator; the sorted finding kinds of each turn.
    fn correlate(lines: &str) -> Vec<Vec<FindingKind>> {
        use crate::correlate::{Correlator, CorrelatorConfig, Output};
        use crate::decode::SkipCounts;
        use crate::decode::native::{NativeLine, decode_line};
        let mut c = Correlator::new(
            CorrelatorConfig::default(),
            std::sync::Arc::new(crate::cost::PriceTable::builtin()),
        );
        let mut out = Vec::new();
        let mut skips = SkipCounts::default();
        for (i, line) in lines.lines().filter(|l| !l.trim().is_empty()).enumerate() {
            match decode_line(line.as_bytes(), &mut skips) {
                Ok(NativeLine::Event(ev)) => c.observe(&ev, i as i64, &mut out),
                other => panic!("line {i}: {other:?}"),
            }
        }
        c.close_all(&mut out);
        out.iter()
            .filter_map(|o| match o {
                Output::TurnClosed(r) => {
                    let mut k: Vec<FindingKind> = r.findings.iter().map(|f| f.kind).collect();
                    k.sort();
                    Some(k)
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn claude_code_runs_the_tool_of_a_message_that_errored() {
        // The message's tool_use was complete, the stream broke before message_delta, the
        // client printed an API error, did not retry, and ran the call anyway.
        let turns = correlate(
            r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"toolu_1","name":"Bash","args":{"command":"touch a"}}
{"turn":"t","type":"error","attempt":0,"message":"terminated"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"toolu_1","name":"Bash"}
{"turn":"t","type":"turn_end"}
"#,
        );
        assert_eq!(
            turns,
            [vec![
                FindingKind::UnfinishedToolExecuted,
                FindingKind::IncompleteTurn
            ]]
        );
    }

    #[test]
    fn an_abandoned_attempts_execution_is_abandoned_and_unfinished() {
        let turns = correlate(
            r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"shell","args":{"c":"x"}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"shell"}
{"turn":"t","type":"error","attempt":0,"message":"reset"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"tool_call","attempt":1,"id":"b","name":"shell","args":{"c":"y"}}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
{"turn":"t","type":"turn_end"}
"#,
        );
        assert_eq!(
            turns,
            [vec![
                FindingKind::AbandonedToolExecuted,
                FindingKind::UnfinishedToolExecuted,
                FindingKind::EarlyExecution
            ]]
        );
    }

    #[test]
    fn a_final_attempt_cut_while_its_call_ran_is_unfinished() {
        // Codex-like: the call ran when its item completed; the stream then ended with no
        // finish and nothing else. Also the final of two attempts.
        let turns = correlate(
            r#"
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"tool_call","attempt":1,"id":"c","name":"shell","args":{"c":"x"}}
{"turn":"t","type":"tool_exec","attempt":1,"id":"c","name":"shell"}
{"turn":"u","type":"tool_call","attempt":0,"id":"r","name":"read","args":{}}
{"turn":"u","type":"tool_exec","attempt":0,"id":"r","name":"read","effect":"read"}
"#,
        );
        assert_eq!(
            turns,
            [
                vec![
                    FindingKind::UnfinishedToolExecuted,
                    FindingKind::EarlyExecution,
                    FindingKind::IncompleteTurn
                ],
                vec![FindingKind::IncompleteTurn],
            ]
        );
    }

    #[test]
    fn a_call_run_early_whose_attempt_then_finished_is_only_early() {
        let turns = correlate(
            r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"c","name":"shell","args":{"c":"x"}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"c","name":"shell"}
{"turn":"t","type":"finish","attempt":0,"reason":"tool_use"}
"#,
        );
        assert_eq!(turns, [vec![FindingKind::EarlyExecution]]);
    }
}
