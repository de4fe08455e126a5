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
//! [`Lookalike`]) is refused: [`Note::Refused`] once, then each of its lines is counted as a
//! bad line (`unknown_format`) and never decoded; other streams go on.
//!
//! Blank-line policy: in the native format a blank (or whitespace-only) line is not a record:
//! skipped, not counted. Provider streams get every line, since SSE ends an event on a blank
//! line.

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::correlate::{Correlator, Output};
use crate::decode::detect::Lookalike;
use crate::decode::gemini_join::{self, JoinFeed, JoinerSnapshot, SessionJoiner};
use crate::decode::{self, BadLineReason, DecodeError, Format, StreamDecoder};
use crate::fasthash::FastMap;
use crate::pipeline::{InputCounters, LineOutcome, Pipeline, Shard};

/// Where a stream comes from: a bounded set, used as a metric label by the sinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Tailed or named files.
    File,
    /// Standard input.
    Stdin,
    /// The built-in demo fleet.
    Demo,
    /// Lines shipped over NATS JetStream by `retryscope ship`.
    Nats,
    /// OpenTelemetry records received over OTLP (`run --otlp-listen`).
    Otlp,
    /// Attempts seen on the wire by `retryscope proxy`.
    Proxy,
}

impl Source {
    /// Every source, for pre-registering series.
    pub const ALL: [Source; 6] = [
        Source::File,
        Source::Stdin,
        Source::Demo,
        Source::Nats,
        Source::Otlp,
        Source::Proxy,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::File => "file",
            Source::Stdin => "stdin",
            Source::Demo => "demo",
            Source::Nats => "nats",
            Source::Otlp => "otlp",
            Source::Proxy => "proxy",
        }
    }
}

/// A stream's handle, valid until [`Ingest::end`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId(u32);

impl StreamId {
    /// The handle as a number, for a wrapper that hands out handles of its own (the live
    /// engine's shards) and maps them to each inner ingest path's.
    pub fn index(self) -> u32 {
        self.0
    }

    /// A handle from [`StreamId::index`]; only meaningful to whoever handed it out.
    pub fn from_index(index: u32) -> Self {
        StreamId(index)
    }
}

/// What the ingest path tells its caller, as it happens.
#[derive(Debug)]
pub enum Note<'a> {
    /// A line's fate: an event, a skipped record, or a bad line with its reason.
    Line {
        /// The stream.
        source: Source,
        /// The stream's name (a path, `<stdin>`).
        name: &'a str,
        /// The line's number in the stream (1-based; counted from where reading started).
        number: u64,
        /// What became of it.
        outcome: Result<LineOutcome, DecodeError>,
    },
    /// A stream's format was decided (sniffed or forced), before its first line is decoded.
    /// A forced format is told with the stream's first line.
    Format {
        /// The stream.
        source: Source,
        /// The stream's name.
        name: &'a str,
        /// The format.
        format: Format,
        /// Forced by the caller (`--format`, the OTLP receiver), not sniffed.
        forced: bool,
    },
    /// A stream was refused: it borrows a provider format's names without its shape. Its
    /// lines are counted as bad lines (`unknown_format`), never decoded.
    Refused {
        /// The stream.
        source: Source,
        /// The stream's name.
        name: &'a str,
        /// What it looks like, and why it is not that.
        lookalike: &'a Lookalike,
    },
}

/// Lines held while a stream's format is not known yet.
#[derive(Default)]
struct Held {
    lines: Vec<(u64, Vec<u8>)>,
    head: Vec<u8>,
    /// No line arrived since the last [`Ingest::settle_idle`].
    idle: bool,
}

enum Decoding {
    Sniffing(Held),
    Native,
    Provider(Box<dyn StreamDecoder>),
    Refused(Lookalike),
}

