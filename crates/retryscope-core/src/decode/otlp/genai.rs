//! Records of the OpenTelemetry GenAI semantic conventions from other instrumentations:
//! inference spans (`gen_ai.operation.name` `chat`, `text_completion`, `generate_content`) and
//! their event `gen_ai.client.inference.operation.details`, and `execute_tool` spans.
//!
//! Owns: one model call per inference record (a span, or the details event when no span of
//! the same `span_id` came first), the next one retrying it when it failed (span status error
//! or `error.type`); usage from `gen_ai.usage.*`; tool calls from `gen_ai.output.messages`
//! parts of type `tool_call` (opt-in content, when the instrumentation records it); executions
//! from `execute_tool` spans (`gen_ai.tool.call.id`, `gen_ai.tool.name`,
//! `gen_ai.tool.call.arguments`). Model calls are turns `<session>`, `<session>#2`, ...
//! A retry whose `gen_ai.input.messages` is the failed attempt's input followed by that
//! attempt's partial output as an assistant message (optionally one user message after it) is
//! a continuation ([`crate::continuation`]): its `Retry` carries the partial text as `prefill`.

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::Value;

use super::{attr_str, attr_u64, text};
use crate::event::{Event, EventKind, TimestampMs, Usage};

/// Span ids remembered to skip a span's details event (or the event's span), at most.
const MAX_SEEN: usize = 10_000;

/// Decoder state for one conversation.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(super) struct GenAi {
    calls: u32,
    /// The current call's turn and attempt, and whether its last attempt failed.
    cur: Option<(String, u32, bool)>,
    /// The current attempt's input messages and output text (when recorded), to recognise
    /// a continuation of it.
    last_io: Option<(Vec<Value>, String)>,
    seen: HashSet<String>,
}

/// What an inference record says.
pub(super) struct Inference<'a> {
    /// Attributes.
    pub attrs: &'a Value,
    /// The span id it belongs to (dedup of span and event).
    pub span_id: Option<&'a str>,
    /// Start and end (the same for an event).
    pub start: Option<TimestampMs>,
    /// End.
    pub end: Option<TimestampMs>,
    /// The span's status said error, with this message.
    pub status_error: Option<&'a str>,
}

/// Whether `op` names an inference operation.
pub(super) fn is_inference(op: &str) -> bool {
    matches!(op, "chat" | "text_completion" | "generate_content")
}

/// A messages attribute (`gen_ai.input.messages`, `gen_ai.output.messages`), as JSON text
/// or structured.
fn messages(attrs: &Value, key: &str) -> Vec<Value> {
    match attrs.get(key) {
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Array(a)) => a,
            _ => Vec::new(),
        },
        Some(Value::Array(a)) => a.clone(),
        _ => Vec::new(),
    }
}

fn parts(m: &Value) -> impl Iterator<Item = &Value> {
    m.get("parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn part_type(p: &Value) -> &str {
    p.get("type").and_then(Value::as_str).unwrap_or("")
}

/// A message's text parts, joined.
fn message_text(m: &Value) -> String {
    parts(m)
        .filter(|p| part_type(p) == "text")
        .filter_map(|p| p.get("content").and_then(Value::as_str))
        .collect()
}

/// The partial output `input` carries as a continuation of an attempt whose input was
/// `prev_input` and whose recorded output text was `prev_output` (empty: not recorded).
fn continued<'a>(
    input: &[Value],
    texts: &'a [String],
    prev_input: &[Value],
    prev_output: &str,
) -> Option<&'a str> {
    use crate::continuation as c;
    let view: Vec<c::Message<'_>> = input
        .iter()
        .zip(texts)
        .map(|(m, text)| c::Message {
            role: match m.get("role").and_then(Value::as_str).unwrap_or("") {
                "system" | "developer" => c::Role::System,
                "user" => c::Role::User,
                "assistant" | "model" => c::Role::Assistant,
                _ => c::Role::Other,
            },
            text,
            calls: parts(m).any(|p| part_type(p) == "tool_call"),
            results: parts(m).any(|p| part_type(p) == "tool_call_response"),
        })
        .collect();
    let (base, partial) = c::tail(&view)?;
    (input.get(..base)? == prev_input
        && (prev_output.is_empty() || c::carries(prev_output, false, partial)))
    .then_some(partial)
}

/// `gen_ai.output.messages` tool call parts: (id, name, arguments).
fn tool_calls(attrs: &Value) -> Vec<(String, String, Option<String>)> {
    let messages = messages(attrs, "gen_ai.output.messages");
    let mut out = Vec::new();
    for m in &messages {
        for p in m
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if p.get("type").and_then(Value::as_str) != Some("tool_call") {
                continue;
            }
            let id = p.get("id").and_then(Value::as_str).unwrap_or("").to_owned();
            let name = p
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("tool")
                .to_owned();
            let args = match p.get("arguments") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(v) => Some(v.to_string()),
            };
            out.push((id, name, args));
        }
    }
    out
}

impl GenAi {
    fn first_time(&mut self, span_id: Option<&str>) -> bool {
        let Some(id) = span_id else { return true };
        if self.seen.len() >= MAX_SEEN {
            self.seen.clear();
        }
        self.seen.insert(id.to_owned())
    }

