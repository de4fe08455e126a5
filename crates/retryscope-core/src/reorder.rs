//! Holding a turn's events until it has been quiet, then handing them over in time order: for
//! inputs where one turn's parts come through different paths that do not keep its order (two
//! hosts' logs of one turn, shipped to a cluster: the second host's half can arrive first).
//!
//! Owns: [`TurnHold`]. Each event is held under its turn with its arrival time and where it
//! came from; once a turn has had no event for the settle time (on the arrival clock the caller
//! passes), its events are released sorted by their own time (arrival time where they have
//! none; ties in arrival order), turns in the order they were first seen. A late part that
//! arrives within the settle time of the turn's last event joins it in its place in time, so
//! the turn correlates as if it had been read from one log. Bounded: past
//! [`TurnHold::MAX_EVENTS`] the turns quiet the longest are released early, until a tenth of
//! the bound is free.
//!
//! [`HoldSnapshot`] is what a checkpoint keeps of it: the events were read past, so a restart
//! must find them. An event the caller can read again (a [`Place`]: a line of a message still
//! in its stream, which decodes alone to the event) is kept by reference, a few bytes; the
//! others, and those held longer than [`TurnHold::REF_MAX_AGE_MS`], whole. Copying every held
//! event into every checkpoint cost a cluster collector five times its correlation.
//! [`HoldSnapshot::resolve`] reads the references back before [`TurnHold::restore`].

use std::cell::OnceCell;
use std::sync::Arc;

use crate::event::Event;
use crate::fasthash::FastMap;
use crate::turn_route::Route;

/// Where a held event can be read again: line `line` (from 0) of message `msg` of the
/// caller's input (a cluster partition's stream sequence), a native line that decodes alone
/// to the event.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Place {
    /// The message.
    pub msg: u64,
    /// The line in it.
    pub line: u32,
}

/// One held event and where it came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HeldEvent {
    /// The event.
    pub event: Event<'static>,
    /// When it arrived (ms, the caller's clock).
    pub arrival_ms: i64,
    /// Arrival order, for ties.
    pub seq: u64,
    /// The input it came from (a turn it opens records it).
    pub input: Option<Arc<str>>,
    /// The route of the feed it came through.
    pub route: Route,
    /// Where it can be read again, if it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub place: Option<Place>,
    /// Decoded from a line held undecoded ([`TurnHold::push_line`]) whose fate is not told
    /// yet: the event is counted, and its line's fate told, when it is correlated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<LineAt>,
}

#[derive(Debug, Clone, Default)]
struct Held {
    /// The arrival number of its first event: names this holding of the turn.
    first_seq: u64,
    last_arrival_ms: i64,
    events: Vec<HeldEvent>,
    /// Its lines held undecoded, and their bytes.
    lines: Vec<HeldLine>,
    bytes: Vec<u8>,
    /// Of its events and lines, those with a place (in [`TurnHold`]'s log) and those without.
    placed: usize,
    unplaced: usize,
}

/// A held event with a place, as a snapshot keeps it: [`TurnHold`] logs them as they come
/// (in place order, as a cluster partition's messages are read), so a snapshot reads a
/// compact list instead of walking and sorting every held event.
#[derive(Debug, Clone)]
struct Placed {
    place: Place,
    seq: u64,
    /// The holding it belongs to ([`Held::first_seq`]): gone once that turn is released.
    holding: u64,
    /// Its message's arrival, input and route (and, for a line held undecoded, where its
    /// fate is told).
    origin: Arc<Origin>,
}

/// One message's entries in [`TurnHold`]'s log of placed events (a range of it: the log is
/// in place order), and what a snapshot wrote of them, kept until one of them changes. A
/// checkpoint of a settle time's hold used to walk every entry, twice a second: a collector
/// spent a tenth of its time there, waiting on memory.
#[derive(Debug, Clone)]
struct Group {
    msg: u64,
    /// Its entries: `placed[start..end]`.
    start: usize,
    end: usize,
    /// The earliest arrival among them: a group with one older than the reference age is
    /// written afresh each time (those are kept whole).
    first_arrival_ms: i64,
    /// Its references as last written, while no entry has come or gone since.
    written: OnceCell<Vec<HeldLines>>,
}

mod released;
mod snapshot;
use released::{HeldLine, Origin};
pub use released::{LineAt, Released, ReleasedLine, ReleasedTurn};
pub use snapshot::{Deferred, HeldLines, HoldSnapshot};

