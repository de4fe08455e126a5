//! retryscope: observability and cost tracking for LLM agent clients that stream model turns
//! and retry them mid-stream.
//!
//! Data flows one way: sources (bytes and positions) → [`decode`] (formats to normalized
//! [`event::Event`]s) → [`correlate`] (a pure state machine: events to turns, attempts,
//! findings and usage) → sinks (metrics, traces, findings, reports).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The core crate's modules, under the paths the rest of this crate has always used.
pub use retryscope_core::{
    bounds, correlate, cost, coverage, decode, effect, event, fasthash, finding, ingest, input,
    pipeline, report, rfc3339, rules, sanitize, turn_route,
};

pub mod check;
pub mod config;
pub mod demo;
pub mod internal_events;
pub mod listener;
pub mod nats;
pub mod otlp_client;
pub mod proxy;
pub mod run;
pub mod server;
pub mod sink;
pub mod source;
pub mod telemetry;
