//! The correlator: a pure state machine from normalized events to turns, attempts, findings
//! and billed usage.
//!
//! No I/O, no clock, no globals: the caller passes each event with the time it arrived
//! (`now_ms`), calls [`Correlator::tick`] to let idle turns time out, and
//! [`Correlator::close_all`] at end of input. Everything the correlator learns comes out as
//! [`Output`]s, in order: live signals (a retry, a finding) as soon as they are known, and a
//! [`TurnReport`] when a turn closes. Its whole state can be snapshotted and restored, which is
//! how the live collector checkpoints open turns.

mod attempt;
pub mod attribute;
mod intern;
mod splice;
mod turn;

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cost::PriceTable;
use crate::event::{Event, EventKind};
use crate::fasthash::FastMap;
use crate::finding::Finding;
use crate::report::{CloseReason, TurnReport};

use intern::Interner;
use turn::TurnState;

/// How many idle timeouts a wire-only turn with a response in flight may stay silent.
pub const IN_FLIGHT_IDLE_FACTOR: i64 = 10;
/// The least silence (ms) after which a wire-only turn with a response in flight is closed
/// anyway: a model may think for minutes before its first token.
pub const IN_FLIGHT_MIN_IDLE_MS: i64 = 600_000;

/// Correlator settings.
#[derive(Debug, Clone)]
pub struct CorrelatorConfig {
    /// More attempts than this in one turn raise `retry_cap_exceeded`.
    pub retry_cap: u32,
    /// Tools whose executions are reads, never effects.
    pub read_only_tools: HashSet<String>,
    /// Close a turn after this long without events (arrival time); `None` disables.
    pub idle_timeout_ms: Option<i64>,
    /// Evict the least recently active turn beyond this many open turns.
    pub max_open_turns: usize,
    /// Bytes of each attempt's text kept for splice checks.
    pub text_prefix_bytes: usize,
    /// How many closed turn ids to remember, to count (not resurrect) late events.
    pub remember_closed_turns: usize,
    /// Put each attempt's text prefix in its report (content capture is opt-in).
    pub capture_content: bool,
    /// Keep a bounded timeline of events per attempt for the reports (`check --html`).
    pub timeline: bool,
}

impl Default for CorrelatorConfig {
    fn default() -> Self {
        CorrelatorConfig {
            retry_cap: 4,
            read_only_tools: HashSet::new(),
            idle_timeout_ms: Some(300_000),
            max_open_turns: 100_000,
            text_prefix_bytes: 256,
            remember_closed_turns: 10_000,
            capture_content: false,
            timeline: false,
        }
    }
}

/// Bounded labels of a turn, for live metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnLabels {
    /// Model, when known.
    pub model: Option<String>,
    /// Provider, when known.
    pub provider: Option<String>,
    /// The agent (client kind or name) of the turn's `turn_start`, when known.
    pub agent: Option<String>,
}

/// What the correlator tells its sinks.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A new attempt after the first began (counted when the retry is seen, not at close).
    Retry {
        /// The turn's model and provider as known now.
        labels: TurnLabels,
        /// The client's reason, when it gave one.
        reason: Option<String>,
    },
    /// A finding, as soon as it is known, with the turn's labels as known then.
    Finding(Finding, TurnLabels),
    /// A turn closed.
    TurnClosed(Box<TurnReport>),
}

/// Counters about the input itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorrelatorStats {
    /// Events observed.
    pub events: u64,
    /// Events out of order: for an attempt already replaced, or a retry to an older attempt.
    pub late_events: u64,
    /// Events for a turn that had already closed (counted and dropped).
    pub after_close_events: u64,
    /// Turns evicted to bound memory.
    pub evicted_turns: u64,
    /// Turns opened.
    pub turns_opened: u64,
    /// Turns closed.
    pub turns_closed: u64,
    /// Events for a closed turn's id that came from a later input: a new turn with the same
    /// id (counted, and reported, since ids are meant to be unique).
    #[serde(default)]
    pub reused_turn_ids: u64,
}

impl CorrelatorStats {
    /// Add another correlator's counters (from another worker).
    pub fn add(&mut self, other: &CorrelatorStats) {
        self.events += other.events;
        self.late_events += other.late_events;
        self.after_close_events += other.after_close_events;
        self.evicted_turns += other.evicted_turns;
        self.turns_opened += other.turns_opened;
        self.turns_closed += other.turns_closed;
        self.reused_turn_ids += other.reused_turn_ids;
    }
}

/// The correlator's complete state, for checkpoints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CorrelatorSnapshot {
    turns: Vec<TurnState>,
    closed: Vec<String>,
    stats: CorrelatorStats,
    seq: u64,
}

