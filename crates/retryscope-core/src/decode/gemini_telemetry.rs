//! gemini-cli's telemetry outfile (`telemetry.target: "local"`, `outfile`): OpenTelemetry JS
//! spans, log records and metric records, pretty-printed one after another in any order (or
//! one per line).
//!
//! Owns: telling the records apart (a log record has `attributes["event.name"]`; spans and
//! metric records are skipped as known), and mapping gemini-cli's log events. Model calls are
//! kept per prompt and `role` (`main`, `utility_router`, ...): each call is a turn
//! (`<prompt_id>`, `<prompt_id>#2`, ...; other roles `<prompt_id>~<role>`, ...).
//!
//! - `api_request`: a new call, or the next attempt of the current one when it failed
//!   (`api_error`) or a `network_retry_attempt` / `chat.content_retry` announced a retry
//!   (those carry no `prompt_id`: they belong to the session's latest main call).
//! - `api_response`: the attempt's text and function calls (with ids) from `response_text`
//!   (the streamed chunks), its usage from the token counts, and a `Finish` only when a chunk
//!   carried a `finishReason`; a stream cut without one (gemini-cli logs a 200 response for
//!   it too) is an `Error` (`no_finish_reason`). Without `response_text` the
//!   `finish_reasons` attribute is trusted.
//! - `api_error`: the attempt failed.
//! - `tool_call`: an execution, named by tool and `function_args` only. It goes to the call
//!   of the current turn with the same tool and canonical arguments; one that matches no
//!   logged call came from an attempt whose response was never logged (it failed), so it is
//!   placed on the latest failed attempt, with a call synthesized there
//!   (`telemetry:<tool>#<n>`); with no failed attempt the correlator attributes it.
//!
//! Time is `event.timestamp`, else the record's `hrTime`.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

use super::json_objects::ObjectFramer;
use super::provider::{StreamDecoder, owned, parse, utf8};
use super::{DecodeError, SkipCounts};
use crate::effect::canonical_args;
use crate::event::{Event, EventKind, TimestampMs, Usage};

/// Prefix of the call ids this decoder makes up.
pub const SYNTHETIC_CALL_PREFIX: &str = "telemetry:";

/// One model call (turn) of a lane.
#[derive(Default)]
struct Call {
    turn: String,
    attempt: u32,
    /// The current attempt failed or a retry was announced: the next request retries.
    retry_pending: bool,
    retry_reason: Option<String>,
    /// Attempts that failed (their responses were never logged).
    failed: Vec<u32>,
    /// Calls logged in responses: (attempt, tool, canonical args, executed).
    calls: Vec<(u32, String, String, bool)>,
    synthesized: u32,
}

/// The calls of one prompt and role.
#[derive(Default)]
struct Lane {
    calls: u32,
    cur: Option<Call>,
}

/// Decoder for one telemetry file.
#[derive(Default)]
pub struct Decoder {
    framer: ObjectFramer,
    lanes: HashMap<(String, String), Lane>,
    /// Latest main-lane prompt per session (`""` when the record has no session).
    latest: HashMap<String, String>,
    skips: SkipCounts,
}

fn s<'v>(a: &'v Value, k: &str) -> Option<&'v str> {
    a.get(k).and_then(Value::as_str)
}

