//! An owned partition of `run --nats` ([`super::collect`]): taking it (restore the
//! checkpoint, fence the previous owner off, read which of its findings are already
//! published, a consumer of this lease epoch), reading it (fetch into its
//! [`PartitionSource`], which feeds the partition's engine [`Core`]; publish what the
//! findings stream's sink handed over), and checkpointing it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::PublishAckFuture;
use bytes::Bytes;
use futures_util::StreamExt;

use super::collect::{MAX_ACKS_IN_FLIGHT, Shared};
use super::partition::subject;
use super::partition_source::{Fetched, FindingsStreamOut, Outgoing, PartitionSource, lines};
use super::state::PartitionState;
use super::tend::LeaseClock;
use super::{LINES_HEADER, NatsError, STREAM_HEADER, TICK_HEADER, cpu, state};
use crate::engine::outputs::{MetricsOut, SharedFindingsOut, TracesOut};
use crate::engine::{Core, IngestState, LiveSource, Restored, ShardedIngest, Sinks};
use crate::sink::metrics::Metrics;
use retryscope_core::reorder::HoldSnapshot;

/// How often a partition's fetch waiting for its next delivery looks whether it should still
/// wait. The fetch is no-wait (a live server answers at once, with messages or with none; an
/// expiry would make 2.9 hold an empty fetch until it ends), so its answer is lost only with
/// the connection that carried the request (a server restart); see [`FetchWatch`].
fn fetch_wait(lease: Duration) -> Duration {
    (lease / 8).min(Duration::from_millis(500))
}

/// The most bytes one fetch of a partition asks for: a few messages of a busy partition's
/// batches (up to 512 KiB each), and never less than the largest message the server takes
/// (a message over a fetch's bytes would be refused with an error, every time).
pub(super) fn fetch_bytes(max_payload: usize) -> usize {
    (max_payload + 64 * 1024).max(2 * 1024 * 1024)
}

/// The description of the status (409) a server ends a fetch with when its next message
/// would pass the fetch's bytes.
const MAX_BYTES_STATUS: &str = "Message Size Exceeds MaxBytes";

/// How many fetches of [`fetch_bytes`] an instance has in flight at once: 32 MiB together,
/// half the 64 MiB the server lets wait for one client before it closes the connection as a
/// slow consumer. Unbounded (200 messages a fetch, of batches up to 512 KiB), a collector
/// catching up a backlog with 16 partitions asked for hundreds of MiB at once; its connection
/// was closed whenever it read slower than the server sent, every request in flight timed
/// out, and every partition was taken again from its checkpoint.
pub(super) fn fetches_in_flight(max_payload: usize) -> usize {
    ((32 * 1024 * 1024) / fetch_bytes(max_payload)).max(1)
}

/// Whether a fetch whose next delivery is late should still wait for it: while the
/// connection that carried its request is up and the lease holds, for at most a lease in all
/// (a live server that never answered would otherwise hold the partition as long as its
/// leases are renewed). The answer of a live server
/// is then on its way, behind the other partitions' deliveries on the one connection. Leaving
/// the fetch after a fixed wait instead left deliveries in flight (a gap in the consumer
/// sequence, so the partition was taken again from its checkpoint and its work since redone):
/// a collector catching up a backlog with 16 partitions did that for each of them every few
/// seconds. A request lost in a restart is left as soon as the connection is down or has been
/// made again; a delivery that went astray shows as a gap in the next fetch.
struct FetchWatch {
    connects: u64,
    until: Instant,
}

impl FetchWatch {
    fn start(client: &async_nats::Client, lease: Duration) -> Self {
        FetchWatch {
            connects: client.statistics().connects.load(Ordering::Relaxed),
            until: Instant::now() + lease,
        }
    }

    fn still_wait(&self, client: &async_nats::Client, o: &Owned) -> bool {
        Instant::now() < self.until
            && client.connection_state() == async_nats::connection::State::Connected
            && client.statistics().connects.load(Ordering::Relaxed) == self.connects
            && o.lease_held().is_ok()
    }
}

