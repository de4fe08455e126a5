//! [`LiveSource`]: one trait for everything that produces lines with a position: the file
//! tailer (`run/file_source.rs`), stdin and the demo fleet and the proxy's feed
//! (`run/feeds.rs`), the OTLP receiver (`run/otlp_feed.rs`) and a NATS partition
//! (`nats/partition_source.rs`). The engine's loop runs over a list of them; each restores
//! itself from the position it gave the last checkpoint (under its [`LiveSource::name`]).

use super::Core;
use retryscope_core::ingest::Source;

/// What a poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Polled {
    /// Lines handed to the core.
    pub lines: u64,
    /// More is waiting right now: poll again without sleeping.
    pub busy: bool,
    /// The source has ended (only a finite one ends: stdin).
    pub ended: bool,
}

/// A producer of lines with a position.
pub trait LiveSource {
    /// Its key in the checkpoint's `sources` (stable across versions: `files`, `otlp`).
    fn name(&self) -> &'static str;

    /// The kind of input it reads (the `source` label of its metrics).
    fn kind(&self) -> Source;

    /// Hand what waits to `core`; `now` is the arrival time (ms) of what is read now.
    fn poll(&mut self, core: &mut Core, now: i64) -> Polled;

    /// Once a second (after [`Core::tick`]): end what went quiet.
    fn tick(&mut self, _core: &mut Core, _now: i64) {}

    /// Where a resumed run continues reading it: taken for each checkpoint, after every line
    /// polled so far was handed to the core. `None`: nothing to resume (a pipe, the demo).
    fn position(&mut self) -> Option<serde_json::Value> {
        None
    }

    /// The checkpoint with [`LiveSource::position`] is durable: what lies behind it may go.
    fn checkpointed(&mut self) {}

    /// Shutdown: take no new input, and hand over what was already accepted.
    fn close(&mut self, _core: &mut Core, _now: i64) {}

    /// Whether it ends by itself (stdin): when every source is finite and has ended, the
    /// input has ended.
    fn finite(&self) -> bool {
        false
    }
}
