//! The native retryscope event format (v1): one JSON object per line.
//!
//! See `docs/event-format.md`. Parsing is a single pass over the object with a hand-written
//! visitor: known keys are read into borrowed slices of the line, unknown keys are skipped and
//! counted, unknown event types are reported as such (never an error).

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{BadLineReason, DecodeError, SkipCounts};
use crate::event::{EffectClass, Event, EventKind, TimestampMs, Usage};

/// What one native line holds.
#[derive(Debug)]
pub enum NativeLine<'a> {
    /// A normalized event.
    Event(Event<'a>),
    /// A raw provider chunk wrapped in the native envelope (`type: "provider_chunk"`).
    ProviderChunk(ProviderChunk<'a>),
    /// A well-formed event of a type this version does not know: count it and go on.
    UnknownType,
}

/// A provider payload inside the native envelope.
#[derive(Debug)]
pub struct ProviderChunk<'a> {
    /// Turn id.
    pub turn: Cow<'a, str>,
    /// Attempt number, when the client tagged one.
    pub attempt: Option<u32>,
    /// Event time.
    pub ts_ms: Option<TimestampMs>,
    /// `openai.chat`, `openai.responses`, `anthropic` or `gemini`.
    pub provider: Cow<'a, str>,
    /// The raw chunk JSON.
    pub data: &'a RawValue,
}

mod fast;

/// Decode one line (without its newline) of the native format.
pub fn decode_line<'a>(
    line: &'a [u8],
    skips: &mut SkipCounts,
) -> Result<NativeLine<'a>, DecodeError> {
    // The common shape takes the hand-written pass; anything else (and every error) serde's.
    let mut fields = Fields::default();
    match fast::fill(line, &mut fields) {
        Some(()) => fields.into_line(skips),
        None => decode_serde(line, skips),
    }
}

/// [`decode_line`] through serde only: the reference the fast path is tested against.
fn decode_serde<'a>(line: &'a [u8], skips: &mut SkipCounts) -> Result<NativeLine<'a>, DecodeError> {
    // serde_json validates UTF-8 as it reads strings; whole-line validation happens only to
    // classify a failure, off the hot path.
    let mut de = serde_json::Deserializer::from_slice(line);
    let parsed = Fields::deserialize(&mut de).and_then(|f| de.end().map(|()| f));
    match parsed {
        Ok(fields) => fields.into_line(skips),
        Err(e) => Err(match std::str::from_utf8(line) {
            Err(u) => DecodeError::new(
                BadLineReason::InvalidUtf8,
                format!("invalid UTF-8 at byte {}", u.valid_up_to()),
            ),
            Ok(_) => json_error(e),
        }),
    }
}

/// Decode one line that is already known to be UTF-8.
pub fn decode_str<'a>(
    text: &'a str,
    skips: &mut SkipCounts,
) -> Result<NativeLine<'a>, DecodeError> {
    let mut fields = Fields::default();
    if fast::fill(text.as_bytes(), &mut fields).is_some() {
        return fields.into_line(skips);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let fields: Fields<'a> = Fields::deserialize(&mut de).map_err(json_error)?;
    de.end().map_err(json_error)?;
    fields.into_line(skips)
}

fn json_error(e: serde_json::Error) -> DecodeError {
    super::json_error(&e)
}

/// A string that borrows from the input when it has no escapes.
struct Str<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Str(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// An id that may be logged as a string or a number.
struct Id<'a>(Cow<'a, str>);

impl<'de> de::Deserialize<'de> for Id<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Id(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Id(Cow::Owned(v.to_owned())))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Id(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Id(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_any(V)
    }
}

/// `ts`: an RFC 3339 string or integer Unix milliseconds.
struct Ts(TimestampMs);

/// A raw JSON `ts` token (a quoted string or a number) read exactly as a native line's `ts`
/// is: the one timestamp parser, also used by `check`'s shard router.
pub fn ts_token(raw: &[u8]) -> Option<TimestampMs> {
    // Plain integer milliseconds (nearly every line), read without serde: up to 18 digits, no
    // leading zero, exactly what serde reads as the same number; anything else goes to serde.
    if (1..=18).contains(&raw.len()) && (raw.len() == 1 || raw[0] != b'0') {
        // One pass: accumulate, and leave to serde at the first byte that is not a digit.
        let mut n = 0i64;
        for &b in raw {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                return serde_json::from_slice::<Ts>(raw).ok().map(|t| t.0);
            }
            n = n * 10 + i64::from(digit);
        }
        return Some(n);
    }
    serde_json::from_slice::<Ts>(raw).ok().map(|t| t.0)
}

