//! `retryscope run --nats`: a collector that shares the partitions with its peers.
//!
//! Each instance heartbeats its membership, takes free or expired partitions up to its fair
//! share (partitions / live members, rounded up; the excess is checkpointed and handed over
//! when a peer joins) and renews their leases ([`super::lease`]).
//! For an owned partition it (re)creates the durable pull consumer `retryscope-p<N>` to start
//! right after the sequence its checkpoint covers, feeds every message through its own
//! [`Ingest`] (a correlator per partition), and every `checkpoint_every`:
//! 1. waits until JetStream acknowledged the findings published since the last checkpoint,
//! 2. stores the partition's state with the covered stream sequence ([`super::state`]),
//! 3. acknowledges the last message (ack policy `all`).
//!
//! Exactly-once findings: a finding is published to `retryscope.findings.<N>` with the message
//! id `p<N>-<seq>-<i>` (the stream sequence of the message that produced it and its index among
//! that message's outputs). Correlation is deterministic from a checkpoint: the arrival time of
//! a line is its JetStream publish time and idle timeouts advance on that clock, so a new owner
//! replaying past the last checkpoint produces the same findings with the same ids. Before it
//! replays, it reads the ids of the partition's findings stored after the checkpoint's findings
//! sequence and does not publish those again: exact whatever the time since (the findings
//! stream's duplicate window is only the second line). The local findings output
//! (`--findings-out`) is per instance and may repeat, after a failover, what the dead owner
//! wrote since its last checkpoint; the findings stream is the exactly-once record.
//!
//! Fencing: a new owner rewrites the partition's checkpoint head (its revision moves past the
//! one a deposed owner holds, so that owner's next checkpoint fails), pulls through a consumer
//! of its own lease epoch (`retryscope-p<N>-e<lease revision>`; the others of the partition are
//! deleted), and every owner stops fetching and checkpointing a partition once its lease could
//! have ended by its own monotonic clock. A delivery missing from the consumer's sequence (a
//! fetch abandoned mid-way, a deposed owner's pull) makes the partition be taken again from its
//! checkpoint rather than correlated with a gap.
//!
//! Finding acknowledgements are awaited in batches of at most [`MAX_ACKS_IN_FLIGHT`], never
//! held until the checkpoint (the client allows 5,000 in flight and makes a publish wait for a
//! free one: an instance that held more blocked itself). Every fetch has an expiry. A finding
//! larger than the server's largest message is a dead letter: written locally, counted, logged,
//! and the partition moves on.
//!
//! Metrics: each partition counts into its own [`Metrics`] whose snapshot travels in the
//! partition's checkpoint; the instance serves the sum of the partitions it owns, so the sum
//! over instances is the total (see docs/scaling.md). The cluster series (partitions owned,
//! lease takeovers, checkpoint lag and failures, findings publish failures) are the
//! instance's own and are set on top of that sum ([`Metrics::set_cluster`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures_util::StreamExt;

use super::FINDINGS_STREAM;
use super::partition::{ensure_findings_stream, subject};
use super::state::PartitionState;
use super::{EVENTS_STREAM, NatsError, STREAM_HEADER, lease, state, wall_ms};
use crate::correlate::{Correlator, CorrelatorConfig, Output};
use crate::cost::PriceTable;
use crate::decode::Format;
use crate::ingest::{Ingest, Source};
use crate::internal_events::{FindingWriteFailed, Ingested, InternalEvent};
use crate::sink::findings::FindingsSink;
use crate::sink::metrics::{ClusterStats, Metrics};

/// How a collector runs.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    /// NATS server URL.
    pub url: String,
    /// This instance's name (unique among live collectors).
    pub instance: String,
    /// Lease length; a dead owner's partitions are taken over after at most this long.
    pub lease: Duration,
    /// Partition checkpoint interval (also the longest a message waits for its ack).
    pub checkpoint_every: Duration,
    /// The findings stream's duplicate window: must exceed lease + checkpoint interval.
    pub findings_window: Duration,
    /// Correlator settings.
    pub correlator: CorrelatorConfig,
    /// Format of shipped lines.
    pub format: Format,
}

