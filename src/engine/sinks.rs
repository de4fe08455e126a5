//! [`Sink`]: one trait for everything that takes the correlator's outputs (metrics, the
//! findings output and its live view, traces, the live page, the NATS findings stream), and
//! [`Sinks`], the ordered list the engine delivers to. A sink with a position (the findings
//! file's durable length) gives it for the checkpoint under its name, and is opened again at
//! it on resume. The implementations are in `outputs.rs`; `check`'s (its summary, the JSON
//! or text report, the HTML page, traces sent without dropping) are in `check.rs` and
//! `cli/check_cmd.rs`, delivered to a [`SinkList`] that borrows them.

use std::collections::BTreeMap;

use retryscope_core::correlate::Output;

/// Why a sink cannot give a checkpoint position now (the checkpoint is skipped and retried).
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct SinkNotDurable {
    /// Which sink, and what is not durable.
    pub what: &'static str,
    /// Why.
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Where one output came from, when a sink needs a deterministic id for it.
#[derive(Debug, Clone, Copy)]
pub struct At<'a> {
    /// The input that produced it (a NATS partition's message: `p<N>-<seq>`).
    pub batch: &'a str,
    /// Its index among that input's outputs.
    pub index: usize,
}

/// A taker of outputs.
pub trait Sink: Send {
    /// Its key in the checkpoint's `sinks`.
    fn name(&self) -> &'static str;

    /// One output, in order.
    fn deliver(&mut self, output: &Output, at: Option<At<'_>>);

    /// Its position for a checkpoint, once everything delivered so far is durable; `Ok(None)`
    /// when it has none to keep.
    fn checkpoint(&mut self) -> Result<Option<serde_json::Value>, SinkNotDurable> {
        Ok(None)
    }

    /// Once per engine round, with the open turns: gauges and periodic summaries.
    fn round(&mut self, _open_turns: usize) {}

    /// Shutdown has begun.
    fn stopping(&mut self) {}

    /// The last round: flush, and say what is left open.
    fn finish(&mut self, _open_turns: usize) {}
}

/// A sink borrowed for one run (`check`'s, which the caller reads back afterwards).
impl<S: Sink> Sink for &mut S {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn deliver(&mut self, output: &Output, at: Option<At<'_>>) {
        (**self).deliver(output, at);
    }
    fn checkpoint(&mut self) -> Result<Option<serde_json::Value>, SinkNotDurable> {
        (**self).checkpoint()
    }
    fn round(&mut self, open_turns: usize) {
        (**self).round(open_turns);
    }
    fn stopping(&mut self) {
        (**self).stopping();
    }
    fn finish(&mut self, open_turns: usize) {
        (**self).finish(open_turns);
    }
}

/// Sinks, delivered to in order; `'a` bounds what they may borrow.
#[derive(Default)]
pub struct SinkList<'a> {
    list: Vec<Box<dyn Sink + 'a>>,
}

/// The engine's sinks: owned by it for its whole life.
pub type Sinks = SinkList<'static>;

impl<'a> SinkList<'a> {
    /// No sinks yet.
    pub fn new() -> Self {
        SinkList { list: Vec::new() }
    }

    /// Deliver to `sink` too, after the ones already added.
    pub fn push(&mut self, sink: Box<dyn Sink + 'a>) {
        self.list.push(sink);
    }

    /// Deliver (and drain) `out` to every sink.
    pub fn deliver(&mut self, out: &mut Vec<Output>, batch: Option<&str>) {
        for (index, o) in out.drain(..).enumerate() {
            let at = batch.map(|batch| At { batch, index });
            self.deliver_one(&o, at);
        }
    }

    /// Deliver one output to every sink.
    pub fn deliver_one(&mut self, output: &Output, at: Option<At<'_>>) {
        for s in &mut self.list {
            s.deliver(output, at);
        }
    }

    /// Every sink's checkpoint position, by name; an error when one is not durable yet.
    pub fn checkpoint(&mut self) -> Result<BTreeMap<String, serde_json::Value>, SinkNotDurable> {
        let mut positions = BTreeMap::new();
        for s in &mut self.list {
            if let Some(p) = s.checkpoint()? {
                positions.insert(s.name().to_owned(), p);
            }
        }
        Ok(positions)
    }

    /// See [`Sink::round`].
    pub fn round(&mut self, open_turns: usize) {
        self.list.iter_mut().for_each(|s| s.round(open_turns));
    }

    /// See [`Sink::stopping`].
    pub fn stopping(&mut self) {
        self.list.iter_mut().for_each(|s| s.stopping());
    }

    /// See [`Sink::finish`].
    pub fn finish(&mut self, open_turns: usize) {
        self.list.iter_mut().for_each(|s| s.finish(open_turns));
    }
}
