//! gemini-cli's telemetry outfile (`telemetry.target: "local"`, `outfile`): OpenTelemetry JS
//! spans, log records and metric records, pretty-printed one after another in any order (or
//! one per line). Also its forks' (Qwen Code): the same records under another agent prefix
//! (`qwen-code.api_request`, ...), matched by structure ([`family`]).
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
//!   `finish_reasons` attribute is trusted. A fork that logs plain text (Qwen Code) says
//!   nothing of the finish there: the attempt finished unless a `chat.content_retry` follows
//!   (its cut is announced that way), settled at the session's next record.
//! - A request's history (`request_text`) shows what the client kept: a retry whose history
//!   ends with a model turn the call's first request did not have is a continuation (the cut
//!   attempt's partial text, prefilled), which is that attempt's text when its response was
//!   never logged; the first new model turn in the next call's history is the previous call's
//!   `Output` (kept text: a continuation that restarted shows both attempts' text, a splice).
//! - `api_error`: the attempt failed.
//! - `tool_call`: an execution, named by tool and `function_args` only. It goes to the call
//!   of the current turn with the same tool and canonical arguments; one that matches no
//!   logged call came from an attempt whose response was never logged (it failed), so it is
//!   placed on the latest failed attempt, with a call synthesized there
//!   (`telemetry:<tool>#<n>`); with no failed attempt the correlator attributes it. A fork's
//!   `tool_call` names its `response_id` and `call_id`: it goes to that response's attempt.
//!
//! Time is `event.timestamp`, else the record's `hrTime`. This module tells the records apart
//! and keeps the lanes; [`request`], [`response`] and [`tool_call`] map those three events.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

pub(crate) mod family;
mod request;
mod response;
mod tool_call;

use super::json_objects::ObjectFramer;
use super::provider::{StreamDecoder, parse, utf8};
use super::{DecodeError, SkipCounts};
use crate::event::{Event, EventKind, TimestampMs};
use family::Kind;

/// Prefix of the call ids this decoder makes up.
pub(crate) const SYNTHETIC_CALL_PREFIX: &str = "telemetry:";

/// One model call (turn) of a lane.
#[derive(Default, serde::Serialize, serde::Deserialize)]
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
    session: String,
    /// The current attempt's response was logged without saying whether it finished (a
    /// fork's plain-text `response_text`): settled by the next record (time of the response).
    #[serde(with = "super::state::nested_option")]
    pending_finish: Option<Option<TimestampMs>>,
    /// Response ids of attempts (`api_response` / `api_error`), for a fork's `tool_call`.
    responses: Vec<(String, u32)>,
    /// Model turns in the history of the call's first request (`None`: not logged).
    history_models: Option<usize>,
    /// The current attempt has logged text.
    has_text: bool,
}

/// The calls of one prompt and role.
#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Lane {
    calls: u32,
    cur: Option<Call>,
}

/// Decoder for one telemetry file.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    framer: ObjectFramer,
    #[serde(with = "super::state::pairs")]
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

impl Decoder {
    /// The model call in progress on the lane `key`, if any (a response, an error or a tool
    /// call with none open is skipped).
    fn current(&mut self, key: &(String, String)) -> Option<&mut Call> {
        self.lanes.get_mut(key).and_then(|l| l.cur.as_mut())
    }

    fn lane_key(&self, attrs: &Value, session: &str) -> Option<(String, String)> {
        let role = s(attrs, "role").unwrap_or("main").to_owned();
        let prompt = match s(attrs, "prompt_id") {
            Some(p) => p.to_owned(),
            None => self.latest.get(session)?.clone(),
        };
        Some((prompt, role))
    }

    /// A response logged without a finish, not followed by a retry: it finished.
    fn settle(c: &mut Call, out: &mut Vec<Event<'static>>) {
        if let Some(ts) = c.pending_finish.take() {
            out.push(Event::owned(
                &c.turn,
                Some(c.attempt),
                ts,
                EventKind::Finish {
                    reason: Cow::Borrowed("stop"),
                },
            ));
        }
    }

    /// Settle every pending finish of `session` (`None`: of every session).
    fn settle_session(&mut self, session: Option<&str>, out: &mut Vec<Event<'static>>) {
        for lane in self.lanes.values_mut() {
            if let Some(c) = &mut lane.cur
                && session.is_none_or(|s| s == c.session)
            {
                Self::settle(c, out);
            }
        }
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
        let event = family::event(name);
        let kind = event.map(|e| e.1);
        // A logged response whose finish is still open is settled by the session's next
        // record, unless that record announces the retry (or is the call's execution).
        if !matches!(
            kind,
            Some(Kind::ContentRetry | Kind::NetworkRetry | Kind::ToolCall)
        ) {
            self.settle_session(Some(&session), out);
        }
        if kind == Some(Kind::ApiRequest)
            && s(attrs, "role").unwrap_or("main") == "main"
            && let Some(p) = s(attrs, "prompt_id")
        {
            self.latest.insert(session.clone(), p.to_owned());
        }
        let Some(key) = self.lane_key(attrs, &session) else {
            // Other events of an agent (`<agent>.config`, `session.end`, `gen_ai.*`).
            if name.contains('.') {
                return;
            }
            self.skips.unknown_types += 1;
            return;
        };
        let Some((agent, kind)) = event else {
            if !name.contains('.') {
                self.skips.unknown_types += 1;
            }
            return;
        };
        match kind {
            Kind::ApiRequest => {
                let agent = family::agent_name(agent);
                self.api_request(key, attrs, &agent, &session, ts, out);
            }
            Kind::ApiResponse => {
                if let Some(c) = self.current(&key) {
                    response::api_response(c, attrs, ts, out);
                }
            }
            Kind::ApiError => {
                let Some(c) = self.current(&key) else { return };
                if let Some(id) = s(attrs, "response_id").filter(|id| !id.is_empty()) {
                    c.responses.push((id.to_owned(), c.attempt));
                }
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
            Kind::NetworkRetry | Kind::ContentRetry => {
                let key = (key.0, "main".to_owned());
                if let Some(c) = self.lanes.get_mut(&key).and_then(|l| l.cur.as_mut()) {
                    // The logged response was cut: no finish after all.
                    if let Some(at) = c.pending_finish.take() {
                        if c.failed.last() != Some(&c.attempt) {
                            c.failed.push(c.attempt);
                        }
                        out.push(Event::owned(
                            &c.turn,
                            Some(c.attempt),
                            at,
                            EventKind::Error {
                                message: Cow::Borrowed("stream ended without a finish reason"),
                                code: text(attrs, "error_type")
                                    .map(Cow::Owned)
                                    .or(Some(Cow::Borrowed("no_finish_reason"))),
                            },
                        ));
                    }
                    c.retry_pending = true;
                    c.retry_reason = text(attrs, "error_type").or_else(|| {
                        Some(
                            if kind == Kind::ContentRetry {
                                "content_retry"
                            } else {
                                "network_retry"
                            }
                            .to_owned(),
                        )
                    });
                }
            }
            Kind::ContentRetryFailure => {
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
            Kind::ToolCall => {
                let key = (key.0, "main".to_owned());
                if let Some(c) = self.current(&key) {
                    tool_call::tool_call(c, attrs, ts, out);
                }
            }
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

    fn finish(&mut self, out: &mut Vec<Event<'static>>) {
        // An object cut mid-way is dropped.
        self.framer.reset();
        self.settle_session(None, out);
    }

    fn skips(&self) -> SkipCounts {
        self.skips
    }

    /// Always: gemini-cli writes a `tool_call` record for every tool it ran.
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
