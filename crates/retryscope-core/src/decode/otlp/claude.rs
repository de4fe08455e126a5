//! Claude Code's OTLP log events (`CLAUDE_CODE_ENABLE_TELEMETRY=1`; body `claude_code.<event>`,
//! attribute `event.name` = `<event>`; one stream per `session.id`), as Claude Code 2.1.328
//! sends them (tests/fixtures/agents/FORMATS.md).
//!
//! Owns: `api_request` (one per model response, logged when it ended, with `duration_ms`, the
//! model and the token counts: a finished attempt), `api_error` (a failed request: the next
//! request of the call is its retry), `tool_decision` and `tool_result` (a call and its
//! execution, by `tool_use_id`, with `tool_input`). Claude Code runs tools while the response
//! still streams and logs the response after them, so tool events are held until the request
//! they came from is logged, and placed on it. Model calls are turns `<session.id>`, then
//! `<session.id>#2`, ...; time is `event.timestamp`.
//!
//! Blind spot (of the export, not of this decoder): a stream cut after a tool call is logged
//! as an ordinary `api_request`, so such an attempt reads as finished.

use std::borrow::Cow;

use serde_json::Value;

use super::{attr_str, attr_u64, text};
use crate::event::{Event, EventKind, TimestampMs, Usage};

/// A tool event waiting for its request: (decision?, id, tool, args, time, success).
type HeldTool = (
    bool,
    String,
    String,
    Option<String>,
    Option<TimestampMs>,
    bool,
);

/// Decoder state for one Claude Code session.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Claude {
    calls: u32,
    /// The current call's turn, attempt, and whether its last attempt failed.
    cur: Option<(String, u32, bool)>,
    held: Vec<HeldTool>,
}

impl Claude {
    /// One Claude Code log record (`name` without the `claude_code.` prefix).
    pub(super) fn record(
        &mut self,
        name: &str,
        a: &Value,
        session: &str,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        match name {
            "tool_decision" | "tool_result" => {
                let Some(id) = attr_str(a, "tool_use_id") else {
                    return;
                };
                if name == "tool_decision" && attr_str(a, "decision") == Some("reject") {
                    return;
                }
                let args = text(a, "tool_input").or_else(|| text(a, "tool_parameters"));
                let ok = !matches!(a.get("success"), Some(Value::Bool(false)))
                    && attr_str(a, "success") != Some("false");
                self.held.push((
                    name == "tool_decision",
                    id.to_owned(),
                    attr_str(a, "tool_name").unwrap_or("tool").to_owned(),
                    args,
                    ts,
                    ok,
                ));
            }
            "api_request" | "api_error" => self.request(name == "api_error", a, session, ts, out),
            // Known, nothing a turn needs: user_prompt, assistant_response, plugin_loaded, ...
            _ => {}
        }
    }

    fn request(
        &mut self,
        failed: bool,
        a: &Value,
        session: &str,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        let model = attr_str(a, "model").map(|m| Cow::Owned(m.to_owned()));
        let started = ts.map(|t| {
            t.saturating_sub(i64::try_from(attr_u64(a, "duration_ms").unwrap_or(0)).unwrap_or(0))
        });
        let (turn, attempt) = match self.cur.take() {
            // The previous attempt of this call failed: this request retries it.
            Some((turn, attempt, true)) => {
                out.push(Event::owned(
                    &turn,
                    Some(attempt + 1),
                    started,
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
                out.push(Event::owned(
                    &turn,
                    None,
                    started,
                    EventKind::TurnStart {
                        model: model.clone(),
                        provider: Some(Cow::Borrowed("anthropic")),
                        session: Some(Cow::Owned(session.to_owned())),
                        agent: Some(Cow::Borrowed("claude-code")),
                        traceparent: None,
                        wire_only: false,
                        requested_model: None,
                    },
                ));
                (turn, 0)
            }
        };
        out.push(Event::owned(
            &turn,
            Some(attempt),
            started,
            EventKind::AttemptStart {
                model: model.clone(),
                request_id: None,
            },
        ));
        for (decision, id, tool, args, t, ok) in self.held.drain(..) {
            let kind = if decision {
                EventKind::ToolCall {
                    id: Cow::Owned(id),
                    name: Cow::Owned(tool),
                    args: args.map(Cow::Owned),
                }
            } else {
                EventKind::ToolExec {
                    id: Cow::Owned(id),
                    name: Cow::Owned(tool),
                    args: args.map(Cow::Owned),
                    effect_key: None,
                    step: None,
                    effect: None,
                    status: Some(Cow::Borrowed(if ok { "success" } else { "error" })),
                    result: None,
                }
            };
            out.push(Event::owned(&turn, Some(attempt), t, kind));
        }
        if failed {
            out.push(Event::owned(
                &turn,
                Some(attempt),
                ts,
                EventKind::Error {
                    message: Cow::Owned(text(a, "error").unwrap_or_default()),
                    code: text(a, "status_code").map(Cow::Owned),
                },
            ));
        } else {
            let cache_read = attr_u64(a, "cache_read_tokens").unwrap_or(0);
            let cache_write = attr_u64(a, "cache_creation_tokens").unwrap_or(0);
            out.push(Event::owned(
                &turn,
                Some(attempt),
                ts,
                EventKind::Usage {
                    usage: Usage {
                        input_tokens: attr_u64(a, "input_tokens").unwrap_or(0)
                            + cache_read
                            + cache_write,
                        output_tokens: attr_u64(a, "output_tokens").unwrap_or(0),
                        cached_input_tokens: cache_read,
                        cache_write_tokens: cache_write,
                        reasoning_tokens: 0,
                    },
                    model: None,
                },
            ));
            out.push(Event::owned(
                &turn,
                Some(attempt),
                ts,
                EventKind::Finish {
                    reason: Cow::Borrowed("completed"),
                },
            ));
        }
        self.cur = Some((turn, attempt, failed));
    }
}
