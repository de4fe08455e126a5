//! The OTLP line contract: the one JSON object per record that the receiver writes (from
//! protobuf or OTLP/JSON, to the queue, the spool and NATS) and the OTLP decoder reads.
//!
//! Owns: the line's field names, their order, which fields may be left out, and their types.
//! Both writers and the reader go through [`Line`], so the contract is written once. The
//! attribute and body types are parameters: the reader uses plain JSON values ([`Read`]); the
//! protobuf writer serialises borrowed protobuf values straight into the line, with no
//! intermediate tree (the receiver's hot path).
//!
//! The text form stays the carrier between the receiver and the decoder (queue, spool, NATS):
//! it is the most compact form of a record (a decoded tree of the same record takes several
//! times its bytes), it is what the spool must write anyway, and the queue charges it exactly.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One record: a log record or a span, tagged by `otlp` (`"log"` or `"span"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "otlp", rename_all = "lowercase")]
#[serde(bound(
    serialize = "A: Serialize, V: Serialize",
    deserialize = "A: Deserialize<'de> + Default, V: Deserialize<'de> + Default"
))]
pub enum Line<'a, A, V> {
    /// A log record.
    Log(LogLine<'a, A, V>),
    /// A span.
    Span(SpanLine<'a, A>),
}

/// The line as the decoder reads it: attributes and body as plain JSON.
pub type Read = Line<'static, Value, Value>;

/// A log record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "A: Serialize, V: Serialize",
    deserialize = "A: Deserialize<'de> + Default, V: Deserialize<'de> + Default"
))]
pub struct LogLine<'a, A, V> {
    /// The resource's `service.name` (empty when it has none).
    #[serde(default)]
    pub service: Cow<'a, str>,
    /// The instrumentation scope's name.
    #[serde(default)]
    pub scope: Cow<'a, str>,
    /// `timeUnixNano`, else `observedTimeUnixNano`; `null` when neither is set.
    #[serde(default)]
    pub time_unix_nano: Option<u64>,
    /// `severityText`, left out when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<Cow<'a, str>>,
    /// The body (`null` when empty).
    #[serde(default)]
    pub body: V,
    /// The record's attributes, an object (a repeated key is written twice; readers keep the
    /// last, as the OTLP/JSON mapping does).
    #[serde(default)]
    pub attributes: A,
    /// Lowercase hex; left out when empty or all zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<Cow<'a, str>>,
    /// Lowercase hex; left out when empty or all zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<Cow<'a, str>>,
}

/// A span.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "A: Serialize",
    deserialize = "A: Deserialize<'de> + Default"
))]
pub struct SpanLine<'a, A> {
    /// The resource's `service.name`.
    #[serde(default)]
    pub service: Cow<'a, str>,
    /// The instrumentation scope's name.
    #[serde(default)]
    pub scope: Cow<'a, str>,
    /// The span's name.
    #[serde(default)]
    pub name: Cow<'a, str>,
    /// `SpanKind` as its number.
    #[serde(default)]
    pub kind: i64,
    /// Lowercase hex; left out when empty or all zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<Cow<'a, str>>,
    /// Lowercase hex; left out when empty or all zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<Cow<'a, str>>,
    /// Lowercase hex; left out when empty or all zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<Cow<'a, str>>,
    /// `null` when unset.
    #[serde(default)]
    pub start_time_unix_nano: Option<u64>,
    /// `null` when unset.
    #[serde(default)]
    pub end_time_unix_nano: Option<u64>,
    /// Left out when the span has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status<'a>>,
    /// The span's attributes, an object.
    #[serde(default)]
    pub attributes: A,
    /// The span's events, left out when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<SpanEvent<'a, A>>,
}

/// A span's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status<'a> {
    /// `StatusCode` as its number (2 is an error).
    #[serde(default)]
    pub code: i64,
    /// The status message.
    #[serde(default)]
    pub message: Cow<'a, str>,
}

/// An event of a span (`exception`, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "A: Serialize",
    deserialize = "A: Deserialize<'de> + Default"
))]
pub struct SpanEvent<'a, A> {
    /// The event's name.
    #[serde(default)]
    pub name: Cow<'a, str>,
    /// `null` when unset.
    #[serde(default)]
    pub time_unix_nano: Option<u64>,
    /// The event's attributes, an object.
    #[serde(default)]
    pub attributes: A,
}

/// `0` (unset in OTLP) as `None`.
pub fn nanos(n: u64) -> Option<u64> {
    (n != 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_it_was_written() {
        let line: Read = Line::Log(LogLine {
            service: "svc".into(),
            scope: "sc".into(),
            time_unix_nano: Some(5),
            severity: None,
            body: Value::from("claude_code.api_request"),
            attributes: serde_json::json!({"session.id": "s", "n": 1}),
            trace_id: Some("0a".into()),
            span_id: None,
        });
        let text = serde_json::to_string(&line).expect("serialises");
        assert_eq!(
            text,
            r#"{"otlp":"log","service":"svc","scope":"sc","time_unix_nano":5,"body":"claude_code.api_request","attributes":{"n":1,"session.id":"s"},"trace_id":"0a"}"#
        );
        let back: Read = serde_json::from_str(&text).expect("reads");
        assert_eq!(back, line);
    }

    #[test]
    fn missing_fields_take_their_defaults_and_a_foreign_tag_is_an_error() {
        let back: Read = serde_json::from_str(r#"{"otlp":"span","name":"chat"}"#).expect("reads");
        let Line::Span(s) = back else {
            panic!("a span")
        };
        assert_eq!(s.name, "chat");
        assert_eq!(s.attributes, Value::Null);
        assert!(s.events.is_empty() && s.status.is_none());
        assert!(serde_json::from_str::<Read>(r#"{"otlp":"metric"}"#).is_err());
        assert!(serde_json::from_str::<Read>(r#"{"service":"x"}"#).is_err());
    }
}
