//! The correlator: a pure state machine from normalized events to turns, attempts, findings
//! and billed usage.
//!
//! No I/O, no clock, no globals: the caller passes each event with the time it arrived
//! (`now_ms`), calls `Correlator::tick` to let idle turns time out, and
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
use crate::turn_route::Route;

use intern::Interner;
use turn::TurnState;

/// How many idle timeouts a wire-only turn with a response in flight may stay silent.
pub(crate) const IN_FLIGHT_IDLE_FACTOR: i64 = 10;
/// The least silence (ms) after which a wire-only turn with a response in flight is closed
/// anyway: a model may think for minutes before its first token.
pub(crate) const IN_FLIGHT_MIN_IDLE_MS: i64 = 600_000;

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
    /// The route of each closed id (see [`TurnState::route`]), in the order of `closed`; empty
    /// when every one is 0 (native lines), as in checkpoints written before routes existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    closed_routes: Vec<Route>,
    stats: CorrelatorStats,
    seq: u64,
    /// Of the inputs that record tool executions ([`Correlator::exec_inputs`]), those of open
    /// turns: a turn restored while its tool runs is not idle-closed before its input says
    /// so again (an OTLP session's stream is parked while it is quiet).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    exec_inputs: Vec<String>,
}

impl CorrelatorSnapshot {
    /// Open turns held.
    pub fn open_turns(&self) -> usize {
        self.turns.len()
    }

    /// A snapshot of these turns and closed ids (with their routes).
    fn from_parts(
        turns: Vec<TurnState>,
        closed: Vec<(String, Route)>,
        stats: CorrelatorStats,
        seq: u64,
        exec_inputs: Vec<String>,
    ) -> CorrelatorSnapshot {
        let routed = closed.iter().any(|(_, r)| *r != 0);
        let (closed, closed_routes): (Vec<String>, Vec<Route>) = closed.into_iter().unzip();
        CorrelatorSnapshot {
            turns,
            closed,
            closed_routes: if routed { closed_routes } else { Vec::new() },
            stats,
            seq,
            exec_inputs,
        }
    }

    /// The closed ids with their routes (0 where none was recorded).
    fn closed_with_routes(
        closed: Vec<String>,
        routes: Vec<Route>,
    ) -> impl Iterator<Item = (String, Route)> {
        let routes = routes.into_iter().chain(std::iter::repeat(0));
        closed.into_iter().zip(routes)
    }

    /// One snapshot of the correlators that shared the turns of the same input (the live
    /// engine's shards), taken at the same point of it: their turns (in opening order), the
    /// closed ids they remember, their counters added up.
    pub fn merge(parts: Vec<CorrelatorSnapshot>) -> CorrelatorSnapshot {
        let mut turns = Vec::new();
        let mut closed = Vec::new();
        let mut stats = CorrelatorStats::default();
        let mut seq = 0;
        let mut exec_inputs = std::collections::BTreeSet::new();
        for part in parts {
            turns.extend(part.turns);
            closed.extend(Self::closed_with_routes(part.closed, part.closed_routes));
            stats.add(&part.stats);
            seq = seq.max(part.seq);
            exec_inputs.extend(part.exec_inputs);
        }
        turns.sort_by_key(|t| t.opened_seq());
        Self::from_parts(turns, closed, stats, seq, exec_inputs.into_iter().collect())
    }

    /// This snapshot cut into `count` (at least one), turn `id` opened through `route` going
    /// to part `owner(id, route)` (see [`crate::turn_route::shard_of_turn`]): the inverse of
    /// [`CorrelatorSnapshot::merge`], for resuming with shards. The counters go to part 0, so
    /// that they still add up.
    pub fn split(
        self,
        count: usize,
        owner: impl Fn(&str, Route) -> usize,
    ) -> Vec<CorrelatorSnapshot> {
        let count = count.max(1);
        let mut turns: Vec<Vec<TurnState>> = (0..count).map(|_| Vec::new()).collect();
        let mut closed: Vec<Vec<(String, Route)>> = (0..count).map(|_| Vec::new()).collect();
        for t in self.turns {
            let i = owner(t.id(), t.route()).min(count - 1);
            turns[i].push(t);
        }
        for (id, route) in Self::closed_with_routes(self.closed, self.closed_routes) {
            let i = owner(&id, route).min(count - 1);
            closed[i].push((id, route));
        }
        let mut stats = Some(self.stats);
        // (Each part gets them all: a handful, and a part without the input's turns ignores it.)
        let exec_inputs = self.exec_inputs;
        turns
            .into_iter()
            .zip(closed)
            .map(|(turns, closed)| {
                let stats = stats.take().unwrap_or_default();
                Self::from_parts(turns, closed, stats, self.seq, exec_inputs.clone())
            })
            .collect()
    }
}

