//! Claude Code's `-p --output-format stream-json --verbose` output (also what the Claude Agent
//! SDK streams): one JSON object per line.
//!
//! Owns: `system/init` (session, model), `system/api_retry` (the next message is a retry of
//! the same model call), `assistant` messages (one `message.id` per model call; each content
//! block arrives as its own line with `stop_reason: null`), the synthetic "API Error"
//! assistant message (`model: "<synthetic>"` or an `error` field: the call failed),
//! `user` `tool_result` blocks (executions, by `tool_use_id`), `result` (the last call's
//! `stop_reason`, the end of the session's turn), and with `--include-partial-messages` the
//! `stream_event` lines: each attempt's `message_start` (also one that delivered nothing),
//! `message_delta`'s stop reason, `message_stop` (the exact finish), and the synthetic
//! `message_stop` with `abandoned_blocks` that marks a cut. A call that failed before any of
//! its tool uses ran is retried: the next message is its next attempt, announced by
//! `system/api_retry` or not.
//!
//! Other agents write this shape too (Qwen Code's `-o stream-json`), and are read by structure:
//! any `system` subtype naming a retry (`api_retry`, `retry`) announces one; the agent is named
//! by its `system/init`'s `<agent>_version` key; a `message.id` equal to the line's own `uuid`
//! names the line, not the model call, so such lines belong to the open call until it ended (a
//! `stop_reason`, a tool result, a retry); a `result` with `is_error` ends an open call as
//! failed, not finished.
//!
//! Turns: one per model call: `<session_id>`, then `<session_id>#2`, ... A retried call keeps
//! its turn and becomes its next attempt. A call is finished when the next call starts or the
//! `result` arrives with no error in between; executions logged after its last block and
//! before that are read as after the finish, executions followed by more blocks of the same
//! message or by its error as before it. Usage: the message's input figures, and as output the
//! larger of the reported count (a snapshot taken when the message started) and an estimate of
//! what it streamed (text and tool input, about four characters a token).

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

use super::provider::{StreamDecoder, json_object_line, owned};
use super::{DecodeError, SkipCounts};
use crate::cost::estimate_tokens;
use crate::event::{Event, EventKind, TimestampMs, Usage};

/// The model call being streamed.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Call {
    turn: String,
    attempt: u32,
    msg_id: String,
    usage: Usage,
    chars: u64,
    has_tool_use: bool,
    errored: bool,
    /// Finished (a later call or the result came with no error).
    done: bool,
    /// Executions of this call's tool uses seen so far.
    results: u32,
    /// `stop_reason` of a `message_delta` stream event (`--include-partial-messages`).
    stop_reason: Option<String>,
    /// Executions seen after the message's latest block, not yet placed.
    held: Vec<Event<'static>>,
    /// A line of the message said how it stopped (`stop_reason`): no more lines of it.
    stopped: bool,
}

/// Decoder for one stream-json file.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    session: String,
    model: Option<String>,
    /// The agent named by `system/init` (`qwen_code_version` → `qwen-code`).
    agent: Option<String>,
    calls: u32,
    call: Option<Call>,
    retry_reason: Option<String>,
    /// Tool name and turn of each call id.
    tools: HashMap<String, (String, String)>,
    skips: SkipCounts,
}

fn s<'v>(v: &'v Value, k: &str) -> Option<&'v str> {
    v.get(k).and_then(Value::as_str)
}

