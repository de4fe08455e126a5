//! OTLP export requests (protobuf messages or OTLP/JSON documents) into the plain per-record
//! JSON lines the core's `otlp` decoder reads (the line shape is documented there), each with
//! the stream it belongs to: one stream per (`service.name`, session), so one session's
//! records stay in order on one stream whichever request carried them.
//!
//! Owns: the OTLP/JSON mapping (hex ids, `intValue` as string or number, enum values as numbers
//! or names, empty values), the session key, and the per-record size bound. Metrics are only
//! counted (data points), never turned into lines.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
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

fn any_to_json(v: Option<&AnyValue>) -> Value {
    match v.and_then(|v| v.value.as_ref()) {
        None => Value::Null,
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => {
            serde_json::Number::from_f64(*d).map_or(Value::Null, Value::Number)
        }
        Some(any_value::Value::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(|v| any_to_json(Some(v))).collect())
        }
        Some(any_value::Value::KvlistValue(kv)) => Value::Object(attrs_to_json(&kv.values)),
        Some(any_value::Value::BytesValue(b)) => Value::String(base64(b)),
        Some(any_value::Value::StringValueStrindex(_)) => Value::Null,
    }
}

fn attrs_to_json(kvs: &[KeyValue]) -> serde_json::Map<String, Value> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), any_to_json(kv.value.as_ref())))
        .collect()
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

fn push(out: &mut Vec<Record>, service: &str, session: &str, line: &Value) {
    if let Ok(mut line) = serde_json::to_vec(line) {
        // Exactly the line's size: records wait in the queue, charged by their size.
        line.shrink_to_fit();
        out.push(Record {
            stream: stream_name(service, session),
            line,
        });
    }
}

fn ns(n: u64) -> Value {
    if n == 0 { Value::Null } else { Value::from(n) }
}

fn put_id(obj: &mut serde_json::Map<String, Value>, key: &str, id: &[u8]) {
    if !id.is_empty() && id.iter().any(|b| *b != 0) {
        obj.insert(key.to_owned(), Value::String(hex(id)));
    }
}

/// A JSON line written straight from protobuf values (no intermediate map: this is the hot
/// path of the receiver).
struct Line(Vec<u8>);

impl Line {
    fn raw(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }

    fn str(&mut self, s: &str) {
        // Escaping only; writing to a Vec cannot fail.
        let _ = serde_json::to_writer(&mut self.0, s);
    }

    fn any(&mut self, v: Option<&AnyValue>) {
        match v.and_then(|v| v.value.as_ref()) {
            None | Some(any_value::Value::StringValueStrindex(_)) => self.raw(b"null"),
            Some(any_value::Value::StringValue(s)) => self.str(s),
            Some(any_value::Value::BoolValue(b)) => self.raw(if *b { b"true" } else { b"false" }),
            Some(any_value::Value::IntValue(i)) => self.raw(i.to_string().as_bytes()),
            Some(any_value::Value::DoubleValue(d)) => {
                let _ = serde_json::to_writer(&mut self.0, d);
            }
            Some(any_value::Value::ArrayValue(a)) => {
                self.raw(b"[");
                for (i, v) in a.values.iter().enumerate() {
                    if i > 0 {
                        self.raw(b",");
                    }
                    self.any(Some(v));
                }
                self.raw(b"]");
            }
            Some(any_value::Value::KvlistValue(kv)) => self.attrs(&kv.values),
            Some(any_value::Value::BytesValue(b)) => self.str(&base64(b)),
        }
    }

    /// Key-value pairs as an object (a repeated key is written twice; readers keep the last,
    /// as the OTLP/JSON mapping does).
    fn attrs(&mut self, kvs: &[KeyValue]) {
        self.raw(b"{");
        for (i, kv) in kvs.iter().enumerate() {
            if i > 0 {
                self.raw(b",");
            }
            self.str(&kv.key);
            self.raw(b":");
            self.any(kv.value.as_ref());
        }
        self.raw(b"}");
    }

    fn id(&mut self, key: &[u8], id: &[u8]) {
        if !id.is_empty() && id.iter().any(|b| *b != 0) {
            self.raw(key);
            self.raw(b"\"");
            self.raw(hex(id).as_bytes());
            self.raw(b"\"");
        }
    }
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

/// The log records of a protobuf request, in order.
pub fn logs_from_proto(req: &ExportLogsServiceRequest, out: &mut Vec<Record>) {
    for rl in &req.resource_logs {
        let rattrs = rl
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let service = attr_str(rattrs, "service.name").unwrap_or("");
        let mut head = Line(Vec::new());
        // One buffer reused for every record; each record keeps an exact-size copy.
        let mut w = Line(Vec::new());
        head.raw(b"{\"otlp\":\"log\",\"service\":");
        head.str(service);
        for sl in &rl.scope_logs {
            let scope = sl.scope.as_ref().map(|s| s.name.as_str()).unwrap_or("");
            for r in &sl.log_records {
                w.0.clear();
                w.raw(&head.0);
                w.raw(b",\"scope\":");
                w.str(scope);
                let t = if r.time_unix_nano != 0 {
                    r.time_unix_nano
                } else {
                    r.observed_time_unix_nano
                };
                w.raw(b",\"time_unix_nano\":");
                if t == 0 {
                    w.raw(b"null");
                } else {
                    w.raw(t.to_string().as_bytes());
                }
                if !r.severity_text.is_empty() {
                    w.raw(b",\"severity\":");
                    w.str(&r.severity_text);
                }
                w.raw(b",\"body\":");
                w.any(r.body.as_ref());
                w.raw(b",\"attributes\":");
                w.attrs(&r.attributes);
                w.id(b",\"trace_id\":", &r.trace_id);
                w.id(b",\"span_id\":", &r.span_id);
                w.raw(b"}");
                out.push(Record {
                    stream: stream_name(service, session_of_kvs(&r.attributes)),
                    line: w.0.as_slice().to_vec(),
                });
            }
        }
    }
}

/// The spans of a protobuf request, in order.
pub fn spans_from_proto(req: &ExportTraceServiceRequest, out: &mut Vec<Record>) {
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
                let mut o = serde_json::Map::new();
                o.insert("otlp".into(), "span".into());
                o.insert("service".into(), service.into());
                o.insert("scope".into(), scope.into());
                o.insert("name".into(), s.name.clone().into());
                o.insert("kind".into(), s.kind.into());
                put_id(&mut o, "trace_id", &s.trace_id);
                put_id(&mut o, "span_id", &s.span_id);
                put_id(&mut o, "parent_span_id", &s.parent_span_id);
                o.insert("start_time_unix_nano".into(), ns(s.start_time_unix_nano));
                o.insert("end_time_unix_nano".into(), ns(s.end_time_unix_nano));
                if let Some(st) = &s.status {
                    o.insert(
                        "status".into(),
                        serde_json::json!({"code": st.code, "message": st.message}),
                    );
                }
                let attrs = attrs_to_json(&s.attributes);
                let session = session_of(&attrs);
                o.insert("attributes".into(), Value::Object(attrs));
                let events: Vec<Value> = s
                    .events
                    .iter()
                    .map(|e| {
                        serde_json::json!({
                            "name": e.name,
                            "time_unix_nano": ns(e.time_unix_nano),
                            "attributes": attrs_to_json(&e.attributes),
                        })
                    })
                    .collect();
                if !events.is_empty() {
                    o.insert("events".into(), Value::Array(events));
                }
                push(out, service, &session, &Value::Object(o));
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
