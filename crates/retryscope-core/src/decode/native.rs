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
use crate::event::{EffectClass, Event, TimestampMs};

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

mod event_type;
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
pub(crate) fn ts_token(raw: &[u8]) -> Option<TimestampMs> {
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
    requested_model: Option<Cow<'a, str>>,
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
                "requested_model" => f.requested_model = opt_str(&mut map)?,
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

#[cfg(test)]
mod tests;
