//! OTLP trace export of closed turns.
//!
//! Each [`TurnReport`](crate::report::TurnReport) becomes one trace (see [`spans`] for the
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

mod export;
pub mod ids;
pub mod spans;

pub(crate) use export::build_exporter;
pub use export::{Protocol, TraceExportConfig, TraceSink, TraceStats};
pub use spans::{SpanOptions, span_count, turn_spans};

/// What can go wrong setting up trace export.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// An `OTEL_EXPORTER_OTLP_*` variable has a value we cannot use.
    #[error("invalid {var}: {message}")]
    Env {
        /// The variable.
        var: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The configuration is unusable.
    #[error("invalid trace export config: {0}")]
    Config(String),
    /// The OTLP exporter could not be built.
    #[error("cannot build the OTLP exporter: {0}")]
    Build(#[from] opentelemetry_otlp::ExporterBuildError),
    /// [`TraceSink::start`] was called outside a tokio runtime.
    #[error("trace export needs a tokio runtime: {0}")]
    NoRuntime(#[from] tokio::runtime::TryCurrentError),
}
