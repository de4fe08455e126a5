//! Lines held undecoded, and what a released turn hands over ([`ReleasedTurn`]): its held
//! events and its held lines, walked together in time order ([`ReleasedTurn::each`]).
//!
//! A busy cluster partition holds every event for the settle time: an owned copy of each
//! (its strings allocated one by one, then freed at release) cost a collector as much as the
//! rest of its work. A native line that decodes alone to its event (a [`Place`]d line of the
//! common shape, `crate::turn_route::deferrable`) is held as its bytes instead, in one
//! buffer per turn, and decoded when its turn is released: once, as `run` decodes it.

use std::sync::Arc;

use super::{Deferred, HeldEvent, Place};
use crate::decode::SkipCounts;
use crate::decode::native::{self, NativeLine};
use crate::ingest::Source;
use crate::turn_route::Route;

/// Where a held line's fate is told once it is decoded: its stream's source, and its number
/// in that stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LineAt {
    /// The stream's source.
    pub source: Source,
    /// The line's number in the stream.
    pub number: u64,
}

/// What the held lines and events of one message have in common, shared by reference (one
/// `Arc` a message, not a copy a line: the hold's bookkeeping a line was twice its bytes,
/// and a busy collector's hold waited on memory).
#[derive(Debug, PartialEq)]
pub(super) struct Origin {
    /// The message.
    pub(super) msg: u64,
    /// When it arrived.
    pub(super) arrival_ms: i64,
    /// The input it came from.
    pub(super) input: Option<Arc<str>>,
    /// The route of its feed.
    pub(super) route: Route,
    /// For lines held undecoded (every line's origin has it): where their fates are told.
    pub(super) deferred: Option<Deferred>,
}

impl Origin {
    /// Where line `line` of the message is told (a line's origin always says).
    pub(super) fn at(&self, line: u32) -> LineAt {
        self.deferred.map_or(
            LineAt {
                source: Source::Nats,
                number: u64::from(line) + 1,
            },
            |d| d.at(line),
        )
    }
}

/// A line held undecoded: its bytes are `bytes[start..start + len]` of its turn's buffer.
#[derive(Debug, Clone)]
pub(super) struct HeldLine {
    pub(super) start: u32,
    pub(super) len: u32,
    /// Its time: the line's `ts`.
    pub(super) ts_ms: i64,
    pub(super) seq: u64,
    /// Its line in its message ([`Place::line`]; the message is the origin's).
    pub(super) line: u32,
    pub(super) origin: Arc<Origin>,
}

impl HeldLine {
    /// Where it can be read again.
    pub(super) fn place(&self) -> Place {
        Place {
            msg: self.origin.msg,
            line: self.line,
        }
    }

    /// The line's bytes in its turn's buffer.
    pub(super) fn bytes<'b>(&self, buffer: &'b [u8]) -> &'b [u8] {
        let start = self.start as usize;
        buffer
            .get(start..start + self.len as usize)
            .unwrap_or_default()
    }

    /// The line decoded now, whole, still to be counted when it is correlated
    /// ([`HeldEvent::deferred`]); `None` when it does not decode to an event.
    pub(super) fn decode(&self, buffer: &[u8]) -> Option<HeldEvent> {
        let mut skips = SkipCounts::default();
        match native::decode_line(self.bytes(buffer), &mut skips) {
            Ok(NativeLine::Event(ev)) if crate::bounds::check(&ev).is_ok() => Some(HeldEvent {
                event: ev.into_owned(),
                arrival_ms: self.origin.arrival_ms,
                seq: self.seq,
                input: self.origin.input.clone(),
                route: self.origin.route,
                place: Some(self.place()),
                deferred: Some(self.origin.at(self.line)),
            }),
            _ => None,
        }
    }
}

/// One held line of a released turn, to decode and correlate.
#[derive(Debug, Clone, Copy)]
pub struct ReleasedLine<'a> {
    /// The line.
    pub bytes: &'a [u8],
    /// When it arrived.
    pub arrival_ms: i64,
    /// The input it came from.
    pub input: Option<&'a Arc<str>>,
    /// The route of the feed it came through.
    pub route: Route,
    /// Where its fate is told.
    pub at: LineAt,
}

/// One item of a released turn, in time order.
#[derive(Debug, Clone, Copy)]
pub enum Released<'a> {
    /// An event held whole.
    Event(&'a HeldEvent),
    /// A line held undecoded.
    Line(ReleasedLine<'a>),
}

/// A turn released from the hold: its events and lines, each list in time order.
#[derive(Debug, Default)]
pub struct ReleasedTurn {
    pub(super) events: Vec<HeldEvent>,
    pub(super) lines: Vec<HeldLine>,
    pub(super) bytes: Vec<u8>,
}

impl ReleasedTurn {
    /// Events and lines it holds.
    pub fn len(&self) -> usize {
        self.events.len() + self.lines.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hand each event and line to `each`, in time order (its own time, the arrival time
    /// where it has none; ties in arrival order).
    pub fn each<'a>(&'a self, mut each: impl FnMut(Released<'a>)) {
        self.merge(|item| {
            each(match item {
                Item::Event(e) => Released::Event(e),
                Item::Line(l) => Released::Line(ReleasedLine {
                    bytes: l.bytes(&self.bytes),
                    arrival_ms: l.origin.arrival_ms,
                    input: l.origin.input.as_ref(),
                    route: l.origin.route,
                    at: l.origin.at(l.line),
                }),
            })
        });
    }

    /// Its events whole, in time order, its lines decoded (one that does not decode to an
    /// event is left out).
    pub fn into_events(self) -> Vec<HeldEvent> {
        let mut out = Vec::with_capacity(self.len());
        self.merge(|item| match item {
            Item::Event(e) => out.push(e.clone()),
            Item::Line(l) => out.extend(l.decode(&self.bytes)),
        });
        out
    }

    /// Its events and lines merged in time order.
    fn merge<'a>(&'a self, mut each: impl FnMut(Item<'a>)) {
        let (mut events, mut lines) = (self.events.iter().peekable(), self.lines.iter().peekable());
        loop {
            let line_first = match (events.peek(), lines.peek()) {
                (Some(e), Some(l)) => {
                    (l.ts_ms, l.seq) < (e.event.ts_ms.unwrap_or(e.arrival_ms), e.seq)
                }
                (None, Some(_)) => true,
                (Some(_), None) => false,
                (None, None) => return,
            };
            let item = if line_first {
                lines.next().map(Item::Line)
            } else {
                events.next().map(Item::Event)
            };
            if let Some(item) = item {
                each(item);
            }
        }
    }
}

/// One item of a released turn as held.
enum Item<'a> {
    Event(&'a HeldEvent),
    Line(&'a HeldLine),
}
