//! The ingest pipeline shared by `check` and `run`: lines in, decoded events into the
//! correlator, every bad line counted by reason.
//!
//! It owns the correlator and the input counters, and nothing else: callers own the sources and
//! the sinks. Time is passed in (`arrival_ms`); with none, a logical clock (the latest event
//! time seen) stands in, so replaying a recorded log is deterministic.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::correlate::{Correlator, Output};
use crate::decode::native::{self, NativeLine};
use crate::decode::{BadLineReason, DecodeError, EnvelopeDecoder, SkipCounts, StreamDecoder};
use crate::event::{Event, EventKind};
use crate::reorder::{HoldSnapshot, Place, ReleasedTurn, TurnHold};

mod held;
pub(crate) use held::Fates;

/// Counters about the input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputCounters {
    /// Lines (records) read.
    pub lines: u64,
    /// Events decoded and correlated.
    pub events: u64,
    /// Bad lines by reason.
    pub bad_lines: BTreeMap<String, u64>,
    /// Skipped unknown types and fields.
    pub skips: SkipCounts,
}

impl InputCounters {
    /// All bad lines.
    pub fn bad_total(&self) -> u64 {
        self.bad_lines.values().sum()
    }

    /// Add another set of counters (from another worker).
    pub fn add(&mut self, other: &InputCounters) {
        self.lines += other.lines;
        self.events += other.events;
        for (reason, n) in &other.bad_lines {
            *self.bad_lines.entry(reason.clone()).or_insert(0) += n;
        }
        self.skips.add(other.skips);
    }

    fn bad(&mut self, reason: BadLineReason) {
        *self
            .bad_lines
            .entry(reason.as_str().to_owned())
            .or_insert(0) += 1;
    }
}

/// What became of a line that decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineOutcome {
    /// An event, correlated.
    Event,
    /// A well-formed record this version skips (unknown type).
    Skipped,
}

/// Lines to correlated outputs.
pub struct Pipeline {
    correlator: Correlator,
    counters: InputCounters,
    clock_ms: i64,
    envelope: EnvelopeDecoder,
    scratch: Vec<Event<'static>>,
    /// Every event correlated, kept when asked ([`Pipeline::record_events`]).
    recorded: Option<Vec<Event<'static>>>,
    /// Turns held until quiet and handed over in time order ([`Pipeline::hold_turns`]).
    hold: Option<TurnHold>,
    /// Where the events being observed come from (what [`Pipeline::set_origin`] set), kept
    /// with each held event.
    origin: (
        Option<std::sync::Arc<str>>,
        Option<u64>,
        crate::turn_route::Route,
    ),
    released: Vec<ReleasedTurn>,
    /// Held lines' fates, known once decoded at their turn's release, until the ingest path
    /// tells them ([`Pipeline::take_fates`]).
    fates: Fates,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("correlator", &self.correlator)
            .field("counters", &self.counters)
            .field("clock_ms", &self.clock_ms)
            .finish_non_exhaustive()
    }
}

impl Pipeline {
    /// A pipeline around a correlator.
    pub fn new(correlator: Correlator) -> Self {
        Pipeline {
            correlator,
            counters: InputCounters::default(),
            clock_ms: 0,
            envelope: EnvelopeDecoder::new(),
            scratch: Vec::new(),
            recorded: None,
            hold: None,
            origin: (None, None, 0),
            released: Vec::new(),
            fates: Fates::default(),
        }
    }

    /// Hold each turn's events until it has been quiet for `settle_ms` (arrival clock), then
    /// correlate them in time order ([`crate::reorder`]): for inputs that do not keep a turn's
    /// order (a cluster's partitions, fed by several hosts). `held` resumes a checkpoint's.
    pub fn hold_turns(&mut self, settle_ms: i64, held: Option<HoldSnapshot>) {
        self.hold = Some(match held {
            Some(h) => TurnHold::restore(settle_ms, h),
            None => TurnHold::new(settle_ms),
        });
    }

    /// What the turn hold holds, for a checkpoint.
    pub fn held_snapshot(&self) -> Option<HoldSnapshot> {
        self.hold.as_ref()?.snapshot()
    }

    /// Back to where the events being read now come from, after correlating held ones.
    fn restore_origin(&mut self) {
        let (input, line, route) = &self.origin;
        if let Some(input) = input {
            self.correlator.set_origin(input, *line);
        }
        self.correlator.set_route(*route);
    }

    /// Keep a copy of every event correlated from now on (for tests and tools that inspect
    /// what the decoders produced, through the same path as `check` and `run`).
    pub fn record_events(&mut self) {
        self.recorded.get_or_insert_with(Vec::new);
    }

