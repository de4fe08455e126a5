//! Spliced text and streams: judged by the output, by render resets, by a splice
//! signal, and a continuation against its partial text.

use super::*;

#[test]
fn no_reset_splice_without_output() {
    let base = r#"
{"turn":"t","type":"text","attempt":0,"text":"Refunding the dam"}
{"turn":"t","type":"retry","attempt":1}
RESET
{"turn":"t","type":"text","attempt":1,"text":"The book arrived damaged."}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#;
    let (_, reports) = run(&base.replace("RESET", ""));
    let f = &reports[0].findings;
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].kind, FindingKind::SplicedText);
    assert_eq!(f[0].evidence, "no_reset");
    let (_, reports) =
        run(&base.replace("RESET", r#"{"turn":"t","type":"render_reset","attempt":1}"#));
    assert!(reports[0].findings.is_empty());
    // A reset logged before the retry line (after the last abandoned text) also counts.
    let (_, reports) = run(r#"
{"turn":"t","type":"text","attempt":0,"text":"Refunding the dam"}
{"turn":"t","type":"render_reset"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"text","attempt":1,"text":"The book arrived damaged."}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
"#);
    assert!(reports[0].findings.is_empty());
}

#[test]
fn wire_only_turn_has_no_no_reset_splice_but_output_still_proves_one() {
    // Proxy defect 2: a proxy sees the wire, never the display, so text of two attempts with
    // no render reset between proves nothing there; only the output (the history the client
    // sent back) does.
    let base = r#"
{"turn":"t","type":"turn_start","provider":"openai","wire_only":true}
{"turn":"t","type":"text","attempt":0,"text":"Refunding the dam"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"text","attempt":1,"text":"The book arrived damaged."}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
OUTPUT
"#;
    let (_, reports) = run(&base.replace("OUTPUT", ""));
    assert!(reports[0].findings.is_empty(), "{:?}", reports[0].findings);
    let (_, reports) = run(&base.replace(
        "OUTPUT",
        r#"{"turn":"t","type":"output","text":"Refunding the damThe book arrived damaged."}"#,
    ));
    let f = &reports[0].findings;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].kind, FindingKind::SplicedText);
    assert_eq!(f[0].evidence, "output");
    // `wire_only: false` (and absent) keeps the reset proof.
    let (_, reports) = run(&base
        .replace("OUTPUT", "")
        .replace(r#""wire_only":true"#, r#""wire_only":false"#));
    assert_eq!(reports[0].findings[0].evidence, "no_reset");
}

#[test]
fn output_rule_overrides_reset_rule() {
    // No reset, but the client's committed output is the final text only: clean.
    let (_, reports) = run(r#"
{"turn":"t","type":"text","attempt":0,"text":"Refunding the dam"}
{"turn":"t","type":"retry","attempt":1}
{"turn":"t","type":"text","attempt":1,"text":"The book arrived damaged."}
{"turn":"t","type":"finish","attempt":1,"reason":"stop"}
{"turn":"t","type":"output","text":"The book arrived damaged."}
"#);
    assert!(reports[0].findings.is_empty(), "{:?}", reports[0].findings);
}

#[test]
fn stream_splice_is_a_retry_and_a_finding() {
    let (_, reports) = run(r#"
{"turn":"t","type":"text","attempt":0,"text":"a"}
{"turn":"t","type":"stream_splice","attempt":1,"signal":"message_start id changed"}
{"turn":"t","type":"finish","attempt":1,"reason":"end_turn"}
"#);
    let r = &reports[0];
    assert_eq!(r.attempts[0].outcome, Outcome::Abandoned);
    assert_eq!(kinds(r), vec![FindingKind::SplicedStream]);
}

#[test]
fn a_splice_of_a_generation_that_left_no_event_still_makes_two_attempts() {
    // The replaced generation streamed only reasoning: nothing of attempt 0 reached us.
    let (out, reports) = run(r#"
{"turn":"t","type":"turn_start","ts":1000,"provider":"anthropic"}
{"turn":"t","type":"stream_splice","attempt":1,"ts":1500,"signal":"message_start id changed"}
{"turn":"t","type":"finish","attempt":1,"ts":1900,"reason":"end_turn"}
"#);
    let r = &reports[0];
    let got: Vec<(u32, Outcome, Option<i64>)> = r
        .attempts
        .iter()
        .map(|a| (a.attempt, a.outcome, a.started_ms))
        .collect();
    assert_eq!(
        got,
        [
            (0, Outcome::Abandoned, Some(1000)),
            (1, Outcome::Completed, Some(1500))
        ]
    );
    assert_eq!(r.retries, 1);
    let retries = out
        .iter()
        .filter(|o| matches!(o, Output::Retry { .. }))
        .count();
    assert_eq!(retries, 1);
}

#[test]
fn a_continuation_is_judged_against_its_partial_text_plus_its_own() {
    // Issue 21: the retry request carries the cut attempt's partial text (`prefill`). A
    // continuation kept after it is clean, with no render reset needed (the client keeps the
    // partial text on screen by design); one that restarted its answer is spliced_text with
    // the shared opening as evidence (Qwen Code 0.24.4 after a cut).
    let log = |cont: &str| {
        format!(
            r#"{{"turn":"q","type":"turn_start","ts":1,"provider":"openai","model":"gpt-4o"}}
{{"turn":"q","type":"text","attempt":0,"ts":2,"text":"[A1] I will now cr"}}
{{"turn":"q","type":"error","attempt":0,"ts":3,"message":"reset"}}
{{"turn":"q","type":"retry","attempt":1,"ts":4,"reason":"eof","prefill":"[A1] I will now cr"}}
{{"turn":"q","type":"text","attempt":1,"ts":5,"text":"{cont}"}}
{{"turn":"q","type":"finish","attempt":1,"ts":6,"reason":"stop"}}
{{"turn":"q","type":"output","ts":7,"text":"[A1] I will now cr{cont}"}}
{{"turn":"q","type":"turn_end","ts":8}}
"#
        )
    };
    let (_, reports) = run(&log("eate the marker file (A2)."));
    assert_eq!(reports[0].retries, 1);
    assert!(reports[0].findings.is_empty(), "{:?}", reports[0].findings);
    let (_, reports) = run(&log("[A2] I will now create the marker file (A2)."));
    assert_eq!(kinds(&reports[0]), vec![FindingKind::SplicedText]);
    assert_eq!(reports[0].findings[0].attempt, Some(0));
    assert_eq!(reports[0].findings[0].evidence, "restart: ] I will now cr");
    // Without the prefill (a plain resend), the same kept text is an ordinary splice.
    let (_, reports) =
        run(&log("eate the marker file (A2).").replace(r#","prefill":"[A1] I will now cr""#, ""));
    assert_eq!(kinds(&reports[0]), vec![FindingKind::SplicedText]);
    assert_eq!(reports[0].findings[0].evidence, "output");
}