/// Turns' events held until each turn is quiet. See the module docs.
#[derive(Debug, Clone)]
pub struct TurnHold {
    settle_ms: i64,
    /// By turn id, as bytes: a line held undecoded names its turn by bytes not checked to
    /// be UTF-8 (its decoder checks them at release).
    turns: FastMap<Box<[u8]>, Held>,
    events: usize,
    seq: u64,
    /// The latest arrival seen: what [`TurnHold::REF_MAX_AGE_MS`] is measured from.
    latest_arrival_ms: i64,
    /// Held events with a place, as they came; entries of released turns are left until
    /// they are half of it (`placed_dead`).
    placed: Vec<Placed>,
    placed_dead: usize,
    /// The log by message, in order; unless `unordered`.
    groups: Vec<Group>,
    /// Whether places came out of order (a caller whose lines are not read in place order):
    /// snapshots then walk the whole log.
    unordered: bool,
    /// The holdings ([`Held::first_seq`]) of the turns held now.
    holdings: FastMap<u64, ()>,
    /// Held events without a place.
    unplaced: usize,
    /// The origin of the last held line or event with a place: the next ones of its message
    /// share it.
    last_origin: Option<Arc<Origin>>,
    /// Turns, and their events, released early since [`TurnHold::take_released_early`].
    early: ReleasedEarly,
}

/// Turns released before they were quiet, because the hold was full
/// ([`TurnHold::MAX_EVENTS`]): a late part of one, if any comes, is correlated after the rest
/// (out of time order, or after the turn closed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReleasedEarly {
    /// Turns.
    pub turns: u64,
    /// Their events and lines.
    pub events: u64,
}

impl TurnHold {
    /// Events held at most; past it the turns quiet the longest are released early, until a
    /// tenth of it is free.
    pub const MAX_EVENTS: usize = 200_000;

    /// A held event that arrived longer ago than this is kept whole by a snapshot, even if it
    /// could be read again: the message it names must still be in its stream (a cluster's
    /// events are kept for days), and a restart reads back at most this much of it.
    pub const REF_MAX_AGE_MS: i64 = 10 * 60 * 1000;

    /// Hold each turn until it has been quiet for `settle_ms`.
    pub fn new(settle_ms: i64) -> Self {
        TurnHold {
            settle_ms: settle_ms.max(0),
            turns: FastMap::default(),
            events: 0,
            seq: 0,
            latest_arrival_ms: i64::MIN,
            placed: Vec::new(),
            placed_dead: 0,
            groups: Vec::new(),
            unordered: false,
            holdings: FastMap::default(),
            unplaced: 0,
            last_origin: None,
            early: ReleasedEarly::default(),
        }
    }

    /// Resume holding what `snapshot` held (its references read back by
    /// [`HoldSnapshot::resolve`]: those left unread are not held).
    pub fn restore(settle_ms: i64, snapshot: HoldSnapshot) -> Self {
        let mut hold = TurnHold::new(settle_ms);
        hold.seq = snapshot.seq;
        let mut events = snapshot.events;
        events.sort_by_key(|e| e.seq);
        let mut lines = snapshot.lines;
        lines.sort_by_key(|l| l.seq);
        // In arrival order: a turn's holding is named by its first.
        let mut lines = lines.into_iter().peekable();
        for e in events {
            while let Some(l) = lines.next_if(|l| l.seq < e.seq) {
                hold.restore_line(l);
            }
            hold.insert(e);
        }
        for l in lines {
            hold.restore_line(l);
        }
        // The log in place order, each entry under its turn's holding as restored.
        let mut placed: Vec<Placed> = hold
            .turns
            .values()
            .flat_map(|h| {
                let events = h.events.iter().filter_map(|e| {
                    let place = e.place?;
                    Some(Placed {
                        place,
                        seq: e.seq,
                        holding: h.first_seq,
                        origin: Arc::new(Origin {
                            msg: place.msg,
                            arrival_ms: e.arrival_ms,
                            input: e.input.clone(),
                            route: e.route,
                            deferred: e.deferred.map(|at| Deferred::of(at, place)),
                        }),
                    })
                });
                events.chain(h.lines.iter().map(|l| Placed {
                    place: l.place(),
                    seq: l.seq,
                    holding: h.first_seq,
                    origin: l.origin.clone(),
                }))
            })
            .collect();
        placed.sort_by_key(|p| p.place);
        hold.placed = placed;
        hold.regroup();
        hold
    }

