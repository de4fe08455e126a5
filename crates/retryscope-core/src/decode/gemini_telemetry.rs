//! gemini-cli telemetry log records, as JSON lines or as the pretty-printed, multi-line JSON
//! objects its `--telemetry-outfile` writes (`safeJsonStringify(record, 2)`).
//!
//! Owns: reassembling objects that span lines (brace depth outside strings); reading a
//! record's attributes (`attributes` of a serialized OpenTelemetry log record, or the record
//! itself when flat); and mapping `gemini_cli.*` events: `prompt_id` → turn; `api_request` →
//! `TurnStart` (first time) ; `api_response` → `Usage` (summed over the attempt's model calls,
//! so the last one carries the total) + `Finish`; `api_error` → `Error`;
//! `network_retry_attempt` / `chat.content_retry` → `Retry` with the next attempt number (they
//! carry no `prompt_id`: they belong to the session's latest prompt);
//! `chat.content_retry_failure` → `Error`; `tool_call` → `ToolCall` + `ToolExec` (ids are
//! synthesized `<prompt_id>#<n>`: the record has none). Time is `event.timestamp`.
//! Other `gemini_cli.*` / `gen_ai.*` events are skipped; spans, metrics and unknown records
//! in the same file are skipped and counted.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::Value;

use super::provider::{StreamDecoder, owned, parse, utf8};
use super::{BadLineReason, DecodeError, SkipCounts};
use crate::event::{Event, EventKind, TimestampMs, Usage};

/// Objects larger than this are dropped (a runaway unbalanced brace).
const MAX_OBJECT_BYTES: usize = 16 << 20;

#[derive(Default)]
struct Turn {
    attempt: u32,
    usage: Usage,
    tools: u32,
}

/// Decoder for one telemetry file.
#[derive(Default)]
pub struct Decoder {
    buf: String,
    depth: i64,
    in_str: bool,
    escaped: bool,
    turns: HashMap<String, Turn>,
    /// Latest prompt per session (`""` when the record has no session).
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
    fn emit(
        &self,
        out: &mut Vec<Event<'static>>,
        turn: &str,
        ts: Option<TimestampMs>,
        kind: EventKind<'static>,
    ) {
        let attempt = self.turns.get(turn).map_or(0, |t| t.attempt);
        out.push(Event {
            turn: Cow::Owned(turn.to_owned()),
            attempt: Some(attempt),
            ts_ms: ts,
            kind,
        });
    }

