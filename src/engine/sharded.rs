//! The live engine's ingest path, sharded: [`ShardedIngest`] has the methods of [`Ingest`]
//! that the engine calls, and behind them either one `Ingest` on the engine thread (one
//! worker) or one `Ingest` per worker thread, each reading its share of the input (as `check`
//! does for native logs, see `check/parallel.rs`).
//!
//! Routing (issue 22), decided on the engine thread for every line, the same for every count
//! of workers:
//! - a stream whose format is not known yet goes to every worker, in arrival order with
//!   explicit line numbers, so each one sniffs it and decides its format and routing alike
//!   ([`Ingest::set_shard`]); worker 0 tells the engine thread the routing, and from then on:
//! - native lines go to the worker of their turn ([`turn_route::shard_of_line`], once per
//!   line);
//! - any other stream (a provider's SSE, an agent's own format, an OTLP session
//!   `otlp:<service>/<session>`) is read whole by ONE worker, the one its route hashes to
//!   ([`turn_route::Routing::Whole`]: FNV-1a of the stream's name, [`turn_route::stream_route`]): all its
//!   lines are decoded once, in order, by one decoder, and that worker correlates every turn
//!   they open. A forced format (the OTLP receiver's streams, `--format`) is routed from its
//!   first line: it is opened, fed and ended on that worker only. The other workers decide a
//!   sniffed stream's format too, then drop what they held of it.
//! - gemini-cli's two outputs of one session (its telemetry outfile or OTLP records, and its
//!   stream-json; Claude Code's shape too) come on different streams and are joined by session
//!   id ([`Ingest::join_sessions_from`]), and the join key is in the records, not in the
//!   stream names: a file's sessions are only known by decoding it. So every stream that feeds
//!   the session joiner goes to one designated worker, that of [`turn_route::joined_route`]
//!   (a fixed key's hash, like a stream's): its joiner alone holds events, releases them
//!   ([`Ingest::release_joined`]) and correlates the joined turns; the other workers' joiners
//!   stay empty. OTLP streams feed the joiner only when files or stdin are read too
//!   ([`Ingest::otlp_unjoined`] otherwise): an OTLP-only collector spreads its sessions over
//!   all workers by name, one that also reads files keeps them on the joiner's worker.
//!
//! A turn keeps the route of the feed that opened it (0 for native lines), in the checkpoint
//! too: resuming, each worker gets the open turns and remembered closed ids whose next events
//! will come to it ([`turn_route::shard_of_turn`]: by id for native turns, by route for the
//! others), and the joiner's worker gets the held gemini-cli events (the checkpoint's
//! `joined`). Routes depend on names and the worker count only, and the checkpoint's format
//! does not depend on the count, so a checkpoint resumes with any `--workers`, as it always
//! did for native turns. A decoder's state is not checkpointed (with one worker as with
//! several): a stream resumes from its offset with a new decoder, on the worker of its route.
//! A checkpoint written before routes existed (version 3 or older) records none: its open
//! turns are placed by id, and an open turn of a stream read whole may then be reported in two
//! parts; `run` warns when such a checkpoint is resumed with several workers.
//!
//! Limits: one turn's events must come through one feed (native lines, one stream, or the
//! joined path) for the result not to depend on the worker count; a turn id that two such
//! feeds share (a native log and an SSE file naming the same turn) is one turn with one worker
//! and may be two with several. `max_open_turns` and `remember_closed_turns` are split evenly,
//! so the joiner's worker, holding every joined session, may evict sooner than one worker
//! would.
//!
//! Lines sent are correlated by the next [`ShardedIngest::flush`] (or any call that waits),
//! which also collects what the workers produced, so the engine delivers outputs at the same
//! points of its loop as with one thread.
//!
//! Checkpoints stay consistent with a barrier: [`ShardedIngest::checkpoint`] sends a marker
//! after everything read so far; each worker answers with its outputs, then its state, once
//! it has applied everything before the marker; the states are merged into one
//! [`CorrelatorSnapshot`] (the checkpoint's format does not depend on the worker count) while
//! the engine thread, which alone moves file offsets, has read nothing since. A worker that
//! dies (only a bug, a panic, stops one) is found at the next call that waits for the workers
//! ([`ShardedIngest::flush`] always does): from then on [`ShardedIngest::alive`] and
//! [`ShardedIngest::checkpoint`] return [`WorkerDied`], and the engine stops, so no checkpoint
//! without the dead worker's open turns is ever written (`sharded/workers.rs`).
//!
//! Per-line notes: successful lines are counted and added to the metrics once per batch (one
//! worker: at each flush), which is what the engine's [`Ingested`](crate::internal_events::Ingested) does with them one by one;
//! the other notes (bad lines, formats) go to the `note` callbacks with one worker, and
//! straight to the metrics as [`Ingested`](crate::internal_events::Ingested) with several. Each line is counted by exactly one
//! worker: the one that decodes it.

