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

use crate::decode::SkipCounts;
use crate::decode::native::{self, NativeLine};
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
}

#[derive(Debug, Clone, Default)]
struct Held {
    /// The arrival number of its first event: names this holding of the turn.
    first_seq: u64,
    last_arrival_ms: i64,
    events: Vec<HeldEvent>,
    /// Of its events, those with a place (in [`TurnHold`]'s log) and those without.
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
    arrival_ms: i64,
    input: Option<Arc<str>>,
    route: Route,
    /// The holding it belongs to ([`Held::first_seq`]): gone once that turn is released.
    holding: u64,
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

/// What a checkpoint keeps of a [`TurnHold`].
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
    /// there) and keep the events whole; the number that could not be read (the message is
    /// gone, or its line no longer decodes to an event), which are lost.
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

/// Turns' events held until each turn is quiet. See the module docs.
#[derive(Debug, Clone)]
pub struct TurnHold {
    settle_ms: i64,
    turns: FastMap<String, Held>,
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
        }
    }

    /// Resume holding what `snapshot` held (its references read back by
    /// [`HoldSnapshot::resolve`]: those left unread are not held).
    pub fn restore(settle_ms: i64, snapshot: HoldSnapshot) -> Self {
        let mut hold = TurnHold::new(settle_ms);
        hold.seq = snapshot.seq;
        let mut events = snapshot.events;
        events.sort_by_key(|e| e.seq);
        for e in events {
            hold.insert(e);
        }
        // The log in place order, each entry under its turn's holding as restored.
        let mut placed: Vec<Placed> = hold
            .turns
            .values()
            .flat_map(|h| {
                h.events.iter().filter_map(|e| {
                    Some(Placed {
                        place: e.place?,
                        seq: e.seq,
                        arrival_ms: e.arrival_ms,
                        input: e.input.clone(),
                        route: e.route,
                        holding: h.first_seq,
                    })
                })
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
            }
            events.sort_by_key(|e| e.seq);
        }
        Some(HoldSnapshot {
            events,
            refs,
            seq: self.seq,
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
            if p.arrival_ms < horizon {
                old = true;
                continue;
            }
            let same = refs.len() > first
                && refs.last().is_some_and(|r| {
                    r.msg == p.place.msg
                        && p.place.line >= line
                        && r.arrival_ms == p.arrival_ms
                        && r.route == p.route
                        && match (&r.input, &p.input) {
                            (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
                            (None, None) => true,
                            _ => false,
                        }
                });
            let p_seq = i64::try_from(p.seq).unwrap_or(i64::MAX);
            if !same {
                refs.push(HeldLines {
                    msg: p.place.msg,
                    arrival_ms: p.arrival_ms,
                    input: p.input.clone(),
                    route: p.route,
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
                g.first_arrival_ms = g.first_arrival_ms.min(p.arrival_ms);
                g.written.take();
            }
            _ => self.groups.push(Group {
                msg: p.place.msg,
                start: at,
                end: at + 1,
                first_arrival_ms: p.arrival_ms,
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
        released: &mut Vec<HeldEvent>,
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
        });
        if let Some(place) = place {
            self.placed.push(Placed {
                place,
                seq,
                arrival_ms,
                input,
                route,
                holding,
            });
            self.group_entry(self.placed.len() - 1);
        }
        if self.events > Self::MAX_EVENTS {
            self.release_early(released);
        }
    }

    /// Past [`TurnHold::MAX_EVENTS`]: release the turns quiet the longest until a tenth of
    /// the bound is free, so the scan of every turn this takes is paid once per that many
    /// events (one turn at a time, each event past the bound paid a scan: 7 µs a push with
    /// 20,000 turns held, against 0.3).
    fn release_early(&mut self, released: &mut Vec<HeldEvent>) {
        let mut quiet: Vec<(i64, u64, &String)> = self
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
            freed += self.turns.get(id).map_or(0, |h| h.events.len());
            ids.push(id.clone());
        }
        for id in ids {
            self.release_turn(&id, released);
        }
    }

    /// Hold `e` (events come in arrival order); its turn's holding.
    fn insert(&mut self, e: HeldEvent) -> u64 {
        self.events += 1;
        self.latest_arrival_ms = self.latest_arrival_ms.max(e.arrival_ms);
        let held = match self.turns.get_mut(&*e.event.turn) {
            Some(held) => held,
            None => {
                self.holdings.insert(e.seq, ());
                self.turns
                    .entry(e.event.turn.to_string())
                    .or_insert_with(|| Held {
                        first_seq: e.seq,
                        last_arrival_ms: e.arrival_ms,
                        // A turn is tens of events: growing from one, moving each held
                        // event (hundreds of bytes) at every doubling, cost a tenth of
                        // holding it.
                        events: Vec::with_capacity(16),
                        ..Held::default()
                    })
            }
        };
        held.last_arrival_ms = held.last_arrival_ms.max(e.arrival_ms);
        if e.place.is_some() {
            held.placed += 1;
        } else {
            held.unplaced += 1;
            self.unplaced += 1;
        }
        held.events.push(e);
        held.first_seq
    }

    /// Release every turn quiet for the settle time at `now_ms` (all of them with `all`),
    /// each turn's events in time order, turns in the order they were first seen.
    pub fn release(&mut self, now_ms: i64, all: bool, released: &mut Vec<HeldEvent>) {
        self.release_each(now_ms, all, |turn| released.append(turn));
    }

    /// [`TurnHold::release`], one turn at a time: `each` gets a turn's events (in time order)
    /// as the hold kept them, so a caller that correlates them as they come never gathers
    /// every quiet turn into one list (a settle time's worth of a busy partition: growing
    /// and freeing that list cost more than correlating it).
    pub fn release_each(
        &mut self,
        now_ms: i64,
        all: bool,
        mut each: impl FnMut(&mut Vec<HeldEvent>),
    ) {
        let mut quiet: Vec<(u64, String)> = self
            .turns
            .iter()
            .filter(|(_, h)| all || now_ms.saturating_sub(h.last_arrival_ms) >= self.settle_ms)
            .map(|(id, h)| (h.first_seq, id.clone()))
            .collect();
        quiet.sort_unstable();
        for (_, id) in quiet {
            if let Some(mut events) = self.take_turn(&id) {
                each(&mut events);
            }
        }
    }

    fn release_turn(&mut self, id: &str, released: &mut Vec<HeldEvent>) {
        if let Some(mut events) = self.take_turn(id) {
            released.append(&mut events);
        }
    }

    /// Remove turn `id` from the hold: its events, in time order.
    fn take_turn(&mut self, id: &str) -> Option<Vec<HeldEvent>> {
        let mut held = self.turns.remove(id)?;
        self.events -= held.events.len();
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
            for msg in held.events.iter().filter_map(|e| e.place.map(|p| p.msg)) {
                if last != Some(msg) {
                    self.ungroup(msg);
                    last = Some(msg);
                }
            }
        }
        held.events
            .sort_by_key(|e| (e.event.ts_ms.unwrap_or(e.arrival_ms), e.seq));
        Some(held.events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventKind;

    fn ev(turn: &str, ts: i64) -> Event<'static> {
        Event::owned(turn, Some(0), Some(ts), EventKind::RenderReset)
    }

    #[test]
    fn released_one_turn_at_a_time_each_whole_in_time_order_turns_as_first_seen() {
        let mut h = TurnHold::new(1_000);
        let mut out = Vec::new();
        for (turn, ts, at) in [
            ("b", 7, 0),
            ("a", 3, 10),
            ("b", 2, 20),
            ("a", 1, 30),
            ("c", 9, 900),
        ] {
            h.push(ev(turn, ts), at, None, 0, None, &mut out);
        }
        let mut turns = Vec::new();
        h.release_each(1_100, false, |events| {
            turns.push(
                events
                    .iter()
                    .map(|e| (e.event.turn.to_string(), e.event.ts_ms))
                    .collect::<Vec<_>>(),
            );
        });
        // c is not quiet yet; b was seen first; each turn sorted by its own time.
        let at = |t: &str, ts: i64| (t.to_string(), Some(ts));
        assert_eq!(
            turns,
            vec![vec![at("b", 2), at("b", 7)], vec![at("a", 1), at("a", 3)]]
        );
        assert_eq!(h.len(), 1);
        let mut rest = Vec::new();
        h.release(i64::MAX, true, &mut rest);
        assert_eq!(rest.len(), 1);
        assert!(h.is_empty());
    }

    #[test]
    fn a_quiet_turn_comes_out_in_time_order_and_a_busy_one_waits() {
        let mut h = TurnHold::new(1_000);
        let mut out = Vec::new();
        // Turn a's second half first (ts 10, 11), its first half later (ts 1, 2).
        for (turn, ts, at) in [
            ("a", 10, 0),
            ("a", 11, 0),
            ("b", 5, 100),
            ("a", 1, 500),
            ("a", 2, 600),
        ] {
            h.push(ev(turn, ts), at, None, 0, None, &mut out);
        }
        h.release(1_050, false, &mut out);
        assert!(
            out.is_empty(),
            "a's last event came 450 ms ago, b's 950: neither is quiet"
        );
        // Held across a checkpoint.
        let snap = h.snapshot().expect("held");
        let mut h = TurnHold::restore(1_000, snap);
        h.release(1_600, false, &mut out);
        let got: Vec<(String, Option<i64>)> = out
            .iter()
            .map(|e| (e.event.turn.to_string(), e.event.ts_ms))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a".into(), Some(1)),
                ("a".into(), Some(2)),
                ("a".into(), Some(10)),
                ("a".into(), Some(11)),
                ("b".into(), Some(5)),
            ]
        );
        assert!(h.is_empty() && h.snapshot().is_none());
    }

    /// A native line of turn `turn` at `ts`, as a cluster message carries it.
    fn line(turn: &str, ts: i64) -> String {
        format!(r#"{{"type":"render_reset","turn":"{turn}","attempt":0,"ts_ms":{ts}}}"#)
    }

    #[test]
    fn events_that_can_be_read_again_are_checkpointed_by_reference_and_read_back() {
        // Two messages of lines; one event (a provider chunk's, say) that cannot be read again.
        let msgs: Vec<Vec<String>> = vec![
            vec![line("a", 10), line("b", 5), line("a", 11)],
            vec![line("b", 6), line("a", 1)],
        ];
        let input: Arc<str> = Arc::from("host-b:agent.jsonl");
        let mut h = TurnHold::new(1_000);
        let mut out = Vec::new();
        for (m, lines) in msgs.iter().enumerate() {
            for (i, l) in lines.iter().enumerate() {
                let mut skips = SkipCounts::default();
                let Ok(NativeLine::Event(ev)) = native::decode_line(l.as_bytes(), &mut skips)
                else {
                    panic!("{l} decodes");
                };
                let place = Place {
                    msg: 100 + m as u64 * 7,
                    line: i as u32,
                };
                h.push(
                    ev.into_owned(),
                    50 * m as i64,
                    Some(input.clone()),
                    0,
                    Some(place),
                    &mut out,
                );
            }
        }
        h.push(ev("a", 2), 60, None, 3, None, &mut out);
        let want = {
            let mut all = Vec::new();
            h.clone().release(i64::MAX, true, &mut all);
            all
        };
        let snap = h.snapshot().expect("held");
        assert_eq!(
            snap.events.len(),
            1,
            "only the unplaced event is kept whole"
        );
        assert_eq!(snap.ref_count(), 5);
        assert_eq!(snap.ref_messages(), vec![100, 107]);
        let json = serde_json::to_string(&snap).expect("encodes");
        assert_eq!(
            json.matches("render_reset").count(),
            1,
            "only the whole event's text: {json}"
        );
        let mut back: HoldSnapshot = serde_json::from_str(&json).expect("decodes");
        let lost = back.resolve(|p| {
            let m = usize::try_from((p.msg - 100) / 7).ok()?;
            msgs.get(m)?.get(p.line as usize).map(|l| l.as_bytes())
        });
        assert_eq!(lost, 0);
        let mut got = Vec::new();
        TurnHold::restore(1_000, back).release(i64::MAX, true, &mut got);
        assert_eq!(got, want, "the same events, arrivals, order and origins");
        assert_eq!(got.len(), 6);

        // A message gone from the stream: its events are counted lost, the rest come back.
        let mut back: HoldSnapshot = serde_json::from_str(&json).expect("decodes");
        let lost = back.resolve(|p| (p.msg == 107).then(|| msgs[1][p.line as usize].as_bytes()));
        assert_eq!(lost, 3);
        assert_eq!(back.events.len(), 3);
    }

    #[test]
    fn a_released_turn_leaves_the_references_and_held_again_keeps_only_its_new_events() {
        let mut h = TurnHold::new(1_000);
        let mut out = Vec::new();
        let at = |msg, line| Some(Place { msg, line });
        h.push(ev("a", 1), 0, None, 0, at(1, 0), &mut out);
        h.push(ev("b", 1), 0, None, 0, at(1, 1), &mut out);
        h.push(ev("a", 2), 500, None, 0, at(2, 0), &mut out);
        h.release(1_200, false, &mut out); // b is quiet, a is not
        assert_eq!(out.len(), 1);
        h.release(1_600, false, &mut out); // now a
        assert_eq!(out.len(), 3);
        assert!(h.snapshot().is_none());
        // Turn a again, in a later message: only that event is referenced.
        h.push(ev("a", 9), 2_000, None, 0, at(3, 4), &mut out);
        let snap = h.snapshot().expect("held");
        assert_eq!(snap.ref_messages(), vec![3]);
        assert_eq!((snap.ref_count(), snap.events.len()), (1, 0));
        // Many turns released: the log is compacted and still right.
        for i in 0..5_000u32 {
            h.push(ev(&format!("t{i}"), 1), 3_000, None, 0, at(4, i), &mut out);
        }
        h.release(3_500, false, &mut out); // a (last at 2,000) goes, the t-turns stay
        assert_eq!(
            h.placed.len(),
            5_004,
            "the four entries of released turns wait for more"
        );
        h.release(10_000, false, &mut out);
        h.push(ev("z", 1), 10_000, None, 0, at(5, 0), &mut out);
        assert!(
            h.placed.len() <= 1 + 1024,
            "compacted (at most 1,024 dead entries wait): {}",
            h.placed.len()
        );
        let snap = h.snapshot().expect("held");
        assert_eq!((snap.ref_messages(), snap.ref_count()), (vec![5], 1));
    }

    #[test]
    fn an_event_held_past_the_reference_age_is_kept_whole() {
        let mut h = TurnHold::new(TurnHold::REF_MAX_AGE_MS * 4);
        let mut out = Vec::new();
        let place = |msg| Some(Place { msg, line: 0 });
        h.push(ev("long", 1), 0, None, 0, place(1), &mut out);
        h.push(
            ev("long", 2),
            TurnHold::REF_MAX_AGE_MS + 1,
            None,
            0,
            place(2),
            &mut out,
        );
        let snap = h.snapshot().expect("held");
        assert_eq!(snap.events.len(), 1);
        assert_eq!(snap.events[0].event.ts_ms, Some(1));
        assert_eq!(snap.ref_messages(), vec![2]);
    }

    #[test]
    fn a_snapshot_of_the_old_shape_is_read_and_the_new_one_refused_by_it() {
        let old = r#"{"events":[],"seq":4}"#;
        let snap: HoldSnapshot = serde_json::from_str(old).expect("old shape read");
        assert_eq!(snap.seq, 4);
        // What a version before references reads: it must fail, not drop them.
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Before {
            events: Vec<HeldEvent>,
            seq: u64,
        }
        let new = serde_json::to_string(&snap).expect("encodes");
        assert!(serde_json::from_str::<Before>(&new).is_err(), "{new}");
    }

    #[test]
    fn consecutive_lines_are_written_as_runs_and_read_back_each_in_its_place() {
        // Message 7: lines 0..1000 of turns t0..t9 interleaved; turn t3 released mid-way.
        let lines: Vec<String> = (0..1000)
            .map(|i| line(&format!("t{}", i % 10), i))
            .collect();
        let mut h = TurnHold::new(1_000);
        let mut out = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            let mut skips = SkipCounts::default();
            let Ok(NativeLine::Event(ev)) = native::decode_line(l.as_bytes(), &mut skips) else {
                panic!("{l} decodes");
            };
            let at = Some(Place {
                msg: 7,
                line: i as u32,
            });
            h.push(ev.into_owned(), 5, None, 0, at, &mut out);
        }
        let snap = h.snapshot().expect("held");
        assert_eq!(snap.refs.len(), 1);
        assert_eq!(snap.refs[0].spans, vec![(0, 0, 1000)], "one run");
        assert!(snap.refs[0].lines.is_empty());
        // Release t3 alone: every tenth line leaves a gap.
        let t3 = h.take_turn("t3").expect("held");
        assert_eq!(t3.len(), 100);
        let want = {
            let mut all = Vec::new();
            h.clone().release(i64::MAX, true, &mut all);
            all
        };
        let snap = h.snapshot().expect("held");
        assert_eq!(snap.ref_count(), 900);
        assert_eq!(snap.refs[0].spans.len(), 101, "a run around each gap");
        assert_eq!(snap.refs[0].spans[0], (0, 0, 3));
        assert_eq!(
            snap.refs[0].spans[1],
            (2, 2, 9),
            "lines 4..=12 after line 2"
        );
        let json = serde_json::to_string(&snap).expect("encodes");
        let mut back: HoldSnapshot = serde_json::from_str(&json).expect("decodes");
        let lost = back.resolve(|p| {
            (p.msg == 7)
                .then(|| lines.get(p.line as usize))?
                .map(|l| l.as_bytes())
        });
        assert_eq!(lost, 0);
        let mut got = Vec::new();
        TurnHold::restore(1_000, back).release(i64::MAX, true, &mut got);
        assert_eq!(got, want);
    }

    #[test]
    fn references_line_by_line_as_older_versions_wrote_them_are_read_and_runs_refused_by_them() {
        let lines = [line("a", 1), line("b", 2), line("a", 3)];
        // Lines 0 and 2 of message 9, arrival numbers 4 and 6, as a version before runs wrote.
        let old = r#"{"by_value":[],"refs":[{"msg":9,"arrival_ms":5,"input":null,"route":0,
            "lines":[0,2],"seqs":[4,2]}],"seq":7}"#;
        let mut snap: HoldSnapshot = serde_json::from_str(old).expect("old shape read");
        assert_eq!(snap.ref_count(), 2);
        let lost = snap.resolve(|p| {
            (p.msg == 9)
                .then(|| lines.get(p.line as usize))?
                .map(|l| l.as_bytes())
        });
        assert_eq!(lost, 0);
        let got: Vec<(u32, u64)> = snap
            .events
            .iter()
            .map(|e| (e.place.map_or(99, |p| p.line), e.seq))
            .collect();
        assert_eq!(got, vec![(0, 4), (2, 6)]);

        // What a version before runs reads: it must fail, not drop the lines.
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct BeforeLines {
            msg: u64,
            lines: Vec<u32>,
            seqs: Vec<i64>,
        }
        let mut h = TurnHold::new(1_000);
        let at = Some(Place { msg: 9, line: 0 });
        h.push(ev("a", 1), 0, None, 0, at, &mut Vec::new());
        let refs = h.snapshot().expect("held").refs;
        let new = serde_json::to_string(&refs[0]).expect("encodes");
        assert!(serde_json::from_str::<BeforeLines>(&new).is_err(), "{new}");

        // A run too long to be a message's is counted lost, not walked, and the next run is
        // still read from where it ends (past this message's three lines: lost too).
        let hostile = r#"{"by_value":[],"refs":[{"msg":9,"arrival_ms":5,"input":null,"route":0,
            "spans":[[1,0,4194305],[0,0,1]]}],"seq":7}"#;
        let mut snap: HoldSnapshot = serde_json::from_str(hostile).expect("read");
        let lost = snap.resolve(|p| lines.get(p.line as usize).map(|l| l.as_bytes()));
        assert_eq!((lost, snap.events.len()), (4_194_306, 0));
        // Runs of the longest length, thousands of them, against a message of three lines:
        // the three are read back, the rest counted at once (not walked, nothing allocated).
        let runs = vec!["[0,0,4194304]"; 5_000].join(",");
        let bomb = format!(
            r#"{{"by_value":[],"refs":[{{"msg":9,"arrival_ms":5,"input":null,"route":0,
            "spans":[{runs}]}}],"seq":7}}"#
        );
        let mut snap: HoldSnapshot = serde_json::from_str(&bomb).expect("read");
        let lost = snap.resolve(|p| lines.get(p.line as usize).map(|l| l.as_bytes()));
        assert_eq!(snap.events.len(), 3);
        assert_eq!(lost, 5_000 * 4_194_304 - 3);
    }

    #[test]
    fn a_snapshot_written_from_kept_groups_equals_one_walking_every_entry() {
        // Lines of 40 turns over 300 messages, turns released as they go quiet, snapshots
        // taken in between: each must equal a walk of the whole log (what `unordered` does).
        let mut h = TurnHold::new(400);
        let mut out = Vec::new();
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut snapshots = 0;
        for msg in 0..300u64 {
            let now = msg as i64 * 50;
            for line in 0..(1 + next(8)) as u32 {
                let turn = format!("t{}", (msg / 10) * 4 + next(4));
                let place = Some(Place { msg, line });
                h.push(ev(&turn, now), now, None, 0, place, &mut out);
            }
            if next(3) == 0 {
                h.release(now, false, &mut out);
            }
            if next(2) == 0 {
                let mut walked = h.clone();
                walked.unordered = true;
                assert_eq!(h.snapshot(), walked.snapshot(), "after message {msg}");
                snapshots += 1;
            }
        }
        assert!(snapshots > 100 && !out.is_empty() && !h.is_empty());
        assert!(!h.unordered && h.groups.len() > 1);
        // Places out of order: snapshots walk the log, and still name every held event.
        h.push(
            ev("late", 1),
            15_000,
            None,
            0,
            Some(Place { msg: 3, line: 0 }),
            &mut out,
        );
        assert!(h.unordered);
        let snap = h.snapshot().expect("held");
        assert_eq!(snap.ref_count() + snap.events.len(), h.len());
    }

    #[test]
    fn past_the_bound_the_longest_quiet_turn_goes_first() {
        let mut h = TurnHold::new(60_000);
        let mut out = Vec::new();
        for i in 0..=TurnHold::MAX_EVENTS {
            let turn = if i == 0 {
                "old".to_string()
            } else {
                format!("t{}", i % 1000)
            };
            h.push(ev(&turn, i as i64), 1 + i as i64, None, 0, None, &mut out);
        }
        // The quietest turns go, "old" first, until a tenth of the bound is free: the turns
        // quiet the longest, whole.
        assert_eq!(&*out[0].event.turn, "old");
        let target = TurnHold::MAX_EVENTS - TurnHold::MAX_EVENTS / 10;
        assert!(h.len() <= target, "{} held", h.len());
        assert_eq!(h.len() + out.len(), TurnHold::MAX_EVENTS + 1, "none lost");
        let last_released = out.iter().map(|e| e.arrival_ms).max().unwrap_or(0);
        let first_held = h
            .turns
            .values()
            .map(|t| t.last_arrival_ms)
            .min()
            .unwrap_or(0);
        let released_quiet = out
            .iter()
            .map(|e| &e.event.turn)
            .collect::<std::collections::HashSet<_>>()
            .into_iter()
            .all(|t| !h.turns.contains_key(&**t));
        assert!(released_quiet, "released turns are released whole");
        assert!(
            last_released <= first_held,
            "the released turns were quiet longer than any held: last released event at \
             {last_released}, quietest held turn's last at {first_held}"
        );
    }
}
