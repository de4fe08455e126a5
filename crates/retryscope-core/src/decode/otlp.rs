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
//! same whichever way they came); records no decoder knows are counted as unknown types.

use serde_json::Value;

use super::gemini_telemetry;
use super::provider::{StreamDecoder, parse, utf8};
use super::{DecodeError, SkipCounts};
use crate::event::Event;

/// `otlp` of a log record line.
pub const LOG: &str = "log";
/// `otlp` of a span line.
pub const SPAN: &str = "span";

/// Decoder for one OTLP stream (the receiver keeps one stream per service and session).
#[derive(Default)]
pub struct Decoder {
    gemini: gemini_telemetry::Decoder,
    skips: SkipCounts,
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
    Other,
}

fn agent_of(record: &Value, name: Option<&str>) -> Agent {
    let service = record.get("service").and_then(Value::as_str).unwrap_or("");
    if service == "gemini-cli" || name.is_some_and(|n| n.starts_with("gemini_cli.")) {
        return Agent::GeminiCli;
    }
    Agent::Other
}

impl Decoder {
    fn log(&mut self, mut record: Value, out: &mut Vec<Event<'static>>) {
        let name = event_name(&record).map(str::to_owned);
        match agent_of(&record, name.as_deref()) {
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
                self.gemini.record(&record, out);
            }
            Agent::Other => self.skips.unknown_types += 1,
        }
    }

    fn span(&mut self, record: &Value, _out: &mut Vec<Event<'static>>) {
        match agent_of(record, None) {
            // gemini-cli's spans (`llm_call`, `tool_call`) repeat what its log records say;
            // its outfile decoder skips them too.
            Agent::GeminiCli => {}
            Agent::Other => self.skips.unknown_types += 1,
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
        self.gemini.finish(out);
    }

    fn skips(&self) -> SkipCounts {
        let mut s = self.skips;
        s.add(self.gemini.skips());
        s
    }
}
