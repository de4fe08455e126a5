//! The `unfinished_tool_executed` rule: a non-read call ran although the attempt that produced
//! it never finished, and no retry replaced that attempt.
//!
//! The article's rule is to hold tool calls until their attempt's finish event. When a retry
//! follows, the unfinished attempt is abandoned and its executions are
//! `abandoned_tool_executed` (critical, raised when the retry is seen); this rule covers the
//! rest, so no execution is reported under both kinds:
//!
//! - the attempt failed (a transport or stream error before its finish) and was not retried:
//!   Claude Code printing "API Error" yet running the `tool_use` of the unfinished message;
//! - the attempt was still open when the turn closed: the stream was cut and nothing followed.
//!
//! Whether an attempt is replaced is only known when the turn closes, so the rule runs at
//! close. Each finding carries the execution's own time, so trace sinks place it on that
//! execution's span.

use super::attempt::AttemptState;
use crate::finding::{Finding, FindingKind};
use crate::report::{CloseReason, Outcome};

/// Findings for every non-read execution of an attempt that ended neither completed nor
/// abandoned, in attempt then execution order.
pub fn unfinished_executions(
    turn: &str,
    attempts: &[AttemptState],
    closed_by: CloseReason,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    for a in attempts {
        let why = match a.outcome {
            Outcome::Failed => "its attempt failed before finishing and was not retried",
            Outcome::Open => match closed_by {
                CloseReason::TurnEnd => "its attempt was still unfinished at turn end",
                CloseReason::IdleTimeout => "its attempt was still unfinished at the idle timeout",
                CloseReason::EndOfInput => "its attempt was still unfinished at end of input",
                CloseReason::Evicted => "its attempt was still unfinished when evicted",
            },
            Outcome::Completed | Outcome::Abandoned => continue,
        };
        for exec in a.execs.iter().filter(|e| !e.read) {
            findings.push(
                Finding::new(
                    FindingKind::UnfinishedToolExecuted,
                    turn,
                    Some(a.number),
                    format!("executed although {why}"),
                )
                .with_call(&exec.name, &exec.id, exec.effect_key.as_deref())
                .at(exec.ts_ms),
            );
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::super::attempt::ExecState;
    use super::super::intern::Interner;
    use super::*;

    fn attempt(n: u32, outcome: Outcome, execs: &[(&str, bool)]) -> AttemptState {
        let mut interner = Interner::default();
        let mut a = AttemptState::new(n, 0);
        a.outcome = outcome;
        for (i, (id, read)) in execs.iter().enumerate() {
            a.execs.push(ExecState {
                id: (*id).to_owned(),
                name: interner.get("shell"),
                effect_key: Some(format!("k{i}")),
                step: None,
                read: *read,
                status: None,
                ts_ms: 100 + i as i64,
                flagged_abandoned: false,
            });
        }
        a
    }

    #[test]
    fn failed_and_open_attempts_report_their_writes_only() {
        let attempts = [
            attempt(0, Outcome::Abandoned, &[("a", false)]),
            attempt(1, Outcome::Completed, &[("b", false)]),
            attempt(2, Outcome::Failed, &[("c", false), ("r", true)]),
        ];
        let f = unfinished_executions("t", &attempts, CloseReason::EndOfInput);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FindingKind::UnfinishedToolExecuted);
        assert_eq!(f[0].attempt, Some(2));
        assert_eq!(f[0].call_id.as_deref(), Some("c"));
        assert_eq!(f[0].ts_ms, Some(100), "placed at the execution's time");
        assert!(f[0].evidence.contains("failed"), "{}", f[0].evidence);

        let open = [attempt(0, Outcome::Open, &[("x", false), ("y", false)])];
        let f = unfinished_executions("t", &open, CloseReason::TurnEnd);
        assert_eq!(f.len(), 2);
        assert!(f[1].evidence.ends_with("at turn end"), "{}", f[1].evidence);
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
    fn an_abandoned_attempts_execution_is_reported_once_as_abandoned() {
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
