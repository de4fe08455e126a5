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
//! (`Decoder::joined`), gemini-cli's events go to it as telemetry, to be joined with the
//! session's stream-json exactly as the outfile's are ([`super::gemini_join`]).

mod claude;
mod codex;
mod genai;
pub mod line;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::gemini_join::{SessionJoiner, Source};
use super::gemini_telemetry;
use super::provider::{StreamDecoder, parse, utf8};
use super::{DecodeError, SkipCounts};
use crate::event::{Event, TimestampMs};
use line::Line;

type Log = line::LogLine<'static, Value, Value>;
type Span = line::SpanLine<'static, Value>;

/// `otlp` of a log record line.
pub(crate) const LOG: &str = "log";
/// `otlp` of a span line.
pub(crate) const SPAN: &str = "span";

/// Decoder for one OTLP stream (the receiver keeps one stream per service and session).
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct Decoder {
    gemini: gemini_telemetry::Decoder,
    codex: codex::Codex,
    claude: claude::Claude,
    genai: genai::GenAi,
    /// Services that sent gemini-cli-family events (gemini-cli's forks).
    family: HashSet<String>,
    /// It has read a record of an agent whose telemetry records every tool it runs
    /// (gemini-cli and its forks, Codex, Claude Code); not GenAI conventions, whose
    /// `execute_tool` spans are there only where the application made them.
    #[serde(default)]
    agent_seen: bool,
    skips: SkipCounts,
    /// Where gemini-cli's events go instead of the caller, when joined.
    #[serde(skip)]
    joiner: Option<Arc<Mutex<SessionJoiner>>>,
    #[serde(skip)]
    scratch: Vec<Event<'static>>,
}

impl Decoder {
    /// A decoder whose gemini-cli events are held in `joiner` as telemetry (to be joined with
    /// that session's stream-json); every other agent's events go to the caller as usual.
    pub(crate) fn joined(joiner: Arc<Mutex<SessionJoiner>>) -> Self {
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

/// Nanoseconds since the epoch to milliseconds.
fn ns_ms(ns: Option<u64>) -> Option<TimestampMs> {
    i64::try_from(ns? / 1_000_000).ok()
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
fn time_of(time_unix_nano: Option<u64>, attrs: &Value) -> Option<TimestampMs> {
    attr_str(attrs, "event.timestamp")
        .and_then(crate::rfc3339::parse_ms)
        .or_else(|| ns_ms(time_unix_nano))
}

/// A record's event name: the `event.name` attribute, else a string body (Claude Code puts
/// `claude_code.<event>` in both).
fn event_name(record: &Log) -> Option<&str> {
    attr_str(&record.attributes, "event.name").or_else(|| record.body.as_str())
}

/// Whether an OTLP line's record goes to the session joiner (to meet its session's
/// stream-json) as its stream's decoder decides it, from the record alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinRoute {
    /// Not one of gemini-cli's family (as far as this record tells).
    No,
    /// This record is (gemini-cli's service, a span naming a prompt).
    Record,
    /// A family event (gemini-cli's or a fork's `<agent>.api_request`, ...): from here on the
    /// decoder takes every record of the stream's service as the family's, so this one and
    /// the stream's later records go to the joiner.
    Stream,
}

/// Where an OTLP line's record goes, by [`JoinRoute`]: a router that keeps sessions with
/// their stream-json remembers a `Stream` answer for the rest of the stream. A line that is
/// not an OTLP record is `No`.
pub fn join_route(line: &[u8]) -> JoinRoute {
    const HINTS: [&[u8]; 5] = [
        b"gemini-cli",
        b"prompt_id",
        b".api_",
        b".tool_call",
        b"retry",
    ];
    if !HINTS
        .iter()
        .any(|h| memchr::memmem::find(line, h).is_some())
    {
        return JoinRoute::No;
    }
    let Ok(text) = std::str::from_utf8(line) else {
        return JoinRoute::No;
    };
    let family = HashSet::new();
    let (seen, event) = match parse::<line::Read>(text) {
        Ok(Line::Log(record)) => {
            let name = event_name(&record).map(str::to_owned);
            let event = name
                .as_deref()
                .is_some_and(|n| gemini_telemetry::family::event(n).is_some());
            let seen = Seen {
                service: &record.service,
                name: name.as_deref(),
                body: record.body.as_str(),
                attributes: &record.attributes,
            };
            (agent_of(&seen, &family), event)
        }
        Ok(Line::Span(record)) => {
            let seen = Seen {
                service: &record.service,
                name: None,
                body: None,
                attributes: &record.attributes,
            };
            (agent_of(&seen, &family), false)
        }
        Err(_) => return JoinRoute::No,
    };
    match (seen, event) {
        (_, true) => JoinRoute::Stream,
        (Agent::GeminiCli, false) => JoinRoute::Record,
        _ => JoinRoute::No,
    }
}

/// Which agent a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Agent {
    GeminiCli,
    Codex,
    Claude,
    Other,
}

/// What [`agent_of`] looks at: the same for a log record and a span.
struct Seen<'r> {
    service: &'r str,
    name: Option<&'r str>,
    body: Option<&'r str>,
    attributes: &'r Value,
}

