//! The one ingest path: every source (files, stdin, the demo fleet, and those to come) hands
//! its lines here, and every format is chosen, framed and decoded here, so a line means the
//! same thing whichever way it arrived.
//!
//! Owns: the streams (one per input: a file, stdin, a feed), each stream's format (forced, or
//! sniffed from its first records with [`decode::detect::sniff`], holding lines until a record
//! decides), the blank-line policy, the per-stream provider decoders, and the [`Pipeline`]
//! (correlator and input counters). It reports every line's fate through a callback, with the
//! stream, its name and the line number, so callers count and log without re-deciding anything.
//!
//! A stream whose first records borrow a provider's event names without its shape (a
//! [`Lookalike`](crate::decode::detect::Lookalike)) is refused: [`Note::Refused`] once, then
//! each of its lines is counted as a bad line (`unknown_format`) and never decoded; other
//! streams go on.
//!
//! Blank-line policy: in the native format a blank (or whitespace-only) line is not a record:
//! skipped, not counted. Provider streams get every line, since SSE ends an event on a blank
//! line.
//!
//! Sharded ([`Ingest::set_shard`], the live engine's workers), each ingest path is handed the
//! lines of a stream until its format is known, decides it as every other one does, and then
//! reads it by its [`Routing`]: native lines of its own turns only, or, for a stream read
//! whole, all of it if the stream's route is its own and nothing otherwise
//! (`ingest/stream.rs`).

mod note;
mod parked;
mod resume;
mod stream;

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::correlate::{Correlator, Output};
use crate::decode::gemini_join::{self, JoinFeed, JoinerSnapshot, SessionJoiner};
use crate::decode::{self, BadLineReason, DecodeError, Format};
use crate::fasthash::FastMap;
use crate::pipeline::{InputCounters, Pipeline};
use crate::turn_route::{self, Routing, Shard};
pub use note::{Note, Source, StreamId};
pub use parked::{MAX_PARKED, MAX_PARKED_BYTES, PARKED_FOR_MS};
use parked::{Parked, ParkedStreams};
pub use resume::{LineBytes, MAX_STREAM_STATES, SniffedLine, StreamState, StreamStates};
use stream::{
    Decoding, Held, Stream, decode_line, gives_notes, joined_origin, plain_decoding, reads,
};

/// Lines of any number of streams, of any format, into one correlator.
pub struct Ingest {
    pipeline: Pipeline,
    format: Format,
    streams: Vec<Option<Stream>>,
    /// Slots of ended streams, reused first (a linear search for one made opening a stream
    /// O(streams): 41% of the engine's time with 100,000 OTLP sessions).
    free: Vec<u32>,
    /// Open streams by name, one map per [`Source`].
    by_name: [FastMap<String, StreamId>; Source::ALL.len()],
    /// Sessions' streams ended for quiet, continued by their next line ([`Ingest::park`]).
    parked: ParkedStreams,
    /// The clock when parked sessions were last expired.
    parked_expired_ms: i64,
    /// Outputs of one client session held to be joined ([`Ingest::join_sessions`]).
    joiner: Option<Arc<Mutex<SessionJoiner>>>,
    /// Turns record the line that opened them (off where line numbers count from where
    /// reading started, not from the top of the file: a live tail resumed or started at the end).
    origin_lines: bool,
    /// Whether OTLP streams' gemini-cli records are held for the join too (default); off when
    /// no stream-json can come ([`Ingest::otlp_unjoined`]).
    join_otlp: bool,
    /// This ingest path's share of the input, when several share it ([`Ingest::set_shard`]).
    shard: Option<Shard>,
    /// Where the next line can be read again ([`Ingest::place_next_line`]).
    next_place: Option<crate::reorder::Place>,
}

impl fmt::Debug for Ingest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ingest")
            .field("pipeline", &self.pipeline)
            .field("format", &self.format)
            .field("streams", &self.streams.iter().flatten().count())
            .finish()
    }
}

impl Ingest {
    /// An ingest path into `correlator`, every stream read as `format` ([`Format::Auto`]:
    /// sniffed per stream).
    pub fn new(correlator: Correlator, format: Format) -> Self {
        Ingest {
            pipeline: Pipeline::new(correlator),
            format,
            streams: Vec::new(),
            free: Vec::new(),
            by_name: Default::default(),
            parked: ParkedStreams::default(),
            parked_expired_ms: i64::MIN,
            joiner: None,
            origin_lines: true,
            join_otlp: true,
            shard: None,
            next_place: None,
        }
    }

