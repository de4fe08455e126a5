//! `retryscope run --nats`: a collector that shares the partitions with its peers (membership,
//! leases, the loop; what is done with one owned partition is in `owned.rs`).
//!
//! Each instance heartbeats its membership, takes free or expired partitions up to its fair
//! share (`fair_share`: ⌊P/M⌋, one more for the first P mod M names; the excess is
//! checkpointed and handed over when a peer joins) and renews their leases ([`super::lease`]).
//! For an owned partition it creates the durable pull consumer `retryscope-p<N>-e<lease
//! revision>` to start right after the sequence its checkpoint covers, feeds every message
//! through its own [`retryscope_core::ingest::Ingest`] (a correlator per partition), and every
//! `checkpoint_every`:
//! 1. waits until JetStream acknowledged the findings still in flight,
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

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures_util::StreamExt;

use super::FINDINGS_STREAM;
use super::deploy::Deploy;
use super::owned::{Owned, await_acks, checkpoint, keep_time, poll, take};
use super::partition::ensure_findings_stream;
use super::{EVENTS_STREAM, NatsError, lease, state, wall_ms};
use crate::sink::findings::FindingsSink;
use crate::sink::metrics::{ClusterStats, Metrics};
use crate::sink::traces::TraceSink;
use retryscope_core::correlate::CorrelatorConfig;
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;

/// How a collector runs.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    /// The NATS deployment (URL, credentials, TLS; replicas and retention of what this
    /// collector creates).
    pub nats: Deploy,
    /// This instance's name, stable across restarts (a second live collector with the same
    /// name is refused at start).
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
    /// Hold each turn until it has been quiet this long (its partition's clock) and correlate
    /// it in time order: a part shipped late by another host still takes its place
    /// (`retryscope_core::reorder`). Zero correlates as lines arrive.
    pub settle: Duration,
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
pub(super) struct Shared<'a> {
    pub(super) js: jetstream::Context,
    pub(super) cfg: &'a CollectConfig,
    pub(super) prices: Arc<PriceTable>,
    pub(super) states: kv::Store,
    pub(super) events: jetstream::stream::Stream,
    pub(super) findings_stream: jetstream::stream::Stream,
    /// The connection (for the server's largest message: a finding over it is a dead letter).
    pub(super) client: async_nats::Client,
    /// The instance's local findings output, shared by its partitions' engines.
    pub(super) findings: Arc<Mutex<FindingsSink>>,
    /// Closed turns exported as traces (`--otlp-endpoint`), as `run` does.
    pub(super) traces: Option<Arc<TraceSink>>,
    pub(super) summary: CollectSummary,
}

