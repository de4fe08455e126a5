//! Tests of the model-call shape: a turn with two model calls, a model call with a retry
//! (usage summed over billed attempts only), and findings on the spans their scope names.
//! Inputs are native-format turns through the real correlator.

use std::sync::Arc;

use opentelemetry::Value;
use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry_sdk::trace::SpanData;

use super::*;
use crate::sink::traces::calls::model_calls;
use crate::sink::traces::ids;
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::SkipCounts;
use retryscope_core::decode::native::{NativeLine, decode_line};
use retryscope_core::report::UsageSource;

fn report(lines: &str, retry_cap: u32) -> TurnReport {
    let cfg = CorrelatorConfig {
        idle_timeout_ms: None,
        retry_cap,
        ..CorrelatorConfig::default()
    };
    let mut c = Correlator::new(cfg, Arc::new(PriceTable::builtin()));
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    for (i, line) in lines.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        match decode_line(line.trim().as_bytes(), &mut skips) {
            Ok(NativeLine::Event(ev)) => c.observe(&ev, 1_000 + i as i64, &mut out),
            other => panic!("line {i} did not decode: {other:?}"),
        }
    }
    c.close_all(&mut out);
    let mut reports: Vec<TurnReport> = out
        .into_iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .collect();
    assert_eq!(reports.len(), 1);
    reports.remove(0)
}

fn get<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn int_attr(span: &SpanData, key: &str) -> Option<i64> {
    match get(span, key) {
        Some(Value::I64(v)) => Some(*v),
        None => None,
        other => panic!("{key}: {other:?}"),
    }
}

fn finding_kinds(span: &SpanData) -> Vec<String> {
    span.events
        .iter()
        .map(|e| {
            assert_eq!(e.name, FINDING_EVENT);
            e.attributes
                .iter()
                .find(|kv| kv.key.as_str() == attr::FINDING_KIND)
                .map(|kv| kv.value.to_string())
                .unwrap_or_default()
        })
        .collect()
}

fn names(spans: &[SpanData]) -> Vec<&str> {
    spans.iter().map(|s| s.name.as_ref()).collect()
}

/// A finished attempt that called a tool, then a second attempt of the same turn (no `retry`
/// event). The format makes attempt 1 a retry, and the correlator judges it so.
const TWO_STEPS: &str = r#"
{"v":1,"turn":"s","type":"turn_start","ts":"2026-11-12T10:00:00.000Z","model":"gpt-5","provider":"openai","agent":"planner","session":"s1"}
{"v":1,"turn":"s","type":"tool_call","ts":"2026-11-12T10:00:00.200Z","attempt":0,"id":"c1","name":"get_weather","args":{"city":"Paris"}}
{"v":1,"turn":"s","type":"usage","ts":"2026-11-12T10:00:00.300Z","attempt":0,"input_tokens":100,"output_tokens":10}
{"v":1,"turn":"s","type":"finish","ts":"2026-11-12T10:00:00.400Z","attempt":0,"reason":"tool_calls"}
{"v":1,"turn":"s","type":"tool_exec","ts":"2026-11-12T10:00:00.500Z","attempt":0,"id":"c1","name":"get_weather","effect":"read","status":"ok"}
{"v":1,"turn":"s","type":"text","ts":"2026-11-12T10:00:00.600Z","attempt":1,"text":"Sunny in Paris."}
{"v":1,"turn":"s","type":"usage","ts":"2026-11-12T10:00:00.700Z","attempt":1,"input_tokens":150,"output_tokens":20,"cached_input_tokens":100}
{"v":1,"turn":"s","type":"finish","ts":"2026-11-12T10:00:00.800Z","attempt":1,"reason":"stop"}
{"v":1,"turn":"s","type":"turn_end","ts":"2026-11-12T10:00:00.900Z"}
"#;

/// 2026-11-12T10:00:00.000Z.
const T0: i64 = 1_794_477_600_000;

fn at(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms as u64)
}

