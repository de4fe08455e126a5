//! The pipeline's side of the turn hold ([`crate::reorder`]): native lines held undecoded
//! ([`Pipeline::defer_line`]), and held turns correlated once released, their lines decoded
//! then, with the fates of those lines kept until the ingest path tells them ([`Fate`]).
//!
//! A held line is counted as read when it arrives and as an event (or a bad line) when it is
//! decoded: a settle time later, as `run` would count it had it read the turn from one log.

use std::sync::Arc;

use super::{InputCounters, LineOutcome, Pipeline};
use crate::correlate::{Correlator, Output};
use crate::decode::native::{self, NativeLine};
use crate::decode::{BadLineReason, DecodeError};
use crate::event::Event;
use crate::ingest::Source;
use crate::reorder::{LineAt, Place, Released, ReleasedEarly, ReleasedLine, ReleasedTurn};

/// A held line that did not decode well, known once its turn is released; the ingest path
/// tells it as a [`crate::ingest::Note::Line`].
#[derive(Debug)]
pub(crate) struct Fate {
    /// Where the line is.
    pub(crate) at: LineAt,
    /// Its stream's name.
    pub(crate) name: Option<Arc<str>>,
    /// Why.
    pub(crate) error: DecodeError,
}

/// Held lines' fates since they were last told: those that decoded well counted by source
/// and outcome (told together, as [`crate::ingest::Note::Decoded`]), the others each; and
/// the turns the hold released early, full ([`crate::ingest::Note::ReleasedEarly`]).
#[derive(Debug, Default)]
pub(crate) struct Fates {
    /// Lines by source (`Source as usize`): events, and records of a type this version
    /// skips.
    pub(crate) decoded: [[u64; 2]; Source::ALL.len()],
    pub(crate) bad: Vec<Fate>,
    pub(crate) early: ReleasedEarly,
}

impl Fates {
    fn decoded(&mut self, at: LineAt, outcome: LineOutcome) {
        let i = match outcome {
            LineOutcome::Event => 0,
            LineOutcome::Skipped => 1,
        };
        self.decoded[at.source as usize][i] += 1;
    }
}

impl Pipeline {
    /// Hold native line `bytes` (of a stream, at `at`) undecoded, when the pipeline holds
    /// turns, the line can be read again (`place`), it has an arrival time, and it decodes
    /// alone to its event (`crate::turn_route::deferrable`): whether it was held. Decoding
    /// it now and holding an owned copy of its event cost a busy collector as much as the
    /// rest of its work.
    pub(crate) fn defer_line(
        &mut self,
        bytes: &[u8],
        arrival_ms: Option<i64>,
        place: Option<Place>,
        at: LineAt,
        out: &mut Vec<Output>,
    ) -> bool {
        let (Some(hold), Some(place), Some(arrival_ms)) = (&mut self.hold, place, arrival_ms)
        else {
            return false;
        };
        let Some(line) = crate::turn_route::deferrable(bytes) else {
            return false;
        };
        let chunks = |t: &[u8]| std::str::from_utf8(t).is_ok_and(|t| self.envelope.holds_turn(t));
        if line.ends_turn && chunks(line.turn) {
            return false;
        }
        let mut released = std::mem::take(&mut self.released);
        let origin = (self.origin.0.as_ref(), self.origin.2);
        let key = (line.turn, line.ts_ms);
        let held = hold.push_line(key, bytes, arrival_ms, origin, place, at, &mut released);
        if held {
            self.counters.lines += 1;
        }
        self.correlate_released(&mut released, out);
        self.released = released;
        held
    }

    /// Correlate turns released early (emptying `released`).
    pub(super) fn correlate_released(
        &mut self,
        released: &mut Vec<ReleasedTurn>,
        out: &mut Vec<Output>,
    ) {
        if released.is_empty() {
            return;
        }
        let mut sink = self.held_sink();
        for turn in released.drain(..) {
            sink.correlate(&turn, out);
        }
        self.restore_origin();
    }