    /// What a checkpoint keeps (`None` when nothing is held): the events that have a place
    /// and arrived within [`TurnHold::REF_MAX_AGE_MS`] of the latest by reference, the
    /// others whole.
    pub fn snapshot(&self) -> Option<HoldSnapshot> {
        if self.events == 0 {
            return None;
        }
        let horizon = self.latest_arrival_ms.saturating_sub(Self::REF_MAX_AGE_MS);
        let mut refs: Vec<HeldLines> = Vec::new();
        // Whether some held event with a place is too old to be kept by reference.
        let mut old = false;
        if self.unordered {
            old = self.write(&self.placed, horizon, &mut refs);
        } else {
            for g in &self.groups {
                let entries = &self.placed[g.start..g.end];
                if g.first_arrival_ms < horizon {
                    old |= self.write(entries, horizon, &mut refs);
                    continue;
                }
                let written = g.written.get_or_init(|| {
                    let mut w = Vec::new();
                    self.write(entries, horizon, &mut w);
                    w
                });
                refs.extend(written.iter().cloned());
            }
        }
        // Whole: the events without a place, and those too old for a reference.
        let mut events = Vec::new();
        if self.unplaced > 0 || old {
            for h in self.turns.values().filter(|h| old || h.unplaced > 0) {
                events.extend(
                    h.events
                        .iter()
                        .filter(|e| e.place.is_none() || e.arrival_ms < horizon)
                        .cloned(),
                );
                // A line too old for a reference is decoded and kept whole, still to be
                // counted; one that does not decode would only have been counted bad.
                if old {
                    events.extend(
                        h.lines
                            .iter()
                            .filter(|l| l.origin.arrival_ms < horizon)
                            .filter_map(|l| l.decode(&h.bytes)),
                    );
                }
            }
            events.sort_by_key(|e| e.seq);
        }
        Some(HoldSnapshot {
            events,
            refs,
            seq: self.seq,
            lines: Vec::new(),
        })
    }

    /// Append to `refs` the held entries of `entries` (in place order) that arrived at or
    /// after `horizon`; whether any held entry arrived before it.
    fn write(&self, entries: &[Placed], horizon: i64, refs: &mut Vec<HeldLines>) -> bool {
        let mut old = false;
        let first = refs.len();
        // The last line and arrival number written, which the next are written from.
        let (mut line, mut seq) = (0u32, 0i64);
        for p in entries {
            if !self.holdings.contains_key(&p.holding) {
                continue; // its turn was released
            }
            if p.origin.arrival_ms < horizon {
                old = true;
                continue;
            }
            let same = refs.len() > first
                && refs.last().is_some_and(|r| {
                    r.msg == p.place.msg
                        && p.place.line >= line
                        && r.arrival_ms == p.origin.arrival_ms
                        && r.route == p.origin.route
                        && r.deferred == p.origin.deferred
                        && match (&r.input, &p.origin.input) {
                            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                            (None, None) => true,
                            _ => false,
                        }
                });
            let p_seq = i64::try_from(p.seq).unwrap_or(i64::MAX);
            if !same {
                refs.push(HeldLines {
                    msg: p.place.msg,
                    arrival_ms: p.origin.arrival_ms,
                    input: p.origin.input.clone(),
                    route: p.origin.route,
                    deferred: p.origin.deferred,
                    ..HeldLines::default()
                });
                (line, seq) = (0, 0);
            }
            if let Some(r) = refs.last_mut() {
                // The next line that arrived next extends the run; anything else starts one.
                match r.spans.last_mut() {
                    Some(run)
                        if p.place.line == line.wrapping_add(1)
                            && p_seq == seq.wrapping_add(1)
                            && run.2 < HeldLines::MAX_SPAN =>
                    {
                        run.2 += 1
                    }
                    _ => r
                        .spans
                        .push((p.place.line - line, p_seq.wrapping_sub(seq), 1)),
                }
            }
            (line, seq) = (p.place.line, p_seq);
        }
        old
    }

