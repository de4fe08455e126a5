//! retryscope's core: everything between bytes and findings that needs no runtime.
//!
//! Data flows one way: [`ingest`] takes every input's lines and picks each one's format,
//! [`decode`] turns records into normalized [`event::Event`]s, [`correlate`] (a pure state
//! machine: no I/O, no clock, no globals) builds turns and attempts and raises findings, and a [`report::TurnReport`] leaves for the sinks, which live in the
//! `retryscope` crate. This crate depends on no async runtime, exporter or HTTP library, and
//! Cargo enforces it.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub(crate) mod bounds;
pub mod continuation;
pub mod correlate;
pub mod cost;
pub mod coverage;
pub mod decode;
pub mod effect;
pub mod event;
pub mod fasthash;
pub mod finding;
pub mod ingest;
pub mod input;
pub mod pipeline;
pub mod reorder;
pub mod report;
pub(crate) mod rfc3339;
pub mod rules;
pub mod sanitize;
pub mod turn_route;