    /// An inference span or details event.
    pub(super) fn inference(
        &mut self,
        r: &Inference<'_>,
        session: &str,
        out: &mut Vec<Event<'static>>,
    ) {
        if !self.first_time(r.span_id) {
            return;
        }
        let a = r.attrs;
        let model = attr_str(a, "gen_ai.request.model").map(str::to_owned);
        let input = messages(a, "gen_ai.input.messages");
        let output: String = messages(a, "gen_ai.output.messages")
            .iter()
            .map(message_text)
            .collect();
        let last_io = self.last_io.replace((input, output));
        let (turn, attempt) = match self.cur.take() {
            Some((turn, attempt, true)) => {
                let prefill = match (&self.last_io, &last_io) {
                    (Some((input, _)), Some((prev_in, prev_out))) => {
                        let texts: Vec<String> = input.iter().map(message_text).collect();
                        continued(input, &texts, prev_in, prev_out).map(str::to_owned)
                    }
                    _ => None,
                };
                out.push(Event::owned(
                    &turn,
                    Some(attempt + 1),
                    r.start,
                    EventKind::Retry {
                        reason: prefill.as_ref().map(|_| Cow::Borrowed("continuation")),
                        prefill: prefill.map(Cow::Owned),
                    },
                ));
                (turn, attempt + 1)
            }
            _ => {
                self.calls += 1;
                let turn = if self.calls == 1 {
                    session.to_owned()
                } else {
                    format!("{session}#{}", self.calls)
                };
                let provider = attr_str(a, "gen_ai.provider.name")
                    .or_else(|| attr_str(a, "gen_ai.system"))
                    .map(|p| Cow::Owned(p.to_owned()));
                out.push(Event::owned(
                    &turn,
                    None,
                    r.start,
                    EventKind::TurnStart {
                        model: model.clone().map(Cow::Owned),
                        provider,
                        session: Some(Cow::Owned(session.to_owned())),
                        agent: attr_str(a, "gen_ai.agent.name").map(|n| Cow::Owned(n.to_owned())),
                        traceparent: None,
                        wire_only: false,
                        requested_model: None,
                    },
                ));
                (turn, 0)
            }
        };
        let ev = |ts, kind| Event::owned(&turn, Some(attempt), ts, kind);
        out.push(ev(
            r.start,
            EventKind::AttemptStart {
                model: attr_str(a, "gen_ai.response.model")
                    .map(str::to_owned)
                    .or(model)
                    .map(Cow::Owned),
                request_id: attr_str(a, "gen_ai.response.id").map(|i| Cow::Owned(i.to_owned())),
            },
        ));
        for (id, name, args) in tool_calls(a) {
            out.push(ev(
                r.end,
                EventKind::ToolCall {
                    id: Cow::Owned(id),
                    name: Cow::Owned(name),
                    args: args.map(Cow::Owned),
                },
            ));
        }
        if let Some(input) = attr_u64(a, "gen_ai.usage.input_tokens") {
            out.push(ev(
                r.end,
                EventKind::Usage {
                    usage: Usage {
                        input_tokens: input,
                        output_tokens: attr_u64(a, "gen_ai.usage.output_tokens").unwrap_or(0),
                        cached_input_tokens: attr_u64(a, "gen_ai.usage.cache_read.input_tokens")
                            .unwrap_or(0),
                        cache_write_tokens: attr_u64(a, "gen_ai.usage.cache_creation.input_tokens")
                            .unwrap_or(0),
                        reasoning_tokens: 0,
                    },
                    model: None,
                },
            ));
        }
        let error_type = attr_str(a, "error.type");
        let failed = r.status_error.is_some() || error_type.is_some();
        if failed {
            let message = r
                .status_error
                .filter(|m| !m.is_empty())
                .or(error_type)
                .unwrap_or("error");
            out.push(ev(
                r.end,
                EventKind::Error {
                    message: Cow::Owned(message.to_owned()),
                    code: error_type.map(|t| Cow::Owned(t.to_owned())),
                },
            ));
        } else {
            let reason = match a.get("gen_ai.response.finish_reasons") {
                Some(Value::Array(v)) => v.first().and_then(Value::as_str).map(str::to_owned),
                Some(Value::String(s)) => Some(s.clone()),
                _ => None,
            };
            out.push(ev(
                r.end,
                EventKind::Finish {
                    reason: Cow::Owned(reason.unwrap_or_else(|| "stop".to_owned())),
                },
            ));
        }
        self.cur = Some((turn, attempt, failed));
    }

    /// An `execute_tool` span: the execution of the call `gen_ai.tool.call.id`.
    pub(super) fn execute_tool(
        &mut self,
        a: &Value,
        session: &str,
        start: Option<TimestampMs>,
        failed: bool,
        out: &mut Vec<Event<'static>>,
    ) {
        let turn = match &self.cur {
            Some((turn, _, _)) => turn.clone(),
            None => session.to_owned(),
        };
        out.push(Event::owned(
            &turn,
            None,
            start,
            EventKind::ToolExec {
                id: Cow::Owned(attr_str(a, "gen_ai.tool.call.id").unwrap_or("").to_owned()),
                name: Cow::Owned(attr_str(a, "gen_ai.tool.name").unwrap_or("tool").to_owned()),
                args: text(a, "gen_ai.tool.call.arguments").map(Cow::Owned),
                effect_key: None,
                step: None,
                effect: None,
                status: Some(Cow::Borrowed(if failed { "error" } else { "success" })),
                result: None,
            },
        ));
    }
}
