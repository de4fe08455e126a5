//! OTLP trace export of closed turns.
//!
//! Each [`TurnReport`](crate::report::TurnReport) becomes one trace (see [`spans`] for the
//! span model).
//!
//! These spans describe the *observed* agent (resource `service.name` = `retryscope` by
//! default). retryscope's own operational telemetry is not exported here; it goes through
//! `tracing` (logs) only.

pub mod ids;
pub mod spans;

pub use spans::{SpanOptions, span_count, turn_spans};