    /// Log entry `at` (just pushed) under its message's group.
    fn group_entry(&mut self, at: usize) {
        let Some(p) = self.placed.get(at) else {
            return;
        };
        if at > 0 && self.placed.get(at - 1).is_some_and(|q| q.place > p.place) {
            self.unordered = true;
        }
        if self.unordered {
            return;
        }
        match self.groups.last_mut() {
            Some(g) if g.msg == p.place.msg && g.end == at => {
                g.end = at + 1;
                g.first_arrival_ms = g.first_arrival_ms.min(p.origin.arrival_ms);
                g.written.take();
            }
            _ => self.groups.push(Group {
                msg: p.place.msg,
                start: at,
                end: at + 1,
                first_arrival_ms: p.origin.arrival_ms,
                written: OnceCell::new(),
            }),
        }
    }

    /// Group the whole log afresh (after it was restored or compacted).
    fn regroup(&mut self) {
        self.groups.clear();
        self.unordered = false;
        for at in 0..self.placed.len() {
            self.group_entry(at);
        }
    }

    /// Forget what was written of the group of message `msg`: an entry of it is gone.
    fn ungroup(&mut self, msg: u64) {
        if let Ok(i) = self.groups.binary_search_by_key(&msg, |g| g.msg)
            && let Some(g) = self.groups.get_mut(i)
        {
            g.written.take();
        }
    }

    /// Events held now.
    pub fn len(&self) -> usize {
        self.events
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Hold `event`, arrived at `arrival_ms` from `input` through `route`; when the bound is
    /// passed, the turns released early are appended to `released`.
    pub fn push(
        &mut self,
        event: Event<'static>,
        arrival_ms: i64,
        input: Option<Arc<str>>,
        route: Route,
        place: Option<Place>,
        released: &mut Vec<ReleasedTurn>,
    ) {
        let seq = self.seq;
        self.seq += 1;
        let holding = self.insert(HeldEvent {
            event,
            arrival_ms,
            seq,
            input: input.clone(),
            route,
            place,
            deferred: None,
        });
        if let Some(place) = place {
            let origin = self.origin(place.msg, arrival_ms, input.as_ref(), route, None);
            self.log(Placed {
                place,
                seq,
                holding,
                origin,
            });
        }
        if self.events > Self::MAX_EVENTS {
            self.release_early(released);
        }
    }

    /// Hold native line `bytes` undecoded, under turn `turn` at its time `ts_ms` (what
    /// `crate::turn_route::deferrable` read of it), arrived at `arrival_ms` from `input`
    /// through `route`; `at` names it when its fate is told, once it is decoded at its
    /// turn's release. `false` (nothing held) when the turn's buffer would pass 4 GiB: the
    /// caller decodes it now. When the bound is passed, the turns released early are
    /// appended to `released`.
    #[allow(clippy::too_many_arguments)]
    pub fn push_line(
        &mut self,
        (turn, ts_ms): (&[u8], i64),
        bytes: &[u8],
        arrival_ms: i64,
        (input, route): (Option<&Arc<str>>, Route),
        place: Place,
        at: LineAt,
        released: &mut Vec<ReleasedTurn>,
    ) -> bool {
        let seq = self.seq;
        let deferred = Some(Deferred::of(at, place));
        let origin = self.origin(place.msg, arrival_ms, input, route, deferred);
        if !self.insert_line((turn, ts_ms), bytes, origin, place.line, seq) {
            return false;
        }
        self.seq += 1;
        if self.events > Self::MAX_EVENTS {
            self.release_early(released);
        }
        true
    }

    /// Hold a line read back from a checkpoint undecoded again (see [`TurnHold::restore`],
    /// which rebuilds the log). One that no longer reads as a line to hold undecoded (by
    /// another version's rules) is decoded and held whole, or dropped if it does not decode.
    fn restore_line(&mut self, l: snapshot::ResolvedLine) {
        match crate::turn_route::deferrable(&l.bytes) {
            Some(d) => {
                let deferred = Some(Deferred::of(l.at, l.place));
                let input = l.input.as_ref();
                let origin = self.origin(l.place.msg, l.arrival_ms, input, l.route, deferred);
                self.insert_line((d.turn, d.ts_ms), &l.bytes, origin, l.place.line, l.seq);
            }
            None => {
                let line = HeldLine {
                    start: 0,
                    len: u32::try_from(l.bytes.len()).unwrap_or(0),
                    ts_ms: 0,
                    seq: l.seq,
                    line: l.place.line,
                    origin: Arc::new(Origin {
                        msg: l.place.msg,
                        arrival_ms: l.arrival_ms,
                        input: l.input,
                        route: l.route,
                        deferred: Some(Deferred::of(l.at, l.place)),
                    }),
                };
                if let Some(e) = line.decode(&l.bytes) {
                    self.insert(e);
                }
            }
        }
    }

    /// The origin of a held line or event of message `msg` (the last one's, shared, when
    /// they are the same).
    fn origin(
        &mut self,
        msg: u64,
        arrival_ms: i64,
        input: Option<&Arc<str>>,
        route: Route,
        deferred: Option<Deferred>,
    ) -> Arc<Origin> {
        if let Some(last) = &self.last_origin
            && last.msg == msg
            && last.arrival_ms == arrival_ms
            && last.route == route
            && last.deferred == deferred
            && match (&last.input, input) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                (None, None) => true,
                _ => false,
            }
        {
            return last.clone();
        }
        let origin = Arc::new(Origin {
            msg,
            arrival_ms,
            input: input.cloned(),
            route,
            deferred,
        });
        self.last_origin = Some(origin.clone());
        origin
    }

