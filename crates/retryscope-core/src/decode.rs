//! Decoding: bytes of one line (or record) into normalized [`Event`](crate::event::Event)s.
//!
//! `native` reads retryscope's own JSON-lines format without copying strings. Provider formats
//! (raw SSE bodies, chunk files, envelopes) plug in through `StreamDecoder`. Every decoder
//! reports bad input as a [`DecodeError`] with a bounded [`BadLineReason`], so callers can count
//! it by reason and go on.

pub(crate) mod acp;
pub(crate) mod anthropic;
pub(crate) mod claude_code;
pub(crate) mod codex_exec;
pub mod detect;
pub(crate) mod envelope;
pub(crate) mod gemini;
pub(crate) mod gemini_cli;
pub mod gemini_join;
pub(crate) mod gemini_stream_json;
pub(crate) mod gemini_telemetry;
pub(crate) mod json_objects;
pub mod native;
pub(crate) mod openai_chat;
pub(crate) mod openai_responses;
pub mod otlp;
pub(crate) mod provider;
pub(crate) mod sse;
pub(crate) mod state;

pub use detect::detect;
pub use envelope::EnvelopeDecoder;
pub use provider::{Format, UnknownFormat};
pub(crate) use provider::{StreamDecoder, stream_decoder};

use std::fmt;

/// Why a line could not be used. A closed set: it becomes a metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BadLineReason {
    /// Not valid UTF-8.
    InvalidUtf8,
    /// Not valid JSON (or not a JSON object).
    InvalidJson,
    /// A required field is missing.
    MissingField,
    /// A field has the wrong type or an impossible value.
    InvalidValue,
    /// Longer than the configured maximum line length.
    TooLong,
    /// A line of a stream refused as a lookalike of a provider format
    /// ([`detect::Lookalike`]): not decoded at all.
    UnknownFormat,
}

impl BadLineReason {
    /// Every reason, for pre-registering metric series.
    pub const ALL: [BadLineReason; 6] = [
        BadLineReason::InvalidUtf8,
        BadLineReason::InvalidJson,
        BadLineReason::MissingField,
        BadLineReason::InvalidValue,
        BadLineReason::TooLong,
        BadLineReason::UnknownFormat,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            BadLineReason::InvalidUtf8 => "invalid_utf8",
            BadLineReason::InvalidJson => "invalid_json",
            BadLineReason::MissingField => "missing_field",
            BadLineReason::InvalidValue => "invalid_value",
            BadLineReason::TooLong => "too_long",
            BadLineReason::UnknownFormat => "unknown_format",
        }
    }
}

impl fmt::Display for BadLineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A line that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct DecodeError {
    /// The bounded reason (metric label).
    pub reason: BadLineReason,
    /// A human-readable explanation (never contains the line's text).
    pub message: String,
}

impl DecodeError {
    /// Build an error.
    pub(crate) fn new(reason: BadLineReason, message: impl Into<String>) -> Self {
        DecodeError {
            reason,
            message: message.into(),
        }
    }
}

/// A serde_json error as a [`DecodeError`] whose message never echoes the line: string and
/// other values quoted from the input (`invalid type: string "…"`, ``unknown variant `…` ``,
/// ``unknown field `…` ``) become their length, so a bad-line warning carries the field's
/// position and what was expected, not the content.
pub(crate) fn json_error(e: &serde_json::Error) -> DecodeError {
    let reason = match e.classify() {
        serde_json::error::Category::Data => BadLineReason::InvalidValue,
        _ => BadLineReason::InvalidJson,
    };
    let full = e.to_string();
    let msg = match full.find(" at line ") {
        Some(i) => &full[..i],
        None => &full,
    };
    // What follows ", expected" is serde's description of our own type: kept as it is.
    let (head, tail) = match msg.find(", expected") {
        Some(i) => msg.split_at(i),
        None => (msg, ""),
    };
    let head = if head.starts_with("missing field") {
        head.to_owned()
    } else {
        redact_quoted(head)
    };
    DecodeError::new(reason, format!("{head}{tail} at column {}", e.column()))
}

/// Replace the text between `"` or `` ` `` pairs with its length in characters.
fn redact_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find(['"', '`']) {
        let q = rest.as_bytes()[open] as char;
        out.push_str(&rest[..=open]);
        let after = &rest[open + 1..];
        match after.rfind(q) {
            Some(close) => {
                out.push_str(&format!("<{} chars>", after[..close].chars().count()));
                out.push(q);
                rest = &after[close + 1..];
            }
            None => {
                out.push_str("<…>");
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Counters a decoder keeps about forward-compatible input it skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SkipCounts {
    /// Events of a type this version does not know.
    pub unknown_types: u64,
    /// Fields this version does not know (on known event types).
    pub unknown_fields: u64,
    /// Tool calls a provider stream left unfinished (e.g. an Anthropic `tool_use` block with no
    /// `content_block_stop`): not executable, so never emitted as a `ToolCall`.
    #[serde(default)]
    pub incomplete_tool_calls: u64,
}

impl SkipCounts {
    /// Add another set of counts.
    pub(crate) fn add(&mut self, other: SkipCounts) {
        self.unknown_types += other.unknown_types;
        self.unknown_fields += other.unknown_fields;
        self.incomplete_tool_calls += other.incomplete_tool_calls;
    }
}
