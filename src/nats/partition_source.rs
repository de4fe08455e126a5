//! One owned partition's messages as the engine's [`LiveSource`] (`run --nats`), and the
//! findings stream's [`Sink`].
//!
//! The driver (`owned.rs`) fetches messages (async, fenced, in consumer order) into
//! [`PartitionSource`]; a poll hands them to the partition's [`Core`] in stream order. The
//! partition's clock is the publish time of its messages, not the wall: a line arrives at its
//! message's publish time, and [`Core::tick`] runs once a second of that clock, so a new owner
//! replaying from a checkpoint produces the same outputs, delivered with the same ids
//! (`p<N>-<seq>`, `-t` for a tick's; the sink adds the output's index). The position is the
//! partition's checkpoint in JetStream (`state.rs`), written by the driver.
//!
//! A clock that moves only with lines would stop when the agents do: a session's joined
//! outputs would wait for the next line to be correlated, and an idle turn for the next line
//! to time out. So the owner of a partition that went quiet publishes clock messages into it
//! (a [`super::TICK_HEADER`] and no line), once a second for as long as a tick could still
//! change something (the idle timeout and the join's wait past the last line): the clock is
//! in the stream, and a replay sees the same ticks at the same places.
//!
//! [`FindingsStreamOut`] turns each finding into a message with that id and hands it to the
//! driver through a channel: publishing is async, delivery is not.

use std::collections::VecDeque;
use std::sync::mpsc;

use async_nats::jetstream;

use crate::engine::sinks::{At, Sink};
use crate::engine::{Core, LiveSource, Polled};
use retryscope_core::correlate::Output;
use retryscope_core::ingest::Source;
use retryscope_core::reorder::Place;

/// A fetched message, in consumer order.
pub(super) struct Fetched {
    /// Its stream sequence.
    pub(super) seq: u64,
    /// Its publish time (ms).
    pub(super) published_ms: i64,
    /// The stream (file) it was shipped from; `None` for a clock message.
    pub(super) stream: Option<String>,
    /// Whether its payload is a batch of lines joined by `\n` (else one line).
    pub(super) batched: bool,
    /// The message (its payload is the line; the last one is acknowledged at checkpoint).
    pub(super) msg: jetstream::Message,
}

/// An owned partition's messages and its clock.
pub(super) struct PartitionSource {
    /// The partition.
    pub(super) partition: u32,
    /// Fetched, not yet handed to the core.
    pub(super) fetched: VecDeque<Fetched>,
    /// Last stream sequence correlated.
    pub(super) seq: u64,
    /// The partition's clock: publish time of its last message.
    pub(super) now_ms: i64,
    /// Clock of the last tick.
    pub(super) tick_ms: i64,
    /// The last message correlated (acknowledged, with all before it, at the checkpoint).
    pub(super) last_msg: Option<jetstream::Message>,
    /// An OTLP session's stream quiet this long (the turns' idle timeout) is ended at a
    /// tick, as `run`'s receiver ends its own (`i64::MAX`: never).
    pub(super) session_quiet_ms: i64,
}

impl PartitionSource {
    /// Partition `partition`, resuming after `seq` with its clock at `now_ms` and `tick_ms`;
    /// its OTLP sessions' streams end once quiet for `session_quiet_ms`.
    pub(super) fn new(
        partition: u32,
        seq: u64,
        now_ms: i64,
        tick_ms: i64,
        session_quiet_ms: i64,
    ) -> Self {
        PartitionSource {
            partition,
            fetched: VecDeque::new(),
            seq,
            now_ms,
            tick_ms,
            last_msg: None,
            session_quiet_ms,
        }
    }
}

