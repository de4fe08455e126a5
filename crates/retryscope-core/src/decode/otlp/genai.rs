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

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::Value;

use super::{attr_str, attr_u64, text};
use crate::event::{Event, EventKind, TimestampMs, Usage};

/// Span ids remembered to skip a span's details event (or the event's span), at most.
const MAX_SEEN: usize = 10_000;

/// Decoder state for one conversation.
#[derive(Default)]
pub(super) struct GenAi {
    calls: u32,
    /// The current call's turn and attempt, and whether its last attempt failed.
    cur: Option<(String, u32, bool)>,
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

/// `gen_ai.output.messages`, as JSON text or structured.
fn tool_calls(attrs: &Value) -> Vec<(String, String, Option<String>)> {
    let parsed;
    let messages = match attrs.get("gen_ai.output.messages") {
        Some(Value::String(s)) => {
            parsed = serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
            &parsed
        }
        Some(v) => v,
        None => return Vec::new(),
    };
    let mut out = Vec::new();
    for m in messages.as_array().into_iter().flatten() {
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
        let (turn, attempt) = match self.cur.take() {
            Some((turn, attempt, true)) => {
                out.push(Event::owned(
                    &turn,
                    Some(attempt + 1),
                    r.start,
                    EventKind::Retry {
                        reason: None,
                        prefill: None,
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