/// What a collector did.
#[derive(Debug, Clone, Default)]
pub struct CollectSummary {
    /// Messages correlated (replays after a takeover included).
    pub messages: u64,
    /// Partition checkpoints stored.
    pub checkpoints: u64,
    /// Partition checkpoints that failed (the partition was given up).
    pub checkpoint_failures: u64,
    /// Partition leases acquired.
    pub takeovers: u64,
    /// Findings not published to, or not acknowledged by, the findings stream.
    pub publish_failures: u64,
    /// Messages correlated and not covered by a stored checkpoint, just before the last
    /// round of checkpoints (right after it, it is 0 by construction).
    pub checkpoint_lag: u64,
    /// Findings too large for the server's largest message: written locally only.
    pub dead_letters: u64,
    /// Findings a new owner found already published and did not publish again.
    pub replayed_unpublished: u64,
}

/// Finding acknowledgements awaited together (async-nats allows 5,000 in flight and blocks a
/// publish past that).
pub const MAX_ACKS_IN_FLIGHT: usize = 1_024;
/// Expiry of a fetch that knows how many messages wait (reading published findings): the
/// server answers at once with them, and a request lost in a restart ends by itself.
const FETCH_EXPIRES: Duration = Duration::from_secs(1);
/// How long a partition's fetch may wait for its next delivery before the batch is left. The
/// fetch is no-wait (a live server answers at once, with messages or with none; an expiry
/// would make 2.9 hold an empty fetch until it ends), so only a request lost in a server
/// restart waits this long, and the partition is kept: a delivery that went astray shows as
/// a gap in the consumer sequence of the next one.
fn fetch_wait(lease: Duration) -> Duration {
    (lease / 8).min(Duration::from_millis(500))
}

struct Owned {
    lease_rev: u64,
    /// Past this instant the lease may have ended for the others (it was renewed at most a
    /// lease earlier, by this instance's monotonic clock): no fetch, no checkpoint.
    lease_until: Instant,
    stored_state: state::Stored,
    ingest: Ingest,
    metrics: Metrics,
    consumer: PullConsumer,
    /// Consumer sequence of the last delivery seen: each delivery must be the next.
    consumer_seq: u64,
    /// Last stream sequence correlated.
    seq: u64,
    /// Last stream sequence covered by the stored checkpoint.
    stored: u64,
    /// The partition's clock: publish time of its last message.
    now_ms: i64,
    /// Clock of the last idle-timeout tick.
    tick_ms: i64,
    last_msg: Option<jetstream::Message>,
    findings_in_flight: Vec<PublishAckFuture>,
    /// Findings stream sequence of the last acknowledged finding of this partition.
    findings_seq: u64,
    /// Ids of this partition's findings already stored past the checkpoint: a replay does not
    /// publish them again.
    published: HashSet<String>,
}

impl Owned {
    fn lease_held(&self) -> Result<(), NatsError> {
        if Instant::now() < self.lease_until {
            Ok(())
        } else {
            Err(NatsError::new(
                "holding the partition",
                "its lease was not renewed in time",
            ))
        }
    }
}

struct Shared<'a> {
    js: jetstream::Context,
    cfg: &'a CollectConfig,
    prices: Arc<PriceTable>,
    states: kv::Store,
    events: jetstream::stream::Stream,
    findings_stream: jetstream::stream::Stream,
    /// The connection (for the server's largest message: a finding over it is a dead letter).
    client: async_nats::Client,
    findings: &'a mut FindingsSink,
    summary: CollectSummary,
}