fn n(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

impl Decoder {
    fn emit(
        &self,
        out: &mut Vec<Event<'static>>,
        ts: Option<TimestampMs>,
        kind: EventKind<'static>,
    ) {
        if let Some(c) = &self.call {
            out.push(Event::owned(&c.turn, Some(c.attempt), ts, kind));
        }
    }

    fn flush_held(&mut self, out: &mut Vec<Event<'static>>) {
        if let Some(c) = &mut self.call {
            out.append(&mut c.held);
        }
    }

    fn emit_usage(&self, out: &mut Vec<Event<'static>>, ts: Option<TimestampMs>) {
        if let Some(c) = &self.call {
            let mut usage = c.usage;
            usage.output_tokens = usage.output_tokens.max(estimate_tokens(c.chars));
            self.emit(out, ts, EventKind::Usage { usage, model: None });
        }
    }

    /// The current call ended without an error: it finished.
    fn finish_call(
        &mut self,
        out: &mut Vec<Event<'static>>,
        ts: Option<TimestampMs>,
        reason: Option<&str>,
    ) {
        let Some(c) = &self.call else { return };
        if !c.errored && !c.done {
            let reason = reason
                .unwrap_or(if c.has_tool_use {
                    "tool_use"
                } else {
                    "end_turn"
                })
                .to_owned();
            self.emit_usage(out, ts);
            self.emit(
                out,
                ts,
                EventKind::Finish {
                    reason: Cow::Owned(reason),
                },
            );
        }
        self.flush_held(out);
        if let Some(c) = &mut self.call {
            c.done = true;
        }
    }

    /// A request failed before streaming and is retried (`system/api_retry`): the failed
    /// attempt is the current call's when it is still streaming, else a new call's first.
    fn api_retry(&mut self, v: &Value, ts: Option<TimestampMs>, out: &mut Vec<Event<'static>>) {
        let status = v
            .get("error_status")
            .filter(|e| !e.is_null())
            .map(Value::to_string);
        let reason = s(v, "error")
            .map(str::to_owned)
            .or_else(|| status.clone())
            .unwrap_or_else(|| "api_retry".to_owned());
        // A call whose tool uses already ran is over: the retry is the next call's.
        let open = self
            .call
            .as_ref()
            .is_some_and(|c| !c.done && !c.errored && c.results == 0);
        if !open && self.retry_reason.is_none() {
            self.new_call(String::new(), "", ts, out);
        }
        if self.call.as_ref().is_some_and(|c| !c.errored) {
            self.emit(
                out,
                ts,
                EventKind::Error {
                    message: Cow::Owned(reason.clone()),
                    code: status.map(Cow::Owned),
                },
            );
            if let Some(c) = &mut self.call {
                c.errored = true;
            }
        }
        self.retry_reason = Some(reason);
    }

    fn assistant(&mut self, v: &Value, ts: Option<TimestampMs>, out: &mut Vec<Event<'static>>) {
        let Some(msg) = v.get("message") else {
            self.skips.unknown_fields += 1;
            return;
        };
        let model = s(msg, "model").unwrap_or("");
        let synthetic = model == "<synthetic>" || v.get("error").is_some_and(|e| !e.is_null());
        if synthetic {
            // Claude Code's own "API Error: ..." message: the call failed.
            self.flush_held(out);
            let text: String = msg
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|b| s(b, "text"))
                .collect();
            let code = s(v, "error").map(str::to_owned);
            let is_open = self.call.as_ref().is_some_and(|c| !c.errored);
            if is_open {
                self.emit_usage(out, ts);
                self.emit(
                    out,
                    ts,
                    EventKind::Error {
                        message: Cow::Owned(text),
                        code: code.map(Cow::Owned),
                    },
                );
            }
            if let Some(c) = &mut self.call {
                c.errored = true;
            }
            return;
        }
        let id = s(msg, "id").unwrap_or("").to_owned();
        // An id that is the line's own names no call: the open call goes on until it ended.
        let line_id = !id.is_empty() && s(v, "uuid") == Some(id.as_str());
        let same = self.call.as_ref().is_some_and(|c| {
            c.msg_id == id || (line_id && !c.done && !c.errored && !c.stopped && c.results == 0)
        });
        if !same {
            self.new_call(id, model, ts, out);
        } else {
            // A further block of the same message: executions held so far ran before it.
            self.flush_held(out);
        }
        if line_id
            && s(msg, "stop_reason").is_some()
            && let Some(c) = &mut self.call
        {
            c.stopped = true;
        }
        if let Some(u) = msg.get("usage")
            && let Some(c) = &mut self.call
        {
            let read = n(u, "cache_read_input_tokens");
            let write = n(u, "cache_creation_input_tokens");
            c.usage = Usage {
                input_tokens: n(u, "input_tokens") + read + write,
                output_tokens: n(u, "output_tokens"),
                cached_input_tokens: read,
                cache_write_tokens: write,
                reasoning_tokens: 0,
            };
        }
        for block in msg
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match s(block, "type") {
                Some("text") => {
                    let text = s(block, "text").unwrap_or("");
                    if let Some(c) = &mut self.call {
                        c.chars += text.chars().count() as u64;
                    }
                    if !text.is_empty() {
                        self.emit(out, ts, EventKind::Text { text: owned(text) });
                    }
                }
                Some("tool_use") => {
                    let call_id = s(block, "id").unwrap_or("").to_owned();
                    let name = s(block, "name").unwrap_or("tool").to_owned();
                    let args = block
                        .get("input")
                        .map_or_else(|| "{}".to_owned(), Value::to_string);
                    let turn = if let Some(c) = &mut self.call {
                        c.chars += args.chars().count() as u64;
                        c.has_tool_use = true;
                        c.turn.clone()
                    } else {
                        continue;
                    };
                    self.tools.insert(call_id.clone(), (name.clone(), turn));
                    self.emit(
                        out,
                        ts,
                        EventKind::ToolCall {
                            id: Cow::Owned(call_id),
                            name: Cow::Owned(name),
                            args: Some(Cow::Owned(args)),
                        },
                    );
                }
                _ => {}
            }
        }
    }

    /// A raw stream event (`--include-partial-messages`): exact attempt starts, stop reasons
    /// and finishes, and cuts (a synthetic `message_stop` with `abandoned_blocks`). Text and
    /// calls still come from the `assistant` lines.
    fn stream_event(&mut self, v: &Value, ts: Option<TimestampMs>, out: &mut Vec<Event<'static>>) {
        let Some(event) = v.get("event") else {
            self.skips.unknown_fields += 1;
            return;
        };
        match s(event, "type") {
            Some("message_start") => {
                let msg = event.get("message");
                let id = msg.and_then(|m| s(m, "id")).unwrap_or("").to_owned();
                let model = msg.and_then(|m| s(m, "model")).unwrap_or("").to_owned();
                if self.call.as_ref().is_none_or(|c| c.msg_id != id) {
                    self.new_call(id, &model, ts, out);
                }
            }
            Some("message_delta") => {
                let reason = event
                    .get("delta")
                    .and_then(|d| s(d, "stop_reason"))
                    .map(str::to_owned);
                if let Some(c) = &mut self.call {
                    c.stop_reason = reason.or(c.stop_reason.take());
                }
            }
            Some("message_stop") => {
                // Executions logged so far ran before the stop.
                self.flush_held(out);
                if v.get("abandoned_blocks").is_some_and(|b| !b.is_null()) {
                    if self.call.as_ref().is_some_and(|c| !c.errored && !c.done) {
                        self.emit_usage(out, ts);
                        self.emit(
                            out,
                            ts,
                            EventKind::Error {
                                message: Cow::Borrowed(
                                    "stream cut: message stopped without message_delta",
                                ),
                                code: Some(Cow::Borrowed("abandoned_blocks")),
                            },
                        );
                    }
                    if let Some(c) = &mut self.call {
                        c.errored = true;
                    }
                } else {
                    let reason = self.call.as_ref().and_then(|c| c.stop_reason.clone());
                    self.finish_call(out, ts, reason.as_deref());
                }
            }
            _ => {}
        }
    }

    fn new_call(
        &mut self,
        id: String,
        model: &str,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        // A call that failed before any of its tool uses ran is retried, announced or not
        // (an in-stream error right after message_start is retried silently).
        let silent_retry = self
            .call
            .as_ref()
            .is_some_and(|c| c.errored && c.results == 0)
            .then(|| "stream_error".to_owned());
        if let Some(reason) = self.retry_reason.take().or(silent_retry)
            && let Some(c) = &mut self.call
        {
            // The same model call, retried.
            out.append(&mut c.held);
            let (turn, attempt) = (c.turn.clone(), c.attempt + 1);
            *c = Call {
                turn,
                attempt,
                msg_id: id,
                ..Call::default()
            };
            self.emit(
                out,
                ts,
                EventKind::Retry {
                    reason: Some(Cow::Owned(reason)),
                    prefill: None,
                },
            );
            return;
        }
        self.finish_call(out, ts, None);
        if let Some(c) = &self.call {
            // The next model call of the agent loop: the previous one's turn is over.
            out.push(Event::owned(
                &c.turn,
                None,
                ts,
                EventKind::TurnEnd { status: None },
            ));
        }
        self.calls += 1;
        let turn = if self.calls == 1 {
            self.session.clone()
        } else {
            format!("{}#{}", self.session, self.calls)
        };
        self.call = Some(Call {
            turn,
            msg_id: id,
            ..Call::default()
        });
        let model = Some(model)
            .filter(|m| !m.is_empty())
            .or(self.model.as_deref());
        let agent = self.agent.as_deref().unwrap_or("claude-code");
        self.emit(
            out,
            ts,
            EventKind::TurnStart {
                model: model.map(owned),
                provider: (agent == "claude-code").then_some(Cow::Borrowed("anthropic")),
                session: Some(owned(&self.session)),
                agent: Some(owned(agent)),
                traceparent: None,
                wire_only: false,
                requested_model: None,
            },
        );
    }

    fn user(&mut self, v: &Value, ts: Option<TimestampMs>) {
        let blocks = v
            .get("message")
            .and_then(|m| m.get("content"))
            .and_then(Value::as_array);
        for b in blocks.into_iter().flatten() {
            if s(b, "type") != Some("tool_result") {
                continue;
            }
            let id = s(b, "tool_use_id").unwrap_or("").to_owned();
            let (name, turn) = self.tools.get(&id).cloned().unwrap_or_else(|| {
                let turn = self
                    .call
                    .as_ref()
                    .map_or_else(|| self.session.clone(), |c| c.turn.clone());
                ("tool".to_owned(), turn)
            });
            let failed = b.get("is_error").and_then(Value::as_bool) == Some(true);
            // What the tool answered (a string, or text blocks): evidence of how it ended.
            let result = match b.get("content") {
                Some(Value::String(t)) => Some(t.as_str()),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .find_map(|p| p.get("text").and_then(Value::as_str)),
                _ => None,
            }
            .filter(|t| !t.trim().is_empty())
            .map(|t| Cow::Owned(crate::event::result_excerpt(t)));
            let exec = Event::owned(
                &turn,
                None,
                ts,
                EventKind::ToolExec {
                    id: Cow::Owned(id),
                    name: Cow::Owned(name),
                    args: None,
                    effect_key: None,
                    step: None,
                    effect: None,
                    status: Some(Cow::Borrowed(if failed { "error" } else { "success" })),
                    result,
                },
            );
            if let Some(c) = &mut self.call {
                c.results += 1;
                c.held.push(exec);
            }
        }
    }

    fn record(&mut self, v: &Value, out: &mut Vec<Event<'static>>) {
        let ts = s(v, "timestamp").and_then(crate::rfc3339::parse_ms);
        if self.session.is_empty()
            && let Some(sid) = s(v, "session_id")
        {
            self.session = sid.to_owned();
        }
        match (s(v, "type"), s(v, "subtype")) {
            (Some("system"), Some("init")) => {
                self.model = s(v, "model").map(str::to_owned);
                self.agent = v.as_object().and_then(|o| {
                    o.keys()
                        .find_map(|k| k.strip_suffix("_version"))
                        .filter(|a| !a.is_empty())
                        .map(|a| a.replace('_', "-"))
                });
            }
            (Some("system"), Some(sub)) if sub.contains("retry") => self.api_retry(v, ts, out),
            (Some("system"), _) => {}
            (Some("assistant"), _) => self.assistant(v, ts, out),
            (Some("stream_event"), _) => self.stream_event(v, ts, out),
            (Some("user"), _) => self.user(v, ts),
            (Some("result"), _) => {
                let failed = v.get("is_error").and_then(Value::as_bool) == Some(true);
                if failed && self.call.as_ref().is_some_and(|c| !c.done && !c.errored) {
                    // The session ended in an error with the call still open: it failed.
                    let message = v
                        .get("error")
                        .and_then(|e| s(e, "message").or_else(|| e.as_str()))
                        .or_else(|| s(v, "result"))
                        .unwrap_or("")
                        .to_owned();
                    self.flush_held(out);
                    self.emit_usage(out, ts);
                    self.emit(
                        out,
                        ts,
                        EventKind::Error {
                            message: Cow::Owned(message),
                            code: s(v, "subtype").map(owned),
                        },
                    );
                    if let Some(c) = &mut self.call {
                        c.errored = true;
                    }
                }
                let reason = s(v, "stop_reason");
                self.finish_call(out, ts, reason);
                if let Some(c) = self.call.take() {
                    out.push(Event::owned(
                        &c.turn,
                        None,
                        ts,
                        EventKind::TurnEnd {
                            status: s(v, "subtype").map(owned),
                        },
                    ));
                }
            }
            _ => self.skips.unknown_types += 1,
        }
    }
}

impl StreamDecoder for Decoder {
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError> {
        if let Some(v) = json_object_line(line)? {
            self.record(&v, out);
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Event<'static>>) {
        // No result line: the last call stays as it is (unfinished unless an error came).
        self.flush_held(out);
    }

    fn skips(&self) -> SkipCounts {
        self.skips
    }

    /// Always: Claude Code writes a `tool_result` for every tool it ran.
    fn records_executions(&self) -> bool {
        true
    }

    fn state(&self) -> Option<serde_json::Value> {
        super::state::state_of(self)
    }

    fn resume(&mut self, state: serde_json::Value) -> bool {
        super::state::resume_into(self, state)
    }
}

#[cfg(test)]
mod tests;
