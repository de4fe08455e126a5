//! The OTLP receiver (`run --otlp-listen`, `--otlp-grpc-listen`): agents send their telemetry
//! straight to retryscope.
//!
//! Requests are decoded into per-record JSON lines ([`record`], [`json`]), accepted whole into
//! the bounded [`queue`] (written ahead to the [`spool`] with a data directory) or refused with
//! a retryable status, and read by the engine thread through the one ingest path, one stream
//! per service and session, as `Format::Otlp`. [`http`] serves OTLP/HTTP, [`grpc`] OTLP/gRPC;
//! [`accept`] is what both do with a request, reported through [`events`] (the receiver never
//! touches metrics); [`auth`] checks the bearer token and loads TLS.

pub mod accept;
pub mod auth;
pub mod events;
pub mod grpc;
pub mod http;
pub mod intake;
pub mod json;
pub mod listen;
pub mod queue;
pub mod record;
pub mod spool;

pub use accept::{Outcome, Protocol, Receiver, ReceiverConfig, Rejection, Signal};
pub use events::ReceiverEvents;
pub use queue::{Batch, Queue};
pub use record::Record;
pub use spool::{Spool, SpoolPos, check_position as spool_check_position};

/// Name of the spool folder inside the data directory.
pub const SPOOL_DIR: &str = "otlp-spool";