/// Events in, turns out. See the module docs.
#[derive(Debug)]
pub struct Correlator {
    cfg: CorrelatorConfig,
    prices: Arc<PriceTable>,
    turns: FastMap<String, Box<TurnState>>,
    interner: Interner,
    /// Closed turn ids in closing order, with their routes ([`TurnState::route`]).
    closed_order: VecDeque<(String, Route)>,
    /// Closed turn ids, with the input they closed in.
    closed: FastMap<String, u32>,
    stats: CorrelatorStats,
    seq: u64,
    seq_hint: Option<u64>,
    /// The current input (see [`Correlator::next_input`]).
    input: u32,
    /// Where the next events come from: a turn they open records it ([`Correlator::set_origin`]).
    origin: Option<(Arc<str>, Option<u64>)>,
    /// The route of the feed the next events come through ([`Correlator::set_route`]).
    route: Route,
    /// The inputs that record tool executions (at most [`MAX_EXEC_INPUTS`]): those that have
    /// shown one, and those whose decoder says they always do. Their turns waiting on tools
    /// are not idle-closed under them ([`TurnState::awaiting_tools`]). A checkpoint keeps
    /// those of open turns ([`CorrelatorSnapshot`]); the others are learned again after a
    /// restart, from each input's decoder or its next execution.
    exec_inputs: HashSet<Arc<str>>,
    /// See [`Correlator::exec_inputs_epoch`].
    exec_inputs_epoch: u64,
    /// Inputs refused since the last walk for inputs to forget (starting past the walk's
    /// threshold: the first full walks at once).
    exec_inputs_refused: usize,
}