    /// Correlate the held turns quiet at `now_ms` (all of them with `all`).
    pub(super) fn release_held(&mut self, now_ms: i64, all: bool, out: &mut Vec<Output>) {
        // Out while its turns are correlated (they touch everything else of the pipeline).
        let Some(mut hold) = self.hold.take() else {
            return;
        };
        let mut sink = self.held_sink();
        let mut any = false;
        hold.release_each(now_ms, all, |turn| {
            any = true;
            sink.correlate(turn, out);
        });
        self.hold = Some(hold);
        if any {
            self.restore_origin();
        }
    }

    /// The fates of held lines decoded since the last call.
    pub(crate) fn take_fates(&mut self) -> Option<Fates> {
        if let Some(hold) = &mut self.hold {
            self.fates.early = hold.take_released_early();
        }
        let told = self.fates.bad.is_empty()
            && self.fates.decoded == Fates::default().decoded
            && self.fates.early == ReleasedEarly::default();
        (!told).then(|| std::mem::take(&mut self.fates))
    }

    fn held_sink(&mut self) -> HeldSink<'_> {
        HeldSink {
            correlator: &mut self.correlator,
            counters: &mut self.counters,
            fates: &mut self.fates,
            clock_ms: &mut self.clock_ms,
            recorded: &mut self.recorded,
        }
    }
}

/// What correlating a released turn touches of the pipeline (not its hold).
struct HeldSink<'p> {
    correlator: &'p mut Correlator,
    counters: &'p mut InputCounters,
    fates: &'p mut Fates,
    clock_ms: &'p mut i64,
    recorded: &'p mut Option<Vec<Event<'static>>>,
}

impl HeldSink<'_> {
    /// Correlate a released turn, each event from where it came; its lines decoded now.
    fn correlate(&mut self, turn: &ReleasedTurn, out: &mut Vec<Output>) {
        turn.each(|item| match item {
            Released::Event(e) => {
                if let Some(at) = e.deferred {
                    // Decoded from a held line after a restore: counted now, as it would
                    // have been.
                    self.counted(&e.event, at);
                }
                if let Some(from) = &e.input {
                    self.correlator.set_origin(from, None);
                }
                self.correlator.set_route(e.route);
                self.correlator.observe(&e.event, e.arrival_ms, out);
            }
            Released::Line(line) => self.line(line, out),
        });
    }

    /// Decode a held line and correlate its event, or count it bad; its fate is kept.
    fn line(&mut self, line: ReleasedLine<'_>, out: &mut Vec<Output>) {
        let event = match native::decode_line(line.bytes, &mut self.counters.skips) {
            Ok(NativeLine::Event(ev)) => crate::bounds::check(&ev).map(|()| Some(ev)),
            Ok(NativeLine::UnknownType) => Ok(None),
            // Held as another type: the line gives `type` twice, the last a provider chunk's.
            Ok(NativeLine::ProviderChunk(_)) => Err(DecodeError::new(
                BadLineReason::InvalidValue,
                "`type` given twice, the second `provider_chunk`",
            )),
            Err(e) => Err(e),
        };
        match event {
            Ok(Some(ev)) => {
                self.counted(&ev, line.at);
                if let Some(from) = line.input {
                    self.correlator.set_origin(from, None);
                }
                self.correlator.set_route(line.route);
                self.correlator.observe(&ev, line.arrival_ms, out);
            }
            Ok(None) => self.fates.decoded(line.at, LineOutcome::Skipped),
            Err(error) => {
                self.counters.bad(error.reason);
                self.fates.bad.push(Fate {
                    at: line.at,
                    name: line.input.cloned(),
                    error,
                });
            }
        }
    }

    /// Count an event decoded from a held line, as the pipeline counts one it observes.
    fn counted(&mut self, ev: &Event<'_>, at: LineAt) {
        if let Some(ts) = ev.ts_ms {
            *self.clock_ms = (*self.clock_ms).max(ts);
        }
        self.counters.events += 1;
        if let Some(recorded) = self.recorded.as_mut() {
            recorded.push(ev.clone().into_owned());
        }
        self.fates.decoded(at, LineOutcome::Event);
    }
}
