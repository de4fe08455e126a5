//! OTLP trace export of closed turns.
//!
//! Each [`TurnReport`](retryscope_core::report::TurnReport) becomes one trace (see [`spans`] for the
//! span model) that [`TraceSink`] sends to an OTLP endpoint over gRPC or HTTP/protobuf.
//!
//! Ingestion never waits for the backend: [`TraceSink::submit`] builds the spans and hands
//! them to a bounded queue without blocking; a worker task batches and exports them. When the
//! queue is full the turn is dropped and counted in [`TraceStats`]. Export failures are
//! counted there too and logged at most once per 10 s.
//!
//! These spans describe the *observed* agent (resource `service.name` = `retryscope` by
//! default). retryscope's own operational spans are not exported here: they go through
//! `tracing` and [`crate::telemetry`], under their own service (`retryscope-self`).

pub mod calls;
mod export;
pub mod ids;
pub mod spans;

pub use crate::otlp_client::{Protocol, TraceError, TraceExportConfig};
pub use export::{TraceSink, TraceStats};
pub use spans::{SpanOptions, span_count, turn_spans};