mod fault;
mod workers;

use std::sync::Arc;

use crate::sink::metrics::Metrics;
use retryscope_core::correlate::{
    Correlator, CorrelatorConfig, CorrelatorSnapshot, CorrelatorStats, Output,
};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::decode::gemini_join::JoinerSnapshot;
use retryscope_core::ingest::{Ingest, Note, Source, StreamId, StreamState, StreamStates};
use retryscope_core::pipeline::{InputCounters, LineOutcome};
use retryscope_core::turn_route::{self, Shard};
use workers::{Op, Workers};

/// Workers at most, whatever the core count.
pub const MAX_WORKERS: usize = 8;

/// The default worker count: 1, everything on the engine thread. Sharding is opt-in
/// (`--workers N`): it pays off on idle cores only, the engine thread (reading, routing,
/// delivering) being one core's work already. Until issue 22 every worker decoded every
/// provider and OTLP stream, and an OTLP receiver fell from ~154k to ~26k records/s with 2
/// workers; each such stream is now read by one worker (see the module docs).
pub fn default_workers() -> usize {
    1
}

/// The correlator state a run resumes from.
#[derive(Debug)]
pub struct Restored {
    /// Open turns and remembered closed ids.
    pub correlator: CorrelatorSnapshot,
    /// Input counters.
    pub counters: InputCounters,
    /// The logical clock.
    pub clock_ms: i64,
    /// gemini-cli events held for the session join (they go to the joiner's worker, which
    /// reads every stream that feeds the joiner).
    pub joined: JoinerSnapshot,
    /// Streams' decoder states ([`Ingest::stream_states`]): every worker is handed all of
    /// them, and the one that reads each stream resumes it.
    pub streams: Vec<StreamState>,
}

/// What a checkpoint holds of the ingest path, taken at one point of the input.
#[derive(Debug)]
pub struct IngestState {
    /// Open turns (of every worker, merged).
    pub correlator: CorrelatorSnapshot,
    /// Input counters (added up).
    pub counters: InputCounters,
    /// The logical clock (the latest of the workers').
    pub clock_ms: i64,
    /// gemini-cli events held for the session join (the joiner's worker's: the others hold
    /// none).
    pub joined: Option<JoinerSnapshot>,
    /// Turns held until quiet ([`ShardedIngest::hold_turns`]; one worker only).
    pub held: Option<retryscope_core::reorder::HoldSnapshot>,
    /// Streams' states (of every worker: each stream is decoded by one), and how many were
    /// left out past [`retryscope_core::ingest::MAX_STREAM_STATES`].
    pub streams: StreamStates,
}

/// An ingest worker thread died: a bug (a panic) in decoding or correlating. The open turns
/// it owned are gone from memory, so the engine must stop rather than write a checkpoint
/// without them: a restart then resumes from the last good checkpoint and loses nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ingest worker {worker} (thread retryscope-shard-{worker}) died: {panic}")]
pub struct WorkerDied {
    /// The worker's index (0-based, of `--workers`).
    pub worker: usize,
    /// Its panic message.
    pub panic: String,
}

