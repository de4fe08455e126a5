//! The worker threads of a sharded ingest path ([`super::ShardedIngest`]): [`Workers`] owns
//! them, their queues, the batches being filled for them on the engine thread and the routing
//! of each stream's lines into those batches (see the parent module); each thread runs
//! [`worker`], applying its batches to its own [`Ingest`] in order and answering a checkpoint
//! barrier with its state.

use std::sync::mpsc::{Receiver, Sender, SyncSender, TryRecvError, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

mod routing;

use super::fault::{ENV as FAULT_ENV, PanicAfter};
use super::{IngestState, LineCounts, WorkerDied};
use crate::internal_events::{Ingested, InternalEvent};
use crate::sink::metrics::Metrics;
use retryscope_core::correlate::{CorrelatorSnapshot, CorrelatorStats, Output};
use retryscope_core::decode::Format;
use retryscope_core::decode::gemini_join::JoinerSnapshot;
use retryscope_core::fasthash::FastMap;
use retryscope_core::ingest::{Ingest, MAX_STREAM_STATES, Note, Source, StreamId, StreamStates};
use retryscope_core::pipeline::InputCounters;
use retryscope_core::turn_route::Routing;
use routing::StreamState;

/// Bytes of lines per batch handed to the workers.
const BATCH_BYTES: usize = 256 * 1024;
/// Operations per batch.
const BATCH_OPS: usize = 4096;
/// Batches queued per worker before the engine thread waits.
const QUEUE: usize = 4;

/// One thing for the workers to do, in order.
#[derive(Clone)]
pub(super) enum Op {
    Open {
        id: u32,
        source: Source,
        name: String,
        /// Read as this format whatever the ingest path's own (`Ingest::stream_as`).
        format: Option<Format>,
    },
    Line {
        id: u32,
        number: Option<u64>,
        arrival_ms: Option<i64>,
        start: usize,
        end: usize,
    },
    TooLong {
        id: u32,
        number: Option<u64>,
        len: u64,
    },
    End {
        id: u32,
        arrival_ms: Option<i64>,
        /// Parked ([`Ingest::park`]) rather than ended.
        park: bool,
    },
    SettleIdle {
        arrival_ms: Option<i64>,
    },
    ReleaseJoined {
        quiet_ticks: u32,
    },
    Tick {
        now_ms: i64,
    },
    CloseAll,
}

/// Operations and the bytes of their lines, for one worker.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    ops: Vec<Op>,
}

impl Batch {
    fn line(&mut self, id: u32, number: u64, bytes: &[u8], arrival_ms: Option<i64>) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(bytes);
        self.ops.push(Op::Line {
            id,
            number: Some(number),
            arrival_ms,
            start,
            end: self.bytes.len(),
        });
    }
}

enum Msg {
    Batch(Batch),
    /// Answer with [`Reply::State`] after everything before.
    Barrier,
}

enum Reply {
    /// A batch was applied: what it produced, and (worker 0) the streams whose format was
    /// decided since, with their routing.
    Done(Vec<Output>, Vec<(u32, Routing)>),
    /// The worker's state at a barrier.
    State(Box<IngestState>),
}

pub(super) struct Workers {
    txs: Vec<SyncSender<Msg>>,
    rxs: Vec<Receiver<Reply>>,
    /// Each worker's thread; taken when it has died (to read its panic).
    handles: Vec<Option<JoinHandle<()>>>,
    /// The next batch of each worker.
    batches: Vec<Batch>,
    /// Bytes in all of them.
    batched_bytes: usize,
    /// Open streams by handle; handles are never reused, so that a late word about an ended
    /// stream cannot be taken for a new one.
    pub(super) streams: FastMap<u32, StreamState>,
    next_id: u32,
    by_name: [FastMap<String, u32>; Source::ALL.len()],
    /// Each worker's correlator counters and open turns, as of its last batch.
    pub(super) stats: Arc<Mutex<Vec<(CorrelatorStats, usize)>>>,
    /// Batches sent to each worker and not answered yet.
    waiting: Vec<usize>,
    /// What the workers produced, not handed to a caller yet (calls without an `out`, like
    /// opening a stream, can collect).
    pending: Vec<Output>,
    /// The first worker found dead. Its open turns are gone from memory, so no checkpoint
    /// may be taken from here on (it would lack them, and a restart would lose them for
    /// good): the engine stops instead.
    dead: Option<WorkerDied>,
    /// The workers' ingest format and whether their OTLP streams feed the session joiner: a
    /// stream's routing when its format is forced, as the workers' [`Ingest`] will decide it.
    format: Format,
    join_otlp: bool,
    /// Lines handed to each worker, by stream handle (tests: a stream read whole reaches one).
    #[cfg(test)]
    pub(super) lines_sent: Vec<FastMap<u32, u64>>,
}

