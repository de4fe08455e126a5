use super::*;

#[test]
fn mid_word_lengths() {
    assert_eq!(
        mid_word_len("Refunding the damage"),
        Some("Refunding the dam".len())
    );
    assert_eq!(mid_word_len("I am"), Some("I a".len()));
    assert_eq!(mid_word_len("ok. "), Some(1));
    assert_eq!(mid_word_len("a b c"), None);
    assert_eq!(mid_word_len(" "), None);
    assert_eq!(mid_word_len("Grüße"), Some("Grü".len()));
}

fn frame(data: &str) -> Frame {
    Frame {
        bytes: format!("data: {data}\n\n").into_bytes(),
        event: None,
        data: data.to_owned(),
    }
}

#[test]
fn mid_word_rewrites_only_the_text() {
    let mut c = Cutter::new(Point::MidWord, How::Eof, Api::OpenAiChat);
    let d = c.decide(&frame(
        r#"{"id":"x","choices":[{"index":0,"delta":{"content":"Hello world"}}]}"#,
    ));
    assert_eq!(
        d,
        Decision::CutAfter {
            bytes: b"data: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello wor\"}}]}\n\n".to_vec(),
            data: r#"{"id":"x","choices":[{"index":0,"delta":{"content":"Hello wor"}}]}"#.to_owned(),
        }
    );
}

#[test]
fn chat_after_tool_call_cuts_before_the_finish_chunk() {
    let mut c = Cutter::new(Point::AfterToolCall, How::Reset, Api::OpenAiChat);
    let first = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":""}}]}}]}"#;
    let more = r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#;
    let fin = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#;
    assert_eq!(c.decide(&frame(first)), Decision::Forward);
    assert_eq!(c.decide(&frame(more)), Decision::Forward);
    assert_eq!(c.decide(&frame(fin)), Decision::CutBefore);
}

#[test]
fn first_n_is_exact_under_concurrency() {
    let inj = Injector::new(InjectRule {
        point: Point::BeforeFinish,
        how: How::Eof,
        first: Some(2),
        fraction: None,
        seed: 0,
    });
    let chosen: Vec<bool> = (0..5)
        .map(|_| inj.choose(Api::Anthropic).is_some())
        .collect();
    assert_eq!(
        chosen, [true; 5],
        "nothing cut yet: every stream is a candidate"
    );
    assert!(inj.claim());
    assert!(inj.claim());
    assert!(!inj.claim());
    assert!(inj.choose(Api::Anthropic).is_none());
    assert_eq!(inj.cuts(), 2);
}

#[test]
fn seeded_fraction_is_repeatable() {
    let rule = InjectRule {
        point: Point::MidWord,
        how: How::Reset,
        first: None,
        fraction: Some(0.3),
        seed: 42,
    };
    let pick = |r: &InjectRule| {
        let inj = Injector::new(r.clone());
        (0..1000)
            .map(|_| inj.choose(Api::Gemini).is_some())
            .collect::<Vec<_>>()
    };
    let a = pick(&rule);
    assert_eq!(a, pick(&rule));
    let n = a.iter().filter(|x| **x).count();
    assert!((250..350).contains(&n), "{n}");
}

#[test]
fn error_events_are_framed_like_the_stream() {
    let (b, d) = error_event(Api::Anthropic, Framing::Sse);
    assert!(b.starts_with(b"event: error\ndata: {"));
    assert!(d.contains("overloaded_error"));
    let (b, _) = error_event(Api::Gemini, Framing::Sse);
    assert!(
        b.starts_with(b"{\"error\":{"),
        "bare JSON, as @google/genai expects"
    );
    let (b, _) = error_event(Api::Gemini, Framing::JsonArray);
    assert!(b.starts_with(b",\r\n{\"error\""));
    assert!(b.ends_with(b"]"));
}
