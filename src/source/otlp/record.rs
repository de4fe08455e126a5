//! OTLP export requests (protobuf messages or OTLP/JSON documents) into the plain per-record
//! JSON lines the core's `otlp` decoder reads (the typed line, `decode::otlp::line`), each with
//! the stream it belongs to: one stream per (`service.name`, session), so one session's
//! records stay in order on one stream whichever request carried them.
//!
//! Owns: the OTLP/JSON mapping (hex ids, `intValue` as string or number, enum values as numbers
//! or names, empty values), the session key, and the per-record size bound. Metrics are only
//! counted (data points), never turned into lines.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use std::borrow::Cow;

use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use retryscope_core::decode::otlp::line::{Line, LogLine, SpanEvent, SpanLine, Status, nanos};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// One record for the engine: its stream's name and its line (no newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `otlp:<service.name>/<session id>` (tabs and newlines replaced).
    pub stream: String,
    /// The JSON line.
    pub line: Vec<u8>,
}

/// A body that is not an OTLP export request.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

/// Attributes that name a session, in order of preference.
/// (`thread.id` is not one: OpenTelemetry's `thread.id` is an OS thread, and Codex sends both
/// that and its own thread id under the same key.)
const SESSION_KEYS: [&str; 3] = ["session.id", "gen_ai.conversation.id", "conversation.id"];

/// Longest service or session name kept in a stream name.
const MAX_NAME: usize = 200;

fn clean(name: &str) -> String {
    name.chars()
        .take(MAX_NAME)
        .map(|c| if c.is_control() { '_' } else { c })
        .collect()
}

pub(super) fn stream_name(service: &str, session: &str) -> String {
    format!("otlp:{}/{}", clean(service), clean(session))
}

fn hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(D[usize::from(b >> 4)] as char);
        s.push(D[usize::from(b & 15)] as char);
    }
    s
}

fn base64(bytes: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                s.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// protobuf

/// A protobuf `AnyValue`, serialised as plain JSON straight from the message.
struct Any<'a>(Option<&'a AnyValue>);

impl Serialize for Any<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.and_then(|v| v.value.as_ref()) {
            None | Some(any_value::Value::StringValueStrindex(_)) => s.serialize_unit(),
            Some(any_value::Value::StringValue(v)) => s.serialize_str(v),
            Some(any_value::Value::BoolValue(b)) => s.serialize_bool(*b),
            Some(any_value::Value::IntValue(i)) => s.serialize_i64(*i),
            // JSON has no NaN or infinity: `null`, as the OTLP/JSON mapping reads them.
            Some(any_value::Value::DoubleValue(d)) if d.is_finite() => s.serialize_f64(*d),
            Some(any_value::Value::DoubleValue(_)) => s.serialize_unit(),
            Some(any_value::Value::ArrayValue(a)) => {
                let mut seq = s.serialize_seq(Some(a.values.len()))?;
                for v in &a.values {
                    seq.serialize_element(&Any(Some(v)))?;
                }
                seq.end()
            }
            Some(any_value::Value::KvlistValue(kv)) => Attrs(&kv.values).serialize(s),
            Some(any_value::Value::BytesValue(b)) => s.serialize_str(&base64(b)),
        }
    }
}

/// Protobuf key-value pairs as an object (a repeated key is written twice; readers keep the
/// last, as the OTLP/JSON mapping does).
struct Attrs<'a>(&'a [KeyValue]);

impl Serialize for Attrs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for kv in self.0 {
            map.serialize_entry(&kv.key, &Any(kv.value.as_ref()))?;
        }
        map.end()
    }
}

fn attr_str<'a>(kvs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    kvs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
            _ => None,
        }
    })
}

/// The session a record belongs to, from its attributes (as plain JSON: with a key given
/// twice, the last value counts, in both mappings).
pub(super) fn session_of(attrs: &serde_json::Map<String, Value>) -> String {
    SESSION_KEYS
        .iter()
        .find_map(|k| attrs.get(*k).and_then(Value::as_str))
        .unwrap_or("")
        .to_owned()
}

/// A protobuf id as lowercase hex; an empty or all-zero id is left out.
fn id(bytes: &[u8]) -> Option<Cow<'static, str>> {
    bytes
        .iter()
        .any(|b| *b != 0)
        .then(|| Cow::Owned(hex(bytes)))
}