struct Stream {
    name: String,
    /// The name, shared with the turns it opens ([`Pipeline::set_origin`]).
    origin: Arc<str>,
    /// Its line numbers count from the top of the input ([`Ingest::without_origin_lines`]).
    lines_known: bool,
    source: Source,
    lines: u64,
    format: Option<Format>,
    /// Its format was told in a [`Note::Format`].
    announced: bool,
    decoding: Decoding,
}

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
    /// Outputs of one client session held to be joined ([`Ingest::join_sessions`]).
    joiner: Option<Arc<Mutex<SessionJoiner>>>,
    /// Turns record the line that opened them (off where line numbers count from where
    /// reading started, not from the top of the file: a live tail resumed or started at the end).
    origin_lines: bool,
    /// Whether OTLP streams' gemini-cli records are held for the join too (default); off when
    /// no stream-json can come ([`Ingest::otlp_unjoined`]).
    join_otlp: bool,
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
            joiner: None,
            origin_lines: true,
            join_otlp: true,
        }
    }

    /// Join the outputs of one client session that live in separate streams (gemini-cli's
    /// telemetry outfile and its stream-json): their events are held, then merged in time
    /// order ([`gemini_join`]): at [`Ingest::close_all`] for whole inputs (`check`), and for
    /// live ones (`run`) session by session once quiet ([`Ingest::release_joined`]).
    pub fn join_sessions(&mut self) {
        self.joiner = Some(Arc::default());
    }

    /// Join sessions ([`Ingest::join_sessions`]) starting from a checkpointed
    /// [`JoinerSnapshot`]: the events it held are held again.
    pub fn join_sessions_from(&mut self, held: JoinerSnapshot) {
        self.joiner = Some(Arc::new(Mutex::new(SessionJoiner::restore(held))));
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
            self.pipeline.set_origin(&joined_origin(), None);
            self.pipeline.observe_events(&mut events, out);
        }
    }

    fn decoding_for(&self, format: Format, name: &str) -> Decoding {
        // An OTLP stream carries gemini-cli's telemetry records: joined like its outfile.
        if format == Format::Otlp
            && self.join_otlp
            && let Some(joiner) = &self.joiner
        {
            return Decoding::Provider(Box::new(decode::otlp::Decoder::joined(joiner.clone())));
        }
        match (decoding_for(format, name), &self.joiner) {
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

    /// Correlate only the turns of `shard`, as one of several ingest paths that are all handed
    /// every line of the same streams (the live engine's shards): a native line is decoded only
    /// by the shard of its top-level `turn` ([`crate::turn_route::shard_of_line`]); provider
    /// streams are decoded by all (see [`Shard`]). Every line's [`Note`] is given by exactly one
    /// shard: its owner, or shard 0 for lines every shard decodes; a format decision, by shard 0.
    pub fn set_shard(&mut self, shard: Shard) {
        self.pipeline.set_shard(shard);
    }

    /// The pipeline, to restore a checkpoint or number turns.
    pub fn pipeline_mut(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }

    /// The next lines come from another input of `check` (see [`Correlator::next_input`]).
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
        let (format, decoding) = match format {
            Format::Auto => (None, Decoding::Sniffing(Held::default())),
            forced => (Some(forced), self.decoding_for(forced, name)),
        };
        let stream = Stream {
            name: name.to_owned(),
            origin: Arc::from(name),
            lines_known: self.origin_lines,
            source,
            lines: 0,
            format,
            announced: false,
            decoding,
        };
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
        let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        stream.lines = number.unwrap_or(stream.lines + 1);
        let number = stream.lines;
        if !stream.announced
            && let Some(format) = stream.format
            && self.pipeline.shard().is_none_or(Shard::primary)
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
            held.lines.push((number, bytes.to_vec()));
            held.idle = false;
            if let Some(sniffed) = decode::detect::sniff(&held.head, false) {
                self.decide(id, sniffed, arrival_ms, out, note);
            }
            return;
        }
        decode_line(
            &mut self.pipeline,
            stream,
            number,
            bytes,
            arrival_ms,
            out,
            note,
        );
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
        if self.pipeline.shard().is_some_and(|s| !s.primary()) {
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
    pub fn settle(
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
        self.settle(id, arrival_ms, out, note);
        let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::take) else {
            return;
        };
        self.by_name[stream.source as usize].remove(&stream.name);
        self.free.push(id.0);
        if let Decoding::Provider(mut decoder) = stream.decoding {
            let line = stream.lines_known.then_some(stream.lines);
            self.pipeline.set_origin(&stream.origin, line);
            self.pipeline.stream_end(decoder.as_mut(), arrival_ms, out);
        }
    }

    /// End of all input: end every stream, then close every open turn.
    pub fn close_all(&mut self, out: &mut Vec<Output>, note: &mut dyn FnMut(Note<'_>)) {
        self.close_all_batched(usize::MAX, out, note, &mut |_| {});
    }

    /// [`Ingest::close_all`], handing `out` to `drain` after every `batch` turns closed (see
    /// [`crate::correlate::Correlator::close_all_batched`]).
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
            self.pipeline.set_origin(&joined_origin(), None);
            self.pipeline.observe_events(&mut events, out);
        }
        self.pipeline.close_all_batched(batch, out, drain);
    }

    /// Let idle turns time out.
    pub fn tick(&mut self, now_ms: i64, out: &mut Vec<Output>) {
        self.pipeline.tick(now_ms, out);
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
        let decoding = match &sniffed {
            Ok(format) => self.decoding_for(*format, &name),
            Err(lookalike) => Decoding::Refused(lookalike.clone()),
        };
        let Some(stream) = self.streams.get_mut(id.0 as usize).and_then(Option::as_mut) else {
            return;
        };
        stream.format = sniffed.as_ref().ok().copied();
        stream.announced = true;
        let Decoding::Sniffing(held) = std::mem::replace(&mut stream.decoding, decoding) else {
            return;
        };
        if self.pipeline.shard().is_none_or(Shard::primary) {
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
        for (number, bytes) in held.lines {
            decode_line(
                &mut self.pipeline,
                stream,
                number,
                &bytes,
                arrival_ms,
                out,
                note,
            );
        }
    }
}