#[test]
fn every_attempt_of_a_turn_is_one_model_call_as_the_correlator_counts_it() {
    // Regression: a first grouping split a turn after a finished attempt into two model
    // calls, while the correlator counted the second attempt as a retry; the trace and the
    // findings disagreed about the same turn.
    let r = report(TWO_STEPS, 4);
    assert_eq!(r.retries, 1);
    let calls = model_calls(&r.attempts);
    assert_eq!((calls.len(), calls[0].clone()), (1, 0..2));
    let spans = turn_spans(&r, &SpanOptions::default());
    assert_eq!(spans.len(), span_count(&r));
    let names = names(&spans);
    assert_eq!(names.iter().filter(|n| n.starts_with("chat ")).count(), 1);
    assert_eq!(names[0], "invoke_agent planner");
    let root = &spans[0];
    let call = spans
        .iter()
        .find(|s| s.name == "chat gpt-5")
        .expect("chat span");
    let att = |n: &str| spans.iter().find(|s| s.name == n).expect("attempt span");
    let (att0, att1) = (att("attempt 0"), att("attempt 1"));
    let exec = spans
        .iter()
        .find(|s| s.name == "execute_tool get_weather")
        .expect("execute_tool span");
    assert_eq!(int_attr(root, attr::TURN_CALLS), Some(1));
    assert_eq!(call.span_kind, SpanKind::Client);
    assert_eq!(call.parent_span_id, root.span_context.span_id());
    assert_eq!(
        call.span_context.span_id(),
        ids::span_id("s", ids::Role::Call, 0, 0)
    );
    assert_eq!(int_attr(call, attr::CALL_ATTEMPTS), Some(2));
    assert_eq!(get(call, attr::OPERATION_NAME), Some(&Value::from("chat")));
    // Both attempts are children of the one call; the second is its first resend.
    for a in [att0, att1] {
        assert_eq!(a.parent_span_id, call.span_context.span_id());
        assert_eq!(get(a, attr::OPERATION_NAME), None);
    }
    assert_eq!(int_attr(att0, attr::RESEND_COUNT), None);
    assert_eq!(int_attr(att1, attr::RESEND_COUNT), Some(1));
    // The call covers both tries and sums the usage of both (both billed).
    assert_eq!(call.start_time, at(T0 + 200));
    assert_eq!(int_attr(call, attr::INPUT_TOKENS), Some(250));
    assert_eq!(int_attr(call, attr::OUTPUT_TOKENS), Some(30));
    assert_eq!(int_attr(call, attr::CALL_BILLED_ATTEMPTS), Some(2));
    // The tool ran by the agent: under the root, linked to attempt 0 whose call it was.
    assert_eq!(exec.parent_span_id, root.span_context.span_id());
    assert_eq!(
        exec.links[0].span_context.span_id(),
        att0.span_context.span_id()
    );
}

#[test]
fn retried_call_has_one_child_per_attempt_and_sums_only_billed_usage() {
    // A content retry (gemini-cli's `chat.content_retry`): attempt 0 answered but its answer
    // was rejected, without usage (not billed as far as the log says); attempt 1 billed.
    let r = report(
        r#"
{"v":1,"turn":"g","type":"turn_start","ts":"2026-11-12T10:00:00.000Z","model":"gemini-2.5-pro","provider":"gcp.gemini"}
{"v":1,"turn":"g","type":"text","ts":"2026-11-12T10:00:00.100Z","attempt":0,"text":"{not json"}
{"v":1,"turn":"g","type":"finish","ts":"2026-11-12T10:00:00.200Z","attempt":0,"reason":"STOP"}
{"v":1,"turn":"g","type":"retry","ts":"2026-11-12T10:00:00.300Z","attempt":1,"reason":"invalid_content"}
{"v":1,"turn":"g","type":"render_reset","ts":"2026-11-12T10:00:00.300Z","attempt":1}
{"v":1,"turn":"g","type":"text","ts":"2026-11-12T10:00:00.400Z","attempt":1,"text":"{\"ok\":true}"}
{"v":1,"turn":"g","type":"usage","ts":"2026-11-12T10:00:00.500Z","attempt":1,"input_tokens":300,"output_tokens":40,"reasoning_tokens":10}
{"v":1,"turn":"g","type":"finish","ts":"2026-11-12T10:00:00.600Z","attempt":1,"reason":"STOP"}
{"v":1,"turn":"g","type":"turn_end","ts":"2026-11-12T10:00:00.700Z"}
"#,
        4,
    );
    assert_eq!(r.attempts[0].usage.source, UsageSource::None);
    let calls = model_calls(&r.attempts);
    assert_eq!((calls.len(), calls[0].clone()), (1, 0..2));
    let spans = turn_spans(&r, &SpanOptions::default());
    assert_eq!(
        names(&spans),
        [
            "invoke_agent",
            "chat gemini-2.5-pro",
            "attempt 0",
            "attempt 1"
        ]
    );
    let (call, att0, att1) = (&spans[1], &spans[2], &spans[3]);
    for att in [att0, att1] {
        assert_eq!(att.parent_span_id, call.span_context.span_id());
        assert_eq!(att.span_kind, SpanKind::Client);
    }
    // The call covers both tries, as the caller observed it.
    assert_eq!(
        (call.start_time, call.end_time),
        (at(T0 + 100), at(T0 + 600))
    );
    assert_eq!(int_attr(call, attr::CALL_ATTEMPTS), Some(2));
    assert_eq!(int_attr(call, attr::CALL_BILLED_ATTEMPTS), Some(1));
    assert_eq!(int_attr(call, attr::INPUT_TOKENS), Some(300));
    assert_eq!(int_attr(call, attr::OUTPUT_TOKENS), Some(40));
    assert_eq!(int_attr(call, attr::REASONING_TOKENS), Some(10));
    assert_eq!(
        get(call, attr::USAGE_SOURCE),
        Some(&Value::from("reported"))
    );
    // The retry is the resend; the unbilled first try carries no token figures.
    assert_eq!(int_attr(att0, attr::RESEND_COUNT), None);
    assert_eq!(int_attr(att1, attr::RESEND_COUNT), Some(1));
    assert_eq!(int_attr(att0, attr::ATTEMPT_INPUT_TOKENS), None);
    assert_eq!(get(att0, attr::USAGE_SOURCE), Some(&Value::from("none")));
    assert_eq!(int_attr(att1, attr::ATTEMPT_INPUT_TOKENS), Some(300));
    assert_eq!(
        get(att1, attr::ATTEMPT_RETRY_REASON),
        Some(&Value::from("invalid_content"))
    );
    // A completed but rejected try is not an error; the call got its answer.
    assert_eq!(att0.status, Status::Unset);
    assert_eq!(call.status, Status::Unset);
}

