//! Findings raised as their facts become known and at close: abandoned and early
//! executions, duplicate effects and reads, the retry cap, incomplete and failed turns.

use super::*;

#[test]
fn execution_logged_after_the_retry_is_still_abandoned() {
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"send_email","args":{"to":"x"}}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"send_email"}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#);
    let f = &reports[0].findings;
    assert_eq!(f.len(), 2, "{f:?}");
    assert_eq!(f[0].kind, FindingKind::AbandonedToolExecuted);
    assert_eq!(f[0].evidence, "executed after the attempt was abandoned");
    assert_eq!(f[1].kind, FindingKind::UnfinishedToolExecuted);
    assert_eq!(
        f[0].effect_key.as_deref(),
        Some(reports[0].attempts[0].tool_calls[0].effect_key.as_str())
    );
}

#[test]
fn findings_known_early_are_emitted_before_the_turn_closes() {
    let (out, _) = run(NAIVE);
    let first_close = out
        .iter()
        .position(|o| matches!(o, Output::TurnClosed(_)))
        .unwrap();
    let abandoned = out
        .iter()
        .position(
            |o| matches!(o, Output::Finding(f, _) if f.kind == FindingKind::AbandonedToolExecuted),
        )
        .unwrap();
    let retry = out
        .iter()
        .position(|o| matches!(o, Output::Retry { .. }))
        .unwrap();
    assert!(retry < abandoned && abandoned < first_close);
    match &out[retry] {
        Output::Retry { labels, reason } => {
            assert_eq!(labels.model.as_deref(), Some("claude-sonnet-4-5"));
            assert_eq!(reason.as_deref(), Some("connection_reset"));
        }
        _ => unreachable!(),
    }
}

#[test]
fn duplicate_needs_same_meaning_and_respects_steps_and_client_keys() {
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"pay","args":{"n":1}}
{"turn":"t","type":"tool_call","attempt":0,"id":"b","name":"pay","args":{"n":2}}
{"turn":"t","type":"finish","attempt":0,"reason":"tool_calls"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"pay"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"pay"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"x","name":"pay","args":{"n":1},"step":2}
{"turn":"t","type":"tool_exec","attempt":0,"id":"y","name":"pay","args":{"n":1},"step":3}
{"turn":"t","type":"tool_exec","attempt":0,"id":"k1","name":"pay","effect_key":"idem-1"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"k2","name":"other","effect_key":"idem-1"}
"#);
    let f = &reports[0].findings;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, FindingKind::DuplicateEffect);
    assert_eq!(f[0].call_id.as_deref(), Some("k2"));
    assert_eq!(f[0].effect_key.as_deref(), Some("idem-1"));
}

#[test]
fn reads_are_never_effects() {
    let lines = r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"lookup_order","args":{"o":1}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"lookup_order","effect":"read"}
{"turn":"t","type":"tool_call","attempt":0,"id":"b","name":"search","args":{"q":1}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"search"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"tool_call","attempt":1,"id":"c","name":"lookup_order","args":{"o":1}}
{"turn":"t","type":"tool_exec","attempt":1,"id":"c","name":"lookup_order","effect":"read"}
{"turn":"t","type":"tool_exec","attempt":1,"id":"d","name":"search","args":{"q":1}}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#;
    let mut c = cfg();
    c.read_only_tools.insert("search".into());
    let (_, reports, _) = run_with(c, lines);
    assert!(reports[0].findings.is_empty(), "{:?}", reports[0].findings);
    let execs: usize = reports[0].attempts.iter().map(|a| a.executed.len()).sum();
    assert_eq!(execs, 4, "reads are still counted");
    // Without the read-only setting, `search` is an effect.
    let (_, reports) = run(lines);
    assert!(reports[0].findings.iter().any(
        |f| f.kind == FindingKind::AbandonedToolExecuted && f.tool.as_deref() == Some("search")
    ));
}

#[test]
fn early_execution_only_before_finish() {
    let (_, reports) = run(r#"
{"turn":"t","type":"tool_call","attempt":0,"id":"a","name":"write","args":{}}
{"turn":"t","type":"tool_exec","attempt":0,"id":"a","name":"write"}
{"turn":"t","type":"tool_call","attempt":0,"id":"b","name":"write2","args":{}}
{"turn":"t","type":"finish","attempt":0,"reason":"tool_calls"}
{"turn":"t","type":"tool_exec","attempt":0,"id":"b","name":"write2"}
"#);
    let f = &reports[0].findings;
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::EarlyExecution);
    assert_eq!(f[0].call_id.as_deref(), Some("a"));
}

