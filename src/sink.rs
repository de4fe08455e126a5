//! Sinks: where correlated outputs go once the correlator has produced them.
//!
//! Each sink consumes [`retryscope_core::correlate::Output`]s (live retries and findings, and closed-turn
//! reports) plus the collector's own health counters, and turns them into something an
//! operator can read: [`metrics`] keeps Prometheus series with bounded labels and a
//! checkpointable state; [`findings`] writes findings as JSON lines; [`traces`] exports every
//! closed turn as an OTLP trace (an agent span per turn, a `chat` span per model call covering
//! its retries, a span per attempt under it, a span per tool execution, findings as span
//! events).

pub mod findings;
pub mod live_page;
pub mod live_view;
pub mod metrics;
pub mod traces;