pub(super) struct Owned {
    /// Past its instant the lease may have ended for the others (it was renewed at most a
    /// lease earlier, by this instance's monotonic clock): no fetch, no checkpoint.
    pub(super) lease: LeaseClock,
    pub(super) stored_state: state::Stored,
    /// The partition's engine: its ingest path and sinks (its metrics, the local findings
    /// output, traces, the findings stream).
    pub(super) core: Core,
    /// Its messages and clock.
    pub(super) source: PartitionSource,
    /// Findings the findings stream's sink handed over, to publish.
    outbox: mpsc::Receiver<Outgoing>,
    pub(super) consumer: PullConsumer,
    /// Consumer sequence of the last delivery seen: each delivery must be the next.
    pub(super) consumer_seq: u64,
    /// Last stream sequence covered by the stored checkpoint.
    pub(super) stored: u64,
    /// When a line last came (wall clock): clock messages are sent for a while after it.
    last_line: Instant,
    /// When this owner last sent a clock message.
    last_tick_sent: Instant,
    /// Published findings' acknowledgements, each with its permit of the instance's.
    pub(super) findings_in_flight: Vec<(PublishAckFuture, tokio::sync::OwnedSemaphorePermit)>,
    /// Findings stream sequence of the last acknowledged finding of this partition.
    pub(super) findings_seq: u64,
    /// Where the take started reading the stored findings (the checkpoint's findings sequence).
    pub(super) replay_from: u64,
    /// Ids of this partition's findings already stored past the checkpoint: a replay does not
    /// publish them again. An id leaves the set when the replay produces it; the set outlives
    /// checkpoints taken mid-replay.
    pub(super) published: HashSet<String>,
}

impl Owned {
    /// Whether a line (not a clock message) came after `t`.
    pub(super) fn read_since(&self, t: Instant) -> bool {
        self.last_line > t
    }

    pub(super) fn lease_held(&self) -> Result<(), NatsError> {
        self.lease.held()
    }
}

/// Restore partition `p` from its checkpoint, fence the previous owner off, read which of its
/// findings are already published past the checkpoint, and start a consumer of this lease
/// epoch right after the checkpoint. The partition counts into `metrics`, new and empty.
pub(super) async fn take(
    sh: &Shared,
    p: u32,
    lease_rev: u64,
    lease: LeaseClock,
    metrics: Arc<Metrics>,
) -> Result<Owned, NatsError> {
    lease.held()?;
    let loaded = state::load(&sh.states, p).await?;
    let mut held = loaded.state.as_ref().and_then(|s| s.held.clone());
    if let Some(h) = &mut held {
        read_back_held(sh, p, h).await?;
    }
    let (restored, seq, now_ms, tick_ms, findings_seq) = match &loaded.state {
        Some(s) => {
            metrics
                .restore(&s.metrics)
                .map_err(|e| NatsError::new("restoring partition metrics", e))?;
            let restored = Restored {
                correlator: s.correlator.clone(),
                counters: s.counters.clone(),
                clock_ms: s.clock_ms,
                joined: s.joined.clone().unwrap_or_default(),
                streams: s.streams.clone(),
            };
            (Some(restored), s.seq, s.now_ms, s.tick_ms, s.findings_seq)
        }
        None => (None, 0, 0, 0, 0),
    };
    // One ingest path on this task's thread: the partitions are the collector's shards. It
    // joins gemini-cli sessions (their telemetry and stream-json are shipped to one
    // partition) and names turns by input only (shipped lines are numbered from where the
    // shipper started).
    let ingest = ShardedIngest::start(
        1,
        sh.cfg.correlator.clone(),
        sh.prices.clone(),
        sh.cfg.format,
        true,
        restored,
        metrics.clone(),
    )
    .map_err(|e| NatsError::new("starting the partition's ingest path", e))?;
    let mut ingest = ingest;
    // One turn's parts come from several hosts, in any order: each turn is held until quiet
    // and correlated in time order (`retryscope_core::reorder`).
    if sh.cfg.settle > Duration::ZERO {
        let settle_ms = i64::try_from(sh.cfg.settle.as_millis()).unwrap_or(i64::MAX);
        ingest.hold_turns(settle_ms, held);
    }
    let (tx, outbox) = mpsc::channel();
    let mut sinks = Sinks::new();
    sinks.push(Box::new(MetricsOut(metrics.clone())));
    sinks.push(Box::new(SharedFindingsOut {
        findings: sh.findings.clone(),
        metrics: metrics.clone(),
    }));
    if let Some(traces) = &sh.traces {
        sinks.push(Box::new(TracesOut {
            traces: traces.clone(),
            stats: None,
        }));
    }
    sinks.push(Box::new(FindingsStreamOut(tx)));
    let mut core = Core::new(ingest, sinks, metrics);
    // A session quiet for the turns' idle timeout has had its turns closed: its stream ends
    // too (without an idle timeout, never).
    let session_quiet_ms = match sh.cfg.correlator.idle_timeout_ms {
        Some(ms) if ms > 0 => ms,
        _ => i64::MAX,
    };
    let source = PartitionSource::new(p, seq, now_ms, tick_ms, session_quiet_ms);
    // The previous owner's next checkpoint now fails its compare-and-set.
    let state_now = core
        .checkpoint(None)
        .map_err(|e| NatsError::new("reading the partition's state", e))?;
    let empty = partition_state(state_now, &core.metrics, 0, 0, 0, 0);
    let max_payload = super::max_payload(&sh.client);
    let stored_state = state::fence(&sh.states, p, &loaded, &empty, max_payload).await?;
    let (published, last_published) = published_since(&sh.findings_stream, p, findings_seq).await?;
    // The take may have waited for CPU past its lease: then the partition is no longer
    // certainly this instance's (the fence above would have failed had another taken it).
    lease.held()?;
    let consumer_name = format!("retryscope-p{p}-e{lease_rev}");
    remove_partition_consumers(&sh.events, p).await;
    let consumer: PullConsumer = sh
        .events
        .create_consumer(pull::Config {
            durable_name: Some(consumer_name),
            filter_subject: subject(p),
            deliver_policy: if seq == 0 {
                DeliverPolicy::All
            } else {
                DeliverPolicy::ByStartSequence {
                    start_sequence: seq + 1,
                }
            },
            ack_policy: AckPolicy::All,
            ack_wait: Duration::from_secs(60),
            max_ack_pending: -1,
            ..Default::default()
        })
        .await
        .map_err(|e| NatsError::new("creating the partition's consumer", e))?;
    if !published.is_empty() {
        tracing::info!(
            partition = p,
            findings = published.len(),
            "findings already published past the checkpoint will not be published again"
        );
    }
    Ok(Owned {
        lease,
        stored_state,
        core,
        source,
        outbox,
        consumer,
        consumer_seq: 0,
        stored: seq,
        // A partition just taken may hold turns the last owner left open: its clock runs.
        last_line: Instant::now(),
        last_tick_sent: Instant::now(),
        findings_in_flight: Vec::new(),
        findings_seq: findings_seq.max(last_published),
        replay_from: findings_seq,
        published,
    })
}