fn num(a: &Value, k: &str) -> u64 {
    match a.get(k) {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

fn text(a: &Value, k: &str) -> Option<String> {
    match a.get(k)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        v => Some(v.to_string()),
    }
}

fn ts_of(record: &Value, attrs: &Value) -> Option<TimestampMs> {
    if let Some(ts) = s(attrs, "event.timestamp").and_then(crate::rfc3339::parse_ms) {
        return Some(ts);
    }
    // OpenTelemetry HrTime: [seconds, nanoseconds].
    let hr = record.get("hrTime")?.as_array()?;
    let secs = hr.first()?.as_i64()?;
    let nanos = hr.get(1).and_then(Value::as_i64).unwrap_or(0);
    secs.checked_mul(1000)?.checked_add(nanos / 1_000_000)
}

/// The last `finishReason` among the streamed chunks, and the chunks' events.
fn response_events(
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

impl Decoder {
    fn lane_key(&self, attrs: &Value, session: &str) -> Option<(String, String)> {
        let role = s(attrs, "role").unwrap_or("main").to_owned();
        let prompt = match s(attrs, "prompt_id") {
            Some(p) => p.to_owned(),
            None => self.latest.get(session)?.clone(),
        };
        Some((prompt, role))
    }

    fn api_request(
        &mut self,
        key: (String, String),
        attrs: &Value,
        session: &str,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        let lane = self.lanes.entry(key.clone()).or_default();
        if let Some(c) = &mut lane.cur
            && c.retry_pending
        {
            c.retry_pending = false;
            c.attempt += 1;
            let reason = c.retry_reason.take().unwrap_or_else(|| "retry".to_owned());
            out.push(Event::owned(
                &c.turn,
                Some(c.attempt),
                ts,
                EventKind::Retry {
                    reason: Some(Cow::Owned(reason)),
                },
            ));
            return;
        }
        lane.calls += 1;
        let (prompt, role) = &key;
        let base = if role == "main" {
            prompt.clone()
        } else {
            format!("{prompt}~{role}")
        };
        let turn = if lane.calls == 1 {
            base
        } else {
            format!("{base}#{}", lane.calls)
        };
        out.push(Event::owned(
            &turn,
            Some(0),
            ts,
            EventKind::TurnStart {
                model: s(attrs, "model").map(owned),
                provider: Some(Cow::Borrowed("gemini")),
                session: (!session.is_empty()).then(|| owned(session)),
                agent: Some(Cow::Borrowed("gemini-cli")),
                traceparent: None,
                wire_only: false,
                requested_model: None,
            },
        ));
        lane.cur = Some(Call {
            turn,
            ..Call::default()
        });
    }

    fn api_response(
        &mut self,
        key: &(String, String),
        attrs: &Value,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        let Some(c) = self.lanes.get_mut(key).and_then(|l| l.cur.as_mut()) else {
            return;
        };
        let response =
            s(attrs, "response_text").and_then(|t| serde_json::from_str::<Value>(t).ok());
        let finish = match &response {
            Some(r) => response_events(r, c, ts, out),
            // Prompts and responses not logged: trust the attribute.
            None => text(attrs, "finish_reasons").map(|r| {
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

    fn tool_call(
        &mut self,
        key: &(String, String),
        attrs: &Value,
        ts: Option<TimestampMs>,
        out: &mut Vec<Event<'static>>,
    ) {
        let Some(c) = self.lanes.get_mut(key).and_then(|l| l.cur.as_mut()) else {
            return;
        };
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
        match known {
            Some(k) => k.3 = true,
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
            },
        ));
    }

    /// One parsed record (span, log record or metrics batch).
    pub(super) fn record(&mut self, record: &Value, out: &mut Vec<Event<'static>>) {
        let attrs = match record.get("attributes") {
            Some(a) if a.get("event.name").is_some() => a,
            _ if record.get("event.name").is_some() => record,
            // A span or a metric record: known, nothing a turn needs.
            _ if record.get("_spanContext").is_some()
                || record.get("scopeMetrics").is_some()
                || record.get("resourceMetrics").is_some() =>
            {
                return;
            }
            _ => {
                self.skips.unknown_types += 1;
                return;
            }
        };
        let name = s(attrs, "event.name").unwrap_or("");
        let ts = ts_of(record, attrs);
        let session = s(attrs, "session.id").unwrap_or("").to_owned();
        if name == "gemini_cli.api_request"
            && s(attrs, "role").unwrap_or("main") == "main"
            && let Some(p) = s(attrs, "prompt_id")
        {
            self.latest.insert(session.clone(), p.to_owned());
        }
        let Some(key) = self.lane_key(attrs, &session) else {
            if name.starts_with("gemini_cli.") || name.starts_with("gen_ai.") {
                return;
            }
            self.skips.unknown_types += 1;
            return;
        };
        match name {
            "gemini_cli.api_request" => self.api_request(key, attrs, &session, ts, out),
            "gemini_cli.api_response" => self.api_response(&key, attrs, ts, out),
            "gemini_cli.api_error" => {
                let Some(c) = self.lanes.get_mut(&key).and_then(|l| l.cur.as_mut()) else {
                    return;
                };
                let code = text(attrs, "status_code").or_else(|| text(attrs, "error.type"));
                let message = text(attrs, "error")
                    .or_else(|| text(attrs, "error.message"))
                    .unwrap_or_default();
                c.retry_pending = true;
                if c.failed.last() != Some(&c.attempt) {
                    c.failed.push(c.attempt);
                }
                out.push(Event::owned(
                    &c.turn,
                    Some(c.attempt),
                    ts,
                    EventKind::Error {
                        message: Cow::Owned(message),
                        code: code.map(Cow::Owned),
                    },
                ));
            }
            "gemini_cli.network_retry_attempt" | "gemini_cli.chat.content_retry" => {
                let key = (key.0, "main".to_owned());
                if let Some(c) = self.lanes.get_mut(&key).and_then(|l| l.cur.as_mut()) {
                    c.retry_pending = true;
                    c.retry_reason = text(attrs, "error_type").or_else(|| {
                        Some(
                            if name.ends_with("content_retry") {
                                "content_retry"
                            } else {
                                "network_retry"
                            }
                            .to_owned(),
                        )
                    });
                }
            }
            "gemini_cli.chat.content_retry_failure" => {
                let key = (key.0, "main".to_owned());
                if let Some(c) = self.lanes.get_mut(&key).and_then(|l| l.cur.as_mut()) {
                    c.retry_pending = false;
                    out.push(Event::owned(
                        &c.turn,
                        Some(c.attempt),
                        ts,
                        EventKind::Error {
                            message: Cow::Borrowed("content retries exhausted"),
                            code: text(attrs, "final_error_type").map(Cow::Owned),
                        },
                    ));
                }
            }
            "gemini_cli.tool_call" => {
                let key = (key.0, "main".to_owned());
                self.tool_call(&key, attrs, ts, out);
            }
            // Other gemini-cli and GenAI events are known and carry nothing a turn needs.
            n if n.starts_with("gemini_cli.") || n.starts_with("gen_ai.") => {}
            _ => self.skips.unknown_types += 1,
        }
    }
}

impl StreamDecoder for Decoder {
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError> {
        let line = utf8(line)?;
        if let Some(object) = self.framer.push_line(line)? {
            let v: Value = parse(&object)?;
            self.record(&v, out);
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<Event<'static>>) {
        // An object cut mid-way is dropped.
        self.framer.reset();
    }

    fn skips(&self) -> SkipCounts {
        self.skips
    }
}

#[cfg(test)]
mod tests;