    /// The next [`Ingest::line`] can be read again at `place` (a cluster partition's message
    /// and line): an event the turn hold keeps from it, decoded where it was read, is
    /// checkpointed by reference ([`crate::reorder`]).
    pub fn place_next_line(&mut self, place: crate::reorder::Place) {
        self.next_place = Some(place);
    }

    /// Join the outputs of one client session that live in separate streams (gemini-cli's
    /// telemetry outfile and its stream-json): their events are held, then merged in time
    /// order ([`gemini_join`]): at [`Ingest::close_all`] for whole inputs (`check`), and for
    /// live ones (`run`) session by session once quiet ([`Ingest::release_joined`]).
    pub fn join_sessions(&mut self) {
        self.joiner = Some(Arc::default());
        self.joined_records_executions();
    }

    /// Joined sessions are gemini-cli's (and its forks'), whose telemetry and stream-json
    /// both record every tool execution ([`decode::StreamDecoder::records_executions`]).
    fn joined_records_executions(&mut self) {
        self.pipeline.input_records_executions(&joined_origin());
    }

    /// Join sessions ([`Ingest::join_sessions`]) starting from a checkpointed
    /// [`JoinerSnapshot`]: the events it held are held again.
    pub fn join_sessions_from(&mut self, held: JoinerSnapshot) {
        self.joiner = Some(Arc::new(Mutex::new(SessionJoiner::restore(held))));
        self.joined_records_executions();
    }

    /// Correlate OTLP streams' gemini-cli records at once instead of holding them for the
    /// join: for a collector that reads no files or stdin, where no stream-json can come to
    /// join them with. Holding them would only delay every finding by the quiet period and
    /// hold that period's records in memory (at 300,000 records/s, millions of events).
    pub fn otlp_unjoined(&mut self) {
        self.join_otlp = false;
    }

    /// Turns record their input but not the line that opened them: for live tails, whose
    /// line numbers count from where reading started (a checkpoint, the end of the file).
    pub fn without_origin_lines(&mut self) {
        self.origin_lines = false;
    }

    /// What the session joiner holds, for a checkpoint (`None` when sessions are not joined
    /// or nothing is held).
    pub fn joined_snapshot(&self) -> Option<JoinerSnapshot> {
        let joiner = self.joiner.as_ref()?.lock().ok()?;
        (!joiner.is_empty()).then(|| joiner.snapshot())
    }

    /// For live sources, called once per tick: correlate the joined events of every held
    /// session that got nothing for more than `quiet_ticks` ticks.
    pub fn release_joined(&mut self, quiet_ticks: u32, out: &mut Vec<Output>) {
        let Some(joiner) = &self.joiner else {
            return;
        };
        let mut events = match joiner.lock() {
            Ok(mut j) => j.release_quiet(quiet_ticks),
            Err(_) => return,
        };
        if !events.is_empty() {
            self.pipeline
                .set_origin(&joined_origin(), None, turn_route::joined_route());
            self.pipeline.observe_events(&mut events, out);
        }
    }

    /// How shards share a stream of `format` called `name` (see [`routing_for`]).
    fn routing(&self, format: Format, name: &str) -> Option<Routing> {
        let joined = self.joiner.is_some() && feeds_joiner(format, self.join_otlp);
        routing_for(format, name, joined)
    }

    fn decoding_for(&self, format: Format, name: &str) -> Decoding {
        if !reads(self.shard, self.routing(format, name)) {
            return Decoding::Elsewhere;
        }
        // An OTLP stream carries gemini-cli's telemetry records: joined like its outfile.
        if format == Format::Otlp
            && self.join_otlp
            && let Some(joiner) = &self.joiner
        {
            return Decoding::Provider(Box::new(decode::otlp::Decoder::joined(joiner.clone())));
        }
        match (plain_decoding(format, name), &self.joiner) {
            (Decoding::Provider(d), Some(joiner)) => match gemini_join::Source::of(format) {
                Some(source) => {
                    Decoding::Provider(Box::new(JoinFeed::new(d, source, joiner.clone())))
                }
                None => Decoding::Provider(d),
            },
            (decoding, _) => decoding,
        }
    }

    /// The pipeline (correlator, counters, logical clock).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// Read only the share of `shard`, as one of several ingest paths that are handed the
    /// lines of the same streams (the live engine's workers): a native line is decoded only by
    /// the shard of its top-level `turn` ([`crate::turn_route::shard_of_line`]); a stream read
    /// whole ([`Routing::Whole`]: every other format) only by the shard of its route, which
    /// correlates all of its turns. Every line's [`Note`] is given by exactly one shard: its
    /// reader, or shard 0 for a native line without a turn; a format decision, by the shard
    /// that reads the stream whole, else shard 0.
    pub fn set_shard(&mut self, shard: Shard) {
        self.shard = Some(shard);
    }