impl LiveSource for PartitionSource {
    fn name(&self) -> &'static str {
        "nats"
    }

    fn kind(&self) -> Source {
        Source::Nats
    }

    /// `_now` is not read: the partition's own clock is.
    fn poll(&mut self, core: &mut Core, _now: i64) -> Polled {
        let p = self.partition;
        let mut polled = Polled::default();
        while let Some(f) = self.fetched.pop_front() {
            if f.seq <= self.seq {
                continue; // a redelivery of what the state already covers
            }
            self.now_ms = self.now_ms.max(f.published_ms);
            if let Some(name) = &f.stream {
                let stream = core.stream(Source::Nats, name);
                // Each line with where it can be read again (`lines`, the same split).
                for (i, line) in lines(&f.msg.payload, f.batched).enumerate() {
                    polled.lines += 1;
                    let place = Place {
                        msg: f.seq,
                        line: u32::try_from(i).unwrap_or(u32::MAX),
                    };
                    core.line_at(stream, line, self.now_ms, place);
                }
                // One delivery per message: its outputs are numbered in its id.
                core.deliver(Some(&format!("p{p}-{}", f.seq)));
            }
            if self.now_ms - self.tick_ms >= 1000 {
                self.tick_ms = self.now_ms;
                core.tick(self.now_ms);
                // On the partition's clock, at the same ticks in a replay: deterministic.
                core.end_quiet_sessions(self.now_ms, self.session_quiet_ms);
                core.deliver(Some(&format!("p{p}-{}-t", f.seq)));
            }
            self.seq = f.seq;
            self.last_msg = Some(f.msg);
        }
        polled
    }
}

/// The lines of a message's payload: joined by `\n` when `batched`, else the payload is one.
/// As `split` on `\n` splits it, with `memchr`: a byte-by-byte split was four fifths of a
/// collector's time in this function.
pub(super) fn lines(payload: &[u8], batched: bool) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(payload);
    std::iter::from_fn(move || {
        let r = rest?;
        match memchr::memchr(b'\n', r).filter(|_| batched) {
            Some(i) => {
                rest = r.get(i + 1..);
                r.get(..i)
            }
            None => rest.take(),
        }
    })
}

/// A finding for the findings stream, with its deterministic id.
pub(super) struct Outgoing {
    /// `p<N>-<seq>[-t]-<index>`: the message id (JetStream's duplicate window key).
    pub(super) id: String,
    /// Its kind (for the dead-letter log).
    pub(super) kind: &'static str,
    /// The JSON body, or why it could not be encoded.
    pub(super) body: Result<Vec<u8>, String>,
}

/// Findings to the findings stream: each one becomes an [`Outgoing`] for the driver to
/// publish (the partition source delivers every output with its id).
pub(super) struct FindingsStreamOut(pub(super) mpsc::Sender<Outgoing>);

impl Sink for FindingsStreamOut {
    fn name(&self) -> &'static str {
        "findings_stream"
    }

    fn deliver(&mut self, output: &Output, at: Option<At<'_>>) {
        let (Output::Finding(f, _), Some(at)) = (output, at) else {
            return;
        };
        let body = retryscope_core::sanitize::to_json_vec(f).map_err(|e| e.to_string());
        // The receiver lives as long as the partition: a send fails only while it is dropped.
        let _ = self.0.send(Outgoing {
            id: format!("{}-{}", at.batch, at.index),
            kind: f.kind.as_str(),
            body,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::lines;

    #[test]
    fn a_batch_splits_as_split_on_newlines_does_and_a_single_line_is_whole() {
        for payload in [
            &b""[..],
            b"a",
            b"a\n",
            b"\n",
            b"\n\n",
            b"a\nb",
            b"ab\n\ncd\n",
            br#"{"turn":"t","type":"text"}"#,
        ] {
            let want: Vec<&[u8]> = payload.split(|b| *b == b'\n').collect();
            assert_eq!(
                lines(payload, true).collect::<Vec<_>>(),
                want,
                "{payload:?}"
            );
            assert_eq!(lines(payload, false).collect::<Vec<_>>(), vec![payload]);
        }
    }
}