/// Collect until `shutdown`; `served` receives the sum of the owned partitions' metrics (and
/// of `receiver`'s, the instance's OTLP receiver's own counters, when it runs one).
#[allow(clippy::too_many_arguments)]
pub async fn collect(
    cfg: CollectConfig,
    prices: Arc<PriceTable>,
    served: Arc<Metrics>,
    receiver: Option<Arc<Metrics>>,
    findings: Arc<Mutex<FindingsSink>>,
    traces: Option<Arc<TraceSink>>,
    shutdown: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
) -> Result<CollectSummary, NatsError> {
    let client = cfg
        .nats
        .connect(&format!("retryscope-run {}", cfg.instance))
        .await?;
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
    ensure_findings_stream(&js, cfg.findings_window, &cfg.nats).await?;
    let findings_stream = js
        .get_stream(FINDINGS_STREAM)
        .await
        .map_err(|e| NatsError::new("opening the findings stream", e))?;
    let owners = lease::owners(&js, &cfg.nats).await?;
    let states = state::bucket(&js, &cfg.nats).await?;
    let me = lease::owner_id(&cfg.instance, wall_ms(), std::process::id());
    claim_name(&owners, &cfg, &me, &shutdown).await?;
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
        traces,
        summary: CollectSummary::default(),
    };
    // Every checkpoint round and the stop publish the partitions' and the collector's series.
    let publish = |owned: &mut BTreeMap<u32, Owned>, sh: &Shared<'_>| {
        let traces = sh.traces.as_deref();
        publish_metrics(
            &served,
            receiver.as_deref(),
            owned,
            &sh.summary,
            partitions,
            traces,
        );
    };
    let mut owned: BTreeMap<u32, Owned> = BTreeMap::new();
    let mut last_lease: Option<Instant> = None;
    let mut last_checkpoint = Instant::now();
    let started = Instant::now();
    let first =
        (retryscope_core::fasthash::fnv1a(cfg.instance.as_bytes()) % u64::from(partitions)) as u32;
    while !shutdown.load(Ordering::SeqCst) {
        if last_lease.is_none_or(|t| t.elapsed() >= cfg.lease / 4) {
            last_lease = Some(Instant::now());
            let members = heartbeat(&owners, &cfg, &me).await;
            renew_all(&mut sh, &owners, &cfg, &me, &mut owned).await;
            let share = fair_share(partitions, &members, &cfg.instance);
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
                let _ = lease::renew(&owners, p, &me, o.lease_rev, Duration::ZERO, 0).await;
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
                match lease::acquire(&owners, p, &me, cfg.lease, wall_ms()).await {
                    Ok(Some(rev)) => match take(&mut sh, p, rev, asked + cfg.lease * 7 / 8).await {
                        Ok(o) => {
                            sh.summary.takeovers += 1;
                            tracing::info!(
                                partition = p,
                                from_seq = o.source.seq,
                                "took partition"
                            );
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
                Ok(0) => {
                    if let Err(e) = keep_time(&mut sh, p, o).await {
                        tracing::warn!(partition = p, error = %e, "cannot keep the partition's clock");
                    }
                }
                Ok(_) => busy = true,
                Err(e) => {
                    tracing::warn!(partition = p, error = %e, "reading partition failed");
                    lost.push(p);
                }
            }
        }
        if last_checkpoint.elapsed() >= cfg.checkpoint_every {
            last_checkpoint = Instant::now();
            // What a new owner would replay had this instance died just now.
            sh.summary.checkpoint_lag = owned
                .values()
                .map(|o| o.source.seq.saturating_sub(o.stored))
                .sum();
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
            publish(&mut owned, &sh);
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
                let _ = lease::renew(&owners, p, &me, o.lease_rev, Duration::ZERO, 0).await;
            }
            Err(e) => tracing::warn!(partition = p, error = %e, "final checkpoint failed"),
        }
    }
    publish(&mut owned, &sh);
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

/// Refuse to run beside a live collector of the same name. A member key of this name left by
/// another process is watched for two heartbeat intervals: renewed meanwhile (its revision
/// moved, by another process), it is a live duplicate; not renewed, it was this instance's
/// previous run (killed), and the name is this run's. The server's revisions decide, not
/// clocks.
async fn claim_name(
    owners: &kv::Store,
    cfg: &CollectConfig,
    me: &str,
    shutdown: &AtomicBool,
) -> Result<(), NatsError> {
    let key = member_key(&cfg.instance);
    let read = |e: async_nats::jetstream::kv::EntryError| NatsError::new("reading members", e);
    let Some(first) = owners.entry(&key).await.map_err(read)? else {
        return Ok(());
    };
    if first.operation != kv::Operation::Put {
        return Ok(());
    }
    let watch = cfg.lease / 2;
    tracing::info!(instance = %cfg.instance, wait_ms = watch.as_millis() as u64,
        "another process used this instance name; checking that it is gone");
    let until = Instant::now() + watch;
    while Instant::now() < until && !shutdown.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(100).min(watch)).await;
        if let Some(now) = owners.entry(&key).await.map_err(read)?
            && now.revision != first.revision
            && now.operation == kv::Operation::Put
            && serde_json::from_slice::<lease::Lease>(&now.value).is_ok_and(|l| l.owner != me)
        {
            return Err(NatsError::new(
                "joining the collectors",
                format!(
                    "another live collector is named `{}`: give each one its own --instance",
                    cfg.instance
                ),
            ));
        }
    }
    Ok(())
}