    /// Hold line `line` of `origin`'s message (`bytes`, turn and time as
    /// [`TurnHold::push_line`] takes them) with arrival number `seq`, without the bound.
    fn insert_line(
        &mut self,
        (turn, ts_ms): (&[u8], i64),
        bytes: &[u8],
        origin: Arc<Origin>,
        line: u32,
        seq: u64,
    ) -> bool {
        let arrival_ms = origin.arrival_ms;
        if bytes.len() > u32::MAX as usize {
            return false;
        }
        // One lookup for a held turn (each a likely cache miss in a map of thousands).
        let held = match self.turns.get_mut(turn) {
            Some(held) => held,
            None => {
                let new = self.new_holding(seq, arrival_ms);
                self.turns.entry(turn.into()).or_insert(new)
            }
        };
        let start = held.bytes.len();
        if start.saturating_add(bytes.len()) > u32::MAX as usize {
            return false; // (never for a turn new now: it holds no line yet)
        }
        let start = start as u32;
        held.last_arrival_ms = held.last_arrival_ms.max(arrival_ms);
        if held.lines.capacity() == 0 {
            // Room for a turn's tens of lines (at most 64 KiB at first): growing from one,
            // each doubling copying them again.
            held.lines.reserve(16);
            held.bytes
                .reserve(bytes.len().saturating_mul(16).min(1 << 16));
        }
        held.bytes.extend_from_slice(bytes);
        held.lines.push(HeldLine {
            start,
            len: bytes.len() as u32,
            ts_ms,
            seq,
            line,
            origin: origin.clone(),
        });
        held.placed += 1;
        let holding = held.first_seq;
        self.events += 1;
        self.latest_arrival_ms = self.latest_arrival_ms.max(arrival_ms);
        let place = Place {
            msg: origin.msg,
            line,
        };
        self.log(Placed {
            place,
            seq,
            holding,
            origin,
        });
        true
    }

    /// Add an entry to the log of placed events.
    fn log(&mut self, entry: Placed) {
        self.placed.push(entry);
        self.group_entry(self.placed.len() - 1);
    }

    /// Past [`TurnHold::MAX_EVENTS`]: release the turns quiet the longest until a tenth of
    /// the bound is free, so the scan of every turn this takes is paid once per that many
    /// events (one turn at a time, each event past the bound paid a scan: 7 µs a push with
    /// 20,000 turns held, against 0.3).
    fn release_early(&mut self, released: &mut Vec<ReleasedTurn>) {
        let mut quiet: Vec<(i64, u64, &Box<[u8]>)> = self
            .turns
            .iter()
            .map(|(id, h)| (h.last_arrival_ms, h.first_seq, id))
            .collect();
        quiet.sort_unstable();
        let target = Self::MAX_EVENTS - Self::MAX_EVENTS / 10;
        let mut freed = 0;
        let mut ids = Vec::new();
        for (_, _, id) in quiet {
            if self.events - freed <= target {
                break;
            }
            freed += self
                .turns
                .get(id)
                .map_or(0, |h| h.events.len() + h.lines.len());
            ids.push(id.clone());
        }
        let before = released.len();
        released.extend(ids.iter().filter_map(|id| self.take_turn(id)));
        for turn in &released[before..] {
            self.early.turns += 1;
            self.early.events += turn.len() as u64;
        }
    }

    /// The turns released early (the hold full) since the last call.
    pub fn take_released_early(&mut self) -> ReleasedEarly {
        std::mem::take(&mut self.early)
    }