#[test]
fn findings_land_on_the_spans_their_scope_names() {
    // Attempt 0 sends an email and finishes; attempt 1 fails, attempt 2 goes over the cap of 2
    // attempts and sends the same email again before finishing.
    let r = report(
        r#"
{"v":1,"turn":"f","type":"turn_start","ts":"2026-11-12T10:00:00.000Z","model":"claude-sonnet-4-5","provider":"anthropic"}
{"v":1,"turn":"f","type":"tool_call","ts":"2026-11-12T10:00:00.100Z","attempt":0,"id":"c1","name":"send_email","args":{"to":"a@b.c"}}
{"v":1,"turn":"f","type":"finish","ts":"2026-11-12T10:00:00.200Z","attempt":0,"reason":"tool_use"}
{"v":1,"turn":"f","type":"tool_exec","ts":"2026-11-12T10:00:00.300Z","attempt":0,"id":"c1","name":"send_email"}
{"v":1,"turn":"f","type":"error","ts":"2026-11-12T10:00:00.400Z","attempt":1,"message":"overloaded","code":"529"}
{"v":1,"turn":"f","type":"retry","ts":"2026-11-12T10:00:00.500Z","attempt":2,"reason":"overloaded"}
{"v":1,"turn":"f","type":"tool_call","ts":"2026-11-12T10:00:00.600Z","attempt":2,"id":"c2","name":"send_email","args":{"to":"a@b.c"}}
{"v":1,"turn":"f","type":"tool_exec","ts":"2026-11-12T10:00:00.700Z","attempt":2,"id":"c2","name":"send_email"}
{"v":1,"turn":"f","type":"finish","ts":"2026-11-12T10:00:00.800Z","attempt":2,"reason":"end_turn"}
{"v":1,"turn":"f","type":"turn_end","ts":"2026-11-12T10:00:00.900Z"}
"#,
        2,
    );
    let calls = model_calls(&r.attempts);
    assert_eq!((calls.len(), calls[0].clone()), (1, 0..3));
    let mut kinds: Vec<&str> = r.findings.iter().map(|f| f.kind.as_str()).collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        ["duplicate_effect", "early_execution", "retry_cap_exceeded"]
    );
    let spans = turn_spans(&r, &SpanOptions::default());
    assert_eq!(
        names(&spans),
        [
            "invoke_agent",
            "chat claude-sonnet-4-5",
            "attempt 0",
            "execute_tool send_email",
            "attempt 1",
            "attempt 2",
            "execute_tool send_email",
        ]
    );
    let by_name_at = |i: usize| &spans[i];
    let (root, call, exec1, att1, att2, exec2) = (
        by_name_at(0),
        by_name_at(1),
        by_name_at(3),
        by_name_at(4),
        by_name_at(5),
        by_name_at(6),
    );
    // retry_cap_exceeded (scope: call) on the model call that retried too often, not on the
    // root; a warning leaves its status alone.
    assert_eq!(finding_kinds(call), ["retry_cap_exceeded"]);
    assert_eq!(call.status, Status::Unset);
    assert!(root.events.is_empty());
    assert_eq!(int_attr(root, attr::FINDINGS_COUNT), Some(3));
    // Tool findings on the execution they concern: the second email.
    let mut exec_kinds = finding_kinds(exec2);
    exec_kinds.sort_unstable();
    assert_eq!(exec_kinds, ["duplicate_effect", "early_execution"]);
    assert_eq!(exec2.status, Status::error("duplicate_effect"));
    assert_eq!(
        exec2.links[0].span_context.span_id(),
        att2.span_context.span_id()
    );
    assert!(exec1.events.is_empty());
    // The failed attempt 1 is abandoned (an error), attempts 1 and 2 are the call's first and
    // second resends, and the call itself succeeded.
    assert_eq!(att1.status, Status::error("abandoned: overloaded"));
    assert_eq!(int_attr(att1, attr::RESEND_COUNT), Some(1));
    assert_eq!(int_attr(att2, attr::RESEND_COUNT), Some(2));
    assert!(att1.events.is_empty() && att2.events.is_empty());
    assert_eq!(get(call, attr::ERROR_TYPE), None);
    assert_ne!(call.parent_span_id, SpanId::INVALID);
}