/// How many inputs [`Correlator`] remembers as recording tool executions: a file per agent
/// session, a stream per OTLP service and session. When it is full, the inputs no open turn
/// came from are forgotten; if that frees nothing, an input's turns still learn it from an
/// execution of their own.
pub(crate) const MAX_EXEC_INPUTS: usize = 10_000;

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
            origin: None,
            route: 0,
            exec_inputs: HashSet::new(),
            exec_inputs_epoch: 0,
            exec_inputs_refused: MAX_EXEC_INPUTS,
        }
    }

    /// The next events come from `input` (at `line`, when it has lines): a turn one of them
    /// opens records it as its source. Cheap per line: the name is shared, not copied.
    pub(crate) fn set_origin(&mut self, input: &Arc<str>, line: Option<u64>) {
        match &mut self.origin {
            Some((name, l)) if Arc::ptr_eq(name, input) => *l = line,
            origin => *origin = Some((input.clone(), line)),
        }
    }

    /// The next events come through the feed of `route` (0, the default: native lines, each
    /// routed by its turn id; see [`crate::turn_route::shard_of_turn`]): a turn they open keeps
    /// it, in its snapshot too, so that a sharded engine can resume it on the shard that its
    /// later events go to.
    pub fn set_route(&mut self, route: Route) {
        self.route = route;
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
    pub(crate) fn set_sequence_hint(&mut self, seq: u64) {
        self.seq_hint = Some(seq);
    }

    /// The next events come from another input (the next file of `check`). A turn id that
    /// closed in an earlier input and shows up again is then a new turn, counted in
    /// [`CorrelatorStats::reused_turn_ids`], not a late event of the closed one. Turns still
    /// open carry on across inputs (a turn split over rotated files is one turn).
    pub(crate) fn next_input(&mut self) {
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
            let source = self.origin.as_ref().map(|(input, line)| {
                Box::new(turn::Origin {
                    input: input.clone(),
                    line: *line,
                })
            });
            let mut state = Box::new(TurnState::new(
                turn_id.to_owned(),
                self.seq,
                now_ms,
                source,
                self.route,
            ));
            let mut env = turn::Env {
                cfg: &self.cfg,
                stats: &mut self.stats,
                interner: &mut self.interner,
            };
            state.apply(ev, ts, now_ms, &mut env, out);
            self.turns.insert(turn_id.to_owned(), state);
        }
        if matches!(ev.kind, EventKind::ToolExec { .. }) {
            self.note_exec_input();
        }
        if closes {
            self.close(turn_id.to_owned(), CloseReason::TurnEnd, out);
        }
    }

    /// The current input has shown a tool execution (see [`Correlator::exec_inputs`]).
    fn note_exec_input(&mut self) {
        if let Some((input, _)) = self.origin.clone() {
            self.input_records_executions(&input);
        }
    }

    /// `input` records its turns' tool executions (it has shown one, or its decoder says it
    /// always does: `StreamDecoder::records_executions`): its turns waiting on tools are not
    /// idle-closed under them.
    pub(crate) fn input_records_executions(&mut self, input: &Arc<str>) {
        if self.exec_inputs.contains(input) {
            return;
        }
        if self.exec_inputs.len() >= MAX_EXEC_INPUTS {
            // Forget the inputs no open turn came from (sessions over): those still read say
            // so again (an execution, or their stream at its next line: see
            // [`Correlator::exec_inputs_epoch`]). A walk of the open turns, at the first full
            // and then once every hundredth of the bound's inputs refused.
            self.exec_inputs_refused += 1;
            if self.exec_inputs_refused > MAX_EXEC_INPUTS / 100 {
                self.exec_inputs_refused = 0;
                let before = self.exec_inputs.len();
                let open: HashSet<&Arc<str>> = self
                    .turns
                    .values()
                    .filter_map(|t| t.source_input())
                    .collect();
                self.exec_inputs.retain(|i| open.contains(i));
                if self.exec_inputs.len() < before {
                    self.exec_inputs_epoch += 1;
                }
            }
        }
        if self.exec_inputs.len() < MAX_EXEC_INPUTS {
            self.exec_inputs.insert(input.clone());
        }
    }

    /// How many times [`Correlator::exec_inputs`] has forgotten the inputs of no open turn: a
    /// stream whose decoder says it records executions tells it again when this has moved.
    pub(crate) fn exec_inputs_epoch(&self) -> u64 {
        self.exec_inputs_epoch
    }

    /// Close turns idle since before `now_ms - idle_timeout`. A turn the client is still
    /// working on is not idle: a wire-only turn with a response still in flight
    /// (`turn_start` `wire_only`, its latest attempt not ended) waits
    /// [`IN_FLIGHT_IDLE_FACTOR`] times as long (at least [`IN_FLIGHT_MIN_IDLE_MS`]), a safety
    /// net for a stream whose end was lost; one whose latest attempt asked for tools that
    /// have not run yet (a long build), from a source that records executions
    /// ([`TurnState::awaiting_tools`]), waits [`IN_FLIGHT_IDLE_FACTOR`] times as long, a
    /// safety net for a client that went away (with the default 5 min, 50 min).
    pub(crate) fn tick(&mut self, now_ms: i64, out: &mut Vec<Output>) {
        let Some(idle) = self.cfg.idle_timeout_ms else {
            return;
        };
        let in_flight_idle = idle
            .saturating_mul(IN_FLIGHT_IDLE_FACTOR)
            .max(IN_FLIGHT_MIN_IDLE_MS);
        let tools_idle = idle.saturating_mul(IN_FLIGHT_IDLE_FACTOR);
        let mut expired: Vec<(u64, String)> = self
            .turns
            .values()
            .filter(|t| {
                let quiet = now_ms.saturating_sub(t.last_arrival_ms());
                if quiet < idle {
                    return false; // (every limit is at least the idle timeout)
                }
                let limit = if t.in_flight() {
                    in_flight_idle
                } else if t.awaiting_tools(|input| self.exec_inputs.contains(input)) {
                    tools_idle
                } else {
                    idle
                };
                quiet >= limit
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
        self.close_all_batched(usize::MAX, out, &mut |_| {});
    }

    /// [`Correlator::close_all`], handing `out` to `drain` after every `batch` turns closed,
    /// so the reports of every open turn never exist at once (100,000 open turns closed in
    /// one go held 100,000 reports: as much memory again as the turns).
    pub(crate) fn close_all_batched(
        &mut self,
        batch: usize,
        out: &mut Vec<Output>,
        drain: &mut dyn FnMut(&mut Vec<Output>),
    ) {
        // Moved out of the table (no copy of any id), oldest first.
        let mut open: Vec<(String, Box<TurnState>)> =
            std::mem::take(&mut self.turns).into_iter().collect();
        open.sort_unstable_by_key(|(_, t)| t.opened_seq());
        for (i, (id, state)) in open.into_iter().enumerate() {
            self.close_state(id, state, CloseReason::EndOfInput, out);
            if (i + 1) % batch.max(1) == 0 {
                drain(out);
            }
        }
    }

    fn evict_oldest(&mut self, out: &mut Vec<Output>) {
        // Evict about 1% at once so a full table does not scan on every new turn.
        let batch = (self.cfg.max_open_turns / 100).max(1);
        // The ages alone are gathered (16 bytes per open turn; a copy of every open id at each
        // eviction cost ~80), the `batch` oldest found by selection, and only their ids copied.
        let mut ages: Vec<(i64, u64)> = self
            .turns
            .values()
            .map(|t| (t.last_arrival_ms(), t.opened_seq()))
            .collect();
        let newest_evicted = if ages.len() > batch {
            *ages.select_nth_unstable(batch - 1).1
        } else {
            ages.iter().copied().max().unwrap_or((i64::MAX, u64::MAX))
        };
        drop(ages);
        let mut evicted: Vec<(i64, u64, String)> = self
            .turns
            .values()
            .map(|t| (t.last_arrival_ms(), t.opened_seq(), t))
            .filter(|(ms, seq, _)| (*ms, *seq) <= newest_evicted)
            .map(|(ms, seq, t)| (ms, seq, t.id().to_owned()))
            .collect();
        evicted.sort_unstable();
        for (_, _, id) in evicted {
            self.stats.evicted_turns += 1;
            self.close(id, CloseReason::Evicted, out);
        }
    }

    fn close(&mut self, id: String, reason: CloseReason, out: &mut Vec<Output>) {
        let Some(state) = self.turns.remove(&id) else {
            return;
        };
        self.close_state(id, state, reason, out);
    }

    fn close_state(
        &mut self,
        id: String,
        state: Box<TurnState>,
        reason: CloseReason,
        out: &mut Vec<Output>,
    ) {
        self.stats.turns_closed += 1;
        let state_route = state.route();
        let report = state.close(reason, &self.prices, self.cfg.capture_content, out);
        out.push(Output::TurnClosed(Box::new(report)));
        if self.cfg.remember_closed_turns > 0 {
            if self.closed_order.len() >= self.cfg.remember_closed_turns
                && let Some((old, _)) = self.closed_order.pop_front()
            {
                self.closed.remove(&old);
            }
            self.closed.insert(id.clone(), self.input);
            self.closed_order.push_back((id, state_route));
        }
    }

    /// Everything needed to resume exactly here.
    pub fn snapshot(&self) -> CorrelatorSnapshot {
        let mut turns: Vec<TurnState> = self.turns.values().map(|t| (**t).clone()).collect();
        turns.sort_by_key(|t| t.opened_seq());
        let exec_inputs: std::collections::BTreeSet<String> = turns
            .iter()
            .filter_map(TurnState::source_input)
            .filter(|i| self.exec_inputs.contains(*i))
            .map(|i| i.to_string())
            .collect();
        CorrelatorSnapshot::from_parts(
            turns,
            self.closed_order.iter().cloned().collect(),
            self.stats,
            self.seq,
            exec_inputs.into_iter().collect(),
        )
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
        for (id, route) in
            CorrelatorSnapshot::closed_with_routes(snapshot.closed, snapshot.closed_routes)
        {
            c.closed.insert(id.clone(), 0);
            c.closed_order.push_back((id, route));
        }
        c.stats = snapshot.stats;
        c.seq = snapshot.seq;
        for input in snapshot.exec_inputs {
            c.input_records_executions(&Arc::from(input));
        }
        c
    }
}

#[cfg(test)]
mod tests;