/// Collect until `shutdown`; `served` receives the sum of the owned partitions' metrics.
pub async fn collect(
    cfg: CollectConfig,
    prices: Arc<PriceTable>,
    served: Arc<Metrics>,
    findings: &mut FindingsSink,
    shutdown: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
) -> Result<CollectSummary, NatsError> {
    let client = super::connect(&cfg.url, &format!("retryscope-run {}", cfg.instance)).await?;
    let js = jetstream::new(client.clone());
    let (events, partitions) = loop {
        if let Ok(mut s) = js.get_stream(EVENTS_STREAM).await
            && let Ok(info) = s.info().await
            && let Some(n) = info
                .config
                .description
                .as_deref()
                .and_then(super::partition::parse_description)
        {
            break (s, n);
        }
        if shutdown.load(Ordering::SeqCst) {
            return Ok(CollectSummary::default());
        }
        tracing::info!("waiting for a shipper to create the events stream");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    ensure_findings_stream(&js, cfg.findings_window).await?;
    let findings_stream = js
        .get_stream(FINDINGS_STREAM)
        .await
        .map_err(|e| NatsError::new("opening the findings stream", e))?;
    let owners = lease::owners(&js).await?;
    let states = state::bucket(&js).await?;
    served.set_cluster(&ClusterStats {
        partitions,
        ..ClusterStats::default()
    });
    ready.store(true, Ordering::SeqCst);
    tracing::info!(partitions, instance = %cfg.instance, "collecting from JetStream");
    let mut sh = Shared {
        js: js.clone(),
        cfg: &cfg,
        prices,
        states,
        events,
        findings_stream,
        client,
        findings,
        summary: CollectSummary::default(),
    };
    let mut owned: BTreeMap<u32, Owned> = BTreeMap::new();
    let mut last_lease: Option<Instant> = None;
    let mut last_checkpoint = Instant::now();
    let started = Instant::now();
    let first = (crate::fasthash::fnv1a(cfg.instance.as_bytes()) % u64::from(partitions)) as u32;
    while !shutdown.load(Ordering::SeqCst) {
        if last_lease.is_none_or(|t| t.elapsed() >= cfg.lease / 4) {
            last_lease = Some(Instant::now());
            let members = heartbeat(&owners, &cfg).await;
            renew_all(&mut sh, &owners, &cfg, &mut owned).await;
            let share = partitions.div_ceil(members.max(1));
            // More than a fair share (a peer joined): hand the excess over, checkpointed.
            while owned.len() as u32 > share {
                let Some((p, mut o)) = owned.pop_last() else {
                    break;
                };
                match checkpoint(&mut sh, p, &mut o).await {
                    Ok(()) => tracing::info!(partition = p, "handed partition over"),
                    Err(e) => {
                        sh.summary.checkpoint_failures += 1;
                        tracing::warn!(partition = p, error = %e,
                            "handover checkpoint failed; the next owner replays from the stored one");
                    }
                }
                // Released either way: the partition is no longer read here.
                let _ =
                    lease::renew(&owners, p, &cfg.instance, o.lease_rev, Duration::ZERO, 0).await;
            }
            // Peers that start together see each other before anyone takes partitions.
            let settled = started.elapsed() >= cfg.lease / 2;
            for i in 0..if settled { partitions } else { 0 } {
                if owned.len() as u32 >= share {
                    break;
                }
                let p = (first + i) % partitions;
                if owned.contains_key(&p) {
                    continue;
                }
                let asked = Instant::now();
                match lease::acquire(&owners, p, &cfg.instance, cfg.lease, wall_ms()).await {
                    Ok(Some(rev)) => match take(&mut sh, p, rev, asked + cfg.lease * 7 / 8).await {
                        Ok(o) => {
                            sh.summary.takeovers += 1;
                            tracing::info!(partition = p, from_seq = o.seq, "took partition");
                            owned.insert(p, o);
                        }
                        Err(e) => {
                            tracing::warn!(partition = p, error = %e, "cannot take partition")
                        }
                    },
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "lease check failed"),
                }
            }
        }
        let mut busy = false;
        let mut lost = Vec::new();
        for (&p, o) in owned.iter_mut() {
            // A fetch lost in a server restart may never be answered. Bounded by the lease: a
            // loop stuck longer would keep serving the metrics of partitions taken over.
            let polled = tokio::time::timeout(cfg.lease, poll(&mut sh, p, o))
                .await
                .unwrap_or_else(|_| Err(NatsError::new("fetching", "timed out")));
            match polled {
                Ok(n) => busy |= n > 0,
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "reading partition failed");
                    lost.push(p);
                }
            }
        }
        if last_checkpoint.elapsed() >= cfg.checkpoint_every {
            last_checkpoint = Instant::now();
            // What a new owner would replay had this instance died just now.
            sh.summary.checkpoint_lag =
                owned.values().map(|o| o.seq.saturating_sub(o.stored)).sum();
            for (&p, o) in owned.iter_mut() {
                let done = tokio::time::timeout(cfg.lease, checkpoint(&mut sh, p, o))
                    .await
                    .unwrap_or_else(|_| Err(NatsError::new("checkpointing", "timed out")));
                if let Err(e) = done {
                    sh.summary.checkpoint_failures += 1;
                    tracing::warn!(partition = p, error = %e, "checkpoint failed; giving the partition up");
                    lost.push(p);
                }
            }
            publish_metrics(&served, &mut owned, &sh.summary, partitions);
        }
        for p in lost {
            // Dropped without a checkpoint: whoever takes it next (us too) replays from the
            // stored one, and reads which findings were published past it.
            if let Some(mut o) = owned.remove(&p) {
                settle_acks(&mut sh, p, &mut o).await;
            }
        }
        if !busy {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Orderly stop: checkpoint everything, then free the leases for the others at once.
    for (&p, o) in owned.iter_mut() {
        match checkpoint(&mut sh, p, o).await {
            Ok(()) => {
                let _ =
                    lease::renew(&owners, p, &cfg.instance, o.lease_rev, Duration::ZERO, 0).await;
            }
            Err(e) => tracing::warn!(partition = p, error = %e, "final checkpoint failed"),
        }
    }
    publish_metrics(&served, &mut owned, &sh.summary, partitions);
    let _ = owners.delete(member_key(&cfg.instance)).await;
    Ok(sh.summary)
}

