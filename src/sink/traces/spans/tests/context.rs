//! What the caller adds to a turn's spans: the agent's trace context (a W3C `traceparent`)
//! and content capture, exported only when both sides opt in.

use super::*;

#[test]
fn traceparent_joins_the_agents_trace_as_a_child() {
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let lines = NAIVE.replacen(
        r#""session":"sess-42""#,
        &format!(r#""session":"sess-42","traceparent":"{tp}""#),
        1,
    );
    let (r, spans) = spans_of(&lines);
    assert_eq!(r.traceparent.as_deref(), Some(tp));
    let trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    assert!(spans.iter().all(|s| s.span_context.trace_id() == trace));
    let root = &spans[0];
    assert_eq!(
        root.parent_span_id,
        SpanId::from_hex("00f067aa0ba902b7").unwrap()
    );
    assert!(root.parent_span_is_remote);
    assert!(spans[1..].iter().all(|s| !s.parent_span_is_remote));
    // Span ids still come from the turn, so they match the un-joined export.
    let plain = spans_of(NAIVE).1;
    let span_ids =
        |v: &[SpanData]| -> Vec<SpanId> { v.iter().map(|s| s.span_context.span_id()).collect() };
    assert_eq!(span_ids(&spans), span_ids(&plain));
    assert_eq!(spans[1].parent_span_id, root.span_context.span_id());

    // A malformed traceparent is ignored: the trace id is derived from the turn.
    let bad = NAIVE.replacen(
        r#""session":"sess-42""#,
        r#""session":"sess-42","traceparent":"00-zz-00f067aa0ba902b7-01""#,
        1,
    );
    let spans = spans_of(&bad).1;
    assert_eq!(
        spans[0].span_context.trace_id(),
        ids::trace_id_for_turn("bookstore-1")
    );
    assert_eq!(spans[0].parent_span_id, SpanId::INVALID);
    assert!(!spans[0].parent_span_is_remote);
}

#[test]
fn content_is_exported_only_when_both_sides_opt_in() {
    let has_text = |spans: &[SpanData]| {
        spans
            .iter()
            .any(|s| get(s, attr::ATTEMPT_TEXT_PREFIX).is_some())
    };
    let on = SpanOptions {
        capture_content: true,
    };
    let off = SpanOptions::default();
    let captured = reports(NAIVE, true).remove(0);
    let plain = reports(NAIVE, false).remove(0);
    assert!(!has_text(&turn_spans(&captured, &off)));
    assert!(!has_text(&turn_spans(&plain, &on)));
    let spans = turn_spans(&captured, &on);
    assert_eq!(
        get(&spans[2], attr::ATTEMPT_TEXT_PREFIX),
        Some(&Value::from("Checking order ORD-7781. Refunding the dam"))
    );
    // Counts are always there.
    for spans in [turn_spans(&plain, &off), spans] {
        assert_eq!(
            get(&spans[2], attr::ATTEMPT_TEXT_CHARS),
            Some(&Value::I64(42))
        );
    }
}
