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
//! [`TurnHold::MAX_EVENTS`] the turn quiet the longest is released early. [`HoldSnapshot`] is
//! what a checkpoint keeps of it: the events were read past, so a restart must find them.

use std::sync::Arc;

use crate::event::Event;
use crate::fasthash::FastMap;
use crate::turn_route::Route;

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
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Held {
    first_seq: u64,
    last_arrival_ms: i64,
    events: Vec<HeldEvent>,
}

/// What a checkpoint keeps of a [`TurnHold`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HoldSnapshot {
    /// Held events, in arrival order.
    pub events: Vec<HeldEvent>,
    /// The next arrival number.
    pub seq: u64,
}

/// Turns' events held until each turn is quiet. See the module docs.
#[derive(Debug, Clone)]
pub struct TurnHold {
    settle_ms: i64,
    turns: FastMap<String, Held>,
    events: usize,
    seq: u64,
}

impl TurnHold {
    /// Events held at most; past it the turn quiet the longest is released early.
    pub const MAX_EVENTS: usize = 200_000;

    /// Hold each turn until it has been quiet for `settle_ms`.
    pub fn new(settle_ms: i64) -> Self {
        TurnHold {
            settle_ms: settle_ms.max(0),
            turns: FastMap::default(),
            events: 0,
            seq: 0,
        }
    }

    /// Resume holding what `snapshot` held.
    pub fn restore(settle_ms: i64, snapshot: HoldSnapshot) -> Self {
        let mut hold = TurnHold::new(settle_ms);
        hold.seq = snapshot.seq;
        for e in snapshot.events {
            hold.insert(e);
        }
        hold
    }

    /// What a checkpoint keeps (`None` when nothing is held).
    pub fn snapshot(&self) -> Option<HoldSnapshot> {
        if self.events == 0 {
            return None;
        }
        let mut events: Vec<HeldEvent> = self
            .turns
            .values()
            .flat_map(|h| h.events.iter().cloned())
            .collect();
        events.sort_by_key(|e| e.seq);
        Some(HoldSnapshot {
            events,
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
        released: &mut Vec<HeldEvent>,
    ) {
        let seq = self.seq;
        self.seq += 1;
        self.insert(HeldEvent {
            event,
            arrival_ms,
            seq,
            input,
            route,
        });
        while self.events > Self::MAX_EVENTS {
            let Some(oldest) = self
                .turns
                .iter()
                .min_by_key(|(_, h)| (h.last_arrival_ms, h.first_seq))
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            self.release_turn(&oldest, released);
        }
    }

    fn insert(&mut self, e: HeldEvent) {
        self.events += 1;
        let held = self
            .turns
            .entry(e.event.turn.to_string())
            .or_insert_with(|| Held {
                first_seq: e.seq,
                last_arrival_ms: e.arrival_ms,
                events: Vec::new(),
            });
        held.last_arrival_ms = held.last_arrival_ms.max(e.arrival_ms);
        held.events.push(e);
    }

    /// Release every turn quiet for the settle time at `now_ms` (all of them with `all`),
    /// each turn's events in time order, turns in the order they were first seen.
    pub fn release(&mut self, now_ms: i64, all: bool, released: &mut Vec<HeldEvent>) {
        let mut quiet: Vec<(u64, String)> = self
            .turns
            .iter()
            .filter(|(_, h)| all || now_ms.saturating_sub(h.last_arrival_ms) >= self.settle_ms)
            .map(|(id, h)| (h.first_seq, id.clone()))
            .collect();
        quiet.sort();
        for (_, id) in quiet {
            self.release_turn(&id, released);
        }
    }

    fn release_turn(&mut self, id: &str, released: &mut Vec<HeldEvent>) {
        let Some(mut held) = self.turns.remove(id) else {
            return;
        };
        self.events -= held.events.len();
        held.events
            .sort_by_key(|e| (e.event.ts_ms.unwrap_or(e.arrival_ms), e.seq));
        released.extend(held.events);
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
            h.push(ev(turn, ts), at, None, 0, &mut out);
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
            h.push(ev(&turn, i as i64), 1 + i as i64, None, 0, &mut out);
        }
        assert_eq!(out.len(), 1, "one turn released");
        assert_eq!(&*out[0].event.turn, "old");
        assert_eq!(h.len(), TurnHold::MAX_EVENTS);
    }
}