impl<'de> de::Deserialize<'de> for Ts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Ts;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 string or integer Unix milliseconds")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ts, E> {
                i64::try_from(v)
                    .map(Ts)
                    .map_err(|_| E::custom("ts out of range"))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ts, E> {
                Ok(Ts(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Ts, E> {
                if v.is_finite() && v.abs() < 9.0e15 {
                    Ok(Ts(v as i64))
                } else {
                    Err(E::custom("ts out of range"))
                }
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Ts, E> {
                crate::rfc3339::parse_ms(v)
                    .map(Ts)
                    .ok_or_else(|| E::custom("ts is not an RFC 3339 timestamp"))
            }
        }
        d.deserialize_any(V)
    }
}

/// Every field any v1 event type may carry; which ones apply depends on `type`.
#[derive(Default)]
struct Fields<'a> {
    version: Option<u64>,
    turn: Option<Cow<'a, str>>,
    ty: Option<Cow<'a, str>>,
    ts: Option<TimestampMs>,
    attempt: Option<u64>,
    model: Option<Cow<'a, str>>,
    provider: Option<Cow<'a, str>>,
    session: Option<Cow<'a, str>>,
    agent: Option<Cow<'a, str>>,
    traceparent: Option<Cow<'a, str>>,
    wire_only: Option<bool>,
    request_id: Option<Cow<'a, str>>,
    reason: Option<Cow<'a, str>>,
    prefill: Option<Cow<'a, str>>,
    text: Option<Cow<'a, str>>,
    id: Option<Cow<'a, str>>,
    name: Option<Cow<'a, str>>,
    /// The raw JSON text of `args`.
    args: Option<&'a str>,
    effect_key: Option<Cow<'a, str>>,
    step: Option<i64>,
    effect: Option<EffectClass>,
    status: Option<Cow<'a, str>>,
    result: Option<Cow<'a, str>>,
    message: Option<Cow<'a, str>>,
    code: Option<Cow<'a, str>>,
    signal: Option<Cow<'a, str>>,
    data: Option<&'a RawValue>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cached_input_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    /// Keys this version does not know.
    unknown: u64,
}

impl<'de> de::Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(FieldsVisitor)
    }
}

struct FieldsVisitor;

fn opt_str<'de, A: MapAccess<'de>>(map: &mut A) -> Result<Option<Cow<'de, str>>, A::Error> {
    Ok(map.next_value::<Option<Str<'de>>>()?.map(|s| s.0))
}

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
        let mut f = Fields::default();
        while let Some(key) = map.next_key::<Str<'de>>()? {
            match key.0.as_ref() {
                "v" => f.version = map.next_value()?,
                "turn" => f.turn = map.next_value::<Option<Id<'de>>>()?.map(|s| s.0),
                "type" => f.ty = opt_str(&mut map)?,
                "ts" => f.ts = map.next_value::<Option<Ts>>()?.map(|t| t.0),
                "attempt" => f.attempt = map.next_value()?,
                "model" => f.model = opt_str(&mut map)?,
                "provider" => f.provider = opt_str(&mut map)?,
                "session" => f.session = map.next_value::<Option<Id<'de>>>()?.map(|s| s.0),
                "agent" => f.agent = opt_str(&mut map)?,
                "traceparent" => f.traceparent = opt_str(&mut map)?,
                "wire_only" => f.wire_only = map.next_value()?,
                "request_id" => f.request_id = opt_str(&mut map)?,
                "reason" => f.reason = opt_str(&mut map)?,
                "prefill" => f.prefill = opt_str(&mut map)?,
                "text" => f.text = opt_str(&mut map)?,
                "id" => f.id = map.next_value::<Option<Id<'de>>>()?.map(|s| s.0),
                "name" => f.name = opt_str(&mut map)?,
                "args" => f.args = Some(map.next_value::<&RawValue>()?.get()),
                "effect_key" => f.effect_key = opt_str(&mut map)?,
                "step" => f.step = map.next_value()?,
                "effect" => f.effect = map.next_value()?,
                "status" => f.status = opt_str(&mut map)?,
                "result" => f.result = opt_str(&mut map)?,
                "message" => f.message = opt_str(&mut map)?,
                "code" => f.code = map.next_value::<Option<Id<'de>>>()?.map(|s| s.0),
                "signal" => f.signal = opt_str(&mut map)?,
                "data" => f.data = Some(map.next_value()?),
                "input_tokens" => f.input_tokens = map.next_value()?,
                "output_tokens" => f.output_tokens = map.next_value()?,
                "cached_input_tokens" => f.cached_input_tokens = map.next_value()?,
                "cache_write_tokens" => f.cache_write_tokens = map.next_value()?,
                "reasoning_tokens" => f.reasoning_tokens = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    f.unknown += 1;
                }
            }
        }
        Ok(f)
    }
}

