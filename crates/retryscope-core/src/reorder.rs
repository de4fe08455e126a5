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
    /// Each line ([`Place::line`]), ascending, as the difference from the one before (the
    /// first from 0).
    pub lines: Vec<u32>,
    /// Each line's arrival number ([`HeldEvent::seq`]), as the difference from the one
    /// before (the first from 0).
    pub seqs: Vec<i64>,
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
        self.refs.iter().map(|r| r.lines.len()).sum()
    }

    /// Read every reference back through `line` (the bytes at a place, if it is still
    /// there) and keep the events whole; the number that could not be read (the message is
    /// gone, or its line no longer decodes to an event), which are lost.
    pub fn resolve<'a>(&mut self, line: impl Fn(Place) -> Option<&'a [u8]>) -> u64 {
        let mut lost = 0u64;
        let mut skips = SkipCounts::default();
        for r in std::mem::take(&mut self.refs) {
            let (mut at, mut seq) = (0u32, 0i64);
            for (dl, ds) in r.lines.iter().zip(&r.seqs) {
                at = at.saturating_add(*dl);
                seq = seq.wrapping_add(*ds);
                let place = Place {
                    msg: r.msg,
                    line: at,
                };
                let event =
                    line(place).and_then(|bytes| match native::decode_line(bytes, &mut skips) {
                        Ok(NativeLine::Event(ev)) if crate::bounds::check(&ev).is_ok() => {
                            Some(ev.into_owned())
                        }
                        _ => None,
                    });
                match (event, u64::try_from(seq)) {
                    (Some(event), Ok(seq)) => self.events.push(HeldEvent {
                        event,
                        arrival_ms: r.arrival_ms,
                        seq,
                        input: r.input.clone(),
                        route: r.route,
                        place: Some(place),
                    }),
                    _ => lost += 1,
                }
            }
            lost += r.lines.len().abs_diff(r.seqs.len()) as u64;
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
        // The last line and arrival number written, which the next are written from.
        let (mut line, mut seq) = (0u32, 0i64);
        // Whether some held event with a place is too old to be kept by reference.
        let mut old = false;
        for p in &self.placed {
            if !self.holdings.contains_key(&p.holding) {
                continue; // its turn was released
            }
            if p.arrival_ms < horizon {
                old = true;
                continue;
            }
            let same = refs.last().is_some_and(|r| {
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
            if !same {
                refs.push(HeldLines {
                    msg: p.place.msg,
                    arrival_ms: p.arrival_ms,
                    input: p.input.clone(),
                    route: p.route,
                    lines: Vec::new(),
                    seqs: Vec::new(),
                });
                (line, seq) = (0, 0);
            }
            let p_seq = i64::try_from(p.seq).unwrap_or(i64::MAX);
            if let Some(r) = refs.last_mut() {
                r.lines.push(p.place.line - line);
                r.seqs.push(p_seq.wrapping_sub(seq));
            }
            (line, seq) = (p.place.line, p_seq);
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