impl CorrelatorSnapshot {
    /// Open turns held.
    pub fn open_turns(&self) -> usize {
        self.turns.len()
    }

    /// One snapshot of the correlators that shared the turns of the same input (the live
    /// engine's shards), taken at the same point of it: their turns (in opening order), the
    /// closed ids they remember, their counters added up.
    pub fn merge(parts: Vec<CorrelatorSnapshot>) -> CorrelatorSnapshot {
        let mut merged = CorrelatorSnapshot {
            turns: Vec::new(),
            closed: Vec::new(),
            stats: CorrelatorStats::default(),
            seq: 0,
        };
        for part in parts {
            merged.turns.extend(part.turns);
            merged.closed.extend(part.closed);
            merged.stats.add(&part.stats);
            merged.seq = merged.seq.max(part.seq);
        }
        merged.turns.sort_by_key(|t| t.opened_seq());
        merged
    }

    /// This snapshot cut into `count` (at least one), turn `id` going to part `owner(id)`:
    /// the inverse of [`CorrelatorSnapshot::merge`], for resuming with shards. The counters
    /// go to part 0, so that they still add up.
    pub fn split(self, count: usize, owner: impl Fn(&str) -> usize) -> Vec<CorrelatorSnapshot> {
        let count = count.max(1);
        let mut parts: Vec<CorrelatorSnapshot> = (0..count)
            .map(|_| CorrelatorSnapshot {
                turns: Vec::new(),
                closed: Vec::new(),
                stats: CorrelatorStats::default(),
                seq: self.seq,
            })
            .collect();
        parts[0].stats = self.stats;
        for t in self.turns {
            let i = owner(t.id()).min(count - 1);
            parts[i].turns.push(t);
        }
        for id in self.closed {
            let i = owner(&id).min(count - 1);
            parts[i].closed.push(id);
        }
        parts
    }
}

/// Events in, turns out. See the module docs.
#[derive(Debug)]
pub struct Correlator {
    cfg: CorrelatorConfig,
    prices: Arc<PriceTable>,
    turns: FastMap<String, Box<TurnState>>,
    interner: Interner,
    closed_order: VecDeque<String>,
    /// Closed turn ids, with the input they closed in.
    closed: FastMap<String, u32>,
    stats: CorrelatorStats,
    seq: u64,
    seq_hint: Option<u64>,
    /// The current input (see [`Correlator::next_input`]).
    input: u32,
}