/// Read the events the checkpoint's turn hold keeps by reference back from the partition's
/// messages (`retryscope_core::reorder`). Those whose messages are gone (the stream's max
/// age, a purge) are counted and logged: their turns correlate without them.
async fn read_back_held(sh: &Shared, p: u32, held: &mut HoldSnapshot) -> Result<(), NatsError> {
    let msgs = held.ref_messages();
    let (Some(&first), Some(&last)) = (msgs.first(), msgs.last()) else {
        return Ok(());
    };
    let mut payloads: HashMap<u64, (Bytes, bool)> = HashMap::with_capacity(msgs.len());
    let config = pull::Config {
        filter_subject: subject(p),
        deliver_policy: DeliverPolicy::ByStartSequence {
            start_sequence: first,
        },
        ..Default::default()
    };
    super::read_pending(&sh.events, config, "reading held events back", |m| {
        let Ok(info) = m.info() else { return true };
        let seq = info.stream_sequence;
        if msgs.binary_search(&seq).is_ok() {
            payloads.insert(seq, (m.payload.clone(), batched(m)));
        }
        seq < last
    })
    .await?;
    let missed: Vec<u64> = msgs
        .iter()
        .copied()
        .filter(|s| !payloads.contains_key(s))
        .collect();
    gone_for_good(sh, &missed).await?;
    let refs = held.ref_count();
    let lost = cpu(&sh.cpu, || {
        let lines: HashMap<u64, Vec<&[u8]>> = payloads
            .iter()
            .map(|(seq, (payload, batched))| (*seq, lines(payload, *batched).collect()))
            .collect();
        held.resolve(|place| {
            lines
                .get(&place.msg)
                .and_then(|l| l.get(place.line as usize).copied())
        })
    })
    .await;
    tracing::debug!(
        partition = p,
        events = refs,
        messages = msgs.len(),
        "held events read back"
    );
    if lost > 0 {
        sh.counters.held_lost.fetch_add(lost, Ordering::Relaxed);
        tracing::error!(
            partition = p,
            lost,
            of = refs,
            "held events could not be read back from the events stream (their messages are \
             gone: its max age or a purge); their turns correlate without them"
        );
    }
    Ok(())
}