/// How long after its lease ended a dead member's key is removed (by any live member).
const EXPIRED_MEMBER_GRACE_MS: i64 = 60_000;

fn member_key(instance: &str) -> String {
    let clean: String = instance
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("member.{clean}")
}

/// Renew this instance's membership and count the live members.
async fn heartbeat(owners: &kv::Store, cfg: &CollectConfig) -> u32 {
    let now = wall_ms();
    let until = now + i64::try_from(cfg.lease.as_millis()).unwrap_or(i64::MAX);
    let value = serde_json::to_vec(&lease::Lease {
        owner: cfg.instance.clone(),
        until_ms: until,
    })
    .unwrap_or_default();
    if let Err(e) = owners
        .put(member_key(&cfg.instance), Bytes::from(value))
        .await
    {
        tracing::warn!(error = %e, "membership heartbeat failed");
    }
    let mut live = 0;
    if let Ok(mut keys) = owners.keys().await {
        let mut names = Vec::new();
        while let Some(Ok(k)) = keys.next().await {
            if k.starts_with("member.") {
                names.push(k);
            }
        }
        for k in names {
            if let Ok(Some(v)) = owners.get(&k).await
                && let Ok(l) = serde_json::from_slice::<lease::Lease>(&v)
            {
                if l.until_ms > now {
                    live += 1;
                } else if l.until_ms + EXPIRED_MEMBER_GRACE_MS <= now {
                    // A member that died without a goodbye: its key would stay forever.
                    let _ = owners.purge(&k).await;
                }
            }
        }
    }
    live.max(1)
}

/// Before a partition is dropped: let the findings in flight land (or fail), so that the next
/// owner's reading of what was published is complete.
async fn settle_acks(sh: &mut Shared<'_>, p: u32, o: &mut Owned) {
    let settled = tokio::time::timeout(Duration::from_secs(5), await_acks(sh, o)).await;
    if !matches!(settled, Ok(Ok(()))) {
        tracing::warn!(
            partition = p,
            "findings in flight not acknowledged before the partition was dropped"
        );
    }
}

async fn renew_all(
    sh: &mut Shared<'_>,
    owners: &kv::Store,
    cfg: &CollectConfig,
    owned: &mut BTreeMap<u32, Owned>,
) {
    let mut lost = Vec::new();
    for (&p, o) in owned.iter_mut() {
        let asked = Instant::now();
        match lease::renew(owners, p, &cfg.instance, o.lease_rev, cfg.lease, wall_ms()).await {
            Some(rev) => {
                o.lease_rev = rev;
                // Counted from before the request: the others' view of the lease starts later.
                o.lease_until = asked + cfg.lease * 7 / 8;
            }
            None => lost.push(p),
        }
    }
    for p in lost {
        tracing::warn!(partition = p, "lease lost; partition given up");
        if let Some(mut o) = owned.remove(&p) {
            settle_acks(sh, p, &mut o).await;
        }
    }
}