    /// The pipeline, to restore a checkpoint or number turns.
    pub fn pipeline_mut(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }

    /// The next lines come from another input of `check` (see `Correlator::next_input`).
    pub fn next_input(&mut self) {
        self.pipeline.next_input();
    }

    /// The correlator.
    pub fn correlator(&self) -> &Correlator {
        self.pipeline.correlator()
    }

    /// Input counters so far.
    pub fn counters(&self) -> &InputCounters {
        self.pipeline.counters()
    }

    /// The stream called `name` from `source`, opened on first use.
    pub fn stream(&mut self, source: Source, name: &str) -> StreamId {
        self.stream_as(source, name, self.format)
    }

    /// The stream called `name` from `source`, opened on first use and read as `format`
    /// whatever the ingest path's own format (the OTLP receiver's streams are always
    /// [`Format::Otlp`]).
    pub fn stream_as(&mut self, source: Source, name: &str, format: Format) -> StreamId {
        if let Some(id) = self.by_name[source as usize].get(name) {
            return *id;
        }
        if let Some(parked) = self.parked.take(source, name)
            && (format == Format::Auto || format == parked.format)
        {
            return self.unpark(source, name, parked);
        }
        let (format, routing, decoding) = match format {
            Format::Auto => (None, None, Decoding::Sniffing(Held::default())),
            forced => (
                Some(forced),
                self.routing(forced, name),
                self.decoding_for(forced, name),
            ),
        };
        let mut stream = Stream {
            name: name.to_owned(),
            origin: Arc::from(name),
            records_executions: None,
            lines_known: self.origin_lines,
            source,
            lines: 0,
            format,
            routing,
            announced: false,
            decoding,
            last_ms: i64::MIN,
        };
        stream.note_records_executions(&mut self.pipeline);
        let id = match self.free.pop() {
            Some(free) => {
                self.streams[free as usize] = Some(stream);
                StreamId(free)
            }
            None => {
                self.streams.push(Some(stream));
                StreamId((self.streams.len() - 1) as u32)
            }
        };
        self.by_name[source as usize].insert(name.to_owned(), id);
        id
    }

    /// The format a stream is read as, once decided.
    pub fn format_of(&self, id: StreamId) -> Option<Format> {
        self.streams.get(id.0 as usize)?.as_ref()?.format
    }

    /// How shards share a stream, once its format is decided (a refused stream is read whole
    /// by the shard of its name).
    pub fn routing_of(&self, id: StreamId) -> Option<Routing> {
        self.streams.get(id.0 as usize)?.as_ref()?.routing
    }

    /// One line of a stream (without its newline; a trailing `\r` is tolerated), arriving at
    /// `arrival_ms` (`None`: the logical clock stands in). `number` is its line number when
    /// the caller knows it; otherwise the stream counts.
    pub fn line(
        &mut self,
        id: StreamId,
        number: Option<u64>,
        bytes: &[u8],
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        let place = self.next_place.take();
        let at = arrival_ms.unwrap_or(self.pipeline.clock_ms());
        let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        stream.last_ms = at;
        stream.lines = number.unwrap_or(stream.lines + 1);
        let number = stream.lines;
        if matches!(stream.decoding, Decoding::Elsewhere) {
            return;
        }
        if !stream.announced
            && let Some(format) = stream.format
            && gives_notes(self.shard, stream.routing)
        {
            stream.announced = true;
            note(Note::Format {
                source: stream.source,
                name: &stream.name,
                format,
                forced: true,
            });
        }
        if let Decoding::Sniffing(held) = &mut stream.decoding {
            held.head.extend_from_slice(bytes);
            held.head.push(b'\n');
            held.lines.push((number, place, bytes.to_vec()));
            held.idle = false;
            if let Some(sniffed) = decode::detect::sniff(&held.head, false) {
                self.decide(id, sniffed, arrival_ms, out, note);
            }
            return;
        }
        decode_line(
            &mut self.pipeline,
            self.shard,
            stream,
            (number, place),
            bytes,
            arrival_ms,
            out,
            note,
        );
        // Holding it may have released turns early (past the hold's bound).
        self.tell_fates(note);
    }