/// Fails unless every message of `missed` (stream sequences a read of held events did not
/// return) is gone from the events stream: before its first sequence (its max age, a purge),
/// or deleted on its own (a purge of one partition's subject, `nats stream rmm`). One still
/// there was missed by the read: the take fails and is tried again, rather than correlating
/// its turns without it. Asking the stream's first sequence alone made a take that met a
/// message deleted on its own fail for ever, its partition leased and never read.
async fn gone_for_good(sh: &Shared, missed: &[u64]) -> Result<(), NatsError> {
    let what = "reading held events back";
    if missed.is_empty() {
        return Ok(());
    }
    let first = sh
        .events
        .get_info()
        .await
        .map_err(|e| NatsError::new(what, e))?
        .state
        .first_sequence;
    for &seq in missed.iter().filter(|&&s| s >= first) {
        match sh.events.get_raw_message(seq).await {
            Ok(_) => {
                return Err(NatsError::new(
                    what,
                    format!("message {seq} is in the stream but was not read"),
                ));
            }
            Err(e) if e.kind() == jetstream::stream::RawMessageErrorKind::NoMessageFound => {}
            Err(e) => return Err(NatsError::new(what, e)),
        }
    }
    Ok(())
}

/// Whether a message's payload is a batch of lines (else one line; see `ship`).
fn batched(m: &jetstream::Message) -> bool {
    m.headers
        .as_ref()
        .and_then(|h| h.get(LINES_HEADER))
        .is_some()
}

/// Delete every consumer of partition `p` (the durable of every earlier owner epoch, and the
/// single durable of versions before epochs): a deposed owner's handle then pulls nothing.
async fn remove_partition_consumers(events: &jetstream::stream::Stream, p: u32) {
    let prefix = format!("retryscope-p{p}-e");
    let legacy = format!("retryscope-p{p}");
    let mut names = events.consumer_names();
    let mut doomed = Vec::new();
    while let Some(Ok(name)) = names.next().await {
        if name == legacy || name.starts_with(&prefix) {
            doomed.push(name);
        }
    }
    for name in doomed {
        if let Err(e) = events.delete_consumer(&name).await {
            tracing::debug!(partition = p, consumer = %name, error = %e, "deleting an old consumer");
        }
    }
}

/// The message ids of partition `p`'s findings stored after findings sequence `after`, and the
/// last sequence read.
async fn published_since(
    findings: &jetstream::stream::Stream,
    p: u32,
    after: u64,
) -> Result<(HashSet<String>, u64), NatsError> {
    let config = pull::Config {
        filter_subject: format!("retryscope.findings.{p}"),
        deliver_policy: DeliverPolicy::ByStartSequence {
            start_sequence: after + 1,
        },
        ..Default::default()
    };
    let mut ids = HashSet::new();
    let mut last = after;
    super::read_pending(findings, config, "reading published findings", |m| {
        if let Ok(info) = m.info() {
            last = last.max(info.stream_sequence);
        }
        if let Some(id) = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")) {
            ids.insert(id.as_str().to_string());
        }
        true
    })
    .await?;
    Ok((ids, last))
}