    /// The events kept since [`Pipeline::record_events`] (or since the last call).
    pub fn take_recorded(&mut self) -> Vec<Event<'static>> {
        self.recorded
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The correlator.
    pub fn correlator(&self) -> &Correlator {
        &self.correlator
    }

    /// `input` records its turns' tool executions (its decoder says it always does).
    pub(crate) fn input_records_executions(&mut self, input: &std::sync::Arc<str>) {
        self.correlator.input_records_executions(input);
    }

    /// Where the next events come from (see [`Correlator::set_origin`]), and the route of the
    /// feed they come through ([`Correlator::set_route`]; 0 for native lines).
    pub(crate) fn set_origin(
        &mut self,
        input: &std::sync::Arc<str>,
        line: Option<u64>,
        route: crate::turn_route::Route,
    ) {
        self.correlator.set_origin(input, line);
        self.correlator.set_route(route);
        if self.hold.is_some() {
            // The same input line after line: no reference counted twice per line.
            match &mut self.origin.0 {
                Some(name) if std::sync::Arc::ptr_eq(name, input) => {}
                name => *name = Some(input.clone()),
            }
            (self.origin.1, self.origin.2) = (line, route);
        }
    }

    /// Input counters so far.
    pub fn counters(&self) -> &InputCounters {
        &self.counters
    }

    /// Replace the counters (restoring a checkpoint).
    pub fn restore_counters(&mut self, counters: InputCounters, clock_ms: i64) {
        self.counters = counters;
        self.clock_ms = clock_ms;
    }

    /// The logical clock: the latest event time seen.
    pub fn clock_ms(&self) -> i64 {
        self.clock_ms
    }

    /// Number the next new turn (see `Correlator::set_sequence_hint`).
    pub fn set_sequence_hint(&mut self, seq: u64) {
        self.correlator.set_sequence_hint(seq);
    }

    /// The next lines come from another input (see [`Correlator::next_input`]).
    pub(crate) fn next_input(&mut self) {
        self.correlator.next_input();
    }

    /// Decode one native-format line and correlate it.
    pub fn native_line(
        &mut self,
        bytes: &[u8],
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
    ) -> Result<LineOutcome, DecodeError> {
        self.native_line_at(bytes, arrival_ms, None, out)
    }

    /// [`Pipeline::native_line`] for a line the caller can read again at `place`: a held
    /// event decoded from it is checkpointed by reference ([`crate::reorder`]).
    pub fn native_line_at(
        &mut self,
        bytes: &[u8],
        arrival_ms: Option<i64>,
        place: Option<Place>,
        out: &mut Vec<Output>,
    ) -> Result<LineOutcome, DecodeError> {
        self.counters.lines += 1;
        let decoded = native::decode_line(bytes, &mut self.counters.skips);
        match decoded {
            Ok(NativeLine::Event(ev)) => {
                if let Err(e) = crate::bounds::check(&ev) {
                    self.counters.bad(e.reason);
                    return Err(e);
                }
                if matches!(ev.kind, EventKind::TurnEnd { .. }) {
                    // The turn's provider chunk decoders are done: flush what they hold (an
                    // unfinished call stays unfinished) before the turn closes, and free them.
                    let mut events = std::mem::take(&mut self.scratch);
                    self.envelope.end_turn(&ev.turn, &mut events);
                    if let Err(e) = self.observe_all(&mut events, arrival_ms, out) {
                        self.counters.bad(e.reason);
                    }
                    self.scratch = events;
                }
                self.observe_at(&ev, arrival_ms, place, out);
                Ok(LineOutcome::Event)
            }
            Ok(NativeLine::UnknownType) => Ok(LineOutcome::Skipped),
            Ok(NativeLine::ProviderChunk(chunk)) => {
                let mut events = std::mem::take(&mut self.scratch);
                let result = self.envelope.push(&chunk, &mut events);
                let outcome = self.observe_all(&mut events, arrival_ms, out);
                self.scratch = events;
                match result.and(outcome) {
                    Ok(o) => Ok(o),
                    Err(e) => {
                        self.counters.bad(e.reason);
                        Err(e)
                    }
                }
            }
            Err(e) => {
                self.counters.bad(e.reason);
                Err(e)
            }
        }
    }

    /// Decode one line of a provider stream with its stream's decoder, and correlate.
    pub(crate) fn stream_line(
        &mut self,
        decoder: &mut dyn StreamDecoder,
        bytes: &[u8],
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
    ) -> Result<LineOutcome, DecodeError> {
        self.counters.lines += 1;
        let mut events = std::mem::take(&mut self.scratch);
        let result = decoder.push_line(bytes, &mut events);
        let outcome = self.observe_all(&mut events, arrival_ms, out);
        self.scratch = events;
        match result.and(outcome) {
            Ok(o) => Ok(o),
            Err(e) => {
                self.counters.bad(e.reason);
                Err(e)
            }
        }
    }

