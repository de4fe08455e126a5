//! OTLP/JSON request bodies (`content-type: application/json`) into the same records as the
//! protobuf path ([`super::record`]).
//!
//! Owns: the OTLP/JSON encoding rules as real exporters apply them. Field names are
//! lowerCamelCase (snake_case accepted too); trace and span ids are hex strings; 64-bit
//! integers come as strings (the spec) or numbers (OpenTelemetry JS, e.g. gemini-cli's
//! `"intValue": 26652`); enums are numbers (names accepted); an attribute value `{}` is empty.
//! Anything that is not an export request of the signal is a [`BadRequest`] naming the field.

use std::borrow::Cow;

use retryscope_core::decode::otlp::line::{Line, LogLine, SpanEvent, SpanLine, Status, nanos};
use serde_json::{Map, Value};

use super::record::{BadRequest, Record, push, session_of, stream_name};

fn field<'a>(o: &'a Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    o.get(camel).or_else(|| o.get(snake))
}

fn list<'a>(
    o: &'a Map<String, Value>,
    camel: &str,
    snake: &str,
) -> Result<&'a [Value], BadRequest> {
    match field(o, camel, snake) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(_) => Err(BadRequest(format!("`{camel}` must be an array"))),
    }
}

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>, BadRequest> {
    v.as_object()
        .ok_or_else(|| BadRequest(format!("{what} must be a JSON object")))
}

/// A 64-bit unsigned integer as string or number (0 when absent or unreadable).
fn u64_of(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

/// An OTLP/JSON `AnyValue` as plain JSON.
fn any(v: &Value) -> Value {
    let Some(o) = v.as_object() else {
        return Value::Null;
    };
    if let Some(s) = field(o, "stringValue", "string_value") {
        return s.clone();
    }
    if let Some(b) = field(o, "boolValue", "bool_value") {
        return b.clone();
    }
    if let Some(i) = field(o, "intValue", "int_value") {
        return match i {
            Value::String(s) => s.parse::<i64>().map_or(Value::Null, Value::from),
            Value::Number(_) => i.clone(),
            _ => Value::Null,
        };
    }
    if let Some(d) = field(o, "doubleValue", "double_value") {
        return match d {
            // "NaN", "Infinity" and numbers as strings.
            Value::String(s) => s
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::Null, Value::Number),
            Value::Number(n) => n
                .as_f64()
                .and_then(serde_json::Number::from_f64)
                .map_or(Value::Null, Value::Number),
            _ => Value::Null,
        };
    }
    if let Some(a) = field(o, "arrayValue", "array_value") {
        let values = a.get("values").and_then(Value::as_array);
        return Value::Array(
            values
                .map(|v| v.iter().map(any).collect())
                .unwrap_or_default(),
        );
    }
    if let Some(kv) = field(o, "kvlistValue", "kvlist_value") {
        let values = kv.get("values").and_then(Value::as_array);
        return Value::Object(values.map(|v| attrs(v)).unwrap_or_default());
    }
    if let Some(b) = field(o, "bytesValue", "bytes_value") {
        return b.clone();
    }
    Value::Null
}

fn attrs(kvs: &[Value]) -> Map<String, Value> {
    kvs.iter()
        .filter_map(|kv| {
            let key = kv.get("key")?.as_str()?;
            Some((key.to_owned(), kv.get("value").map_or(Value::Null, any)))
        })
        .collect()
}

fn attrs_of(o: &Map<String, Value>) -> Map<String, Value> {
    match o.get("attributes") {
        Some(Value::Array(a)) => attrs(a),
        _ => Map::new(),
    }
}

/// A hex id, lowercased; an empty, all-zero or non-hex id is left out.
fn hex_id(v: Option<&Value>) -> Option<Cow<'static, str>> {
    let s = v.and_then(Value::as_str)?;
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()) && s.bytes().any(|b| b != b'0'))
        .then(|| Cow::Owned(s.to_ascii_lowercase()))
}

fn enum_num(v: Option<&Value>, names: &[&str]) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => names.iter().position(|n| n == s).unwrap_or(0) as i64,
        _ => 0,
    }
}

fn service_of(resource: Option<&Value>) -> String {
    resource
        .and_then(Value::as_object)
        .map(attrs_of)
        .and_then(|a| {
            a.get("service.name")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default()
}

fn parse(body: &[u8]) -> Result<Map<String, Value>, BadRequest> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(BadRequest("the body must be a JSON object".to_owned())),
        Err(e) => Err(BadRequest(format!(
            "the body is not valid JSON ({:?} error at line {} column {})",
            e.classify(),
            e.line(),
            e.column()
        ))),
    }
}

