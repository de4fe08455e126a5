//! An `api_response`: the attempt's text and calls from the logged response (`response_text`:
//! the streamed chunks, or a fork's plain text), its usage, and its finish (or a cut).

use std::borrow::Cow;

use serde_json::Value;

use super::{Call, family, num, s, text};
use crate::decode::provider::owned;
use crate::effect::canonical_args;
use crate::event::{Event, EventKind, TimestampMs, Usage};

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

pub(super) fn api_response(
    c: &mut Call,
    attrs: &Value,
    ts: Option<TimestampMs>,
    out: &mut Vec<Event<'static>>,
) {
    if let Some(id) = s(attrs, "response_id").filter(|id| !id.is_empty()) {
        c.responses.push((id.to_owned(), c.attempt));
    }
    let logged = s(attrs, "response_text");
    let response = logged
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .filter(family::is_chunks);
    let plain = logged.filter(|_| response.is_none());
    if let Some(t) = plain.filter(|t| !t.is_empty()) {
        c.has_text = true;
        out.push(Event::owned(
            &c.turn,
            Some(c.attempt),
            ts,
            EventKind::Text { text: owned(t) },
        ));
    }
    let reasons = text(attrs, "finish_reasons");
    if response.is_some() {
        c.has_text = true;
    }
    let finish = match &response {
        Some(r) => events(r, c, ts, out),
        // A fork's plain text says nothing of the finish: settled by the next record.
        None if plain.is_some() && reasons.is_none() => {
            c.pending_finish = Some(ts);
            None
        }
        // Prompts and responses not logged: trust the attribute.
        None => reasons.map(|r| {
            r.trim_matches(|ch| matches!(ch, '[' | ']' | '\'' | '"' | ' '))
                .rsplit(',')
                .next()
                .unwrap_or("stop")
                .trim_matches(|ch| matches!(ch, '\'' | '"' | ' '))
                .to_owned()
        }),
    };
    let thoughts = num(attrs, "thoughts_token_count");
    let usage = Usage {
        input_tokens: num(attrs, "input_token_count") + num(attrs, "tool_token_count"),
        output_tokens: num(attrs, "output_token_count") + thoughts,
        cached_input_tokens: num(attrs, "cached_content_token_count"),
        cache_write_tokens: 0,
        reasoning_tokens: thoughts,
    };
    out.push(Event::owned(
        &c.turn,
        Some(c.attempt),
        ts,
        EventKind::Usage {
            usage,
            model: s(attrs, "model").map(owned),
        },
    ));
    if c.pending_finish.is_some() {
        return;
    }
    match finish {
        Some(reason) => out.push(Event::owned(
            &c.turn,
            Some(c.attempt),
            ts,
            EventKind::Finish {
                reason: Cow::Owned(reason),
            },
        )),
        // The stream ended before its finish event (gemini-cli logs it as a response).
        None => out.push(Event::owned(
            &c.turn,
            Some(c.attempt),
            ts,
            EventKind::Error {
                message: Cow::Borrowed("stream ended without a finishReason"),
                code: Some(Cow::Borrowed("no_finish_reason")),
            },
        )),
    }
}