fn agent_of(r: &Seen<'_>, family: &HashSet<String>) -> Agent {
    if r.service == "gemini-cli"
        || family.contains(r.service)
        || r.name
            .is_some_and(|n| gemini_telemetry::family::event(n).is_some())
    {
        return Agent::GeminiCli;
    }
    // A span that names a gemini-cli prompt (`qwen-code.prompt_id`) is a fork's.
    if r.name.is_none()
        && r.attributes.as_object().is_some_and(|a| {
            a.keys()
                .any(|k| k.ends_with(".prompt_id") && !k.starts_with("gen_ai."))
        })
    {
        return Agent::GeminiCli;
    }
    if r.name.is_some_and(|n| n.starts_with("codex.")) {
        return Agent::Codex;
    }
    if r.service == "claude-code" || r.body.is_some_and(|b| b.starts_with("claude_code.")) {
        return Agent::Claude;
    }
    Agent::Other
}

impl Decoder {
    fn log(&mut self, record: Log, out: &mut Vec<Event<'static>>) {
        let name = event_name(&record).map(str::to_owned);
        if let Some(n) = &name
            && gemini_telemetry::family::event(n).is_some()
        {
            self.family.insert(record.service.to_string());
        }
        let seen = Seen {
            service: &record.service,
            name: name.as_deref(),
            body: record.body.as_str(),
            attributes: &record.attributes,
        };
        let agent = agent_of(&seen, &self.family);
        self.agent_seen |= agent != Agent::Other;
        match agent {
            Agent::GeminiCli => {
                // The outfile's records carry `hrTime` ([seconds, nanoseconds]); it stands in
                // when `event.timestamp` is missing.
                let mut outfile = serde_json::Map::new();
                if let Some(ns) = record.time_unix_nano {
                    outfile.insert(
                        "hrTime".to_owned(),
                        Value::from(vec![ns / 1_000_000_000, ns % 1_000_000_000]),
                    );
                }
                outfile.insert("body".to_owned(), record.body);
                outfile.insert("attributes".to_owned(), record.attributes);
                let sink = Self::gemini_out(&self.joiner, &mut self.scratch, out);
                self.gemini.record(&Value::Object(outfile), sink);
                self.hand_over();
            }
            Agent::Codex => {
                let attrs = &record.attributes;
                let session = attr_str(attrs, "conversation.id").unwrap_or("codex");
                let ts = time_of(record.time_unix_nano, attrs);
                self.codex
                    .record(name.as_deref().unwrap_or(""), attrs, session, ts, out);
            }
            Agent::Claude => {
                let attrs = &record.attributes;
                let session = attr_str(attrs, "session.id").unwrap_or("claude-code");
                let ts = time_of(record.time_unix_nano, attrs);
                let name = name.as_deref().unwrap_or("");
                let name = name.strip_prefix("claude_code.").unwrap_or(name);
                self.claude.record(name, attrs, session, ts, out);
            }
            Agent::Other
                if name.as_deref() == Some("gen_ai.client.inference.operation.details") =>
            {
                let attrs = &record.attributes;
                let ts = time_of(record.time_unix_nano, attrs);
                self.genai.inference(
                    &genai::Inference {
                        attrs,
                        span_id: record.span_id.as_deref(),
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

    fn span(&mut self, record: &Span, out: &mut Vec<Event<'static>>) {
        let seen = Seen {
            service: &record.service,
            name: None,
            body: None,
            attributes: &record.attributes,
        };
        match agent_of(&seen, &self.family) {
            // gemini-cli's and Claude Code's spans repeat what their log records say.
            Agent::GeminiCli | Agent::Claude => {}
            // Codex's spans are its internals (`run_turn`, `receiving`, ...); its log events
            // say what a turn needs.
            _ if record.service.starts_with("codex") => {}
            Agent::Codex | Agent::Other => {
                let attrs = &record.attributes;
                let op = attr_str(attrs, "gen_ai.operation.name").unwrap_or("");
                let start = ns_ms(record.start_time_unix_nano);
                let end = ns_ms(record.end_time_unix_nano).or(start);
                let status_error = record
                    .status
                    .as_ref()
                    .filter(|s| s.code == 2)
                    .map(|s| s.message.as_ref());
                if genai::is_inference(op) {
                    self.genai.inference(
                        &genai::Inference {
                            attrs,
                            span_id: record.span_id.as_deref(),
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
        match parse::<line::Read>(line) {
            Ok(Line::Log(record)) => self.log(record, out),
            Ok(Line::Span(record)) => self.span(&record, out),
            Err(e) => match parse::<Value>(line) {
                // Valid JSON under another `otlp` tag, or none: a type no decoder knows.
                Ok(v) if !matches!(v.get("otlp").and_then(Value::as_str), Some(LOG | SPAN)) => {
                    self.skips.unknown_types += 1;
                }
                // Not JSON, or a record whose fields break the contract.
                _ => return Err(e),
            },
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Event<'static>>) {
        let sink = Self::gemini_out(&self.joiner, &mut self.scratch, out);
        self.gemini.finish(sink);
        self.hand_over();
    }

    fn state(&self) -> Option<serde_json::Value> {
        super::state::state_of(self)
    }

    fn resume(&mut self, state: serde_json::Value) -> bool {
        let mut d = Decoder::default();
        if !super::state::resume_into(&mut d, state) {
            return false;
        }
        // Where its gemini-cli events go is this path's, not the checkpoint's.
        d.joiner = self.joiner.take();
        *self = d;
        true
    }

    /// Once it has read an agent's record ([`Decoder::agent_seen`]).
    fn records_executions(&self) -> bool {
        self.agent_seen
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