    fn record(&mut self, record: &Value, out: &mut Vec<Event<'static>>) {
        let attrs = match record.get("attributes") {
            Some(a) if a.get("event.name").is_some() => a,
            _ if record.get("event.name").is_some() => record,
            _ => {
                self.skips.unknown_types += 1; // a span, a metric, something else
                return;
            }
        };
        let name = s(attrs, "event.name").unwrap_or("");
        let ts = ts_of(record, attrs);
        let session = s(attrs, "session.id").unwrap_or("").to_owned();
        let prompt = s(attrs, "prompt_id").map(str::to_owned);
        if let Some(p) = &prompt {
            self.latest.insert(session.clone(), p.clone());
        }
        let model = s(attrs, "model").map(str::to_owned);
        match name {
            "gemini_cli.api_request" => {
                let Some(p) = prompt else { return };
                if !self.turns.contains_key(&p) {
                    self.turns.insert(p.clone(), Turn::default());
                    self.emit(
                        out,
                        &p,
                        ts,
                        EventKind::TurnStart {
                            model: model.map(Cow::Owned),
                            provider: Some(Cow::Borrowed("gemini")),
                            session: (!session.is_empty()).then(|| owned(&session)),
                            agent: None,
                            traceparent: None,
                        },
                    );
                }
            }
            "gemini_cli.api_response" => {
                let Some(p) = prompt else { return };
                let thoughts = num(attrs, "thoughts_token_count");
                let usage = {
                    let t = self.turns.entry(p.clone()).or_default();
                    t.usage.input_tokens +=
                        num(attrs, "input_token_count") + num(attrs, "tool_token_count");
                    t.usage.output_tokens += num(attrs, "output_token_count") + thoughts;
                    t.usage.cached_input_tokens += num(attrs, "cached_content_token_count");
                    t.usage.reasoning_tokens += thoughts;
                    t.usage
                };
                self.emit(
                    out,
                    &p,
                    ts,
                    EventKind::Usage {
                        usage,
                        model: model.map(Cow::Owned),
                    },
                );
                let reason = attrs
                    .get("finish_reasons")
                    .and_then(Value::as_array)
                    .and_then(|a| a.first())
                    .and_then(Value::as_str)
                    .unwrap_or("completed")
                    .to_owned();
                self.emit(
                    out,
                    &p,
                    ts,
                    EventKind::Finish {
                        reason: Cow::Owned(reason),
                    },
                );
            }
            "gemini_cli.api_error" => {
                let Some(p) = prompt else { return };
                let code = text(attrs, "error_type").or_else(|| text(attrs, "status_code"));
                let message = text(attrs, "error")
                    .or_else(|| text(attrs, "error.message"))
                    .unwrap_or_default();
                self.emit(
                    out,
                    &p,
                    ts,
                    EventKind::Error {
                        message: Cow::Owned(message),
                        code: code.map(Cow::Owned),
                    },
                );
            }
            "gemini_cli.network_retry_attempt" | "gemini_cli.chat.content_retry" => {
                let Some(p) = prompt.or_else(|| self.latest.get(&session).cloned()) else {
                    self.skips.unknown_types += 1;
                    return;
                };
                let t = self.turns.entry(p.clone()).or_default();
                t.attempt += 1;
                t.usage = Usage::default();
                let reason = text(attrs, "error_type").unwrap_or_else(|| {
                    if name.ends_with("content_retry") {
                        "content_retry"
                    } else {
                        "network_retry"
                    }
                    .to_owned()
                });
                self.emit(
                    out,
                    &p,
                    ts,
                    EventKind::Retry {
                        reason: Some(Cow::Owned(reason)),
                    },
                );
            }
            "gemini_cli.chat.content_retry_failure" => {
                let Some(p) = prompt.or_else(|| self.latest.get(&session).cloned()) else {
                    return;
                };
                let code = text(attrs, "final_error_type");
                self.emit(
                    out,
                    &p,
                    ts,
                    EventKind::Error {
                        message: Cow::Borrowed("content retries exhausted"),
                        code: code.map(Cow::Owned),
                    },
                );
            }
            "gemini_cli.tool_call" => {
                let Some(p) = prompt else { return };
                let n = {
                    let t = self.turns.entry(p.clone()).or_default();
                    t.tools += 1;
                    t.tools
                };
                let id = format!("{p}#{n}");
                let tool = s(attrs, "function_name").unwrap_or("tool").to_owned();
                let args = text(attrs, "function_args");
                self.emit(
                    out,
                    &p,
                    ts,
                    EventKind::ToolCall {
                        id: owned(&id),
                        name: owned(&tool),
                        args: args.clone().map(Cow::Owned),
                    },
                );
                let rejected = matches!(s(attrs, "decision"), Some("reject" | "cancel"));
                if !rejected {
                    let ok = attrs.get("success").and_then(Value::as_bool) != Some(false);
                    self.emit(
                        out,
                        &p,
                        ts,
                        EventKind::ToolExec {
                            id: Cow::Owned(id),
                            name: Cow::Owned(tool),
                            args: args.map(Cow::Owned),
                            effect_key: None,
                            step: None,
                            effect: None,
                            status: Some(Cow::Borrowed(if ok { "success" } else { "error" })),
                        },
                    );
                }
            }
            // Other gemini-cli and GenAI events are known and carry nothing a turn needs.
            n if n.starts_with("gemini_cli.") || n.starts_with("gen_ai.") => {}
            _ => self.skips.unknown_types += 1,
        }
    }