    /// A line of a stream skipped for its length (`len` bytes): counted as a bad line.
    pub fn too_long(
        &mut self,
        id: StreamId,
        number: Option<u64>,
        len: u64,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        stream.lines = number.unwrap_or(stream.lines + 1);
        // Counted once: by the shard that reads the stream whole, else (native lines, or a
        // format not known yet) by shard 0.
        if matches!(stream.decoding, Decoding::Elsewhere)
            || !gives_notes(self.shard, stream.routing)
        {
            return;
        }
        self.pipeline.too_long();
        note(Note::Line {
            source: stream.source,
            name: &stream.name,
            number: stream.lines,
            outcome: Err(DecodeError::new(
                BadLineReason::TooLong,
                format!("line of {len} bytes skipped"),
            )),
        });
    }

    /// Decide a sniffing stream's format now with what it holds (a live stream that went
    /// quiet): held lines are decoded. No-op once decided.
    pub(crate) fn settle(
        &mut self,
        id: StreamId,
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        let Some(Some(stream)) = self.streams.get(id.0 as usize) else {
            return;
        };
        if let Decoding::Sniffing(held) = &stream.decoding {
            let sniffed = decode::detect::sniff(&held.head, true).unwrap_or(Ok(Format::Native));
            self.decide(id, sniffed, arrival_ms, out, note);
        }
    }

    /// For live sources, called periodically: settle every stream that is still sniffing and
    /// got no line since the previous call, so a quiet stream's lines are never held for long.
    pub fn settle_idle(
        &mut self,
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        for i in 0..self.streams.len() {
            let Some(Some(stream)) = self.streams.get_mut(i) else {
                continue;
            };
            if let Decoding::Sniffing(held) = &mut stream.decoding {
                if held.idle {
                    self.settle(StreamId(i as u32), arrival_ms, out, note);
                } else {
                    held.idle = true;
                }
            }
        }
        self.tell_fates(note);
    }

    /// A stream ended: its held lines are decoded, its provider decoder flushed (a stream cut
    /// without its terminator stays unfinished), and its handle released. Lines under the same
    /// name later start a new stream.
    pub fn end(
        &mut self,
        id: StreamId,
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        self.end_keeping(id, arrival_ms, out, note);
    }

    /// [`Ingest::end`], giving back the stream and its flushed provider decoder.
    fn end_keeping(
        &mut self,
        id: StreamId,
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) -> Option<(Stream, Option<Box<dyn decode::StreamDecoder>>)> {
        self.settle(id, arrival_ms, out, note);
        self.tell_fates(note);
        let mut stream = self.streams.get_mut(id.0 as usize).and_then(Option::take)?;
        self.by_name[stream.source as usize].remove(&stream.name);
        self.free.push(id.0);
        let route = stream.route();
        let decoder = match std::mem::replace(&mut stream.decoding, Decoding::Native) {
            Decoding::Provider(mut decoder) => {
                let line = stream.lines_known.then_some(stream.lines);
                self.pipeline.set_origin(&stream.origin, line, route);
                self.pipeline.stream_end(decoder.as_mut(), arrival_ms, out);
                self.tell_fates(note);
                Some(decoder)
            }
            _ => None,
        };
        Some((stream, decoder))
    }

