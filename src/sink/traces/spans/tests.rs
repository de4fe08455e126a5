//! Unit tests of the span builder, on the bookstore examples run through the real correlator.

use std::sync::Arc;

use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::{Array, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::SpanData;

use super::*;
use crate::sink::traces::ids;
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::SkipCounts;
use retryscope_core::decode::native::{NativeLine, decode_line};
use retryscope_core::report::{TurnReport, UsageSource};

mod context;
mod sparse;

const NAIVE: &str = include_str!("../../../../examples/bookstore/naive.jsonl");
const RESET: &str = include_str!("../../../../examples/bookstore/reset.jsonl");
const LATE: &str = include_str!("../../../../examples/bookstore/reset-late-exec.jsonl");

/// 2026-11-12T10:00:00.000Z, the bookstore turn's start.
const T0: i64 = 1_794_477_600_000;
const KEY: &str = "8887034cdd9dd778";

fn reports(lines: &str, capture_content: bool) -> Vec<TurnReport> {
    let cfg = CorrelatorConfig {
        idle_timeout_ms: None,
        capture_content,
        ..CorrelatorConfig::default()
    };
    let mut c = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    for (i, line) in lines.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        match decode_line(line.as_bytes(), &mut skips) {
            Ok(NativeLine::Event(ev)) => c.observe(&ev, 1_000 + i as i64, &mut out),
            other => panic!("line {i} did not decode: {other:?}"),
        }
    }
    c.close_all(&mut out);
    out.into_iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .collect()
}

fn one(lines: &str) -> TurnReport {
    let mut r = reports(lines, false);
    assert_eq!(r.len(), 1);
    r.remove(0)
}

fn spans_of(lines: &str) -> (TurnReport, Vec<SpanData>) {
    let r = one(lines);
    let spans = turn_spans(&r, &SpanOptions::default());
    (r, spans)
}

fn at(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms as u64)
}

fn kv(k: &'static str, v: impl Into<Value>) -> KeyValue {
    KeyValue::new(k, v)
}

fn get<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn event_summary(span: &SpanData) -> Vec<(String, SystemTime, Vec<KeyValue>)> {
    span.events
        .iter()
        .map(|e| (e.name.to_string(), e.timestamp, e.attributes.clone()))
        .collect()
}

fn finding_attrs(
    kind: &'static str,
    severity: &'static str,
    evidence: &'static str,
    attempt: i64,
    call: Option<&'static str>,
) -> Vec<KeyValue> {
    let mut a = vec![
        kv(attr::FINDING_KIND, kind),
        kv(attr::FINDING_SEVERITY, severity),
        kv(attr::FINDING_EVIDENCE, evidence),
        kv(attr::ATTEMPT_NUMBER, attempt),
    ];
    if let Some(call) = call {
        a.extend([
            kv(attr::TOOL_NAME, "issue_refund"),
            kv(attr::TOOL_CALL_ID, call),
            kv(attr::EFFECT_KEY, KEY),
        ]);
    }
    a
}

/// Root and attempt attributes shared by the three examples (they differ only in findings,
/// output and execution times).
fn expected_root_attrs(r: &TurnReport, findings: i64, max: Option<&'static str>) -> Vec<KeyValue> {
    let mut a = vec![
        kv(attr::OPERATION_NAME, "invoke_agent"),
        kv(attr::AGENT_NAME, "help-desk"),
        kv(attr::PROVIDER_NAME, "anthropic"),
        kv(attr::REQUEST_MODEL, "claude-sonnet-4-5"),
        kv(attr::CONVERSATION_ID, "sess-42"),
        kv(attr::TURN_ID, "bookstore-1"),
        kv(attr::TURN_STATUS, "completed"),
        kv(attr::TURN_CLOSED_BY, "turn_end"),
        kv(attr::TURN_ATTEMPTS, 2_i64),
        kv(attr::TURN_RETRIES, 1_i64),
        kv(attr::TURN_CALLS, 1_i64),
        kv(attr::COST_USD, r.cost_usd),
        kv(attr::WASTED_COST_USD, r.wasted_cost_usd),
        kv(attr::FINDINGS_COUNT, findings),
    ];
    if let Some(max) = max {
        a.push(kv(attr::FINDINGS_MAX_SEVERITY, max));
    }
    a.push(kv(attr::TURN_OUTPUT_CHARS, r.output_chars.unwrap() as i64));
    a
}

