//! Sinks: where correlated results go (findings as JSON lines, Prometheus metrics, OTLP traces).

pub mod findings;
