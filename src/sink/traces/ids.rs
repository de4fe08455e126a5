//! Deterministic trace and span ids, and W3C `traceparent` parsing.
//!
//! Re-processing the same log must give the same trace, so ids are hashes of what identifies
//! a span in the report, never random:
//!
//! * trace id: the `traceparent`'s trace id when the turn carries a valid one, else the first
//!   16 bytes of `sha256(turn id)`;
//! * span id: the first 8 bytes of `sha256(turn id, role, attempt number, index)`, the fields
//!   separated by NUL so no two tuples share an input.
//!
//! An all-zero id is invalid in W3C trace context; a hash that comes out all zero (never in
//! practice) gets its last bit set.

use opentelemetry::trace::{SpanId, TraceId};
use sha2::{Digest, Sha256};

/// What a span stands for, as it goes into its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The turn's root span.
    Turn,
    /// One model call (its attempts' parent); its index is the call's.
    Call,
    /// One attempt.
    Attempt,
    /// One tool execution.
    Exec,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::Turn => "turn",
            Role::Call => "call",
            Role::Attempt => "attempt",
            Role::Exec => "exec",
        }
    }
}

/// The trace id of a turn that joins no existing trace.
pub fn trace_id_for_turn(turn_id: &str) -> TraceId {
    let digest = Sha256::digest(turn_id.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    if bytes == [0u8; 16] {
        bytes[15] = 1;
    }
    TraceId::from_bytes(bytes)
}

/// The span id of the `index`-th span of `role` in `attempt` of `turn_id`.
pub fn span_id(turn_id: &str, role: Role, attempt: u32, index: usize) -> SpanId {
    let mut h = Sha256::new();
    h.update(turn_id.as_bytes());
    h.update([0]);
    h.update(role.as_str().as_bytes());
    h.update([0]);
    h.update(attempt.to_string().as_bytes());
    h.update([0]);
    h.update(index.to_string().as_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    if bytes == [0u8; 8] {
        bytes[7] = 1;
    }
    SpanId::from_bytes(bytes)
}

/// The trace id and parent span id of a W3C `traceparent` header value.
///
/// Accepts `version-traceid-parentid-flags` with version `00`, and any later version but
/// `ff` (whose extra fields are ignored, as the W3C spec asks). Returns `None` for anything
/// malformed or for all-zero ids.
pub fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId)> {
    let mut parts = value.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let span = parts.next()?;
    let flags = parts.next()?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let lower = |s: &str| !s.bytes().any(|b| b.is_ascii_uppercase());
    if !(hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2)) {
        return None;
    }
    if ![version, trace, span, flags].into_iter().all(lower) {
        return None;
    }
    if version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    Some((trace_id, span_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        assert_eq!(trace_id_for_turn("t-1"), trace_id_for_turn("t-1"));
        assert_ne!(trace_id_for_turn("t-1"), trace_id_for_turn("t-2"));
        // sha256("t-1"), first 16 bytes.
        let digest = Sha256::digest(b"t-1");
        assert_eq!(
            trace_id_for_turn("t-1").to_bytes(),
            <[u8; 16]>::try_from(&digest[..16]).unwrap()
        );
        let a = span_id("t", Role::Attempt, 1, 0);
        assert_eq!(a, span_id("t", Role::Attempt, 1, 0));
        assert_ne!(a, span_id("t", Role::Attempt, 0, 1));
        assert_ne!(a, span_id("t", Role::Exec, 1, 0));
        assert_ne!(
            span_id("t", Role::Call, 0, 1),
            span_id("t", Role::Attempt, 0, 1)
        );
        assert_ne!(a, span_id("u", Role::Attempt, 1, 0));
        // The separator keeps ("t", 1, 10) and ("t", 11, 0) apart.
        assert_ne!(
            span_id("t", Role::Exec, 1, 10),
            span_id("t", Role::Exec, 11, 0)
        );
    }

    #[test]
    fn traceparent_parses_only_when_valid() {
        let (t, s) =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(t.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(s.to_string(), "00f067aa0ba902b7");
        // A future version may carry more fields.
        assert!(
            parse_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
                .is_some()
        );
        for bad in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad}");
        }
    }
}
