//! retryscope: observability and cost tracking for LLM agent clients that stream model turns
//! and retry them mid-stream.
//!
//! Data flows one way: sources (bytes and positions) → [`decode`] (formats to normalized
//! [`event::Event`]s) → [`correlate`] (a pure state machine: events to turns, attempts,
//! findings and usage) → sinks (metrics, traces, findings, reports).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bounds;
pub mod check;
pub mod config;
pub mod correlate;
pub mod cost;
pub mod decode;
pub mod demo;
pub mod effect;
pub mod event;
pub mod fasthash;
pub mod finding;
pub mod input;
pub mod pipeline;
pub mod report;
pub mod rfc3339;
pub mod run;
pub mod sanitize;
pub mod server;
pub mod sink;
pub mod source;
pub mod telemetry;
