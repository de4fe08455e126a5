//! Sparse logs: turn findings on the root, a failed turn, missing or backwards times, a tool
//! finding placed on the execution at its time.

use super::*;

#[test]
fn turn_findings_go_on_the_root_and_a_failed_turn_is_an_error() {
    let r = one(r#"
{"v":1,"turn":"t","type":"turn_start","ts":"2026-11-12T10:00:00.000Z","provider":"openai"}
{"v":1,"turn":"t","type":"text","ts":"2026-11-12T10:00:00.100Z","attempt":0,"text":"hi"}
{"v":1,"turn":"t","type":"error","ts":"2026-11-12T10:00:00.200Z","attempt":0,"message":"boom"}
{"v":1,"turn":"t","type":"turn_end","ts":"2026-11-12T10:00:00.300Z"}
"#);
    assert_eq!(r.status, TurnStatus::Failed);
    let spans = turn_spans(&r, &SpanOptions::default());
    let root = &spans[0];
    // No agent, no model: bare names.
    assert_eq!(root.name, "invoke_agent");
    assert_eq!(spans[1].name, "chat");
    assert_eq!(spans[2].name, "attempt 0");
    assert_eq!(root.status, Status::error("failed"));
    let kinds: Vec<Value> = root
        .events
        .iter()
        .filter_map(|e| {
            e.attributes
                .iter()
                .find(|kv| kv.key.as_str() == attr::FINDING_KIND)
                .map(|kv| kv.value.clone())
        })
        .collect();
    assert_eq!(kinds, vec![Value::from("incomplete_turn")]);
    // The model call failed (its last attempt did), and so did the attempt.
    for span in &spans[1..3] {
        assert!(span.events.is_empty());
        assert_eq!(span.status, Status::error("failed"), "{}", span.name);
        assert_eq!(get(span, attr::ERROR_TYPE), Some(&Value::from("failed")));
    }
    // No usage reported or estimable: no token attributes.
    if r.attempts[0].usage.source == UsageSource::None {
        assert!(get(&spans[1], attr::INPUT_TOKENS).is_none());
        assert!(get(&spans[2], attr::ATTEMPT_INPUT_TOKENS).is_none());
    }
}

#[test]
fn times_are_guarded_and_fall_back_to_the_turn() {
    let mut r = one(NAIVE);
    r.ended_ms = Some(T0 - 10);
    r.attempts[0].started_ms = None;
    r.attempts[0].ended_ms = None;
    r.attempts[1].ended_ms = Some(T0);
    r.attempts[1].executed[0].ts_ms = None;
    r.findings.clear();
    let spans = turn_spans(&r, &SpanOptions::default());
    // Root end before start: clamped to the start.
    assert_eq!((spans[0].start_time, spans[0].end_time), (at(T0), at(T0)));
    // Attempt without times: the turn's start.
    assert_eq!((spans[2].start_time, spans[2].end_time), (at(T0), at(T0)));
    // Attempt 1 ends before it starts: clamped.
    assert_eq!(
        (spans[4].start_time, spans[4].end_time),
        (at(T0 + 2_500), at(T0 + 2_500))
    );
    // The model call spans what its attempts have: attempt 1's start, clamped.
    assert_eq!(
        (spans[1].start_time, spans[1].end_time),
        (at(T0 + 2_500), at(T0 + 2_500))
    );
    // An execution without a time sits at its attempt's end.
    assert_eq!(spans[5].start_time, at(T0));
    // Negative times clamp to the epoch instead of panicking.
    r.started_ms = Some(-5);
    let spans = turn_spans(&r, &SpanOptions::default());
    assert_eq!(spans[0].start_time, UNIX_EPOCH);
}

#[test]
fn unfinished_tool_finding_goes_on_the_execution_span_at_its_time() {
    let r = one(r#"
{"v":1,"turn":"t","type":"turn_start","ts":"2026-11-12T10:00:00.000Z","provider":"anthropic"}
{"v":1,"turn":"t","type":"tool_call","ts":"2026-11-12T10:00:00.100Z","attempt":0,"id":"toolu_1","name":"Bash","args":{"command":"touch x"}}
{"v":1,"turn":"t","type":"error","ts":"2026-11-12T10:00:00.200Z","attempt":0,"message":"terminated"}
{"v":1,"turn":"t","type":"tool_exec","ts":"2026-11-12T10:00:00.300Z","attempt":0,"id":"toolu_1","name":"Bash"}
{"v":1,"turn":"t","type":"turn_end","ts":"2026-11-12T10:00:01.000Z"}
"#);
    let spans = turn_spans(&r, &SpanOptions::default());
    let exec = spans
        .iter()
        .find(|s| s.name.starts_with("execute_tool"))
        .expect("an execution span");
    assert_eq!(exec.status, Status::error("unfinished_tool_executed"));
    let events = event_summary(exec);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].1, at(T0 + 300));
    assert!(
        events[0]
            .2
            .contains(&kv(attr::FINDING_KIND, "unfinished_tool_executed"))
    );
}
