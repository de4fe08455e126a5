//! Unit tests of the native format decoder: every event type, unknown types and fields, bad
//! lines, escapes, `ts` tokens and the provider envelope.

use super::*;
use crate::event::{EventKind, Usage};

fn ev(line: &str) -> Event<'_> {
    let mut skips = SkipCounts::default();
    match decode_line(line.as_bytes(), &mut skips) {
        Ok(NativeLine::Event(e)) => e,
        other => panic!("not an event: {other:?}"),
    }
}

#[test]
fn decodes_every_type() {
    let e = ev(r#"{"turn":"t1","type":"text","attempt":0,"ts":1000,"text":"hi"}"#);
    assert_eq!(e.turn, "t1");
    assert_eq!(e.attempt, Some(0));
    assert_eq!(e.ts_ms, Some(1000));
    assert_eq!(e.kind, EventKind::Text { text: "hi".into() });
    assert!(matches!(e.turn, Cow::Borrowed(_)), "turn must borrow");

    let e = ev(
        r#"{"v":1,"turn":"t1","type":"tool_call","attempt":1,"id":"c7","name":"issue_refund","args":{"order":"ORD-7781"}}"#,
    );
    assert_eq!(
        e.kind,
        EventKind::ToolCall {
            id: "c7".into(),
            name: "issue_refund".into(),
            args: Some(r#"{"order":"ORD-7781"}"#.into())
        }
    );
    let e = ev(
        r#"{"turn":"t","type":"usage","attempt":0,"input_tokens":10,"output_tokens":5,"cached_input_tokens":2}"#,
    );
    assert!(matches!(
        e.kind,
        EventKind::Usage {
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
                cached_input_tokens: 2,
                ..
            },
            ..
        }
    ));
    let e = ev(
        r#"{"turn":"t","type":"tool_exec","attempt":0,"id":"c1","name":"lookup","effect":"read","step":3}"#,
    );
    assert!(matches!(
        e.kind,
        EventKind::ToolExec {
            effect: Some(EffectClass::Read),
            step: Some(3),
            ..
        }
    ));
    let e = ev(r#"{"turn":"t","type":"turn_start","ts":"2026-11-12T10:00:00Z","model":"m"}"#);
    assert_eq!(e.ts_ms, Some(1_794_477_600_000));
}

#[test]
fn unknown_types_and_fields_are_counted_not_fatal() {
    let mut skips = SkipCounts::default();
    let r = decode_line(br#"{"turn":"t","type":"telepathy","x":1}"#, &mut skips).unwrap();
    assert!(matches!(r, NativeLine::UnknownType));
    let r = decode_line(
        br#"{"turn":"t","type":"text","text":"a","future":{"deep":[1]},"more":2}"#,
        &mut skips,
    )
    .unwrap();
    assert!(matches!(r, NativeLine::Event(_)));
    assert_eq!(
        skips,
        SkipCounts {
            unknown_types: 1,
            unknown_fields: 2,
            incomplete_tool_calls: 0,
        }
    );
}

#[test]
fn bad_lines_have_bounded_reasons() {
    let mut s = SkipCounts::default();
    let cases: [(&[u8], BadLineReason); 8] = [
        (b"{not json", BadLineReason::InvalidJson),
        (b"[1,2]", BadLineReason::InvalidValue),
        (b"\xff\xfe", BadLineReason::InvalidUtf8),
        (
            br#"{"type":"text","text":"a"}"#,
            BadLineReason::MissingField,
        ),
        (
            br#"{"turn":"t","type":"text"}"#,
            BadLineReason::MissingField,
        ),
        (
            br#"{"turn":"t","type":"text","text":"a","ts":"yesterday"}"#,
            BadLineReason::InvalidValue,
        ),
        (
            br#"{"turn":"t","type":"text","text":"a","attempt":-1}"#,
            BadLineReason::InvalidValue,
        ),
        (
            br#"{"turn":"t","type":"text","text":"a"} trailing"#,
            BadLineReason::InvalidJson,
        ),
    ];
    for (line, reason) in cases {
        let err = decode_line(line, &mut s).expect_err("must fail");
        assert_eq!(err.reason, reason, "{}", String::from_utf8_lossy(line));
    }
}

#[test]
fn escaped_strings_are_owned_and_unescaped() {
    let e = ev(r#"{"turn":"t","type":"text","text":"a\"b\u00e9"}"#);
    assert_eq!(
        e.kind,
        EventKind::Text {
            text: "a\"bé".into()
        }
    );
}

#[test]
fn ts_token_reads_integers_like_serde() {
    for raw in [
        &b"0"[..],
        b"7",
        b"1794477600000",
        b"999999999999999999",
        b"9999999999999999999",
        b"0123",
        b"-5",
        b"1.5",
        b"1e3",
        b"\"2026-11-12T10:00:00Z\"",
        b"",
        b"12a",
    ] {
        assert_eq!(
            ts_token(raw),
            serde_json::from_slice::<Ts>(raw).ok().map(|t| t.0),
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
}

#[test]
fn provider_envelope() {
    let mut s = SkipCounts::default();
    let r = decode_line(
        br#"{"turn":"t","attempt":1,"type":"provider_chunk","provider":"anthropic","data":{"type":"ping"}}"#,
        &mut s,
    )
    .unwrap();
    match r {
        NativeLine::ProviderChunk(c) => {
            assert_eq!(c.provider, "anthropic");
            assert_eq!(c.attempt, Some(1));
            assert_eq!(c.data.get(), r#"{"type":"ping"}"#);
        }
        other => panic!("{other:?}"),
    }
}