/// This instance's share of `partitions` among the live `members` (instance names, this one
/// included): ⌊P/M⌋ each, and one more for the first P mod M names in order, so every
/// partition has an owner and no member idles while another holds two more than it (with
/// ⌈P/M⌉ for all, 16 partitions left the fifth of 5 collectors with none).
fn fair_share(partitions: u32, members: &[String], me: &str) -> u32 {
    let m = (members.len() as u32).max(1);
    let rank = members.iter().filter(|n| n.as_str() < me).count() as u32;
    partitions / m + u32::from(rank < partitions % m)
}

/// Renew this instance's membership; the names of the live members, sorted (this one always
/// among them).
async fn heartbeat(owners: &kv::Store, cfg: &CollectConfig, me: &str) -> Vec<String> {
    let now = wall_ms();
    let until = now + i64::try_from(cfg.lease.as_millis()).unwrap_or(i64::MAX);
    let value = serde_json::to_vec(&lease::Lease {
        owner: me.to_string(),
        until_ms: until,
    })
    .unwrap_or_default();
    if let Err(e) = owners
        .put(member_key(&cfg.instance), Bytes::from(value))
        .await
    {
        tracing::warn!(error = %e, "membership heartbeat failed");
    }
    let mut live = vec![cfg.instance.clone()];
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
                    let name = lease::instance_of(&l.owner);
                    if name != cfg.instance {
                        live.push(name.to_string());
                    }
                } else if l.until_ms + EXPIRED_MEMBER_GRACE_MS <= now {
                    // A member that died without a goodbye: its key would stay forever.
                    let _ = owners.purge(&k).await;
                }
            }
        }
    }
    live.sort();
    live.dedup();
    live
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
    me: &str,
    owned: &mut BTreeMap<u32, Owned>,
) {
    let mut lost = Vec::new();
    for (&p, o) in owned.iter_mut() {
        let asked = Instant::now();
        match lease::renew(owners, p, me, o.lease_rev, cfg.lease, wall_ms()).await {
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

/// Serve the sum of the owned partitions' metrics, and this instance's cluster series.
fn publish_metrics(
    served: &Metrics,
    receiver: Option<&Metrics>,
    owned: &mut BTreeMap<u32, Owned>,
    summary: &CollectSummary,
    partitions: u32,
    traces: Option<&TraceSink>,
) {
    for o in owned.values() {
        o.core.publish_stats();
    }
    let snaps: Vec<_> = owned
        .values()
        .map(|o| o.core.metrics.snapshot())
        .chain(receiver.map(Metrics::snapshot))
        .collect();
    let sum = crate::sink::metrics::sum_snapshots(&snaps);
    if let Err(e) = served.restore(&sum) {
        tracing::warn!(error = %e, "cannot publish partition metrics");
    }
    served.set_cluster(&cluster_stats(owned, summary, partitions));
    if let Some(t) = traces {
        crate::engine::outputs::set_trace_stats(served, t);
    }
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
        dead_letters: summary.dead_letters,
    }
}

#[cfg(test)]
mod tests {
    use super::fair_share;

    #[test]
    fn every_partition_has_an_owner_and_no_member_idles() {
        for (p, m) in [(16u32, 5usize), (16, 3), (8, 8), (4, 6), (1, 2), (16, 1)] {
            let names: Vec<String> = (0..m).map(|i| format!("c{i}")).collect();
            let shares: Vec<u32> = names.iter().map(|n| fair_share(p, &names, n)).collect();
            assert_eq!(shares.iter().sum::<u32>(), p, "{p} over {m}: {shares:?}");
            let (lo, hi) = (shares.iter().min(), shares.iter().max());
            assert!(hi.zip(lo).is_some_and(|(h, l)| h - l <= 1), "{shares:?}");
        }
        // Five collectors on 16 partitions: 4, 3, 3, 3, 3 (⌈16/5⌉ for all left one with none).
        let names: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
        let shares: Vec<u32> = names.iter().map(|n| fair_share(16, &names, n)).collect();
        assert_eq!(shares, vec![4, 3, 3, 3, 3]);
    }
}
