//! retryscope: observability and cost tracking for LLM agent clients that stream model turns
//! and retry them mid-stream.
//!
//! Data flows one way: sources (bytes and positions) → [`retryscope_core::decode`] (formats
//! to normalized [`retryscope_core::event::Event`]s) → [`retryscope_core::correlate`] (a pure
//! state machine: events to turns, attempts, findings and usage) → sinks (metrics, traces,
//! findings, reports). The core's modules are used under their own crate's name: this crate
//! re-exports none of them.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
pub mod config;
pub mod demo;
pub mod engine;
pub mod internal_events;
pub mod listener;
pub mod metric_labels;
pub mod nats;
pub mod otlp_client;
pub mod proxy;
pub mod run;
pub mod server;
pub mod sink;
pub mod source;
pub mod telemetry;