/// The model call of the bookstore turn: both attempts, both billed (attempt 0 by estimate).
fn expected_call_attrs(r: &TurnReport) -> Vec<KeyValue> {
    let (c0, c1) = (
        r.attempts[0].cost_usd.unwrap(),
        r.attempts[1].cost_usd.unwrap(),
    );
    vec![
        kv(attr::OPERATION_NAME, "chat"),
        kv(attr::PROVIDER_NAME, "anthropic"),
        kv(attr::REQUEST_MODEL, "claude-sonnet-4-5"),
        kv(
            attr::FINISH_REASONS,
            Value::Array(Array::String(vec![StringValue::from("tool_use")])),
        ),
        kv(attr::INPUT_TOKENS, 2500_i64),
        kv(attr::OUTPUT_TOKENS, 74_i64),
        kv(attr::CACHE_READ_TOKENS, 2048_i64),
        kv(attr::CALL_INDEX, 0_i64),
        kv(attr::CALL_ATTEMPTS, 2_i64),
        kv(attr::CALL_BILLED_ATTEMPTS, 2_i64),
        kv(attr::USAGE_SOURCE, "estimated"),
        kv(attr::COST_USD, c0 + c1),
        kv(attr::WASTED_COST_USD, c0),
        kv(attr::AGENT_NAME, "help-desk"),
    ]
}

fn model_attr(r: &TurnReport, i: usize) -> Vec<KeyValue> {
    r.attempts[i]
        .model
        .iter()
        .map(|m| kv(attr::ATTEMPT_MODEL, m.clone()))
        .collect()
}

fn expected_attempt0_attrs(r: &TurnReport) -> Vec<KeyValue> {
    let mut a = vec![
        kv(attr::ATTEMPT_NUMBER, 0_i64),
        kv(attr::ATTEMPT_OUTCOME, "abandoned"),
    ];
    a.extend(model_attr(r, 0));
    a.extend([
        kv(attr::ATTEMPT_INPUT_TOKENS, 1250_i64),
        kv(attr::ATTEMPT_OUTPUT_TOKENS, 26_i64),
        kv(attr::ATTEMPT_CACHE_READ_TOKENS, 1024_i64),
        kv(attr::USAGE_SOURCE, "estimated"),
        kv(attr::COST_USD, r.attempts[0].cost_usd.unwrap()),
        kv(attr::ATTEMPT_TEXT_CHARS, 42_i64),
        kv(attr::ATTEMPT_TOOL_CALLS, 1_i64),
        kv(attr::ERROR_TYPE, "abandoned"),
        kv(attr::AGENT_NAME, "help-desk"),
    ]);
    a
}

fn expected_attempt1_attrs(r: &TurnReport) -> Vec<KeyValue> {
    let mut a = vec![
        kv(attr::RESEND_COUNT, 1_i64),
        kv(attr::ATTEMPT_NUMBER, 1_i64),
        kv(attr::ATTEMPT_OUTCOME, "completed"),
    ];
    a.extend(model_attr(r, 1));
    a.extend([
        kv(attr::ATTEMPT_FINISH_REASON, "tool_use"),
        kv(attr::ATTEMPT_INPUT_TOKENS, 1250_i64),
        kv(attr::ATTEMPT_OUTPUT_TOKENS, 48_i64),
        kv(attr::ATTEMPT_CACHE_READ_TOKENS, 1024_i64),
        kv(attr::USAGE_SOURCE, "reported"),
        kv(attr::COST_USD, r.attempts[1].cost_usd.unwrap()),
        kv(attr::ATTEMPT_TEXT_CHARS, 83_i64),
        kv(attr::ATTEMPT_TOOL_CALLS, 1_i64),
        kv(attr::ATTEMPT_RETRY_REASON, "connection_reset"),
        kv(attr::AGENT_NAME, "help-desk"),
    ]);
    a
}

