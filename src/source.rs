//! Sources: where retryscope's bytes come from, and how far it has read them.
//!
//! A source hands out complete lines with the position just after each one; it does not decode
//! them (that is [`retryscope_core::decode`]'s job) and it does not store positions itself: the caller
//! saves them, together with its own state, through [`checkpoint_io`].
//!
//! - [`file`](mod@file): a polling tailer of log files (globs, rotation, truncation, restarts).
//! - [`checkpoint_io`]: crash-safe reading and writing of a checkpoint file's bytes.
//! - [`otlp`]: the OTLP receiver (HTTP and gRPC), its bounded queue and write-ahead spool.

pub mod checkpoint_io;
pub mod file;
pub mod otlp;