impl Workers {
    /// One thread per ingest path (`ingests[i]` is worker `i`'s, its shard already set, all
    /// reading `format`, joining sessions, OTLP streams too when `join_otlp`); `fault`: a
    /// worker to make panic (tests, see `fault.rs`).
    pub(super) fn spawn(
        ingests: Vec<Ingest>,
        metrics: &Arc<Metrics>,
        fault: Option<PanicAfter>,
        format: Format,
        join_otlp: bool,
    ) -> std::io::Result<Workers> {
        let count = ingests.len();
        let stats = Arc::new(Mutex::new(vec![
            (CorrelatorStats::default(), 0usize);
            count
        ]));
        let mut txs = Vec::new();
        let mut rxs = Vec::new();
        let mut handles = Vec::new();
        for (index, ingest) in ingests.into_iter().enumerate() {
            let (tx, rx) = sync_channel::<Msg>(QUEUE);
            let (reply_tx, reply_rx) = channel::<Reply>();
            let shared = (metrics.clone(), stats.clone());
            let fault = fault.filter(|f| f.worker == index);
            if fault.is_some_and(|f| f.spawn_fails) {
                return Err(std::io::Error::other(
                    "fault injected: the thread was not started",
                ));
            }
            let panic_after = fault.map(|f| f.lines);
            // On an error the threads started so far stop as their queues close.
            let handle = std::thread::Builder::new()
                .name(format!("retryscope-shard-{index}"))
                .spawn(move || {
                    worker(
                        index,
                        ingest,
                        rx,
                        reply_tx,
                        &shared.0,
                        &shared.1,
                        panic_after,
                    )
                })?;
            handles.push(Some(handle));
            txs.push(tx);
            rxs.push(reply_rx);
        }
        Ok(Workers {
            txs,
            rxs,
            handles,
            batches: (0..count).map(|_| Batch::default()).collect(),
            batched_bytes: 0,
            streams: FastMap::default(),
            next_id: 0,
            by_name: Default::default(),
            stats,
            waiting: vec![0; count],
            pending: Vec::new(),
            dead: None,
            format,
            join_otlp,
            #[cfg(test)]
            lines_sent: vec![FastMap::default(); count],
        })
    }

    /// Worker threads.
    pub(super) fn count(&self) -> usize {
        self.txs.len()
    }

    /// Queue `op` for every worker.
    pub(super) fn push_all(&mut self, op: &Op) {
        for b in &mut self.batches {
            b.ops.push(op.clone());
        }
    }

    /// Queue `op` for every worker; full batches go to the workers, and what they have
    /// produced so far is moved into `out`.
    pub(super) fn push(&mut self, op: &Op, out: &mut Vec<Output>) {
        self.push_all(op);
        self.maybe_send();
        out.append(&mut self.pending);
    }

    fn maybe_send(&mut self) {
        if self.batched_bytes >= BATCH_BYTES
            || self.batches.iter().any(|b| b.ops.len() >= BATCH_OPS)
        {
            self.send();
        }
    }

    /// The first worker found dead, if any.
    pub(super) fn dead(&self) -> Option<&WorkerDied> {
        self.dead.as_ref()
    }

    /// Worker `i`'s queues are closed: only a panic ends a worker before the engine drops
    /// them. The first one is kept with its panic message (and logged); the engine stops on it.
    fn died(&mut self, i: usize) {
        self.waiting[i] = 0;
        if self.dead.is_some() {
            return;
        }
        // The queues close as the thread unwinds: the join waits for it to finish.
        let panic = match self
            .handles
            .get_mut(i)
            .and_then(Option::take)
            .map(JoinHandle::join)
        {
            Some(Err(payload)) => panic_message(payload.as_ref()),
            Some(Ok(())) => "it stopped without a panic".to_owned(),
            None => "its thread is gone".to_owned(),
        };
        let dead = WorkerDied { worker: i, panic };
        tracing::error!(
            worker = i,
            panic = %dead.panic,
            "an ingest worker died; the engine stops without writing another checkpoint"
        );
        self.dead = Some(dead);
    }

