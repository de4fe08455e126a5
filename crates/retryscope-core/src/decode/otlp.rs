//! OpenTelemetry log records and spans as the OTLP receiver hands them over (`Format::Otlp`):
//! one JSON object per line, the same whether the record came as OTLP/JSON or protobuf, over
//! HTTP or gRPC. The root crate turns OTLP into these lines; this module (no OpenTelemetry
//! dependency) decides what each record means.
//!
//! A line:
//!
//! ```json
//! {"otlp":"log","service":"gemini-cli","scope":"gemini-cli","time_unix_nano":1796227707221000000,
//!  "body":"…","attributes":{"event.name":"gemini_cli.api_request","session.id":"…"},
//!  "trace_id":"5b8e…","span_id":"0c1d…"}
//! {"otlp":"span","service":"claude-code","scope":"…","name":"claude_code.llm_request",
//!  "trace_id":"…","span_id":"…","parent_span_id":"…","start_time_unix_nano":…,
//!  "end_time_unix_nano":…,"status":{"code":2,"message":"…"},"attributes":{…},
//!  "events":[{"name":"exception","time_unix_nano":…,"attributes":{…}}]}
//! ```
//!
//! Attribute values are plain JSON (OTLP `intValue` strings become numbers, arrays and key-value
//! lists become arrays and objects, an empty value `null`); ids are lowercase hex.
//!
//! Owns: dispatching each record to the agent it came from. gemini-cli's records are the same
//! records as its telemetry outfile, so they go to that decoder unchanged (findings are the
//! same whichever way they came); so do its forks' (Qwen Code's `qwen-code.api_request`, ...:
//! recognised by the events' structure, `gemini_telemetry::family`), and a service that sent
//! such events has its other records and its spans (which repeat them) go the same way; Codex's `codex.*` events go to `codex`, Claude Code's
//! `claude_code.*` events to `claude`; GenAI semantic-convention records of any other service
//! (inference and `execute_tool` spans, `gen_ai.client.inference.operation.details` events) to
//! `genai`; records no decoder knows are counted as unknown types. With a session joiner
//! ([`Decoder::joined`]), gemini-cli's events go to it as telemetry, to be joined with the
//! session's stream-json exactly as the outfile's are ([`super::gemini_join`]).

mod claude;
mod codex;
mod genai;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::gemini_join::{SessionJoiner, Source};
use super::gemini_telemetry;
use super::provider::{StreamDecoder, parse, utf8};
use super::{DecodeError, SkipCounts};
use crate::event::{Event, TimestampMs};

/// `otlp` of a log record line.
pub const LOG: &str = "log";
/// `otlp` of a span line.
pub const SPAN: &str = "span";

/// Decoder for one OTLP stream (the receiver keeps one stream per service and session).
#[derive(Default)]
pub struct Decoder {
    gemini: gemini_telemetry::Decoder,
    codex: codex::Codex,
    claude: claude::Claude,
    genai: genai::GenAi,
    /// Services that sent gemini-cli-family events (gemini-cli's forks).
    family: HashSet<String>,
    skips: SkipCounts,
    /// Where gemini-cli's events go instead of the caller, when joined.
    joiner: Option<Arc<Mutex<SessionJoiner>>>,
    scratch: Vec<Event<'static>>,
}

impl Decoder {
    /// A decoder whose gemini-cli events are held in `joiner` as telemetry (to be joined with
    /// that session's stream-json); every other agent's events go to the caller as usual.
    pub fn joined(joiner: Arc<Mutex<SessionJoiner>>) -> Self {
        Decoder {
            joiner: Some(joiner),
            ..Decoder::default()
        }
    }

    /// gemini-cli's events: to the joiner if there is one, else to `out`.
    fn gemini_out<'o>(
        joiner: &Option<Arc<Mutex<SessionJoiner>>>,
        scratch: &'o mut Vec<Event<'static>>,
        out: &'o mut Vec<Event<'static>>,
    ) -> &'o mut Vec<Event<'static>> {
        if joiner.is_some() { scratch } else { out }
    }

    /// Hand what the gemini-cli decoder wrote to the joiner.
    fn hand_over(&mut self) {
        if let Some(joiner) = &self.joiner
            && !self.scratch.is_empty()
            && let Ok(mut j) = joiner.lock()
        {
            j.push(Source::Telemetry, &mut self.scratch);
        }
        self.scratch.clear();
    }
}