/// Restore partition `p` from its checkpoint, fence the previous owner off, read which of its
/// findings are already published past the checkpoint, and start a consumer of this lease
/// epoch right after the checkpoint.
async fn take(
    sh: &mut Shared<'_>,
    p: u32,
    lease_rev: u64,
    lease_until: Instant,
) -> Result<Owned, NatsError> {
    let loaded = state::load(&sh.states, p).await?;
    let metrics = Metrics::new(Default::default())
        .map_err(|e| NatsError::new("registering partition metrics", e))?;
    let fresh = || {
        Ingest::new(
            Correlator::new(sh.cfg.correlator.clone(), sh.prices.clone()),
            sh.cfg.format,
        )
    };
    let (mut ingest, seq, now_ms, tick_ms, findings_seq) = match &loaded.state {
        Some(s) => {
            metrics
                .restore(&s.metrics)
                .map_err(|e| NatsError::new("restoring partition metrics", e))?;
            let mut ingest = Ingest::new(
                Correlator::restore(
                    sh.cfg.correlator.clone(),
                    sh.prices.clone(),
                    s.correlator.clone(),
                ),
                sh.cfg.format,
            );
            ingest
                .pipeline_mut()
                .restore_counters(s.counters.clone(), s.clock_ms);
            ingest.join_sessions_from(s.joined.clone().unwrap_or_default());
            (ingest, s.seq, s.now_ms, s.tick_ms, s.findings_seq)
        }
        None => {
            let mut ingest = fresh();
            ingest.join_sessions();
            (ingest, 0, 0, 0, 0)
        }
    };
    // Shipped lines are numbered from where the shipper started: turns name the input only.
    ingest.without_origin_lines();
    // The previous owner's next checkpoint now fails its compare-and-set.
    let empty = partition_state(&ingest, &metrics, 0, 0, 0, 0);
    let stored_state = state::fence(&sh.states, p, &loaded, &empty).await?;
    let (published, last_published) = published_since(&sh.findings_stream, p, findings_seq).await?;
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
        lease_rev,
        lease_until,
        stored_state,
        ingest,
        metrics,
        consumer,
        consumer_seq: 0,
        seq,
        stored: seq,
        now_ms,
        tick_ms,
        last_msg: None,
        findings_in_flight: Vec::new(),
        findings_seq: findings_seq.max(last_published),
        published,
    })
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
    let reader: PullConsumer = findings
        .create_consumer(pull::Config {
            filter_subject: format!("retryscope.findings.{p}"),
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: after + 1,
            },
            ack_policy: AckPolicy::None,
            inactive_threshold: Duration::from_secs(60),
            ..Default::default()
        })
        .await
        .map_err(|e| NatsError::new("reading published findings", e))?;
    let mut ids = HashSet::new();
    let mut last = after;
    // What the stream held for the subject when the reader was made: read that much, no more
    // (a fetch of an empty consumer waits for its expiry).
    let mut pending = reader.cached_info().num_pending;
    while pending > 0 {
        let mut batch = reader
            .fetch()
            .max_messages(usize::try_from(pending).unwrap_or(1_000).min(1_000))
            .expires(FETCH_EXPIRES)
            .messages()
            .await
            .map_err(|e| NatsError::new("reading published findings", e))?;
        let mut n = 0u64;
        while let Some(m) = batch.next().await {
            let m = m.map_err(|e| NatsError::new("reading published findings", e))?;
            n += 1;
            if let Ok(info) = m.info() {
                last = last.max(info.stream_sequence);
            }
            if let Some(id) = m.headers.as_ref().and_then(|h| h.get("Nats-Msg-Id")) {
                ids.insert(id.as_str().to_string());
            }
        }
        if n == 0 {
            return Err(NatsError::new(
                "reading published findings",
                format!("{pending} of them could not be read"),
            ));
        }
        pending = pending.saturating_sub(n);
    }
    let name = reader.cached_info().name.clone();
    let _ = findings.delete_consumer(&name).await;
    Ok((ids, last))
}