/// The log records of an OTLP/JSON logs request, in order.
pub fn logs(body: &[u8], out: &mut Vec<Record>) -> Result<(), BadRequest> {
    let top = parse(body)?;
    let mut buf = Vec::new();
    for rl in list(&top, "resourceLogs", "resource_logs")? {
        let rl = object(rl, "`resourceLogs[]`")?;
        let service = service_of(rl.get("resource"));
        for sl in list(rl, "scopeLogs", "scope_logs")? {
            let sl = object(sl, "`scopeLogs[]`")?;
            let scope = sl
                .get("scope")
                .and_then(|s| s.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            for r in list(sl, "logRecords", "log_records")? {
                let r = object(r, "`logRecords[]`")?;
                let a = attrs_of(r);
                let mut t = u64_of(field(r, "timeUnixNano", "time_unix_nano"));
                if t == 0 {
                    t = u64_of(field(r, "observedTimeUnixNano", "observed_time_unix_nano"));
                }
                let stream = stream_name(&service, &session_of(&a));
                let line: Line<'_, Map<String, Value>, Value> = Line::Log(LogLine {
                    service: service.as_str().into(),
                    scope: scope.into(),
                    time_unix_nano: nanos(t),
                    severity: field(r, "severityText", "severity_text")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .map(Cow::Borrowed),
                    body: r.get("body").map_or(Value::Null, any),
                    attributes: a,
                    trace_id: hex_id(field(r, "traceId", "trace_id")),
                    span_id: hex_id(field(r, "spanId", "span_id")),
                });
                push(out, &mut buf, stream, &line);
            }
        }
    }
    Ok(())
}

/// The spans of an OTLP/JSON traces request, in order.
pub fn spans(body: &[u8], out: &mut Vec<Record>) -> Result<(), BadRequest> {
    const KINDS: [&str; 6] = [
        "SPAN_KIND_UNSPECIFIED",
        "SPAN_KIND_INTERNAL",
        "SPAN_KIND_SERVER",
        "SPAN_KIND_CLIENT",
        "SPAN_KIND_PRODUCER",
        "SPAN_KIND_CONSUMER",
    ];
    const CODES: [&str; 3] = ["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"];
    let top = parse(body)?;
    let mut buf = Vec::new();
    for rs in list(&top, "resourceSpans", "resource_spans")? {
        let rs = object(rs, "`resourceSpans[]`")?;
        let service = service_of(rs.get("resource"));
        for ss in list(rs, "scopeSpans", "scope_spans")? {
            let ss = object(ss, "`scopeSpans[]`")?;
            let scope = ss
                .get("scope")
                .and_then(|s| s.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("");
            for s in list(ss, "spans", "spans")? {
                let s = object(s, "`spans[]`")?;
                let a = attrs_of(s);
                let stream = stream_name(&service, &session_of(&a));
                let events = list(s, "events", "events")?
                    .iter()
                    .filter_map(Value::as_object)
                    .map(|e| SpanEvent {
                        name: e.get("name").and_then(Value::as_str).unwrap_or("").into(),
                        time_unix_nano: nanos(u64_of(field(e, "timeUnixNano", "time_unix_nano"))),
                        attributes: attrs_of(e),
                    })
                    .collect();
                let line: Line<'_, Map<String, Value>, Value> = Line::Span(SpanLine {
                    service: service.as_str().into(),
                    scope: scope.into(),
                    name: s.get("name").and_then(Value::as_str).unwrap_or("").into(),
                    kind: enum_num(s.get("kind"), &KINDS),
                    trace_id: hex_id(field(s, "traceId", "trace_id")),
                    span_id: hex_id(field(s, "spanId", "span_id")),
                    parent_span_id: hex_id(field(s, "parentSpanId", "parent_span_id")),
                    start_time_unix_nano: nanos(u64_of(field(
                        s,
                        "startTimeUnixNano",
                        "start_time_unix_nano",
                    ))),
                    end_time_unix_nano: nanos(u64_of(field(
                        s,
                        "endTimeUnixNano",
                        "end_time_unix_nano",
                    ))),
                    status: s.get("status").and_then(Value::as_object).map(|st| Status {
                        code: enum_num(st.get("code"), &CODES),
                        message: st
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .into(),
                    }),
                    attributes: a,
                    events,
                });
                push(out, &mut buf, stream, &line);
            }
        }
    }
    Ok(())
}

/// Data points of an OTLP/JSON metrics request (acknowledged and counted, not decoded).
pub fn metric_points(body: &[u8]) -> Result<u64, BadRequest> {
    let top = parse(body)?;
    let mut n = 0u64;
    for rm in list(&top, "resourceMetrics", "resource_metrics")? {
        let rm = object(rm, "`resourceMetrics[]`")?;
        for sm in list(rm, "scopeMetrics", "scope_metrics")? {
            let sm = object(sm, "`scopeMetrics[]`")?;
            for m in list(sm, "metrics", "metrics")? {
                let Some(m) = m.as_object() else { continue };
                for kind in [
                    "gauge",
                    "sum",
                    "histogram",
                    "exponentialHistogram",
                    "summary",
                ] {
                    if let Some(points) = m
                        .get(kind)
                        .and_then(|d| field(d.as_object()?, "dataPoints", "data_points"))
                        .and_then(Value::as_array)
                    {
                        n += points.len() as u64;
                    }
                }
            }
        }
    }
    Ok(n)
}