fn exec_attrs(call: &'static str, attempt: i64) -> Vec<KeyValue> {
    vec![
        kv(attr::OPERATION_NAME, "execute_tool"),
        kv(attr::TOOL_NAME, "issue_refund"),
        kv(attr::TOOL_CALL_ID, call),
        kv(attr::ATTEMPT_NUMBER, attempt),
        kv(attr::EFFECT_KEY, KEY),
        kv(attr::TOOL_READ, false),
        kv(attr::TOOL_STATUS, "ok"),
        kv(attr::AGENT_NAME, "help-desk"),
    ]
}

/// Finds the span with `id`.
fn by_id(spans: &[SpanData], id: SpanId) -> &SpanData {
    spans
        .iter()
        .find(|s| s.span_context.span_id() == id)
        .expect("span present")
}

/// The span id an execution span links to (the attempt whose call it ran).
fn linked(span: &SpanData) -> SpanId {
    assert_eq!(span.links.len(), 1, "{}", span.name);
    span.links[0].span_context.span_id()
}

/// Checks shared by the three examples: tree shape, ids, names, kinds, times, attributes.
fn check_common(r: &TurnReport, spans: &[SpanData]) {
    let trace = ids::trace_id_for_turn("bookstore-1");
    let root_id = ids::span_id("bookstore-1", ids::Role::Turn, 0, 0);
    let call_id = ids::span_id("bookstore-1", ids::Role::Call, 0, 0);
    let a0 = ids::span_id("bookstore-1", ids::Role::Attempt, 0, 0);
    let a1 = ids::span_id("bookstore-1", ids::Role::Attempt, 1, 0);
    for s in spans {
        assert_eq!(s.span_context.trace_id(), trace);
        assert!(s.span_context.is_sampled());
        assert!(!s.parent_span_is_remote);
        assert!(s.end_time >= s.start_time, "{}", s.name);
        assert_eq!(s.instrumentation_scope.name(), SCOPE_NAME);
    }
    let root = &spans[0];
    assert_eq!(root.name, "invoke_agent help-desk");
    assert_eq!(root.span_kind, SpanKind::Internal);
    assert_eq!(root.span_context.span_id(), root_id);
    assert_eq!(root.parent_span_id, SpanId::INVALID);
    assert_eq!((root.start_time, root.end_time), (at(T0), at(T0 + 4_600)));
    // Usage only on the model call: no span but the `chat` one has gen_ai.usage.*.
    for s in spans {
        let has_usage = s
            .attributes
            .iter()
            .any(|kv| kv.key.as_str().starts_with("gen_ai.usage."));
        assert_eq!(has_usage, s.span_context.span_id() == call_id, "{}", s.name);
    }

    // One model call covering both attempts: the logical operation, as the caller saw it.
    let call = &spans[1];
    assert_eq!(call.name, "chat claude-sonnet-4-5");
    assert_eq!(call.span_kind, SpanKind::Client);
    assert_eq!(call.span_context.span_id(), call_id);
    assert_eq!(call.parent_span_id, root_id);
    let att1 = by_id(spans, a1);
    assert_eq!(
        (call.start_time, call.end_time),
        (at(T0 + 50), att1.end_time)
    );
    assert_eq!(call.attributes, expected_call_attrs(r));
    assert_eq!(call.status, Status::Unset);
    assert!(call.events.is_empty());
    assert!(call.links.is_empty());

    let att0 = &spans[2];
    assert_eq!(att0.name, "attempt 0");
    assert_eq!(att0.span_kind, SpanKind::Client);
    assert_eq!(att0.span_context.span_id(), a0);
    assert_eq!(att0.parent_span_id, call_id);
    assert_eq!(
        (att0.start_time, att0.end_time),
        (at(T0 + 50), at(T0 + 2_500))
    );
    assert_eq!(att0.attributes, expected_attempt0_attrs(r));

    assert_eq!(att1.name, "attempt 1");
    assert_eq!(att1.span_kind, SpanKind::Client);
    assert_eq!(att1.parent_span_id, call_id);
    assert_eq!(att1.attributes, expected_attempt1_attrs(r));
    assert_eq!(att1.status, Status::Unset);
    assert!(att1.events.is_empty());

    // Executions are the agent's: children of the root, linked to the attempt they ran.
    for s in spans.iter().filter(|s| s.name.starts_with("execute_tool")) {
        assert_eq!(s.name, "execute_tool issue_refund");
        assert_eq!(s.span_kind, SpanKind::Internal);
        assert_eq!(s.start_time, s.end_time);
        assert_eq!(s.parent_span_id, root_id);
        let attempt = match get(s, attr::ATTEMPT_NUMBER) {
            Some(Value::I64(0)) => a0,
            Some(Value::I64(1)) => a1,
            other => panic!("{other:?}"),
        };
        assert_eq!(linked(s), attempt);
        assert_eq!(s.links[0].span_context.trace_id(), trace);
    }
    for s in spans.iter().filter(|s| !s.name.starts_with("execute_tool")) {
        assert!(s.links.is_empty(), "{}", s.name);
    }
    // Distinct span ids.
    let mut ids: Vec<SpanId> = spans.iter().map(|s| s.span_context.span_id()).collect();
    ids.sort_by_key(|id| id.to_bytes());
    ids.dedup();
    assert_eq!(ids.len(), spans.len());
}

