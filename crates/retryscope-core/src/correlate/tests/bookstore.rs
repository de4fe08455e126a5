//! The bookstore examples end to end: which findings each session raises, which
//! attempt's refund counts.

use super::*;

#[test]
fn bookstore_naive_splices_and_refunds_twice() {
    let (_, reports) = run(NAIVE);
    let r = &reports[0];
    assert_eq!(
        kinds(r),
        vec![
            FindingKind::AbandonedToolExecuted,
            FindingKind::UnfinishedToolExecuted,
            FindingKind::DuplicateEffect,
            FindingKind::SplicedText,
            FindingKind::EarlyExecution,
            FindingKind::EarlyExecution,
        ]
    );
    let spliced = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::SplicedText)
        .unwrap();
    assert_eq!(spliced.evidence, "output");
    assert_eq!(spliced.attempt, Some(0));
    let abandoned = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::AbandonedToolExecuted)
        .unwrap();
    assert_eq!(abandoned.call_id.as_deref(), Some("c1"));
    assert_eq!(abandoned.tool.as_deref(), Some("issue_refund"));
    // c1 and c7 have different ids and key orders but one effect key.
    let k1 = &r.attempts[0].tool_calls[0].effect_key;
    let k7 = &r.attempts[1].tool_calls[0].effect_key;
    assert_eq!(k1, k7);
    let dup = r
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::DuplicateEffect)
        .unwrap();
    assert_eq!(dup.call_id.as_deref(), Some("c7"));
    assert_eq!(dup.effect_key.as_ref(), Some(k1));
    assert_eq!(r.status, TurnStatus::Completed);
    assert_eq!(r.retries, 1);
    assert_eq!(r.attempts[0].outcome, Outcome::Abandoned);
    assert_eq!(r.attempts[1].outcome, Outcome::Completed);
}

#[test]
fn bookstore_reset_clean_text_but_refunds_twice() {
    let (_, reports) = run(RESET);
    assert_eq!(
        kinds(&reports[0]),
        vec![
            FindingKind::AbandonedToolExecuted,
            FindingKind::UnfinishedToolExecuted,
            FindingKind::DuplicateEffect,
            FindingKind::EarlyExecution,
            FindingKind::EarlyExecution,
        ]
    );
}

#[test]
fn bookstore_reset_late_exec_is_clean_with_one_refund_from_attempt_1() {
    let (_, reports) = run(LATE);
    let r = &reports[0];
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    let executed: Vec<(u32, &str)> = r
        .attempts
        .iter()
        .flat_map(|a| a.executed.iter().map(move |e| (a.attempt, e.id.as_str())))
        .collect();
    assert_eq!(executed, vec![(1, "c7")]);
}
