//! What a checkpoint keeps of a [`TurnHold`](super::TurnHold): [`HoldSnapshot`], its events
//! kept whole or by reference ([`HeldLines`]), and reading the references back.

use std::sync::Arc;

use super::{HeldEvent, LineAt, Place};
use crate::decode::SkipCounts;
use crate::decode::native::{self, NativeLine};
use crate::turn_route::Route;

/// What a checkpoint keeps of a [`TurnHold`](super::TurnHold).
///
/// The whole events are stored as `by_value` (older versions wrote `events`, still read): a
/// version that does not know references refuses the snapshot rather than losing them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HoldSnapshot {
    /// Held events kept whole, in arrival order.
    #[serde(rename = "by_value", alias = "events")]
    pub events: Vec<HeldEvent>,
    /// Held events kept by reference, by message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refs: Vec<HeldLines>,
    /// The next arrival number.
    pub seq: u64,
    /// Lines held undecoded, read back by [`HoldSnapshot::resolve`]: held undecoded again.
    #[serde(skip)]
    pub(super) lines: Vec<ResolvedLine>,
}

/// A line held undecoded, read back from its place: it is decoded (and counted, or counted
/// bad) at its turn's release, as it would have been.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct ResolvedLine {
    pub(super) bytes: Vec<u8>,
    pub(super) arrival_ms: i64,
    pub(super) seq: u64,
    pub(super) input: Option<Arc<str>>,
    pub(super) route: Route,
    pub(super) place: Place,
    pub(super) at: LineAt,
}

/// Held events read from lines of one message, arrived together from one input.
///
/// The lines are written as spans: a busy partition's message is nearly all held at once, a
/// few runs of consecutive lines that arrived one after another, and a line at a time (two
/// numbers each) made a checkpoint of a 5 s hold a megabyte per partition, rewritten twice
/// a second. A version that knows only `lines` refuses a snapshot of spans (it requires
/// `lines`) rather than losing them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HeldLines {
    /// The message ([`Place::msg`]).
    pub msg: u64,
    /// When its lines arrived.
    pub arrival_ms: i64,
    /// The input they came from.
    pub input: Option<Arc<str>>,
    /// The route of the feed.
    pub route: Route,
    /// Lines held undecoded: their events are counted, and their fates told, when they are
    /// correlated (the line numbers counted from the message's first line's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<Deferred>,
    /// Runs of lines, ascending: each `(line, seq, count)` is a first line ([`Place::line`])
    /// and its arrival number ([`HeldEvent::seq`]), each as the difference from the last of
    /// the run before (the first run's from 0), and how many lines the run has, each one
    /// line and one arrival number past the one before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spans: Vec<(u32, i64, u32)>,
    /// Older versions' shape, still read: each line, ascending, as the difference from the
    /// one before (the first from 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lines: Vec<u32>,
    /// Older versions' shape: each line's arrival number, as the difference from the one
    /// before (the first from 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub seqs: Vec<i64>,
}

impl HeldLines {
    /// A run longer than this is not read back (a message holds far fewer lines: NATS
    /// refuses a message over a few megabytes): it is counted lost instead of walked.
    pub const MAX_SPAN: u32 = 1 << 22;

    /// How many lines it names.
    pub fn count(&self) -> u64 {
        let spans: u64 = self.spans.iter().map(|s| u64::from(s.2)).sum();
        spans + self.lines.len().max(self.seqs.len()) as u64
    }