impl Correlator {
    /// A correlator with no open turns.
    pub fn new(cfg: CorrelatorConfig, prices: Arc<PriceTable>) -> Self {
        Correlator {
            cfg,
            prices,
            turns: FastMap::default(),
            interner: Interner::default(),
            closed_order: VecDeque::new(),
            closed: FastMap::default(),
            stats: CorrelatorStats::default(),
            seq: 0,
            seq_hint: None,
            input: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &CorrelatorConfig {
        &self.cfg
    }

    /// Input counters.
    pub fn stats(&self) -> CorrelatorStats {
        self.stats
    }

    /// Turns currently open.
    pub fn open_turns(&self) -> usize {
        self.turns.len()
    }

    /// Number the next new turn `seq` (e.g. its global line number), so that correlators
    /// sharing one input by turn order their end-of-input closes consistently.
    pub fn set_sequence_hint(&mut self, seq: u64) {
        self.seq_hint = Some(seq);
    }

    /// The next events come from another input (the next file of `check`). A turn id that
    /// closed in an earlier input and shows up again is then a new turn, counted in
    /// [`CorrelatorStats::reused_turn_ids`], not a late event of the closed one. Turns still
    /// open carry on across inputs (a turn split over rotated files is one turn).
    pub fn next_input(&mut self) {
        self.input = self.input.saturating_add(1);
    }

    /// Apply one event that arrived at `now_ms` (used as its time when it has none).
    pub fn observe(&mut self, ev: &Event<'_>, now_ms: i64, out: &mut Vec<Output>) {
        self.stats.events += 1;
        let turn_id: &str = &ev.turn;
        let ts = ev.ts_ms.unwrap_or(now_ms);
        let closes = matches!(ev.kind, EventKind::TurnEnd { .. });
        // One hash lookup for the common case: an event of an open turn.
        if let Some(state) = self.turns.get_mut(turn_id) {
            let mut env = turn::Env {
                cfg: &self.cfg,
                stats: &mut self.stats,
                interner: &mut self.interner,
            };
            state.apply(ev, ts, now_ms, &mut env, out);
        } else {
            if let Some(&closed_in) = self.closed.get(turn_id) {
                if closed_in == self.input {
                    self.stats.after_close_events += 1;
                    return;
                }
                self.stats.reused_turn_ids += 1;
                self.closed.remove(turn_id);
            }
            if self.turns.len() >= self.cfg.max_open_turns.max(1) {
                self.evict_oldest(out);
            }
            self.seq = match self.seq_hint {
                Some(hint) => hint.max(self.seq + 1),
                None => self.seq + 1,
            };
            self.stats.turns_opened += 1;
            let mut state = Box::new(TurnState::new(turn_id.to_owned(), self.seq, now_ms));
            let mut env = turn::Env {
                cfg: &self.cfg,
                stats: &mut self.stats,
                interner: &mut self.interner,
            };
            state.apply(ev, ts, now_ms, &mut env, out);
            self.turns.insert(turn_id.to_owned(), state);
        }
        if closes {
            self.close(turn_id.to_owned(), CloseReason::TurnEnd, out);
        }
    }

    /// Close turns idle since before `now_ms - idle_timeout`. A wire-only turn with a
    /// response still in flight (`turn_start` `wire_only`, its latest attempt not ended) is
    /// not idle: it waits [`IN_FLIGHT_IDLE_FACTOR`] times as long (at least
    /// [`IN_FLIGHT_MIN_IDLE_MS`]), a safety net for a stream whose end was lost.
    pub fn tick(&mut self, now_ms: i64, out: &mut Vec<Output>) {
        let Some(idle) = self.cfg.idle_timeout_ms else {
            return;
        };
        let in_flight_idle = idle
            .saturating_mul(IN_FLIGHT_IDLE_FACTOR)
            .max(IN_FLIGHT_MIN_IDLE_MS);
        let mut expired: Vec<(u64, String)> = self
            .turns
            .values()
            .filter(|t| {
                let limit = if t.in_flight() { in_flight_idle } else { idle };
                now_ms.saturating_sub(t.last_arrival_ms()) >= limit
            })
            .map(|t| (t.opened_seq(), t.id().to_owned()))
            .collect();
        expired.sort();
        for (_, id) in expired {
            self.close(id, CloseReason::IdleTimeout, out);
        }
    }

    /// Close every open turn (end of input), oldest first.
    pub fn close_all(&mut self, out: &mut Vec<Output>) {
        let mut ids: Vec<(u64, String)> = self
            .turns
            .values()
            .map(|t| (t.opened_seq(), t.id().to_owned()))
            .collect();
        ids.sort();
        for (_, id) in ids {
            self.close(id, CloseReason::EndOfInput, out);
        }
    }

    fn evict_oldest(&mut self, out: &mut Vec<Output>) {
        // Evict about 1% at once so a full table does not scan on every new turn.
        let batch = (self.cfg.max_open_turns / 100).max(1);
        let mut by_age: Vec<(i64, u64, String)> = self
            .turns
            .values()
            .map(|t| (t.last_arrival_ms(), t.opened_seq(), t.id().to_owned()))
            .collect();
        by_age.sort();
        for (_, _, id) in by_age.into_iter().take(batch) {
            self.stats.evicted_turns += 1;
            self.close(id, CloseReason::Evicted, out);
        }
    }

    fn close(&mut self, id: String, reason: CloseReason, out: &mut Vec<Output>) {
        let Some(state) = self.turns.remove(&id) else {
            return;
        };
        self.stats.turns_closed += 1;
        let report = state.close(reason, &self.prices, self.cfg.capture_content, out);
        out.push(Output::TurnClosed(Box::new(report)));
        if self.cfg.remember_closed_turns > 0 {
            if self.closed_order.len() >= self.cfg.remember_closed_turns
                && let Some(old) = self.closed_order.pop_front()
            {
                self.closed.remove(&old);
            }
            self.closed.insert(id.clone(), self.input);
            self.closed_order.push_back(id);
        }
    }

    /// Everything needed to resume exactly here.
    pub fn snapshot(&self) -> CorrelatorSnapshot {
        let mut turns: Vec<TurnState> = self.turns.values().map(|t| (**t).clone()).collect();
        turns.sort_by_key(|t| t.opened_seq());
        CorrelatorSnapshot {
            turns,
            closed: self.closed_order.iter().cloned().collect(),
            stats: self.stats,
            seq: self.seq,
        }
    }

    /// Resume from a snapshot.
    pub fn restore(
        cfg: CorrelatorConfig,
        prices: Arc<PriceTable>,
        snapshot: CorrelatorSnapshot,
    ) -> Self {
        let mut c = Correlator::new(cfg, prices);
        for t in snapshot.turns {
            c.turns.insert(t.id().to_owned(), Box::new(t));
        }
        for id in snapshot.closed {
            c.closed.insert(id.clone(), 0);
            c.closed_order.push_back(id);
        }
        c.stats = snapshot.stats;
        c.seq = snapshot.seq;
        c
    }
}

#[cfg(test)]
mod tests;