    /// Park the streams that `ends` picks (by name and format) and that have had no line for
    /// longer than `quiet_ms` at `now_ms` (on the clock their lines arrived by), as
    /// [`Ingest::park`] parks one: for a reader that keeps a stream per session and cannot
    /// tell when a session is over (a cluster partition's OTLP sessions), so they do not pile
    /// up.
    pub fn end_quiet(
        &mut self,
        now_ms: i64,
        quiet_ms: i64,
        ends: impl Fn(&str, Option<Format>) -> bool,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        let quiet: Vec<StreamId> = self
            .streams
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref()?;
                let idle = s.last_ms != i64::MIN && now_ms.saturating_sub(s.last_ms) > quiet_ms;
                (idle && ends(&s.name, s.format)).then_some(StreamId(i as u32))
            })
            .collect();
        for id in quiet {
            self.park(id, now_ms, out, note);
        }
        self.expire_parked(now_ms);
    }

    /// End of all input: end every stream, then close every open turn.
    pub fn close_all(&mut self, out: &mut Vec<Output>, note: &mut dyn FnMut(Note<'_>)) {
        self.close_all_batched(usize::MAX, out, note, &mut |_| {});
    }

    /// [`Ingest::close_all`], handing `out` to `drain` after every `batch` turns closed (see
    /// `Correlator::close_all_batched`).
    pub fn close_all_batched(
        &mut self,
        batch: usize,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
        drain: &mut dyn FnMut(&mut Vec<Output>),
    ) {
        for i in 0..self.streams.len() {
            self.end(StreamId(i as u32), None, out, note);
        }
        if let Some(joiner) = &self.joiner
            && let Ok(mut j) = joiner.lock()
            && !j.is_empty()
        {
            let mut events = j.finish();
            self.pipeline
                .set_origin(&joined_origin(), None, turn_route::joined_route());
            self.pipeline.observe_events(&mut events, out);
        }
        self.pipeline.close_all_batched(batch, out, drain);
        self.tell_fates(note);
    }

    /// Let idle turns time out (and held turns quiet for the settle time be correlated: the
    /// fates of their lines held undecoded are told to `note`).
    pub fn tick(&mut self, now_ms: i64, out: &mut Vec<Output>, note: &mut dyn FnMut(Note<'_>)) {
        self.pipeline.tick(now_ms, out);
        self.tell_fates(note);
    }

    /// Tell the fates of held lines decoded since the last time (their turns released).
    fn tell_fates(&mut self, note: &mut dyn FnMut(Note<'_>)) {
        let Some(fates) = self.pipeline.take_fates() else {
            return;
        };
        for (source, [events, skipped]) in Source::ALL.into_iter().zip(fates.decoded) {
            for (outcome, lines) in [
                (crate::pipeline::LineOutcome::Event, events),
                (crate::pipeline::LineOutcome::Skipped, skipped),
            ] {
                if lines > 0 {
                    note(Note::Decoded {
                        source,
                        outcome,
                        lines,
                    });
                }
            }
        }
        if fates.early.turns > 0 {
            note(Note::ReleasedEarly {
                turns: fates.early.turns,
                events: fates.early.events,
            });
        }
        for fate in fates.bad {
            note(Note::Line {
                source: fate.at.source,
                name: fate.name.as_deref().unwrap_or_default(),
                number: fate.at.number,
                outcome: Err(fate.error),
            });
        }
    }

    fn decide(
        &mut self,
        id: StreamId,
        sniffed: decode::detect::Sniffed,
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        let Some(name) = self
            .streams
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .map(|s| s.name.clone())
        else {
            return;
        };
        let (routing, decoding) = match &sniffed {
            Ok(format) => (
                self.routing(*format, &name),
                self.decoding_for(*format, &name),
            ),
            Err(lookalike) => {
                // Read whole: its lines are only counted, by one shard.
                let routing = Some(Routing::Whole(turn_route::stream_route(&name)));
                let decoding = if reads(self.shard, routing) {
                    Decoding::Refused(lookalike.clone())
                } else {
                    Decoding::Elsewhere
                };
                (routing, decoding)
            }
        };
        let shard = self.shard;
        let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        stream.format = sniffed.as_ref().ok().copied();
        stream.routing = routing;
        stream.announced = true;
        let Decoding::Sniffing(held) = std::mem::replace(&mut stream.decoding, decoding) else {
            return;
        };
        stream.note_records_executions(&mut self.pipeline);
        if gives_notes(shard, routing) {
            match &sniffed {
                Ok(format) => note(Note::Format {
                    source: stream.source,
                    name: &stream.name,
                    format: *format,
                    forced: false,
                }),
                Err(lookalike) => note(Note::Refused {
                    source: stream.source,
                    name: &stream.name,
                    lookalike,
                }),
            }
        }
        for (number, place, bytes) in held.lines {
            decode_line(
                &mut self.pipeline,
                shard,
                stream,
                (number, place),
                &bytes,
                arrival_ms,
                out,
                note,
            );
        }
    }
}

/// Whether a stream read as `format` feeds the session joiner, when sessions are joined
/// ([`Ingest::join_sessions`]): gemini-cli's telemetry and stream-json (and Claude Code's
/// shape, see `gemini_join::Source::of`), and OTLP streams unless `join_otlp` is off
/// ([`Ingest::otlp_unjoined`]).
pub fn feeds_joiner(format: Format, join_otlp: bool) -> bool {
    match format {
        Format::Otlp => join_otlp,
        other => gemini_join::Source::of(other).is_some(),
    }
}

/// How shards share a stream read as `format` and called `name` (`None` while its format is
/// unknown): native lines by turn; any other format whole, on the shard of the session joiner
/// ([`turn_route::joined_route`]) when it feeds it (`joined`), else of its name
/// ([`turn_route::stream_route`]). The live engine routes by it before any worker has read a
/// line of a stream whose format is forced.
pub fn routing_for(format: Format, name: &str, joined: bool) -> Option<Routing> {
    match format {
        Format::Auto => None,
        Format::Native => Some(Routing::ByTurn),
        _ if joined => Some(Routing::Whole(turn_route::joined_route())),
        _ => Some(Routing::Whole(turn_route::stream_route(name))),
    }
}