    /// Hand each line and its arrival number, as written, to `each`, until it answers
    /// `false` (the line is past the message's end: so are the rest, which are not walked);
    /// the number of lines named that were not handed over (a run too long, lists of unequal
    /// length, the lines past the end).
    fn each(&self, mut each: impl FnMut(u32, i64) -> bool) -> u64 {
        let mut skipped = 0u64;
        let mut ended = false;
        let (mut at, mut seq) = (0u32, 0i64);
        for &(dl, ds, n) in &self.spans {
            at = at.saturating_add(dl);
            seq = seq.wrapping_add(ds);
            if n == 0 {
                continue; // never written: nothing named
            }
            if ended || n > Self::MAX_SPAN {
                skipped += u64::from(n);
            } else {
                for k in 0..n {
                    if !each(at.saturating_add(k), seq.wrapping_add(i64::from(k))) {
                        skipped += u64::from(n - k);
                        ended = true;
                        break;
                    }
                }
            }
            // The next run is written from this one's last line.
            at = at.saturating_add(n - 1);
            seq = seq.wrapping_add(i64::from(n - 1));
        }
        let (mut at, mut seq) = (0u32, 0i64);
        for (dl, ds) in self.lines.iter().zip(&self.seqs) {
            at = at.saturating_add(*dl);
            seq = seq.wrapping_add(*ds);
            if ended || !each(at, seq) {
                skipped += 1;
                ended = true;
            }
        }
        skipped + self.lines.len().abs_diff(self.seqs.len()) as u64
    }
}

impl HoldSnapshot {
    /// Messages the references name, ascending.
    pub fn ref_messages(&self) -> Vec<u64> {
        let mut msgs: Vec<u64> = self.refs.iter().map(|r| r.msg).collect();
        msgs.sort_unstable();
        msgs.dedup();
        msgs
    }

    /// Events kept by reference.
    pub fn ref_count(&self) -> usize {
        self.refs.iter().map(|r| r.count() as usize).sum()
    }

    /// Read every reference back through `line` (the bytes at a place, if it is still
    /// there) and keep the events whole (lines held undecoded stay undecoded); the number
    /// that could not be read (the message is gone, or its line no longer decodes to an
    /// event), which are lost.
    pub fn resolve<'a>(&mut self, line: impl Fn(Place) -> Option<&'a [u8]>) -> u64 {
        let mut lost = 0u64;
        let mut skips = SkipCounts::default();
        for r in std::mem::take(&mut self.refs) {
            let mut events = Vec::new();
            let skipped = r.each(|at, seq| {
                let place = Place {
                    msg: r.msg,
                    line: at,
                };
                let Some(bytes) = line(place) else {
                    return false; // past the message's end (or the message is gone)
                };
                if let (Some(d), Ok(seq)) = (r.deferred, u64::try_from(seq)) {
                    self.lines.push(ResolvedLine {
                        bytes: bytes.to_vec(),
                        arrival_ms: r.arrival_ms,
                        seq,
                        input: r.input.clone(),
                        route: r.route,
                        place,
                        at: d.at(at),
                    });
                    return true;
                }
                let event = match native::decode_line(bytes, &mut skips) {
                    Ok(NativeLine::Event(ev)) if crate::bounds::check(&ev).is_ok() => {
                        Some(ev.into_owned())
                    }
                    _ => None,
                };
                match (event, u64::try_from(seq)) {
                    (Some(event), Ok(seq)) => events.push(HeldEvent {
                        event,
                        arrival_ms: r.arrival_ms,
                        seq,
                        input: r.input.clone(),
                        route: r.route,
                        place: Some(place),
                        deferred: None,
                    }),
                    _ => lost += 1,
                }
                true
            });
            lost += skipped;
            self.events.append(&mut events);
        }
        lost
    }
}

/// Where the fates of a message's lines held undecoded are told: their stream's source, and
/// the number in that stream of the message's line 0 (a message's lines are consecutive
/// lines of one stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Deferred {
    /// The stream's source.
    pub source: crate::ingest::Source,
    /// The number of the message's line 0.
    pub first: u64,
}

impl Deferred {
    /// Of line `place` told at `at`.
    pub(super) fn of(at: LineAt, place: Place) -> Self {
        Deferred {
            source: at.source,
            first: at.number.saturating_sub(u64::from(place.line)),
        }
    }

    /// Where line `line` of the message is told.
    pub(super) fn at(self, line: u32) -> LineAt {
        LineAt {
            source: self.source,
            number: self.first.saturating_add(u64::from(line)),
        }
    }
}
