//! What the next request's tool results say about how a call ended, through the tracker and
//! the real pipeline: an abandoned attempt's call that the client started and then aborted.
//!
//! Modelled on the clients issue 21 describes: after a cut, the abandoned attempt's command
//! was started, then aborted, and the model is answered with a tool result such as "User
//! aborted the command" (Anthropic: `is_error: true`; OpenAI Chat: the text alone).

use std::sync::Arc;

use super::super::tests::{Shared, answer, anthropic, anthropic_attempt, stream, tracker};
use super::super::*;
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::finding::Finding;
use retryscope_core::ingest::{Ingest, Source};

/// Every finding, through the ingest path, with or without content capture.
fn findings(lines: &Shared, capture_content: bool) -> Vec<Finding> {
    let cfg = CorrelatorConfig {
        capture_content,
        ..CorrelatorConfig::default()
    };
    let correlator = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut ingest = Ingest::new(correlator, Format::Native);
    let id = ingest.stream(Source::Proxy, "<proxy>");
    let mut out = Vec::new();
    for line in lines.0.lock().expect("lock").iter() {
        ingest.line(id, None, line, None, &mut out, &mut |_| {});
    }
    ingest.close_all(&mut out, &mut |_| {});
    out.into_iter()
        .filter_map(|o| match o {
            Output::Finding(f, _) => Some(f),
            _ => None,
        })
        .collect()
}

/// A cut attempt streaming call `c1`, its retry streaming `c7`, then the next request with
/// both calls kept and `results` (id, content, is_error) answering them.
fn cut_retry_and_results(results: &[(&str, &str, bool)]) -> Shared {
    let (mut t, lines) = tracker();
    let mut ts = 1_000;
    let user =
        serde_json::json!({"role":"user","content":"My book arrived damaged, order ORD-7781."});
    let first = serde_json::json!({"model":"claude-sonnet-4-5","stream":true,"messages":[user]});
    let r0 = anthropic(first.clone());
    let a0 = t.begin(Api::Anthropic, r0.as_ref(), None, ts);
    let cut = End::Injected {
        point: "after-tool-call",
        how: "reset",
    };
    let a0_chunks = anthropic_attempt("Checking order ORD-7781. ", "c1", "Refunding", false);
    stream(&mut t, &a0, &a0_chunks, cut, &mut ts);
    let a1 = t.begin(Api::Anthropic, r0.as_ref(), None, ts);
    let a1_chunks = anthropic_attempt("Checking your order. ", "c7", "Refund started.", true);
    stream(&mut t, &a1, &a1_chunks, End::Complete, &mut ts);
    let blocks: Vec<serde_json::Value> = results
        .iter()
        .map(|(id, text, error)| {
            serde_json::json!({"type":"tool_result","tool_use_id":id,"content":text,"is_error":error})
        })
        .collect();
    let next = anthropic(serde_json::json!({"model":"claude-sonnet-4-5","messages":[
        user,
        {"role":"assistant","content":[
            {"type":"text","text":"Checking your order. Refund started."},
            {"type":"tool_use","id":"c1","name":"issue_refund","input":{"order_id":"ORD-7781"}},
            {"type":"tool_use","id":"c7","name":"issue_refund","input":{"order_id":"ORD-7781"}}
        ]},
        {"role":"user","content":blocks}
    ]}));
    let a2 = t.begin(Api::Anthropic, next.as_ref(), None, ts + 100);
    answer(&mut t, &a2, ts + 200);
    lines
}

fn abandoned(f: &[Finding]) -> &Finding {
    f.iter()
        .find(|f| f.kind.as_str() == "abandoned_tool_executed")
        .expect("abandoned_tool_executed")
}

#[test]
fn an_aborted_result_of_the_abandoned_call_is_the_evidence() {
    let lines = cut_retry_and_results(&[
        ("c1", "User aborted the command", true),
        ("c7", "refund issued", false),
    ]);
    let f = findings(&lines, false);
    let a = abandoned(&f);
    assert_eq!(a.call_id.as_deref(), Some("c1"));
    assert!(
        a.evidence.contains("aborted or cancelled"),
        "{}",
        a.evidence
    );
    assert_eq!(a.quote, None, "the result's words stay in the process");
    let f = findings(&lines, true);
    assert_eq!(
        abandoned(&f).quote.as_deref(),
        Some("User aborted the command"),
        "quoted with content capture"
    );
}

#[test]
fn an_error_result_says_so_and_a_plain_one_does_not() {
    let lines = cut_retry_and_results(&[
        ("c1", "refund service timed out", true),
        ("c7", "refund issued", false),
    ]);
    let a = findings(&lines, false);
    assert!(
        abandoned(&a).evidence.contains("its result is an error"),
        "{}",
        abandoned(&a).evidence
    );
    let lines = cut_retry_and_results(&[("c1", "refund issued", false), ("c7", "ok", false)]);
    let f = findings(&lines, false);
    assert_eq!(
        abandoned(&f).evidence,
        "executed after the attempt was abandoned"
    );
}