/// Correlate what partition `p` has waiting; the number of messages taken.
pub(super) async fn poll(sh: &Shared, p: u32, o: &mut Owned) -> Result<usize, NatsError> {
    // Up to 200 messages (each up to 1,000 lines) a poll: the partition's task checks its
    // orders and its checkpoint time between polls.
    const BATCH: usize = 200;
    o.lease_held()?;
    // Until the batch is in: the instance's fetches in flight are bounded in bytes.
    let in_flight = sh.fetches.acquire().await;
    let watch = FetchWatch::start(&sh.client, sh.cfg.lease);
    let mut batch = o
        .consumer
        .fetch()
        .max_messages(BATCH)
        .max_bytes(fetch_bytes(super::max_payload(&sh.client)))
        .messages()
        .await
        .map_err(|e| NatsError::new("fetching", e))?;
    // Only the wait for a delivery is bounded: a batch taken is correlated and delivered
    // whole, so the partition's state never holds half a message.
    let wait = fetch_wait(sh.cfg.lease);
    let mut got = 0usize;
    loop {
        let next = match tokio::time::timeout(wait, batch.next()).await {
            Ok(next) => next,
            Err(_) if watch.still_wait(&sh.client, o) => continue,
            Err(_) => break,
        };
        let Some(m) = next else { break };
        let m = match m {
            Ok(m) => m,
            // The server ends a fetch whose next message would pass its bytes with this
            // status (the client passes it on as an error): the batch is in. Before any
            // message it would mean one message over the bytes, which `fetch_bytes` rules out.
            Err(e) if got > 0 && e.to_string().contains(MAX_BYTES_STATUS) => break,
            Err(e) => return Err(NatsError::new("fetching", e)),
        };
        got += 1;
        let Ok(info) = m.info() else { continue };
        if info.consumer_sequence != o.consumer_seq + 1 {
            return Err(NatsError::new(
                "fetching",
                format!(
                    "delivery {} came after {}: a delivery went elsewhere; taking the partition \
                     again from its checkpoint",
                    info.consumer_sequence, o.consumer_seq
                ),
            ));
        }
        o.consumer_seq = info.consumer_sequence;
        let seq = info.stream_sequence;
        let published_ms = i64::try_from(info.published.unix_timestamp_nanos() / 1_000_000)
            .unwrap_or(o.source.now_ms);
        let headers = m.headers.as_ref();
        let batched = batched(&m);
        let stream = if headers.and_then(|h| h.get(TICK_HEADER)).is_some() {
            None
        } else {
            Some(
                headers
                    .and_then(|h| h.get(STREAM_HEADER))
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_else(|| "unknown".to_string()),
            )
        };
        o.source.fetched.push_back(Fetched {
            seq,
            published_ms,
            stream,
            batched,
            msg: m,
        });
    }
    drop(in_flight);
    let fetched = o.source.fetched.len();
    let polled = cpu(&sh.cpu, || o.source.poll(&mut o.core, 0)).await;
    sh.counters
        .messages
        .fetch_add(polled.lines, Ordering::Relaxed);
    if polled.lines > 0 {
        o.last_line = Instant::now();
    }
    publish(sh, p, o).await?;
    Ok(fetched)
}

/// Publish a clock message into partition `p` when it has been quiet for a second and a tick
/// could still change something: for the idle timeout and the join's wait past its last
/// line, and while it holds open turns (see `partition_source.rs`).
pub(super) async fn keep_time(sh: &Shared, p: u32, o: &mut Owned) -> Result<(), NatsError> {
    let since_line = o.last_line.elapsed();
    let idle_ms = sh.cfg.correlator.idle_timeout_ms.unwrap_or(0).max(0) as u64;
    let window = Duration::from_millis(idle_ms)
        + Duration::from_secs(u64::from(crate::engine::JOIN_QUIET_TICKS) + 5);
    if o.last_tick_sent.elapsed() < Duration::from_secs(1)
        || since_line < Duration::from_secs(1)
        || (since_line > window && o.core.ingest.open_turns() == 0)
    {
        return Ok(());
    }
    o.lease_held()?;
    o.last_tick_sent = Instant::now();
    let mut headers = HeaderMap::new();
    headers.insert(TICK_HEADER, "1");
    sh.js
        .publish_with_headers(subject(p), headers, Bytes::new())
        .await
        .map_err(|e| NatsError::new("publishing a clock message", e))?
        .await
        .map_err(|e| NatsError::new("publishing a clock message", e))?;
    Ok(())
}