/// [`Ingest`] on one thread or sharded over several (native lines by turn, other streams
/// whole by name); see the module docs.
pub struct ShardedIngest {
    mode: Mode,
    /// Successful lines of the one-thread mode, added to `metrics` at each flush.
    counts: LineCounts,
    metrics: Arc<Metrics>,
}

enum Mode {
    Local(Box<Ingest>),
    Workers(Box<Workers>),
}

impl std::fmt::Debug for ShardedIngest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedIngest")
            .field("workers", &self.workers())
            .finish()
    }
}

fn new_ingest(
    cfg: &CorrelatorConfig,
    prices: &Arc<PriceTable>,
    format: Format,
    join_otlp: bool,
    restored: Option<Restored>,
    shard: Option<Shard>,
) -> Ingest {
    let mut held = JoinerSnapshot::default();
    let mut streams = Vec::new();
    let mut ingest = match restored {
        Some(r) => {
            held = r.joined;
            streams = r.streams;
            let mut ingest = Ingest::new(
                Correlator::restore(cfg.clone(), prices.clone(), r.correlator),
                format,
            );
            ingest
                .pipeline_mut()
                .restore_counters(r.counters, r.clock_ms);
            ingest
        }
        None => Ingest::new(Correlator::new(cfg.clone(), prices.clone()), format),
    };
    // gemini-cli's telemetry outfile and stream-json of one session become one turn.
    ingest.join_sessions_from(held);
    // A tail's line numbers count from where it started reading: turns name the file only.
    ingest.without_origin_lines();
    if !join_otlp {
        ingest.otlp_unjoined();
    }
    // Its shard first: each stream is resumed by the worker that reads it, and only opened
    // (another's) by the rest.
    if let Some(shard) = shard {
        ingest.set_shard(shard);
    }
    let failed = ingest.resume_streams(streams);
    if failed > 0 {
        tracing::warn!(
            streams = failed,
            "streams' states in the checkpoint do not fit this run (a --format other than \
             theirs, or a state their decoder does not read): they start afresh"
        );
    }
    ingest
}

/// The worker threads could not be started (the system refused a thread).
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot start {count} ingest worker threads: {source}; nothing was read, and the checkpoint \
     is untouched (restart, or run with --workers 1)"
)]
pub struct WorkerSpawn {
    /// Workers asked for.
    pub count: usize,
    /// Why a thread could not be started.
    #[source]
    pub source: std::io::Error,
}

impl ShardedIngest {
    /// An ingest path over `workers` threads (1: on the calling thread), resuming from
    /// `restored` when given. Notes of sharded workers go to `metrics`. `join_otlp`: hold OTLP
    /// streams' gemini-cli records for the stream-json join ([`Ingest::otlp_unjoined`]).
    pub fn start(
        workers: usize,
        cfg: CorrelatorConfig,
        prices: Arc<PriceTable>,
        format: Format,
        join_otlp: bool,
        restored: Option<Restored>,
        metrics: Arc<Metrics>,
    ) -> Result<ShardedIngest, WorkerSpawn> {
        let fault = fault::PanicAfter::from_env();
        Self::start_faulty(
            workers, cfg, prices, format, join_otlp, restored, metrics, fault,
        )
    }