    /// Hold `e` (events come in arrival order); its turn's holding.
    fn insert(&mut self, e: HeldEvent) -> u64 {
        self.events += 1;
        self.latest_arrival_ms = self.latest_arrival_ms.max(e.arrival_ms);
        let placed = e.place.is_some();
        if !placed {
            self.unplaced += 1;
        }
        let held = match self.turns.get_mut(e.event.turn.as_bytes()) {
            Some(held) => held,
            None => {
                let new = self.new_holding(e.seq, e.arrival_ms);
                self.turns
                    .entry(e.event.turn.as_bytes().into())
                    .or_insert(new)
            }
        };
        held.last_arrival_ms = held.last_arrival_ms.max(e.arrival_ms);
        if held.events.capacity() == 0 {
            // A turn is tens of events: growing from one, moving each held event (hundreds
            // of bytes) at every doubling, cost a tenth of holding it.
            held.events.reserve(16);
        }
        if placed {
            held.placed += 1;
        } else {
            held.unplaced += 1;
        }
        held.events.push(e);
        held.first_seq
    }

    /// A new holding of a turn, first held with arrival number `seq` at `arrival_ms`.
    fn new_holding(&mut self, seq: u64, arrival_ms: i64) -> Held {
        self.holdings.insert(seq, ());
        Held {
            first_seq: seq,
            last_arrival_ms: arrival_ms,
            ..Held::default()
        }
    }

    /// Release every turn quiet for the settle time at `now_ms` (all of them with `all`),
    /// each turn's events in time order, turns in the order they were first seen.
    /// Lines held undecoded are decoded (one that does not decode to an event is left out).
    pub fn release(&mut self, now_ms: i64, all: bool, released: &mut Vec<HeldEvent>) {
        self.release_each(now_ms, all, |turn| {
            released.extend(std::mem::take(turn).into_events())
        });
    }

    /// [`TurnHold::release`], one turn at a time: `each` gets a turn's events (in time order)
    /// as the hold kept them, so a caller that correlates them as they come never gathers
    /// every quiet turn into one list (a settle time's worth of a busy partition: growing
    /// and freeing that list cost more than correlating it).
    pub fn release_each(
        &mut self,
        now_ms: i64,
        all: bool,
        mut each: impl FnMut(&mut ReleasedTurn),
    ) {
        let settle_ms = self.settle_ms;
        // Taken out whole (no id copied): the quiet turns of a busy partition's tick are
        // tens of thousands.
        let mut quiet: Vec<Held> = self
            .turns
            .extract_if(|_, h| all || now_ms.saturating_sub(h.last_arrival_ms) >= settle_ms)
            .map(|(_, h)| h)
            .collect();
        quiet.sort_unstable_by_key(|h| h.first_seq);
        for held in quiet {
            each(&mut self.released(held));
        }
    }

    /// Remove turn `id` from the hold: its events and lines, each in time order.
    fn take_turn(&mut self, id: &[u8]) -> Option<ReleasedTurn> {
        let held = self.turns.remove(id)?;
        Some(self.released(held))
    }

    /// A holding taken out of the hold: its events and lines, each in time order.
    fn released(&mut self, mut held: Held) -> ReleasedTurn {
        self.events -= held.events.len() + held.lines.len();
        self.holdings.remove(&held.first_seq);
        self.unplaced -= held.unplaced;
        self.placed_dead += held.placed;
        if self.placed_dead > 1024 && self.placed_dead * 2 > self.placed.len() {
            let holdings = &self.holdings;
            self.placed.retain(|p| holdings.contains_key(&p.holding));
            self.placed_dead = 0;
            self.regroup();
        } else if held.placed > 0 && !self.unordered {
            let mut last = None;
            let events = held.events.iter().filter_map(|e| e.place.map(|p| p.msg));
            for msg in events.chain(held.lines.iter().map(|l| l.origin.msg)) {
                if last != Some(msg) {
                    self.ungroup(msg);
                    last = Some(msg);
                }
            }
        }
        held.events
            .sort_by_key(|e| (e.event.ts_ms.unwrap_or(e.arrival_ms), e.seq));
        held.lines.sort_by_key(|l| (l.ts_ms, l.seq));
        ReleasedTurn {
            events: held.events,
            lines: held.lines,
            bytes: held.bytes,
        }
    }
}

#[cfg(test)]
mod tests;