fn ns_ms(v: Option<&Value>) -> Option<TimestampMs> {
    i64::try_from(v?.as_u64()? / 1_000_000).ok()
}

/// The session of a generic record: its conversation, else the stream's service.
fn genai_session(attrs: &Value) -> &str {
    attr_str(attrs, "gen_ai.conversation.id")
        .or_else(|| attr_str(attrs, "session.id"))
        .unwrap_or("genai")
}

/// A string attribute.
fn attr_str<'v>(a: &'v Value, key: &str) -> Option<&'v str> {
    a.get(key).and_then(Value::as_str)
}

/// An integer attribute, as a number or a numeric string.
fn attr_u64(a: &Value, key: &str) -> Option<u64> {
    match a.get(key)? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// An attribute as text (strings as they are, other values as JSON).
fn text(a: &Value, key: &str) -> Option<String> {
    match a.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        v => Some(v.to_string()),
    }
}

/// A record's time: `event.timestamp` (RFC 3339), else `time_unix_nano`.
fn time_of(record: &Value, attrs: &Value) -> Option<TimestampMs> {
    attr_str(attrs, "event.timestamp")
        .and_then(crate::rfc3339::parse_ms)
        .or_else(|| {
            let ns = record.get("time_unix_nano")?.as_u64()?;
            i64::try_from(ns / 1_000_000).ok()
        })
}

/// A record's event name: the `event.name` attribute, else a string body (Claude Code puts
/// `claude_code.<event>` in both).
fn event_name(record: &Value) -> Option<&str> {
    record
        .get("attributes")
        .and_then(|a| a.get("event.name"))
        .and_then(Value::as_str)
        .or_else(|| record.get("body").and_then(Value::as_str))
}

/// Which agent a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agent {
    GeminiCli,
    Codex,
    Claude,
    Other,
}

fn agent_of(record: &Value, name: Option<&str>, family: &HashSet<String>) -> Agent {
    let service = record.get("service").and_then(Value::as_str).unwrap_or("");
    if service == "gemini-cli"
        || family.contains(service)
        || name.is_some_and(|n| gemini_telemetry::family::event(n).is_some())
    {
        return Agent::GeminiCli;
    }
    // A span that names a gemini-cli prompt (`qwen-code.prompt_id`) is a fork's.
    if name.is_none()
        && record
            .get("attributes")
            .and_then(Value::as_object)
            .is_some_and(|a| {
                a.keys()
                    .any(|k| k.ends_with(".prompt_id") && !k.starts_with("gen_ai."))
            })
    {
        return Agent::GeminiCli;
    }
    if name.is_some_and(|n| n.starts_with("codex.")) {
        return Agent::Codex;
    }
    if service == "claude-code"
        || record
            .get("body")
            .and_then(Value::as_str)
            .is_some_and(|b| b.starts_with("claude_code."))
    {
        return Agent::Claude;
    }
    Agent::Other
}

impl Decoder {
    fn log(&mut self, mut record: Value, out: &mut Vec<Event<'static>>) {
        let name = event_name(&record).map(str::to_owned);
        if let Some(n) = &name
            && gemini_telemetry::family::event(n).is_some()
            && let Some(service) = record.get("service").and_then(Value::as_str)
        {
            self.family.insert(service.to_owned());
        }
        match agent_of(&record, name.as_deref(), &self.family) {
            Agent::GeminiCli => {
                // The outfile's records carry `hrTime` ([seconds, nanoseconds]); it stands in
                // when `event.timestamp` is missing.
                if let Some(ns) = record.get("time_unix_nano").and_then(Value::as_u64)
                    && let Some(obj) = record.as_object_mut()
                {
                    obj.insert(
                        "hrTime".to_owned(),
                        Value::from(vec![ns / 1_000_000_000, ns % 1_000_000_000]),
                    );
                }
                let sink = Self::gemini_out(&self.joiner, &mut self.scratch, out);
                self.gemini.record(&record, sink);
                self.hand_over();
            }
            Agent::Codex => {
                let attrs = record.get("attributes").unwrap_or(&Value::Null);
                let session = attr_str(attrs, "conversation.id").unwrap_or("codex");
                let ts = time_of(&record, attrs);
                self.codex
                    .record(name.as_deref().unwrap_or(""), attrs, session, ts, out);
            }
            Agent::Claude => {
                let attrs = record.get("attributes").unwrap_or(&Value::Null);
                let session = attr_str(attrs, "session.id").unwrap_or("claude-code");
                let ts = time_of(&record, attrs);
                let name = name.as_deref().unwrap_or("");
                let name = name.strip_prefix("claude_code.").unwrap_or(name);
                self.claude.record(name, attrs, session, ts, out);
            }
            Agent::Other
                if name.as_deref() == Some("gen_ai.client.inference.operation.details") =>
            {
                let attrs = record.get("attributes").unwrap_or(&Value::Null);
                let ts = time_of(&record, attrs);
                self.genai.inference(
                    &genai::Inference {
                        attrs,
                        span_id: record.get("span_id").and_then(Value::as_str),
                        start: ts,
                        end: ts,
                        status_error: None,
                    },
                    genai_session(attrs),
                    out,
                );
            }
            Agent::Other => self.skips.unknown_types += 1,
        }
    }

