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
//! replaying past the last checkpoint produces the same findings with the same ids, and the
//! findings stream's duplicate window drops them. The local findings output (`--findings-out`)
//! is per instance and may repeat, after a failover, what the dead owner wrote since its last
//! checkpoint; the findings stream is the exactly-once record.
//!
//! Metrics: each partition counts into its own [`Metrics`] whose snapshot travels in the
//! partition's checkpoint; the instance serves the sum of the partitions it owns, so the sum
//! over instances is the total (see docs/scaling.md). The cluster series (partitions owned,
//! lease takeovers, checkpoint lag and failures, findings publish failures) are the
//! instance's own and are set on top of that sum ([`Metrics::set_cluster`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, PullConsumer, pull};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures_util::StreamExt;

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
}

struct Owned {
    lease_rev: u64,
    state_rev: u64,
    ingest: Ingest,
    metrics: Metrics,
    consumer: PullConsumer,
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
}

struct Shared<'a> {
    js: jetstream::Context,
    cfg: &'a CollectConfig,
    prices: Arc<PriceTable>,
    states: kv::Store,
    events: jetstream::stream::Stream,
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
    let js = jetstream::new(client);
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
            renew_all(&owners, &cfg, &mut owned).await;
            let share = partitions.div_ceil(members.max(1));
            // More than a fair share (a peer joined): hand the excess over, checkpointed.
            while owned.len() as u32 > share {
                let Some((p, mut o)) = owned.pop_last() else {
                    break;
                };
                if checkpoint(&mut sh, p, &mut o).await.is_ok() {
                    let _ = lease::renew(&owners, p, &cfg.instance, o.lease_rev, Duration::ZERO, 0)
                        .await;
                    tracing::info!(partition = p, "handed partition over");
                }
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
                match lease::acquire(&owners, p, &cfg.instance, cfg.lease, wall_ms()).await {
                    Ok(Some(rev)) => match take(&mut sh, p, rev).await {
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
            publish_metrics(&served, &owned, &sh.summary, partitions);
        }
        for p in lost {
            // Dropped without a checkpoint: whoever takes it next (us too) replays from the
            // stored one, and the findings' ids make the replay harmless.
            owned.remove(&p);
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
    publish_metrics(&served, &owned, &sh.summary, partitions);
    let _ = owners.delete(member_key(&cfg.instance)).await;
    Ok(sh.summary)
}

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
            if let Ok(Some(v)) = owners.get(k).await
                && let Ok(l) = serde_json::from_slice::<lease::Lease>(&v)
                && l.until_ms > now
            {
                live += 1;
            }
        }
    }
    live.max(1)
}

async fn renew_all(owners: &kv::Store, cfg: &CollectConfig, owned: &mut BTreeMap<u32, Owned>) {
    let mut lost = Vec::new();
    for (&p, o) in owned.iter_mut() {
        match lease::renew(owners, p, &cfg.instance, o.lease_rev, cfg.lease, wall_ms()).await {
            Some(rev) => o.lease_rev = rev,
            None => lost.push(p),
        }
    }
    for p in lost {
        tracing::warn!(partition = p, "lease lost; partition given up");
        owned.remove(&p);
    }
}

/// Restore partition `p` from its checkpoint and start its consumer right after it.
async fn take(sh: &mut Shared<'_>, p: u32, lease_rev: u64) -> Result<Owned, NatsError> {
    let (stored, state_rev) = state::load(&sh.states, p).await?;
    let metrics = Metrics::new(Default::default())
        .map_err(|e| NatsError::new("registering partition metrics", e))?;
    let (ingest, seq, now_ms, tick_ms) = match stored {
        Some(s) => {
            metrics
                .restore(&s.metrics)
                .map_err(|e| NatsError::new("restoring partition metrics", e))?;
            let mut ingest = Ingest::new(
                Correlator::restore(sh.cfg.correlator.clone(), sh.prices.clone(), s.correlator),
                sh.cfg.format,
            );
            ingest
                .pipeline_mut()
                .restore_counters(s.counters, s.clock_ms);
            (ingest, s.seq, s.now_ms, s.tick_ms)
        }
        None => (
            Ingest::new(
                Correlator::new(sh.cfg.correlator.clone(), sh.prices.clone()),
                sh.cfg.format,
            ),
            0,
            0,
            0,
        ),
    };
    let name = format!("retryscope-p{p}");
    let _ = sh.events.delete_consumer(&name).await;
    let consumer: PullConsumer = sh
        .events
        .create_consumer(pull::Config {
            durable_name: Some(name),
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
    Ok(Owned {
        lease_rev,
        state_rev,
        ingest,
        metrics,
        consumer,
        seq,
        stored: seq,
        now_ms,
        tick_ms,
        last_msg: None,
        findings_in_flight: Vec::new(),
    })
}

/// Correlate what partition `p` has waiting; the number of messages taken.
async fn poll(sh: &mut Shared<'_>, p: u32, o: &mut Owned) -> Result<usize, NatsError> {
    const BATCH: usize = 500;
    let mut batch = o
        .consumer
        .fetch()
        .max_messages(BATCH)
        .messages()
        .await
        .map_err(|e| NatsError::new("fetching", e))?;
    let mut n = 0;
    let mut out = Vec::new();
    while let Some(m) = batch.next().await {
        let m = m.map_err(|e| NatsError::new("fetching", e))?;
        let Ok(info) = m.info() else { continue };
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
    for (i, output) in out.drain(..).enumerate() {
        o.metrics.observe(&output);
        let Output::Finding(f, _) = &output else {
            continue;
        };
        if let Err(error) = sh.findings.write(f) {
            FindingWriteFailed { error: &error }.emit(&o.metrics);
        }
        let body = serde_json::to_vec(f).map_err(|e| NatsError::new("encoding a finding", e))?;
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", format!("{id}-{i}").as_str());
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
    }
    Ok(())
}

/// Store the partition's state with the sequence it covers, then acknowledge.
async fn checkpoint(sh: &mut Shared<'_>, p: u32, o: &mut Owned) -> Result<(), NatsError> {
    if o.seq == o.stored {
        return Ok(());
    }
    for ack in o.findings_in_flight.drain(..) {
        ack.await.map_err(|e| {
            sh.summary.publish_failures += 1;
            NatsError::new("waiting for a finding's acknowledgement", e)
        })?;
    }
    let pipeline = o.ingest.pipeline();
    let s = PartitionState {
        seq: o.seq,
        correlator: pipeline.correlator().snapshot(),
        counters: pipeline.counters().clone(),
        clock_ms: pipeline.clock_ms(),
        now_ms: o.now_ms,
        tick_ms: o.tick_ms,
        metrics: o.metrics.snapshot(),
    };
    o.state_rev = state::save(&sh.states, p, &s, o.state_rev).await?;
    o.stored = o.seq;
    sh.summary.checkpoints += 1;
    if let Some(m) = o.last_msg.take()
        && let Err(e) = m.ack().await
    {
        // Harmless: a redelivery is skipped by sequence.
        tracing::debug!(partition = p, error = %e, "ack failed");
    }
    Ok(())
}

/// Serve the sum of the owned partitions' metrics, and this instance's cluster series.
fn publish_metrics(
    served: &Metrics,
    owned: &BTreeMap<u32, Owned>,
    summary: &CollectSummary,
    partitions: u32,
) {
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