fn missing(field: &str, ty: &str) -> DecodeError {
    DecodeError::new(
        BadLineReason::MissingField,
        format!("`{ty}` event without `{field}`"),
    )
}

impl<'a> Fields<'a> {
    fn into_line(self, skips: &mut SkipCounts) -> Result<NativeLine<'a>, DecodeError> {
        if let Some(v) = self.version
            && v != 1
        {
            return Err(DecodeError::new(
                BadLineReason::InvalidValue,
                format!("unsupported format version v={v}"),
            ));
        }
        let ty = self
            .ty
            .ok_or_else(|| DecodeError::new(BadLineReason::MissingField, "event without `type`"))?;
        let turn = self.turn.ok_or_else(|| missing("turn", &ty))?;
        if turn.is_empty() {
            return Err(DecodeError::new(
                BadLineReason::InvalidValue,
                "`turn` is empty",
            ));
        }
        let attempt = match self.attempt {
            Some(a) => Some(u32::try_from(a).map_err(|_| {
                DecodeError::new(BadLineReason::InvalidValue, "`attempt` out of range")
            })?),
            None => None,
        };
        let ty_ref: &str = &ty;
        // Fields outside the event's own set are "unknown" for that type only when they are
        // not known anywhere; cross-type fields are tolerated silently.
        let kind = match ty_ref {
            "turn_start" => EventKind::TurnStart {
                model: self.model,
                provider: self.provider,
                session: self.session,
                agent: self.agent,
                traceparent: self.traceparent,
                wire_only: self.wire_only.unwrap_or(false),
            },
            "attempt_start" => EventKind::AttemptStart {
                model: self.model,
                request_id: self.request_id,
            },
            "retry" => EventKind::Retry {
                reason: self.reason,
                prefill: self.prefill,
            },
            "stream_splice" => EventKind::StreamSplice {
                signal: self.signal.unwrap_or(Cow::Borrowed("unspecified")),
            },
            "text" => EventKind::Text {
                text: self.text.ok_or_else(|| missing("text", ty_ref))?,
            },
            "tool_call" => EventKind::ToolCall {
                id: self.id.ok_or_else(|| missing("id", ty_ref))?,
                name: self.name.ok_or_else(|| missing("name", ty_ref))?,
                args: self.args.map(Cow::Borrowed),
            },
            "tool_exec" => EventKind::ToolExec {
                id: self.id.ok_or_else(|| missing("id", ty_ref))?,
                name: self.name.ok_or_else(|| missing("name", ty_ref))?,
                args: self.args.map(Cow::Borrowed),
                effect_key: self.effect_key,
                step: self.step,
                effect: self.effect,
                status: self.status,
                result: self.result.map(|r| match r {
                    Cow::Borrowed(s) if s.len() <= crate::event::MAX_RESULT_BYTES => {
                        Cow::Borrowed(s)
                    }
                    r => Cow::Owned(crate::event::result_excerpt(&r)),
                }),
            },
            "render_reset" => EventKind::RenderReset,
            "usage" => EventKind::Usage {
                usage: Usage {
                    input_tokens: self
                        .input_tokens
                        .ok_or_else(|| missing("input_tokens", ty_ref))?,
                    output_tokens: self
                        .output_tokens
                        .ok_or_else(|| missing("output_tokens", ty_ref))?,
                    cached_input_tokens: self.cached_input_tokens.unwrap_or(0),
                    cache_write_tokens: self.cache_write_tokens.unwrap_or(0),
                    reasoning_tokens: self.reasoning_tokens.unwrap_or(0),
                },
                model: self.model,
            },
            "finish" => EventKind::Finish {
                reason: self.reason.unwrap_or(Cow::Borrowed("unknown")),
            },
            "error" => EventKind::Error {
                message: self.message.unwrap_or(Cow::Borrowed("")),
                code: self.code,
            },
            "output" => EventKind::Output {
                text: self.text.ok_or_else(|| missing("text", ty_ref))?,
            },
            "turn_end" => EventKind::TurnEnd {
                status: self.status,
            },
            "provider_chunk" => {
                let provider = self.provider.ok_or_else(|| missing("provider", ty_ref))?;
                let data = self.data.ok_or_else(|| missing("data", ty_ref))?;
                skips.unknown_fields += self.unknown;
                return Ok(NativeLine::ProviderChunk(ProviderChunk {
                    turn,
                    attempt,
                    ts_ms: self.ts,
                    provider,
                    data,
                }));
            }
            _ => {
                skips.unknown_types += 1;
                return Ok(NativeLine::UnknownType);
            }
        };
        skips.unknown_fields += self.unknown;
        Ok(NativeLine::Event(Event {
            turn,
            attempt,
            ts_ms: self.ts,
            kind,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