/// Correlate what partition `p` has waiting; the number of messages taken.
async fn poll(sh: &mut Shared<'_>, p: u32, o: &mut Owned) -> Result<usize, NatsError> {
    // Small enough that one round over the owned partitions stays well inside a lease: the
    // leases are renewed between rounds.
    const BATCH: usize = 200;
    o.lease_held()?;
    let mut batch = o
        .consumer
        .fetch()
        .max_messages(BATCH)
        .messages()
        .await
        .map_err(|e| NatsError::new("fetching", e))?;
    let mut n = 0;
    let mut out = Vec::new();
    // Only the wait for a delivery is bounded: a message taken is correlated and delivered
    // whole, so the partition's state never holds half a message.
    let wait = fetch_wait(sh.cfg.lease);
    while let Ok(next) = tokio::time::timeout(wait, batch.next()).await {
        let Some(m) = next else { break };
        let m = m.map_err(|e| NatsError::new("fetching", e))?;
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
        let published_ms =
            i64::try_from(info.published.unix_timestamp_nanos() / 1_000_000).unwrap_or(o.now_ms);
        if seq <= o.seq {
            continue; // a redelivery of what the state already covers
        }
        n += 1;
        sh.summary.messages += 1;
        o.now_ms = o.now_ms.max(published_ms);
        let name = m
            .headers
            .as_ref()
            .and_then(|h| h.get(STREAM_HEADER))
            .map(|v| v.as_str().to_string())
            .unwrap_or_else(|| "unknown".to_string());
        let stream = o.ingest.stream(Source::Nats, &name);
        let metrics = &o.metrics;
        o.ingest.line(
            stream,
            None,
            &m.payload,
            Some(o.now_ms),
            &mut out,
            &mut |note| Ingested(note).emit(metrics),
        );
        deliver(sh, p, o, &mut out, &format!("p{p}-{seq}")).await?;
        if o.now_ms - o.tick_ms >= 1000 {
            o.tick_ms = o.now_ms;
            o.ingest.settle_idle(Some(o.now_ms), &mut out, &mut |note| {
                Ingested(note).emit(&o.metrics)
            });
            o.ingest.tick(o.now_ms, &mut out);
            deliver(sh, p, o, &mut out, &format!("p{p}-{seq}-t")).await?;
        }
        o.seq = seq;
        o.last_msg = Some(m);
    }
    Ok(n)
}

/// Count the outputs, write findings locally and publish them with deterministic ids.
async fn deliver(
    sh: &mut Shared<'_>,
    p: u32,
    o: &mut Owned,
    out: &mut Vec<Output>,
    id: &str,
) -> Result<(), NatsError> {
    // Headers, subject and protocol line: what a message carries besides the body.
    const ENVELOPE: usize = 512;
    for (i, output) in std::mem::take(out).into_iter().enumerate() {
        o.metrics.observe(&output);
        let Output::Finding(f, _) = &output else {
            continue;
        };
        if let Err(error) = sh.findings.write(f) {
            FindingWriteFailed { error: &error }.emit(&o.metrics);
        }
        let msg_id = format!("{id}-{i}");
        if o.published.remove(&msg_id) {
            sh.summary.replayed_unpublished += 1;
            continue;
        }
        let body =
            crate::sanitize::to_json_vec(f).map_err(|e| NatsError::new("encoding a finding", e))?;
        let max_payload = super::max_payload(&sh.client);
        if body.len() + ENVELOPE > max_payload {
            sh.summary.dead_letters += 1;
            tracing::warn!(
                partition = p,
                id = %msg_id,
                kind = f.kind.as_str(),
                bytes = body.len(),
                max_payload,
                "finding larger than the server's largest message: written to the findings \
                 output only (a dead letter)"
            );
            continue;
        }
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", msg_id.as_str());
        let ack = sh
            .js
            .publish_with_headers(
                format!("retryscope.findings.{p}"),
                headers,
                Bytes::from(body),
            )
            .await
            .map_err(|e| {
                sh.summary.publish_failures += 1;
                NatsError::new("publishing a finding", e)
            })?;
        o.findings_in_flight.push(ack);
        if o.findings_in_flight.len() >= MAX_ACKS_IN_FLIGHT {
            await_acks(sh, o).await?;
        }
    }
    Ok(())
}