    /// Hand each worker its batch; collect what is ready without waiting.
    fn send(&mut self) {
        self.batched_bytes = 0;
        for i in 0..self.txs.len() {
            let batch = std::mem::take(&mut self.batches[i]);
            if batch.ops.is_empty() {
                continue;
            }
            if self.txs[i].send(Msg::Batch(batch)).is_ok() {
                self.waiting[i] += 1;
            } else {
                self.died(i);
            }
        }
        self.collect(false);
    }

    /// Take the workers' answers into `pending`: all of them (`wait`), or those already there.
    fn collect(&mut self, wait: bool) {
        let mut gone = Vec::new();
        for (i, rx) in self.rxs.iter().enumerate() {
            while self.waiting[i] > 0 {
                let reply = if wait {
                    rx.recv().map_err(|_| TryRecvError::Disconnected)
                } else {
                    rx.try_recv()
                };
                match reply {
                    Ok(Reply::Done(outputs, decided)) => {
                        self.waiting[i] -= 1;
                        self.pending.extend(outputs);
                        for (id, routing) in decided {
                            if let Some(st) = self.streams.get_mut(&id) {
                                st.routing.get_or_insert(routing);
                            }
                        }
                    }
                    Ok(Reply::State(_)) => {}
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        // The worker is gone (it panicked): nothing more will come.
                        gone.push(i);
                        break;
                    }
                }
            }
        }
        for i in gone {
            self.died(i);
        }
    }

    pub(super) fn flush(&mut self, out: &mut Vec<Output>) {
        self.send();
        self.collect(true);
        out.append(&mut self.pending);
    }

    /// Every worker's state at a barrier, merged; an error, and no state, when any worker is
    /// dead (a checkpoint without its turns would lose them for good).
    pub(super) fn checkpoint(&mut self, out: &mut Vec<Output>) -> Result<IngestState, WorkerDied> {
        self.flush(out);
        if let Some(dead) = &self.dead {
            return Err(dead.clone());
        }
        let mut snapshots = Vec::new();
        let mut counters = InputCounters::default();
        let mut clock_ms = 0;
        let mut joined = None;
        let mut streams = StreamStates::default();
        for i in 0..self.txs.len() {
            let mut state = None;
            if self.txs[i].send(Msg::Barrier).is_ok() {
                while let Ok(reply) = self.rxs[i].recv() {
                    match reply {
                        Reply::Done(outputs, _) => out.extend(outputs),
                        Reply::State(s) => {
                            state = Some(s);
                            break;
                        }
                    }
                }
            }
            let Some(state) = state else {
                self.died(i);
                return Err(self.dead.clone().unwrap_or(WorkerDied {
                    worker: i,
                    panic: "it did not answer the checkpoint barrier".to_owned(),
                }));
            };
            snapshots.push(state.correlator);
            counters.add(&state.counters);
            clock_ms = clock_ms.max(state.clock_ms);
            joined = merge_joined(joined, state.joined);
            streams.states.extend(state.streams.states);
            streams.left_out += state.streams.left_out;
        }
        // A stream still sniffing is held by every worker alike (each gets its lines until
        // its format is decided): keep one; a decoder's state is only ever one worker's.
        let mut seen = std::collections::HashSet::new();
        streams
            .states
            .retain(|s| seen.insert((s.source.clone(), s.name.clone())));
        // The bound holds for all workers together: the most recently active.
        if streams.states.len() > MAX_STREAM_STATES {
            streams.states.sort_by_key(|s| std::cmp::Reverse(s.last_ms));
            streams.left_out += streams.states.len() - MAX_STREAM_STATES;
            streams.states.truncate(MAX_STREAM_STATES);
        }
        Ok(IngestState {
            correlator: CorrelatorSnapshot::merge(snapshots),
            counters,
            clock_ms,
            joined,
            // Workers never hold turns ([`super::ShardedIngest::hold_turns`]).
            held: None,
            streams,
        })
    }
}

/// The session joiners' held events and call names: only the joined route's worker holds
/// any (every stream that feeds the joiner is read there), so at most one is `Some`; two
/// are added up.
fn merge_joined(a: Option<JoinerSnapshot>, b: Option<JoinerSnapshot>) -> Option<JoinerSnapshot> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.events.extend(b.events);
            a.quiet.extend(b.quiet);
            a.calls.extend(b.calls);
            Some(a)
        }
        (a, b) => a.or(b),
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Closing the queues stops the workers.
        self.txs.clear();
        for h in self.handles.drain(..).flatten() {
            let _ = h.join();
        }
    }
}