#[test]
fn naive_tree_attributes_events_and_statuses() {
    let (r, spans) = spans_of(NAIVE);
    assert_eq!(spans.len(), 6);
    assert_eq!(span_count(&r), 6);
    check_common(&r, &spans);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "invoke_agent help-desk",
            "chat claude-sonnet-4-5",
            "attempt 0",
            "execute_tool issue_refund",
            "attempt 1",
            "execute_tool issue_refund",
        ]
    );
    let (root, att0, c1, att1, c7) = (&spans[0], &spans[2], &spans[3], &spans[4], &spans[5]);
    assert_eq!(
        root.attributes,
        expected_root_attrs(&r, 6, Some("critical"))
    );
    assert_eq!(root.status, Status::Unset);
    assert!(root.events.is_empty());

    // spliced_text is about attempt 0's text: on its span, with the abandonment reason.
    assert_eq!(
        att0.status,
        Status::error("abandoned: connection_reset; spliced_text")
    );
    assert_eq!(
        event_summary(att0),
        vec![(
            FINDING_EVENT.to_owned(),
            at(T0 + 4_600),
            finding_attrs("spliced_text", "high", "output", 0, None)
        )]
    );

    assert_eq!(linked(c1), att0.span_context.span_id());
    assert_eq!(c1.start_time, at(T0 + 1_000));
    assert_eq!(c1.attributes, exec_attrs("c1", 0));
    assert_eq!(
        c1.status,
        Status::error("abandoned_tool_executed; unfinished_tool_executed")
    );
    assert_eq!(
        event_summary(c1),
        vec![
            (
                FINDING_EVENT.to_owned(),
                at(T0 + 1_000),
                finding_attrs(
                    "early_execution",
                    "warning",
                    "executed before its attempt finished",
                    0,
                    Some("c1")
                )
            ),
            (
                FINDING_EVENT.to_owned(),
                at(T0 + 2_500),
                finding_attrs(
                    "abandoned_tool_executed",
                    "critical",
                    "executed before the attempt was abandoned",
                    0,
                    Some("c1")
                )
            ),
            (
                FINDING_EVENT.to_owned(),
                at(T0 + 1_000),
                finding_attrs(
                    "unfinished_tool_executed",
                    "high",
                    "executed although its attempt never finished (a retry replaced it)",
                    0,
                    Some("c1")
                )
            ),
        ]
    );

    assert_eq!(
        (att1.start_time, att1.end_time),
        (at(T0 + 2_500), at(T0 + 4_100))
    );
    assert_eq!(linked(c7), att1.span_context.span_id());
    assert_eq!(c7.start_time, at(T0 + 3_500));
    assert_eq!(c7.attributes, exec_attrs("c7", 1));
    assert_eq!(c7.status, Status::error("duplicate_effect"));
    assert_eq!(
        event_summary(c7),
        vec![
            (
                FINDING_EVENT.to_owned(),
                at(T0 + 3_500),
                finding_attrs(
                    "early_execution",
                    "warning",
                    "executed before its attempt finished",
                    1,
                    Some("c7")
                )
            ),
            (
                FINDING_EVENT.to_owned(),
                at(T0 + 3_500),
                finding_attrs(
                    "duplicate_effect",
                    "critical",
                    "same effect as call c1 of attempt 0",
                    1,
                    Some("c7")
                )
            ),
        ]
    );
}

