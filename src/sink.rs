//! Sinks: where closed turns go besides the report.
//!
//! [`traces`] exports every closed turn as an OTLP trace (one root span per turn, one client
//! span per attempt, one span per tool execution, findings as span events).

pub mod traces;