/// The text of a panic (`panic!` with a literal or a formatted message), made safe to print.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message");
    retryscope_core::sanitize::display(text).into_owned()
}

fn worker(
    index: usize,
    mut ingest: Ingest,
    rx: Receiver<Msg>,
    replies: Sender<Reply>,
    metrics: &Metrics,
    stats: &Mutex<Vec<(CorrelatorStats, usize)>>,
    mut panic_after: Option<u64>,
) {
    // The engine thread's stream handles → this ingest path's.
    let mut local: FastMap<u32, StreamId> = FastMap::default();
    // Streams whose routing worker 0 has not reported yet.
    let mut undecided: Vec<u32> = Vec::new();
    let mut counts = LineCounts::default();
    let mut out: Vec<Output> = Vec::new();
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Batch(batch) => {
                let note =
                    &mut |n: Note<'_>| counts.note(n, &mut |other| Ingested(other).emit(metrics));
                for op in &batch.ops {
                    if index == 0
                        && let Op::Open { id, .. } = op
                    {
                        undecided.push(*id);
                    }
                    if let (Op::Line { .. }, Some(left)) = (op, &mut panic_after) {
                        if *left == 0 {
                            panic!("fault injected by {FAULT_ENV}");
                        }
                        *left -= 1;
                    }
                    apply(&mut ingest, &mut local, &batch.bytes, op, &mut out, note);
                }
                counts.publish(metrics);
                if let Ok(mut s) = stats.lock()
                    && let Some(slot) = s.get_mut(index)
                {
                    *slot = (
                        ingest.correlator().stats(),
                        ingest.correlator().open_turns(),
                    );
                }
                // Every worker decides a stream's format and routing alike (they all get its
                // lines until then); worker 0 tells the engine thread.
                let mut decided = Vec::new();
                undecided.retain(|id| match local.get(id).map(|s| ingest.routing_of(*s)) {
                    None => false,
                    Some(None) => true,
                    Some(Some(routing)) => {
                        decided.push((*id, routing));
                        false
                    }
                });
                if replies
                    .send(Reply::Done(std::mem::take(&mut out), decided))
                    .is_err()
                {
                    return;
                }
            }
            Msg::Barrier => {
                let p = ingest.pipeline();
                let state = IngestState {
                    correlator: p.correlator().snapshot(),
                    counters: p.counters().clone(),
                    clock_ms: p.clock_ms(),
                    joined: ingest.joined_snapshot(),
                    held: None,
                    streams: ingest.stream_states(),
                };
                if replies.send(Reply::State(Box::new(state))).is_err() {
                    return;
                }
            }
        }
    }
}

fn apply(
    ingest: &mut Ingest,
    local: &mut FastMap<u32, StreamId>,
    bytes: &[u8],
    op: &Op,
    out: &mut Vec<Output>,
    note: &mut dyn FnMut(Note<'_>),
) {
    match op {
        Op::Open {
            id,
            source,
            name,
            format,
        } => {
            let s = match format {
                Some(f) => ingest.stream_as(*source, name, *f),
                None => ingest.stream(*source, name),
            };
            local.insert(*id, s);
        }
        Op::Line {
            id,
            number,
            arrival_ms,
            start,
            end,
        } => {
            if let (Some(s), Some(line)) = (local.get(id), bytes.get(*start..*end)) {
                ingest.line(*s, *number, line, *arrival_ms, out, note);
            }
        }
        Op::TooLong { id, number, len } => {
            if let Some(s) = local.get(id) {
                ingest.too_long(*s, *number, *len, note);
            }
        }
        Op::End {
            id,
            arrival_ms,
            park,
        } => {
            if let Some(s) = local.remove(id) {
                match arrival_ms {
                    Some(now) if *park => ingest.park(s, *now, out, note),
                    _ => ingest.end(s, *arrival_ms, out, note),
                }
            }
        }
        Op::SettleIdle { arrival_ms } => ingest.settle_idle(*arrival_ms, out, note),
        Op::ReleaseJoined { quiet_ticks } => ingest.release_joined(*quiet_ticks, out),
        Op::Tick { now_ms } => ingest.tick(*now_ms, out, note),
        Op::CloseAll => ingest.close_all(out, note),
    }
}