    /// Track brace depth outside strings; true when an object just closed.
    fn scan(&mut self, line: &str) -> bool {
        let mut closed = false;
        for c in line.chars() {
            if self.in_str {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.in_str = false;
                }
                continue;
            }
            match c {
                '"' => self.in_str = true,
                '{' | '[' => self.depth += 1,
                '}' | ']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        closed = true;
                    }
                }
                _ => {}
            }
        }
        closed
    }

    fn reset(&mut self) {
        self.buf.clear();
        self.depth = 0;
        self.in_str = false;
        self.escaped = false;
    }
}

impl StreamDecoder for Decoder {
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError> {
        let line = utf8(line)?;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if self.buf.is_empty() {
            let t = line.trim_start();
            if t.is_empty() {
                return Ok(());
            }
            if !t.starts_with('{') {
                return Err(DecodeError::new(
                    BadLineReason::InvalidJson,
                    "expected a JSON object",
                ));
            }
        }
        self.buf.push_str(line);
        self.buf.push('\n');
        let closed = self.scan(line);
        if self.buf.len() > MAX_OBJECT_BYTES {
            self.reset();
            return Err(DecodeError::new(
                BadLineReason::TooLong,
                "telemetry record too large",
            ));
        }
        if !closed || self.depth > 0 {
            return Ok(());
        }
        let unbalanced = self.depth < 0;
        let text = std::mem::take(&mut self.buf);
        self.reset();
        if unbalanced {
            return Err(DecodeError::new(
                BadLineReason::InvalidJson,
                "unbalanced braces",
            ));
        }
        let v: Value = parse(&text)?;
        self.record(&v, out);
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<Event<'static>>) {
        // An object cut mid-way is dropped.
        self.reset();
    }

    fn skips(&self) -> SkipCounts {
        self.skips
    }
}

#[cfg(test)]
mod tests {
    use super::super::Format;
    use super::super::provider::stream_decoder;
    use super::*;

    #[test]
    fn pretty_printed_records_with_braces_in_strings() {
        let input = r#"{
  "hrTime": [1760000000, 5000000],
  "attributes": {
    "session.id": "s",
    "event.name": "gemini_cli.api_request",
    "event.timestamp": "2025-10-09T08:53:20.000Z",
    "model": "gemini-2.5-pro",
    "prompt_id": "p1",
    "request_text": "a } brace and \" quote {"
  }
}
{"attributes":{"session.id":"s","event.name":"gemini_cli.network_retry_attempt","attempt":2,"error_type":"ECONNRESET","model":"gemini-2.5-pro"}}
{
  "attributes": {
    "session.id": "s",
    "event.name": "gemini_cli.api_response",
    "prompt_id": "p1",
    "input_token_count": 100,
    "output_token_count": 10,
    "cached_content_token_count": 40,
    "thoughts_token_count": 5,
    "finish_reasons": ["stop"]
  }
}
"#;
        let mut d = stream_decoder(Format::GeminiCliTelemetry, "x").expect("decoder");
        let mut out = Vec::new();
        for line in input.lines() {
            d.push_line(line.as_bytes(), &mut out).expect("line");
        }
        d.finish(&mut out);
        let k: Vec<(&str, Option<u32>)> = out
            .iter()
            .map(|e| (e.kind.type_name(), e.attempt))
            .collect();
        assert_eq!(
            k,
            [
                ("turn_start", Some(0)),
                ("retry", Some(1)),
                ("usage", Some(1)),
                ("finish", Some(1))
            ]
        );
        assert_eq!(out[0].ts_ms, Some(1_760_000_000_000));
        assert!(matches!(
            out[2].kind,
            EventKind::Usage {
                usage: Usage {
                    input_tokens: 100,
                    output_tokens: 15,
                    cached_input_tokens: 40,
                    reasoning_tokens: 5,
                    ..
                },
                ..
            }
        ));
    }
}