    /// [`ShardedIngest::start`] with a worker made to panic (`fault.rs`).
    #[allow(clippy::too_many_arguments)]
    fn start_faulty(
        workers: usize,
        cfg: CorrelatorConfig,
        prices: Arc<PriceTable>,
        format: Format,
        join_otlp: bool,
        restored: Option<Restored>,
        metrics: Arc<Metrics>,
        fault: Option<fault::PanicAfter>,
    ) -> Result<ShardedIngest, WorkerSpawn> {
        let count = workers.clamp(1, MAX_WORKERS);
        if count == 1 {
            return Ok(ShardedIngest {
                mode: Mode::Local(Box::new(new_ingest(
                    &cfg, &prices, format, join_otlp, restored, None,
                ))),
                counts: LineCounts::default(),
                metrics,
            });
        }
        // The memory bounds hold for all workers together.
        let mut cfg = cfg;
        cfg.max_open_turns = cfg.max_open_turns.div_ceil(count).max(1);
        cfg.remember_closed_turns = cfg.remember_closed_turns.div_ceil(count);
        // Resuming: each worker gets the turns whose next events will come to it (by the
        // route each turn keeps: its id for native lines, else its stream's or the joined
        // path's route), the joined route's worker the held gemini-cli events; counters go to
        // worker 0; every worker gets the clock.
        let parts: Vec<Option<Restored>> = match restored {
            Some(r) => {
                let clock_ms = r.clock_ms;
                let mut joined = Some(r.joined);
                let streams = r.streams;
                let joiner = turn_route::shard_of_route(turn_route::joined_route(), count as u32);
                let mut counters = Some(r.counters);
                r.correlator
                    .split(count, |id, route| {
                        turn_route::shard_of_turn(id, route, count as u32) as usize
                    })
                    .into_iter()
                    .enumerate()
                    .map(|(index, correlator)| {
                        Some(Restored {
                            correlator,
                            counters: counters.take().unwrap_or_default(),
                            clock_ms,
                            joined: if index as u32 == joiner {
                                joined.take().unwrap_or_default()
                            } else {
                                JoinerSnapshot::default()
                            },
                            streams: streams.clone(),
                        })
                    })
                    .collect()
            }
            None => (0..count).map(|_| None).collect(),
        };
        let ingests = parts
            .into_iter()
            .enumerate()
            .map(|(index, part)| {
                let shard = Shard {
                    index: index as u32,
                    count: count as u32,
                };
                new_ingest(&cfg, &prices, format, join_otlp, part, Some(shard))
            })
            .collect();
        match Workers::spawn(ingests, &metrics, fault, format, join_otlp) {
            Ok(workers) => Ok(ShardedIngest {
                mode: Mode::Workers(Box::new(workers)),
                counts: LineCounts::default(),
                metrics,
            }),
            // The restored turns went into the workers that could not all start: no fallback
            // could resume them, so the engine does not start (the checkpoint on disk is
            // untouched; a restart, or `--workers 1`, resumes it).
            Err(source) => Err(WorkerSpawn { count, source }),
        }
    }

    /// Hold each turn's events until it has been quiet for `settle_ms`, then correlate them in
    /// time order (`retryscope_core::reorder`), resuming `held`: with one worker only (a
    /// collector's partition); `false` with several, which do not hold.
    pub fn hold_turns(
        &mut self,
        settle_ms: i64,
        held: Option<retryscope_core::reorder::HoldSnapshot>,
    ) -> bool {
        match &mut self.mode {
            Mode::Local(i) => {
                i.pipeline_mut().hold_turns(settle_ms, held);
                true
            }
            Mode::Workers(_) => false,
        }
    }

    /// Worker threads (1: the calling thread).
    pub fn workers(&self) -> usize {
        match &self.mode {
            Mode::Local(_) => 1,
            Mode::Workers(w) => w.count(),
        }
    }

    /// See [`Ingest::stream`].
    pub fn stream(&mut self, source: Source, name: &str) -> StreamId {
        match &mut self.mode {
            Mode::Local(i) => i.stream(source, name),
            Mode::Workers(w) => w.stream(source, name, None),
        }
    }

    /// See [`Ingest::stream_as`].
    pub fn stream_as(&mut self, source: Source, name: &str, format: Format) -> StreamId {
        match &mut self.mode {
            Mode::Local(i) => i.stream_as(source, name, format),
            Mode::Workers(w) => w.stream(source, name, Some(format)),
        }
    }