/// Wait for every finding acknowledgement in flight; the last findings sequence is kept for
/// the checkpoint.
async fn await_acks(sh: &mut Shared<'_>, o: &mut Owned) -> Result<(), NatsError> {
    for ack in o.findings_in_flight.drain(..) {
        let ack = ack.await.map_err(|e| {
            sh.summary.publish_failures += 1;
            NatsError::new("waiting for a finding's acknowledgement", e)
        })?;
        o.findings_seq = o.findings_seq.max(ack.sequence);
    }
    Ok(())
}

/// What a checkpoint of this partition holds.
fn partition_state(
    ingest: &Ingest,
    metrics: &Metrics,
    seq: u64,
    now_ms: i64,
    tick_ms: i64,
    findings_seq: u64,
) -> PartitionState {
    let pipeline = ingest.pipeline();
    PartitionState {
        seq,
        correlator: pipeline.correlator().snapshot(),
        counters: pipeline.counters().clone(),
        clock_ms: pipeline.clock_ms(),
        now_ms,
        tick_ms,
        metrics: metrics.snapshot(),
        findings_seq,
        joined: ingest.joined_snapshot(),
    }
}

/// Store the partition's state with the sequence it covers, then acknowledge.
async fn checkpoint(sh: &mut Shared<'_>, p: u32, o: &mut Owned) -> Result<(), NatsError> {
    if o.seq == o.stored {
        return Ok(());
    }
    o.lease_held()?;
    await_acks(sh, o).await?;
    set_correlator_stats(o);
    let s = partition_state(
        &o.ingest,
        &o.metrics,
        o.seq,
        o.now_ms,
        o.tick_ms,
        o.findings_seq,
    );
    o.stored_state = state::save(&sh.states, p, &s, &o.stored_state).await?;
    o.stored = o.seq;
    // What was published before this checkpoint is covered by its findings sequence.
    o.published.clear();
    sh.summary.checkpoints += 1;
    if let Some(m) = o.last_msg.take()
        && let Err(e) = m.ack().await
    {
        // Harmless: a redelivery is skipped by sequence.
        tracing::debug!(partition = p, error = %e, "ack failed");
    }
    Ok(())
}

/// The correlator's own counters (late events, events after close, evictions, open turns)
/// into the partition's metrics, as `run` sets them.
fn set_correlator_stats(o: &Owned) {
    let correlator = o.ingest.pipeline().correlator();
    o.metrics
        .set_correlator_stats(&correlator.stats(), correlator.open_turns());
}

/// Serve the sum of the owned partitions' metrics, and this instance's cluster series.
fn publish_metrics(
    served: &Metrics,
    owned: &mut BTreeMap<u32, Owned>,
    summary: &CollectSummary,
    partitions: u32,
) {
    for o in owned.values() {
        set_correlator_stats(o);
    }
    let snaps: Vec<_> = owned.values().map(|o| o.metrics.snapshot()).collect();
    let sum = crate::sink::metrics::sum_snapshots(&snaps);
    if let Err(e) = served.restore(&sum) {
        tracing::warn!(error = %e, "cannot publish partition metrics");
    }
    served.set_cluster(&cluster_stats(owned, summary, partitions));
}

/// The instance's cluster series from what it owns and what it did.
fn cluster_stats(
    owned: &BTreeMap<u32, Owned>,
    summary: &CollectSummary,
    partitions: u32,
) -> ClusterStats {
    ClusterStats {
        partitions,
        owned: owned.len() as u32,
        takeovers: summary.takeovers,
        checkpoint_lag: summary.checkpoint_lag,
        publish_failures: summary.publish_failures,
        checkpoint_writes: summary.checkpoints,
        checkpoint_failures: summary.checkpoint_failures,
    }
}
