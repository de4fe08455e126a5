//! How the OTLP receiver reports what becomes of each request: the [`ReceiverEvents`] trait
//! (every method required). The receiver never touches metrics itself, as the file tailer
//! does not (`source/file/events.rs`); the app's answer is `internal_events::OtlpReport`,
//! which counts and logs.

use super::accept::{Protocol, Rejection, Signal};

/// What the receiver tells about the requests it answers.
pub trait ReceiverEvents: Send + Sync + std::fmt::Debug {
    /// A request was accepted whole: `items` records (or, for metrics, data points, which are
    /// only counted) were queued.
    fn accepted(&self, signal: Signal, protocol: Protocol, items: u64);
    /// A request was refused and nothing of it queued; `rejection` says why, in the words sent
    /// back to the client.
    fn refused(&self, signal: Signal, protocol: Protocol, rejection: &Rejection);
}
