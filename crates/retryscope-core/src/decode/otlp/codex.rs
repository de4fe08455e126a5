//! Codex's OTLP log events (`[otel]` exporter; `codex.*` `event.name`s, one stream per
//! `conversation.id`), as Codex 0.169.0 sends them (tests/fixtures/agents/FORMATS.md).
//!
//! Owns: `codex.api_request` (one per HTTP request; an HTTP status of 400 or more fails the
//! attempt). A request retries the current model call when it follows a failed or broken
//! attempt that saw no `codex.tool_result` (Codex 0.169.0 sends `attempt: 0` on its
//! reconnects too; after a tool ran, the next request carries its output: a new call), or
//! when it has a higher `attempt` than the unfinished current one. Otherwise it starts a new
//! model call.
//! `codex.sse_event` (one per SSE event received: an `error.message` fails the attempt, once;
//! `response.completed` without one finishes it, and the one carrying `input_token_count`
//! gives its usage), `codex.tool_decision` (the call, by `call_id`) and `codex.tool_result`
//! (its execution, with `arguments`). Model calls are turns `<conversation.id>`, then
//! `<conversation.id>#2`, ...; time is `event.timestamp`.

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::Value;

use super::{attr_str, attr_u64, text};
use crate::event::{Event, EventKind, TimestampMs, Usage};

/// The model call being streamed.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Call {
    turn: String,
    /// Our attempt number (from 0).
    attempt: u32,
    /// Codex's `attempt` of the current request.
    codex_attempt: u64,
    failed: bool,
    finished: bool,
    /// A `codex.tool_result` arrived since the current attempt's request.
    tool_ran: bool,
    calls: HashSet<String>,
}

/// Decoder state for one Codex conversation.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Codex {
    calls: u32,
    cur: Option<Call>,
}

impl Codex {
    /// One `codex.*` log record (`name` is its `event.name`).
    pub(super) fn record(
        &mut self,
        name: &str,
        a: &Value,
        session: &str,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        match name {
            "codex.api_request" => self.request(a, session, ts, out),
            "codex.sse_event" => self.sse_event(a, ts, out),
            "codex.tool_decision" | "codex.tool_result" => self.tool(name, a, ts, out),
            // Known, nothing a turn needs: conversation_starts, user_prompt, turn_ttft,
            // startup_phase, ...
            _ => {}
        }
    }

    fn request(
        &mut self,
        a: &Value,
        session: &str,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        let codex_attempt = attr_u64(a, "attempt").unwrap_or(0);
        let model = attr_str(a, "model").map(|m| Cow::Owned(m.to_owned()));
        let retry = self.cur.as_ref().is_some_and(|c| {
            !c.finished && (codex_attempt > c.codex_attempt || (c.failed && !c.tool_ran))
        });
        if retry && let Some(c) = self.cur.as_mut() {
            c.attempt += 1;
            c.codex_attempt = codex_attempt;
            c.failed = false;
            c.tool_ran = false;
            out.push(Event::owned(
                &c.turn,
                Some(c.attempt),
                ts,
                EventKind::Retry {
                    reason: None,
                    prefill: None,
                },
            ));
        } else {
            self.calls += 1;
            let turn = if self.calls == 1 {
                session.to_owned()
            } else {
                format!("{session}#{}", self.calls)
            };
            out.push(Event::owned(
                &turn,
                None,
                ts,
                EventKind::TurnStart {
                    model: model.clone(),
                    provider: Some(Cow::Borrowed("openai")),
                    session: Some(Cow::Owned(session.to_owned())),
                    agent: Some(Cow::Borrowed("codex")),
                    traceparent: None,
                    wire_only: false,
                    requested_model: None,
                },
            ));
            self.cur = Some(Call {
                turn,
                codex_attempt,
                ..Call::default()
            });
        }
        let Some(c) = self.cur.as_mut() else { return };
        out.push(Event::owned(
            &c.turn,
            Some(c.attempt),
            ts,
            EventKind::AttemptStart {
                model,
                request_id: None,
            },
        ));
        if let Some(status) = attr_u64(a, "http.response.status_code")
            && status >= 400
        {
            c.failed = true;
            out.push(Event::owned(
                &c.turn,
                Some(c.attempt),
                ts,
                EventKind::Error {
                    message: Cow::Owned(
                        text(a, "error.message").unwrap_or_else(|| format!("HTTP {status}")),
                    ),
                    code: Some(Cow::Owned(status.to_string())),
                },
            ));
        }
    }

    fn sse_event(&mut self, a: &Value, ts: Option<TimestampMs>, out: &mut Vec<Event<'static>>) {
        let Some(c) = self.cur.as_mut() else { return };
        if let Some(message) = attr_str(a, "error.message") {
            if !c.failed && !c.finished {
                c.failed = true;
                out.push(Event::owned(
                    &c.turn,
                    Some(c.attempt),
                    ts,
                    EventKind::Error {
                        message: Cow::Owned(message.to_owned()),
                        code: None,
                    },
                ));
            }
            return;
        }
        if attr_str(a, "event.kind") != Some("response.completed") || c.failed {
            return;
        }
        if let Some(input) = attr_u64(a, "input_token_count") {
            out.push(Event::owned(
                &c.turn,
                Some(c.attempt),
                ts,
                EventKind::Usage {
                    usage: Usage {
                        input_tokens: input,
                        output_tokens: attr_u64(a, "output_token_count").unwrap_or(0),
                        cached_input_tokens: attr_u64(a, "cached_token_count").unwrap_or(0),
                        cache_write_tokens: attr_u64(a, "cache_write_token_count").unwrap_or(0),
                        reasoning_tokens: attr_u64(a, "reasoning_token_count").unwrap_or(0),
                    },
                    model: None,
                },
            ));
        }
        if !c.finished {
            c.finished = true;
            out.push(Event::owned(
                &c.turn,
                Some(c.attempt),
                ts,
                EventKind::Finish {
                    reason: Cow::Borrowed("completed"),
                },
            ));
        }
    }

    fn tool(
        &mut self,
        name: &str,
        a: &Value,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        let Some(c) = self.cur.as_mut() else { return };
        let Some(id) = attr_str(a, "call_id") else {
            return;
        };
        let tool = attr_str(a, "tool_name").unwrap_or("tool").to_owned();
        let args = text(a, "arguments");
        if c.calls.insert(id.to_owned()) {
            out.push(Event::owned(
                &c.turn,
                Some(c.attempt),
                ts,
                EventKind::ToolCall {
                    id: Cow::Owned(id.to_owned()),
                    name: Cow::Owned(tool.clone()),
                    args: args.clone().map(Cow::Owned),
                },
            ));
        }
        if name == "codex.tool_decision" {
            return;
        }
        c.tool_ran = true;
        let ok = !matches!(a.get("success"), Some(Value::Bool(false)))
            && attr_str(a, "success") != Some("false");
        out.push(Event::owned(
            &c.turn,
            Some(c.attempt),
            ts,
            EventKind::ToolExec {
                id: Cow::Owned(id.to_owned()),
                name: Cow::Owned(tool),
                args: args.map(Cow::Owned),
                effect_key: None,
                step: None,
                effect: None,
                status: Some(Cow::Borrowed(if ok { "success" } else { "error" })),
                result: None,
            },
        ));
    }
}
