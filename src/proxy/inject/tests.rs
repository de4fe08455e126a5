use super::*;
use select::Match as InjectMatch;

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

/// A model request that offers tools (an agent's main call).
fn agent_call() -> Target {
    Target {
        method: "POST".to_owned(),
        path: "/v1/messages".to_owned(),
        model: Some("claude-sonnet-4-5".to_owned()),
        tools: true,
    }
}

/// A side call: a title request, no tools, another model.
fn title_call() -> Target {
    Target {
        tools: false,
        model: Some("claude-haiku-4-5".to_owned()),
        ..agent_call()
    }
}

#[test]
fn by_default_only_requests_that_offer_tools_count() {
    // Claude Code's first request is a title (no tools): with --inject-first 1 it must not
    // take the cut, nor count as a stream.
    let rule = InjectRule {
        point: Point::MidWord,
        how: How::Reset,
        first: Some(1),
        fraction: None,
        seed: 0,
        matches: InjectMatch::default(),
    };
    let inj = Injector::new(rule.clone());
    assert!(inj.choose(Api::Anthropic, title_call()).is_none());
    let c = inj
        .choose(Api::Anthropic, agent_call())
        .expect("the main call is chosen");
    assert_eq!(
        c.target(),
        Some(&agent_call()),
        "the cut knows which request it cut"
    );
    assert!(inj.claim());
    assert!(
        inj.choose(Api::Anthropic, agent_call()).is_none(),
        "one cut only"
    );
    // `all` keeps the old behaviour: the side call takes the cut.
    let all = Injector::new(InjectRule {
        matches: InjectMatch::All,
        ..rule.clone()
    });
    assert!(all.choose(Api::Anthropic, title_call()).is_some());
    // By model (or path).
    let haiku = Injector::new(InjectRule {
        matches: "model=*haiku*".parse().expect("match"),
        ..rule
    });
    assert!(haiku.choose(Api::Anthropic, agent_call()).is_none());
    assert!(haiku.choose(Api::Anthropic, title_call()).is_some());
}

#[test]
fn a_fraction_counts_only_the_requests_aimed_at() {
    // The same seed picks the same main calls whether or not side calls come in between.
    let rule = InjectRule {
        point: Point::MidWord,
        how: How::Reset,
        first: None,
        fraction: Some(0.5),
        seed: 7,
        matches: InjectMatch::Tools,
    };
    let (a, b) = (Injector::new(rule.clone()), Injector::new(rule));
    let plain: Vec<bool> = (0..50)
        .map(|_| a.choose(Api::Anthropic, agent_call()).is_some())
        .collect();
    let mixed: Vec<bool> = (0..50)
        .map(|_| {
            assert!(b.choose(Api::Anthropic, title_call()).is_none());
            b.choose(Api::Anthropic, agent_call()).is_some()
        })
        .collect();
    assert_eq!(plain, mixed);
}

#[test]
fn the_config_file_names_it_match() {
    let rule: InjectRule =
        toml::from_str("point = \"mid-word\"\nmatch = \"path=*/chat/completions\"\n")
            .expect("toml");
    assert_eq!(
        rule.matches,
        InjectMatch::Path("*/chat/completions".to_owned())
    );
    let rule: InjectRule = toml::from_str("point = \"mid-word\"\n").expect("toml");
    assert_eq!(rule.matches, InjectMatch::Tools);
    assert!(toml::from_str::<InjectRule>("point = \"mid-word\"\nmatch = \"tool\"\n").is_err());
}

#[test]
fn first_n_is_exact_under_concurrency() {
    let inj = Injector::new(InjectRule {
        point: Point::BeforeFinish,
        how: How::Eof,
        first: Some(2),
        fraction: None,
        seed: 0,
        matches: InjectMatch::All,
    });
    let chosen: Vec<bool> = (0..5)
        .map(|_| inj.choose(Api::Anthropic, agent_call()).is_some())
        .collect();
    assert_eq!(
        chosen, [true; 5],
        "nothing cut yet: every stream is a candidate"
    );
    assert!(inj.claim());
    assert!(inj.claim());
    assert!(!inj.claim());
    assert!(inj.choose(Api::Anthropic, agent_call()).is_none());
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
        matches: InjectMatch::All,
    };
    let pick = |r: &InjectRule| {
        let inj = Injector::new(r.clone());
        (0..1000)
            .map(|_| inj.choose(Api::Gemini, agent_call()).is_some())
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