    /// See [`Ingest::line`]. Sharded, the line is correlated by the next
    /// [`ShardedIngest::flush`].
    pub fn line(
        &mut self,
        id: StreamId,
        number: Option<u64>,
        bytes: &[u8],
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        match &mut self.mode {
            Mode::Local(i) => {
                // Successful lines are counted here and added to the metrics at the next
                // flush, as the workers do (a metrics lock per line cost ~8%).
                let counts = &mut self.counts;
                i.line(id, number, bytes, arrival_ms, out, &mut |n| {
                    counts.note(n, note)
                });
            }
            Mode::Workers(w) => w.line(id.index(), number, bytes, arrival_ms, out),
        }
    }

    /// See [`Ingest::place_next_line`] (with one worker; several do not hold turns).
    pub fn place_next_line(&mut self, place: retryscope_core::reorder::Place) {
        if let Mode::Local(i) = &mut self.mode {
            i.place_next_line(place);
        }
    }

    /// See [`Ingest::too_long`].
    pub fn too_long(
        &mut self,
        id: StreamId,
        number: Option<u64>,
        len: u64,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        match &mut self.mode {
            Mode::Local(i) => i.too_long(id, number, len, note),
            Mode::Workers(w) => w.too_long(id.index(), number, len),
        }
    }

    /// See [`Ingest::settle_idle`].
    pub fn settle_idle(
        &mut self,
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        match &mut self.mode {
            Mode::Local(i) => i.settle_idle(arrival_ms, out, note),
            Mode::Workers(w) => w.push(&Op::SettleIdle { arrival_ms }, out),
        }
    }

    /// See [`Ingest::release_joined`].
    pub fn release_joined(&mut self, quiet_ticks: u32, out: &mut Vec<Output>) {
        match &mut self.mode {
            Mode::Local(i) => i.release_joined(quiet_ticks, out),
            Mode::Workers(w) => w.push(&Op::ReleaseJoined { quiet_ticks }, out),
        }
    }