/// Publish what the findings stream's sink handed over, with its deterministic id: not those
/// a replay finds already published, and not one over the server's largest message (a dead
/// letter, in the local output only).
async fn publish(sh: &Shared, p: u32, o: &mut Owned) -> Result<(), NatsError> {
    // Headers, subject and protocol line: what a message carries besides the body.
    const ENVELOPE: usize = 512;
    while let Ok(out) = o.outbox.try_recv() {
        // Fenced as fetches and checkpoints are: a poll is not timed, so an owner whose
        // lease lapsed while it correlated publishes nothing more.
        o.lease_held()?;
        if o.published.remove(&out.id) {
            sh.counters
                .replayed_unpublished
                .fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let body = out
            .body
            .map_err(|e| NatsError::new("encoding a finding", e))?;
        let max_payload = super::max_payload(&sh.client);
        if body.len() + ENVELOPE > max_payload {
            sh.counters.dead_letters.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                partition = p,
                id = %out.id,
                kind = out.kind,
                bytes = body.len(),
                max_payload,
                "finding larger than the server's largest message: written to the findings \
                 output only (a dead letter)"
            );
            continue;
        }
        // A permit of the instance's first: when none is free, this partition's own
        // acknowledgements are awaited (freeing its permits), then it waits its turn.
        let permit = match sh.acks.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                await_acks(sh, o).await?;
                sh.acks
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|e| NatsError::new("publishing a finding", e))?
            }
        };
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", out.id.as_str());
        let ack = sh
            .js
            .publish_with_headers(
                format!("retryscope.findings.{p}"),
                headers,
                Bytes::from(body),
            )
            .await
            .map_err(|e| {
                sh.counters.publish_failures.fetch_add(1, Ordering::Relaxed);
                NatsError::new("publishing a finding", e)
            })?;
        o.findings_in_flight.push((ack, permit));
        if o.findings_in_flight.len() >= MAX_ACKS_IN_FLIGHT {
            await_acks(sh, o).await?;
        }
    }
    Ok(())
}

/// Wait for every finding acknowledgement in flight; the last findings sequence is kept for
/// the checkpoint.
pub(super) async fn await_acks(sh: &Shared, o: &mut Owned) -> Result<(), NatsError> {
    for (ack, _permit) in o.findings_in_flight.drain(..) {
        let ack = ack.await.map_err(|e| {
            sh.counters.publish_failures.fetch_add(1, Ordering::Relaxed);
            NatsError::new("waiting for a finding's acknowledgement", e)
        })?;
        o.findings_seq = o.findings_seq.max(ack.sequence);
    }
    Ok(())
}

/// What a checkpoint of this partition holds.
fn partition_state(
    state: IngestState,
    metrics: &Metrics,
    seq: u64,
    now_ms: i64,
    tick_ms: i64,
    findings_seq: u64,
) -> PartitionState {
    use crate::internal_events::InternalEvent;
    crate::internal_events::StreamStatesLeftOut {
        left_out: state.streams.left_out,
    }
    .emit(metrics);
    PartitionState {
        seq,
        correlator: state.correlator,
        counters: state.counters,
        clock_ms: state.clock_ms,
        now_ms,
        tick_ms,
        metrics: metrics.snapshot(),
        findings_seq,
        joined: state.joined,
        held: state.held,
        streams: state.streams.states,
    }
}

/// Store the partition's state with the sequence it covers, then acknowledge.
pub(super) async fn checkpoint(sh: &Shared, p: u32, o: &mut Owned) -> Result<(), NatsError> {
    if o.source.seq == o.stored {
        return Ok(());
    }
    if let Some(slow) = super::fault::slow_checkpoint() {
        tokio::time::sleep(slow).await;
    }
    o.lease_held()?;
    // Everything correlated is delivered (one ingest path on this thread: the barrier
    // produces nothing new, but whatever it produced would be published first).
    let batch = format!("p{p}-{}-c", o.source.seq);
    let state = cpu(&sh.cpu, || o.core.checkpoint(Some(&batch)))
        .await
        .map_err(|e| NatsError::new("reading the partition's state", e))?;
    publish(sh, p, o).await?;
    await_acks(sh, o).await?;
    o.core.publish_stats();
    // While findings read at the take have not all come round again in the replay, the next
    // owner must read them too: the checkpoint keeps the take's starting point until then.
    let findings_seq = if o.published.is_empty() {
        o.findings_seq
    } else {
        o.replay_from
    };
    let s = partition_state(
        state,
        &o.core.metrics,
        o.source.seq,
        o.source.now_ms,
        o.source.tick_ms,
        findings_seq,
    );
    let max_payload = super::max_payload(&sh.client);
    o.stored_state = state::save(&sh.states, p, &s, &o.stored_state, max_payload, &sh.cpu).await?;
    o.stored = o.source.seq;
    sh.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
    if let Some(m) = o.source.last_msg.take()
        && let Err(e) = m.ack().await
    {
        // Harmless: a redelivery is skipped by sequence.
        tracing::debug!(partition = p, error = %e, "ack failed");
    }
    Ok(())
}