    fn span(&mut self, record: &Value, out: &mut Vec<Event<'static>>) {
        match agent_of(record, None, &self.family) {
            // gemini-cli's and Claude Code's spans repeat what their log records say.
            Agent::GeminiCli | Agent::Claude => {}
            // Codex's spans are its internals (`run_turn`, `receiving`, ...); its log events
            // say what a turn needs.
            _ if record
                .get("service")
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with("codex")) => {}
            Agent::Codex | Agent::Other => {
                let attrs = record.get("attributes").unwrap_or(&Value::Null);
                let op = attr_str(attrs, "gen_ai.operation.name").unwrap_or("");
                let start = ns_ms(record.get("start_time_unix_nano"));
                let end = ns_ms(record.get("end_time_unix_nano")).or(start);
                let status = record.get("status");
                let status_error = (status.and_then(|s| s.get("code")).and_then(Value::as_i64)
                    == Some(2))
                .then(|| {
                    status
                        .and_then(|s| s.get("message"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                });
                if genai::is_inference(op) {
                    self.genai.inference(
                        &genai::Inference {
                            attrs,
                            span_id: record.get("span_id").and_then(Value::as_str),
                            start,
                            end,
                            status_error,
                        },
                        genai_session(attrs),
                        out,
                    );
                } else if op == "execute_tool" {
                    let failed = status_error.is_some() || attrs.get("error.type").is_some();
                    self.genai
                        .execute_tool(attrs, genai_session(attrs), start, failed, out);
                } else {
                    self.skips.unknown_types += 1;
                }
            }
        }
    }
}

impl StreamDecoder for Decoder {
    fn push_line(&mut self, line: &[u8], out: &mut Vec<Event<'static>>) -> Result<(), DecodeError> {
        let line = utf8(line)?;
        if line.trim().is_empty() {
            return Ok(());
        }
        let record: Value = parse(line)?;
        match record.get("otlp").and_then(Value::as_str) {
            Some(LOG) => self.log(record, out),
            Some(SPAN) => self.span(&record, out),
            _ => self.skips.unknown_types += 1,
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Event<'static>>) {
        let sink = Self::gemini_out(&self.joiner, &mut self.scratch, out);
        self.gemini.finish(sink);
        self.hand_over();
    }

    fn skips(&self) -> SkipCounts {
        let mut s = self.skips;
        s.add(self.gemini.skips());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::super::Format;
    use super::super::provider::decode_lines;

    #[test]
    fn a_gemini_cli_forks_spans_are_not_read_as_genai_turns() {
        // Qwen Code's inference span repeats its `qwen-code.api_*` log records; it may arrive
        // before them. A span without the fork's prompt id is a GenAI inference.
        let span = |extra: &str| {
            format!(
                r#"{{"otlp":"span","service":"qwen-code","name":"qwen-code.llm_request","span_id":"01","start_time_unix_nano":1000000000,"end_time_unix_nano":2000000000,"attributes":{{"gen_ai.operation.name":"chat","gen_ai.request.model":"m","session.id":"s"{extra}}}}}"#
            )
        };
        let fork = span(r#","qwen-code.prompt_id":"s########0""#);
        let (evs, skips) = decode_lines(Format::Otlp, [fork.as_str()]);
        assert!(evs.is_empty(), "{evs:?}");
        assert_eq!(skips.unknown_types, 0);
        let plain = span("");
        let (evs, _) = decode_lines(Format::Otlp, [plain.as_str()]);
        assert!(!evs.is_empty());
    }
}