    /// A provider stream ended: flush its decoder and add its skip counts.
    pub(crate) fn stream_end(
        &mut self,
        decoder: &mut dyn StreamDecoder,
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
    ) {
        let mut events = std::mem::take(&mut self.scratch);
        decoder.finish(&mut events);
        if let Err(e) = self.observe_all(&mut events, arrival_ms, out) {
            self.counters.bad(e.reason);
        }
        self.scratch = events;
        self.counters.skips.add(decoder.skips());
    }

    /// Correlate events decoded elsewhere (e.g. joined from several inputs).
    /// Events with numbers out of range are skipped and counted as bad values.
    pub(crate) fn observe_events(
        &mut self,
        events: &mut Vec<Event<'static>>,
        out: &mut Vec<Output>,
    ) {
        if let Err(e) = self.observe_all(events, None, out) {
            self.counters.bad(e.reason);
        }
    }

    fn observe_all(
        &mut self,
        events: &mut Vec<Event<'static>>,
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
    ) -> Result<LineOutcome, DecodeError> {
        let outcome = if events.is_empty() {
            LineOutcome::Skipped
        } else {
            LineOutcome::Event
        };
        // Events with numbers out of range are skipped; the line counts as one bad line.
        let mut bad = None;
        for ev in events.drain(..) {
            match crate::bounds::check(&ev) {
                Ok(()) => self.observe(&ev, arrival_ms, out),
                Err(e) => {
                    bad.get_or_insert(e);
                }
            }
        }
        match bad {
            None => Ok(outcome),
            Some(e) => Err(e),
        }
    }

    /// Correlate one event: it moves the logical clock, which stands in for a missing arrival.
    fn observe(&mut self, ev: &Event<'_>, arrival_ms: Option<i64>, out: &mut Vec<Output>) {
        self.observe_at(ev, arrival_ms, None, out);
    }

    /// [`Pipeline::observe`] of an event that can be read again at `place`.
    fn observe_at(
        &mut self,
        ev: &Event<'_>,
        arrival_ms: Option<i64>,
        place: Option<Place>,
        out: &mut Vec<Output>,
    ) {
        if let Some(ts) = ev.ts_ms {
            self.clock_ms = self.clock_ms.max(ts);
        }
        let now = arrival_ms.unwrap_or(self.clock_ms);
        self.counters.events += 1;
        if let Some(recorded) = &mut self.recorded {
            recorded.push(ev.clone().into_owned());
        }
        if let Some(hold) = &mut self.hold {
            let mut released = std::mem::take(&mut self.released);
            hold.push(
                ev.clone().into_owned(),
                now,
                self.origin.0.clone(),
                self.origin.2,
                place,
                &mut released,
            );
            self.correlate_released(&mut released, out);
            self.released = released;
            return;
        }
        self.correlator.observe(ev, now, out);
    }

    /// Count a line of a stream refused as a lookalike (never decoded).
    pub(crate) fn refused_line(&mut self) {
        self.counters.lines += 1;
        self.counters.bad(BadLineReason::UnknownFormat);
    }

    /// Count a line skipped for its length.
    pub(crate) fn too_long(&mut self) {
        self.counters.lines += 1;
        self.counters.bad(BadLineReason::TooLong);
    }

    /// Correlate the held turns that went quiet, and let idle turns time out.
    pub(crate) fn tick(&mut self, now_ms: i64, out: &mut Vec<Output>) {
        self.release_held(now_ms, false, out);
        self.correlator.tick(now_ms, out);
    }

    /// End of input: flush provider envelopes and close every open turn.
    pub fn close_all(&mut self, out: &mut Vec<Output>) {
        self.close_all_batched(usize::MAX, out, &mut |_| {});
    }

    /// [`Pipeline::close_all`] with the turns closed in batches (see
    /// [`Correlator::close_all_batched`]).
    pub(crate) fn close_all_batched(
        &mut self,
        batch: usize,
        out: &mut Vec<Output>,
        drain: &mut dyn FnMut(&mut Vec<Output>),
    ) {
        let mut events = std::mem::take(&mut self.scratch);
        self.envelope.finish(&mut events);
        if let Err(e) = self.observe_all(&mut events, None, out) {
            self.counters.bad(e.reason);
        }
        self.scratch = events;
        let skips = std::mem::take(&mut self.envelope).skips();
        self.counters.skips.add(skips);
        self.release_held(i64::MAX, true, out);
        self.correlator.close_all_batched(batch, out, drain);
    }
}