#[test]
fn reset_has_no_splice_but_both_refunds_flagged() {
    let (r, spans) = spans_of(RESET);
    assert_eq!(spans.len(), 6);
    check_common(&r, &spans);
    assert_eq!(
        spans[0].attributes,
        expected_root_attrs(&r, 5, Some("critical"))
    );
    assert_eq!(
        spans[2].status,
        Status::error("abandoned: connection_reset")
    );
    assert!(spans[2].events.is_empty());
    assert_eq!(
        spans[3].status,
        Status::error("abandoned_tool_executed; unfinished_tool_executed")
    );
    assert_eq!(spans[3].events.len(), 3);
    assert_eq!(spans[5].status, Status::error("duplicate_effect"));
    assert_eq!(spans[5].events.len(), 2);
}

#[test]
fn reset_late_exec_is_clean_with_one_execution_under_attempt_1() {
    let (r, spans) = spans_of(LATE);
    assert_eq!(spans.len(), 5);
    check_common(&r, &spans);
    assert_eq!(spans[0].attributes, expected_root_attrs(&r, 0, None));
    assert_eq!(spans[0].status, Status::Unset);
    // Attempt 0 is still an error: it was abandoned, and its cost is waste; the model call,
    // which got its answer from attempt 1, is not.
    assert_eq!(spans[1].status, Status::Unset);
    assert_eq!(
        spans[2].status,
        Status::error("abandoned: connection_reset")
    );
    let (att1, c7) = (&spans[3], &spans[4]);
    assert_eq!(att1.name, "attempt 1");
    assert_eq!(
        (att1.start_time, att1.end_time),
        (at(T0 + 2_500), at(T0 + 4_300))
    );
    assert_eq!(linked(c7), att1.span_context.span_id());
    assert_eq!(c7.start_time, at(T0 + 4_300));
    assert_eq!(c7.status, Status::Unset);
    assert!(spans.iter().all(|s| s.events.is_empty()));
}

#[test]
fn same_input_gives_the_same_spans() {
    for lines in [NAIVE, RESET, LATE] {
        let a = spans_of(lines).1;
        let b = spans_of(lines).1;
        assert_eq!(a, b);
    }
    // A different turn id is a different trace with different span ids.
    let other = spans_of(&NAIVE.replace("bookstore-1", "bookstore-2")).1;
    let naive = spans_of(NAIVE).1;
    assert_ne!(
        other[0].span_context.trace_id(),
        naive[0].span_context.trace_id()
    );
    assert_ne!(
        other[1].span_context.span_id(),
        naive[1].span_context.span_id()
    );
}
