//! A `tool_call` record: an execution, placed on the call it ran (by tool and canonical
//! arguments, or a fork's `response_id`), or on the latest failed attempt with a call
//! synthesized there; its finish settled, since the call was in the response.

use std::borrow::Cow;

use serde_json::Value;

use super::{Call, Decoder, SYNTHETIC_CALL_PREFIX, s, text};
use crate::decode::provider::owned;
use crate::effect::canonical_args;
use crate::event::{Event, EventKind, TimestampMs};

pub(super) fn tool_call(
    c: &mut Call,
    attrs: &Value,
    ts: Option<TimestampMs>,
    out: &mut Vec<Event<'static>>,
) {
    let name = s(attrs, "function_name").unwrap_or("tool").to_owned();
    let args = text(attrs, "function_args");
    let canonical = canonical_args(args.as_deref());
    let known = c
        .calls
        .iter_mut()
        .rev()
        .filter(|k| k.1 == name && k.2 == canonical)
        .min_by_key(|k| k.3);
    let mut attempt = None;
    let mut id = String::new();
    // A fork names the response the call came in and the call's id.
    let by_response = s(attrs, "response_id")
        .filter(|r| !r.is_empty())
        .and_then(|r| c.responses.iter().rev().find(|x| x.0 == r))
        .map(|x| x.1);
    let call_id = s(attrs, "call_id").filter(|i| !i.is_empty());
    match known {
        Some(k) => k.3 = true,
        None if by_response.is_some() => {
            id = call_id.map_or_else(
                || {
                    c.synthesized += 1;
                    format!("{SYNTHETIC_CALL_PREFIX}{name}#{}", c.synthesized)
                },
                str::to_owned,
            );
            attempt = by_response;
            c.calls
                .push((by_response.unwrap_or(0), name.clone(), canonical, true));
            out.push(Event::owned(
                &c.turn,
                attempt,
                c.pending_finish.flatten().or(ts),
                EventKind::ToolCall {
                    id: owned(&id),
                    name: owned(&name),
                    args: args.clone().map(Cow::Owned),
                },
            ));
        }
        None => {
            if let Some(&failed) = c.failed.last() {
                // From an attempt whose response was never logged.
                c.synthesized += 1;
                id = format!("{SYNTHETIC_CALL_PREFIX}{name}#{}", c.synthesized);
                attempt = Some(failed);
                c.calls.push((failed, name.clone(), canonical, true));
                out.push(Event::owned(
                    &c.turn,
                    attempt,
                    ts,
                    EventKind::ToolCall {
                        id: owned(&id),
                        name: owned(&name),
                        args: args.clone().map(Cow::Owned),
                    },
                ));
            }
        }
    }
    // The call was in the response: the attempt finished before it ran.
    Decoder::settle(c, out);
    if matches!(s(attrs, "decision"), Some("reject" | "cancel")) {
        return;
    }
    let ok = !matches!(attrs.get("success"), Some(Value::Bool(false)))
        && s(attrs, "success") != Some("false");
    out.push(Event::owned(
        &c.turn,
        attempt,
        ts,
        EventKind::ToolExec {
            id: Cow::Owned(id),
            name: Cow::Owned(name),
            args: args.map(Cow::Owned),
            effect_key: None,
            step: None,
            effect: None,
            status: Some(Cow::Borrowed(if ok { "success" } else { "error" })),
            result: None,
        },
    ));
}