    /// See [`Ingest::tick`].
    pub fn tick(&mut self, now_ms: i64, out: &mut Vec<Output>, note: &mut dyn FnMut(Note<'_>)) {
        match &mut self.mode {
            Mode::Local(i) => {
                // Held lines decoded at their turn's release: counted as `line` counts.
                let counts = &mut self.counts;
                i.tick(now_ms, out, &mut |n| counts.note(n, note));
            }
            Mode::Workers(w) => w.push(&Op::Tick { now_ms }, out),
        }
    }

    /// See [`Ingest::end_quiet`]: on one thread only (sharded, the sources end their own
    /// streams; a cluster partition, which calls this, is one thread).
    pub fn end_quiet(
        &mut self,
        now_ms: i64,
        quiet_ms: i64,
        ends: impl Fn(&str, Option<Format>) -> bool,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        if let Mode::Local(i) = &mut self.mode {
            i.end_quiet(now_ms, quiet_ms, ends, out, note);
        }
    }

    /// See [`Ingest::end`].
    pub fn end(
        &mut self,
        id: StreamId,
        arrival_ms: Option<i64>,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        match &mut self.mode {
            Mode::Local(i) => i.end(id, arrival_ms, out, note),
            Mode::Workers(w) => w.end(id, arrival_ms, false, out),
        }
    }

    /// See [`Ingest::park`].
    pub fn park(
        &mut self,
        id: StreamId,
        now_ms: i64,
        out: &mut Vec<Output>,
        note: &mut dyn FnMut(Note<'_>),
    ) {
        match &mut self.mode {
            Mode::Local(i) => i.park(id, now_ms, out, note),
            Mode::Workers(w) => w.end(id, Some(now_ms), true, out),
        }
    }

    /// See [`Ingest::close_all`]. Sharded, it returns once every worker has closed its turns
    /// and their reports are in `out`.
    pub fn close_all(&mut self, out: &mut Vec<Output>, note: &mut dyn FnMut(Note<'_>)) {
        match &mut self.mode {
            Mode::Local(i) => i.close_all(out, note),
            Mode::Workers(w) => {
                let mut ids: Vec<u32> = w.streams.keys().copied().collect();
                ids.sort_unstable();
                for id in ids {
                    w.end(StreamId::from_index(id), None, false, out);
                }
                w.push(&Op::CloseAll, out);
                w.flush(out);
            }
        }
    }

    /// Correlate every line handed in so far and move what came of it into `out` (a no-op
    /// with one worker, which correlates as lines arrive).
    pub fn flush(&mut self, out: &mut Vec<Output>) {
        match &mut self.mode {
            Mode::Local(_) => self.counts.publish(&self.metrics),
            Mode::Workers(w) => w.flush(out),
        }
    }

    /// Input counters of the correlator(s), added up (as of the last flush when sharded).
    pub fn stats(&self) -> CorrelatorStats {
        match &self.mode {
            Mode::Local(i) => i.correlator().stats(),
            Mode::Workers(w) => {
                let mut total = CorrelatorStats::default();
                if let Ok(s) = w.stats.lock() {
                    for (stats, _) in s.iter() {
                        total.add(stats);
                    }
                }
                total
            }
        }
    }

    /// Open turns (as of the last flush when sharded).
    pub fn open_turns(&self) -> usize {
        match &self.mode {
            Mode::Local(i) => i.correlator().open_turns(),
            Mode::Workers(w) => w
                .stats
                .lock()
                .map(|s| s.iter().map(|(_, open)| open).sum())
                .unwrap_or(0),
        }
    }

    /// `Err` once a worker thread has died (found at any call that hands over or collects
    /// work; [`ShardedIngest::flush`] waits for every worker, so it always finds one). The
    /// engine then stops: the dead worker's open turns are lost from memory.
    pub fn alive(&self) -> Result<(), WorkerDied> {
        match &self.mode {
            Mode::Local(_) => Ok(()),
            Mode::Workers(w) => w.dead().map_or(Ok(()), |d| Err(d.clone())),
        }
    }

    /// The state a checkpoint holds, after every line handed in so far; what the workers
    /// produced before it is moved into `out` (deliver it before reading metric values or
    /// the findings offset). `Err` when a worker has died: there is no consistent state to
    /// write, and none may be written.
    pub fn checkpoint(&mut self, out: &mut Vec<Output>) -> Result<IngestState, WorkerDied> {
        match &mut self.mode {
            Mode::Local(i) => {
                self.counts.publish(&self.metrics);
                let p = i.pipeline();
                Ok(IngestState {
                    correlator: p.correlator().snapshot(),
                    counters: p.counters().clone(),
                    clock_ms: p.clock_ms(),
                    joined: i.joined_snapshot(),
                    held: p.held_snapshot(),
                    streams: i.stream_states(),
                })
            }
            Mode::Workers(w) => w.checkpoint(out),
        }
    }
}

/// Successful lines counted per source and outcome, added to the metrics once per batch.
#[derive(Default)]
struct LineCounts([[u64; 2]; Source::ALL.len()]);

impl LineCounts {
    fn add(&mut self, source: Source, outcome: LineOutcome, lines: u64) {
        let i = match outcome {
            LineOutcome::Event => 0,
            LineOutcome::Skipped => 1,
        };
        self.0[source as usize][i] += lines;
    }

    /// Count `n` if it tells successful lines; hand anything else to `other`.
    fn note(&mut self, n: Note<'_>, other: &mut dyn FnMut(Note<'_>)) {
        match n {
            Note::Line {
                source,
                outcome: Ok(outcome),
                ..
            } => self.add(source, outcome, 1),
            Note::Decoded {
                source,
                outcome,
                lines,
            } => self.add(source, outcome, lines),
            n => other(n),
        }
    }

    fn publish(&mut self, metrics: &Metrics) {
        for source in Source::ALL {
            let [events, skipped] = std::mem::take(&mut self.0[source as usize]);
            if events > 0 {
                metrics.add_events_decoded(source, events);
            }
            if skipped > 0 {
                metrics.add_unknown_events(source, skipped);
            }
        }
    }
}

#[cfg(test)]
mod tests;