/// The source of turns joined from a gemini-cli session's telemetry and stream-json (the
/// session id tells which).
fn joined_origin() -> Arc<str> {
    Arc::from("gemini-cli session (telemetry and stream-json joined)")
}

fn decoding_for(format: Format, name: &str) -> Decoding {
    match decode::stream_decoder(format, &stream_name(name)) {
        Some(decoder) => Decoding::Provider(decoder),
        None => Decoding::Native,
    }
}

/// The name a provider stream's turn ids are seeded from: the file name without its folder.
fn stream_name(name: &str) -> String {
    std::path::Path::new(name)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.to_owned())
}

fn decode_line(
    pipeline: &mut Pipeline,
    stream: &mut Stream,
    number: u64,
    bytes: &[u8],
    arrival_ms: Option<i64>,
    out: &mut Vec<Output>,
    note: &mut dyn FnMut(Note<'_>),
) {
    let shard = pipeline.shard();
    pipeline.set_origin(&stream.origin, stream.lines_known.then_some(number));
    let outcome = match &mut stream.decoding {
        Decoding::Native if bytes.iter().all(u8::is_ascii_whitespace) => return,
        Decoding::Native
            if shard
                .is_some_and(|s| crate::turn_route::shard_of_line(bytes, s.count) != s.index) =>
        {
            return;
        }
        Decoding::Native => pipeline.native_line(bytes, arrival_ms, out),
        Decoding::Provider(decoder) => {
            let outcome = pipeline.stream_line(decoder.as_mut(), bytes, arrival_ms, out);
            if shard.is_some_and(|s| !s.primary()) {
                return;
            }
            outcome
        }
        Decoding::Refused(_) if bytes.iter().all(u8::is_ascii_whitespace) => return,
        Decoding::Refused(lookalike) => {
            pipeline.refused_line();
            if shard.is_some_and(|s| !s.primary()) {
                return;
            }
            Err(DecodeError::new(
                BadLineReason::UnknownFormat,
                format!(
                    "not decoded: the stream borrows {} names without its shape",
                    lookalike.like_name()
                ),
            ))
        }
        Decoding::Sniffing(_) => return,
    };
    note(Note::Line {
        source: stream.source,
        name: &stream.name,
        number,
        outcome,
    });
}