/// The session of protobuf attributes, with the same rule as [`session_of`] (a repeated key's
/// last value counts).
fn session_of_kvs(kvs: &[KeyValue]) -> &str {
    for key in SESSION_KEYS {
        if let Some(kv) = kvs.iter().rev().find(|kv| kv.key == key)
            && let Some(any_value::Value::StringValue(s)) =
                kv.value.as_ref().and_then(|v| v.value.as_ref())
        {
            return s;
        }
    }
    ""
}

/// `line` written into `buf` (reused across records) and kept as an exact-size copy: records
/// wait in the queue, charged by their size.
pub(super) fn push<A: Serialize, V: Serialize>(
    out: &mut Vec<Record>,
    buf: &mut Vec<u8>,
    stream: String,
    line: &Line<'_, A, V>,
) {
    buf.clear();
    // Writing to a Vec fails only on a value JSON cannot hold; such a record has no line.
    if serde_json::to_writer(&mut *buf, line).is_ok() {
        out.push(Record {
            stream,
            line: buf.as_slice().to_vec(),
        });
    }
}

/// The log records of a protobuf request, in order.
pub fn logs_from_proto(req: &ExportLogsServiceRequest, out: &mut Vec<Record>) {
    let mut buf = Vec::new();
    for rl in &req.resource_logs {
        let rattrs = rl
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let service = attr_str(rattrs, "service.name").unwrap_or("");
        for sl in &rl.scope_logs {
            let scope = sl.scope.as_ref().map(|s| s.name.as_str()).unwrap_or("");
            for r in &sl.log_records {
                let t = if r.time_unix_nano != 0 {
                    r.time_unix_nano
                } else {
                    r.observed_time_unix_nano
                };
                let line = Line::Log(LogLine {
                    service: service.into(),
                    scope: scope.into(),
                    time_unix_nano: nanos(t),
                    severity: (!r.severity_text.is_empty())
                        .then_some(Cow::Borrowed(r.severity_text.as_str())),
                    body: Any(r.body.as_ref()),
                    attributes: Attrs(&r.attributes),
                    trace_id: id(&r.trace_id),
                    span_id: id(&r.span_id),
                });
                let stream = stream_name(service, session_of_kvs(&r.attributes));
                push(out, &mut buf, stream, &line);
            }
        }
    }
}

/// The spans of a protobuf request, in order.
pub fn spans_from_proto(req: &ExportTraceServiceRequest, out: &mut Vec<Record>) {
    let mut buf = Vec::new();
    for rs in &req.resource_spans {
        let rattrs = rs
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let service = attr_str(rattrs, "service.name").unwrap_or("");
        for ss in &rs.scope_spans {
            let scope = ss.scope.as_ref().map(|s| s.name.as_str()).unwrap_or("");
            for s in &ss.spans {
                let line: Line<'_, Attrs<'_>, Any<'_>> = Line::Span(SpanLine {
                    service: service.into(),
                    scope: scope.into(),
                    name: s.name.as_str().into(),
                    kind: i64::from(s.kind),
                    trace_id: id(&s.trace_id),
                    span_id: id(&s.span_id),
                    parent_span_id: id(&s.parent_span_id),
                    start_time_unix_nano: nanos(s.start_time_unix_nano),
                    end_time_unix_nano: nanos(s.end_time_unix_nano),
                    status: s.status.as_ref().map(|st| Status {
                        code: i64::from(st.code),
                        message: st.message.as_str().into(),
                    }),
                    attributes: Attrs(&s.attributes),
                    events: s
                        .events
                        .iter()
                        .map(|e| SpanEvent {
                            name: e.name.as_str().into(),
                            time_unix_nano: nanos(e.time_unix_nano),
                            attributes: Attrs(&e.attributes),
                        })
                        .collect(),
                });
                let stream = stream_name(service, session_of_kvs(&s.attributes));
                push(out, &mut buf, stream, &line);
            }
        }
    }
}

/// Data points in a protobuf metrics request (acknowledged and counted, not decoded).
pub fn metric_points_proto(req: &ExportMetricsServiceRequest) -> u64 {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let mut n = 0u64;
    for rm in &req.resource_metrics {
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                n += match &m.data {
                    Some(Data::Gauge(g)) => g.data_points.len(),
                    Some(Data::Sum(s)) => s.data_points.len(),
                    Some(Data::Histogram(h)) => h.data_points.len(),
                    Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
                    Some(Data::Summary(s)) => s.data_points.len(),
                    None => 0,
                } as u64;
            }
        }
    }
    n
}

#[cfg(test)]
#[path = "record/tests.rs"]
mod tests;
