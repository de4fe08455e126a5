//! gemini-cli's logged response (`response_text`: the streamed chunks) as events.

use std::borrow::Cow;

use serde_json::Value;

use super::{Call, s};
use crate::decode::provider::owned;
use crate::effect::canonical_args;
use crate::event::{Event, EventKind, TimestampMs};

/// The last `finishReason` among the streamed chunks, and the chunks' events.
pub(super) fn events(
    response: &Value,
    call: &mut Call,
    ts: Option<TimestampMs>,
    out: &mut Vec<Event<'static>>,
) -> Option<String> {
    let chunks: Vec<&Value> = match response {
        Value::Array(a) => a.iter().collect(),
        v => vec![v],
    };
    let mut finish = None;
    let mut unnamed = 0;
    for chunk in chunks {
        let Some(cand) = chunk
            .get("candidates")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            continue;
        };
        let parts = cand
            .get("content")
            .and_then(|c| c.get("parts"))
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            if let Some(fc) = part.get("functionCall") {
                let name = s(fc, "name").unwrap_or("tool").to_owned();
                let args = fc
                    .get("args")
                    .map_or_else(|| "{}".to_owned(), Value::to_string);
                let id = match s(fc, "id") {
                    Some(id) if !id.is_empty() => id.to_owned(),
                    _ => {
                        unnamed += 1;
                        format!("{}#fc{}.{unnamed}", call.turn, call.attempt)
                    }
                };
                call.calls.push((
                    call.attempt,
                    name.clone(),
                    canonical_args(Some(&args)),
                    false,
                ));
                out.push(Event::owned(
                    &call.turn,
                    Some(call.attempt),
                    ts,
                    EventKind::ToolCall {
                        id: Cow::Owned(id),
                        name: Cow::Owned(name),
                        args: Some(Cow::Owned(args)),
                    },
                ));
            } else if part.get("thought").and_then(Value::as_bool) != Some(true)
                && let Some(t) = s(part, "text")
                && !t.is_empty()
            {
                out.push(Event::owned(
                    &call.turn,
                    Some(call.attempt),
                    ts,
                    EventKind::Text { text: owned(t) },
                ));
            }
        }
        if let Some(r) = s(cand, "finishReason") {
            finish = Some(r.to_owned());
        }
    }
    finish
}
