//! Each v1 event type's fields: the [`NativeLine`] a line's `type` makes of the fields it
//! carried (the version checked, required fields per type, unknown types and fields counted).

use std::borrow::Cow;

use super::{Fields, NativeLine, ProviderChunk};
use crate::decode::{BadLineReason, DecodeError, SkipCounts};
use crate::event::{Event, EventKind, Usage};

fn missing(field: &str, ty: &str) -> DecodeError {
    DecodeError::new(
        BadLineReason::MissingField,
        format!("`{ty}` event without `{field}`"),
    )
}

impl<'a> Fields<'a> {
    pub(super) fn into_line(self, skips: &mut SkipCounts) -> Result<NativeLine<'a>, DecodeError> {
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
                requested_model: self.requested_model,
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