#[test]
fn retry_cap_is_raised_once_when_exceeded() {
    let mut lines = String::new();
    for n in 0..7 {
        lines.push_str(&format!(
            "{{\"turn\":\"t\",\"type\":\"retry\",\"attempt\":{n},\"reason\":\"overloaded\"}}\n"
        ));
    }
    lines.push_str(r#"{"turn":"t","type":"finish","attempt":6,"reason":"stop"}"#);
    let (out, reports) = run(&lines);
    let caps: Vec<_> = reports[0]
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::RetryCapExceeded)
        .collect();
    assert_eq!(caps.len(), 1);
    assert_eq!(
        caps[0].attempt,
        Some(4),
        "the fifth attempt exceeds a cap of 4"
    );
    assert_eq!(reports[0].retries, 6);
    let retries = out
        .iter()
        .filter(|o| matches!(o, Output::Retry { .. }))
        .count();
    assert_eq!(retries, 6);
    // At the cap exactly: no finding.
    let (_, reports) = run(r#"
{"turn":"t","type":"retry","attempt":3}
{"turn":"t","type":"finish","attempt":3,"reason":"stop"}
"#);
    assert!(reports[0].findings.is_empty());
}

#[test]
fn incomplete_and_failed_turns() {
    let (_, reports) = run(r#"
{"turn":"a","type":"text","attempt":0,"text":"hel"}
{"turn":"b","type":"text","attempt":0,"text":"hel"}
{"turn":"b","type":"error","attempt":0,"message":"overloaded","code":"529"}
{"turn":"b","type":"turn_end"}
"#);
    let by_id = |id: &str| reports.iter().find(|r| r.turn == id).unwrap();
    assert_eq!(by_id("a").status, TurnStatus::Incomplete);
    assert_eq!(by_id("a").closed_by, CloseReason::EndOfInput);
    assert_eq!(by_id("a").attempts[0].outcome, Outcome::Open);
    assert_eq!(kinds(by_id("a")), vec![FindingKind::IncompleteTurn]);
    assert_eq!(by_id("b").status, TurnStatus::Failed);
    // Issue 11.8: without content capture, the error's text stays in the process; its
    // length does not.
    assert_eq!(by_id("b").attempts[0].error, None);
    assert_eq!(by_id("b").attempts[0].error_chars, Some(15));
    assert_eq!(kinds(by_id("b")), vec![FindingKind::IncompleteTurn]);
}

/// An abandoned attempt's call that the client started and then aborted (modelled on a
/// client answering the model "User aborted the command" for a call it cancelled after a
/// retry): still `abandoned_tool_executed`, with the abort as evidence, and its words
/// quoted only with content capture.
const STARTED_THEN_ABORTED: &str = r#"
{"turn":"t","type":"turn_start","ts":1000,"model":"claude-sonnet-4-5"}
{"turn":"t","type":"tool_call","attempt":0,"ts":1100,"id":"c1","name":"Bash","args":{"command":"touch /m/a1"}}
{"turn":"t","type":"error","attempt":0,"ts":1200,"message":"reset"}
{"turn":"t","type":"retry","attempt":1,"ts":1300}
{"turn":"t","type":"tool_call","attempt":1,"ts":1400,"id":"c7","name":"Bash","args":{"command":"touch /m/a2"}}
{"turn":"t","type":"finish","attempt":1,"ts":1500,"reason":"tool_use"}
{"turn":"t","type":"tool_exec","ts":1600,"id":"c1","name":"Bash","status":"error","result":"User aborted the command"}
{"turn":"t","type":"tool_exec","ts":1600,"id":"c7","name":"Bash","status":"success","result":"done"}
{"turn":"t","type":"turn_end","ts":1700}
"#;

#[test]
fn started_then_aborted_is_reported_with_its_result_as_evidence() {
    let (out, reports) = run(STARTED_THEN_ABORTED);
    let r = &reports[0];
    let abandoned: Vec<&Finding> = r
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::AbandonedToolExecuted)
        .collect();
    assert_eq!(abandoned.len(), 1, "{:?}", r.findings);
    let f = abandoned[0];
    assert_eq!((f.attempt, f.call_id.as_deref()), (Some(0), Some("c1")));
    assert!(
        f.evidence.contains("aborted or cancelled") && f.evidence.contains("check whether"),
        "{}",
        f.evidence
    );
    assert_eq!(f.quote, None, "no text without content capture");
    // the live finding says the same
    assert!(
        out.iter()
            .any(|o| matches!(o, Output::Finding(x, _) if x == f))
    );
    // The retry's successful execution is no finding.
    assert!(
        r.findings
            .iter()
            .all(|f| f.call_id.as_deref() != Some("c7"))
    );

    let (_, reports, _) = run_with(
        CorrelatorConfig {
            capture_content: true,
            ..cfg()
        },
        STARTED_THEN_ABORTED,
    );
    let f = reports[0]
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::AbandonedToolExecuted)
        .expect("finding");
    assert_eq!(f.quote.as_deref(), Some("User aborted the command"));

    // An error result (no abort words): the same finding, "its result is an error".
    let failed = STARTED_THEN_ABORTED.replace("User aborted the command", "exit status 1");
    let (_, reports) = run(&failed);
    let f = reports[0]
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::AbandonedToolExecuted)
        .expect("finding");
    assert!(
        f.evidence.contains("its result is an error"),
        "{}",
        f.evidence
    );
}
