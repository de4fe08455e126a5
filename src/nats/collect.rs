//! `retryscope run --nats`: a collector that shares the partitions with its peers (membership,
//! leases, the loop; what is done with one owned partition is in `owned.rs`).
//!
//! Each instance heartbeats its membership, takes free or expired partitions up to its fair
//! share (`fair_share`: ⌊P/M⌋, one more for the first P mod M names; the excess is
//! checkpointed and handed over when a peer joins) and renews their leases, all at once
//! ([`super::lease`]). An owned partition is taken on its own task (`Tended::take`), which
//! creates the durable pull consumer `retryscope-p<N>-e<lease
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
//! have ended by its own monotonic clock. No wall clocks are compared between collectors:
//! another's lease or membership has ended when its key's revision stood still for a lease as
//! this instance observed it ([`super::lease::Observer`]).
//!
//! Each owned partition is tended by its own task (`nats/tend.rs`), so the partitions of one
//! instance are read, correlated and checkpointed concurrently; this loop keeps the membership
//! and the leases, starts and ends the tasks, and serves the sum of their metrics. A delivery missing from the consumer's sequence (a
//! fetch abandoned mid-way, a deposed owner's pull) makes the partition be taken again from its
//! checkpoint rather than correlated with a gap.
//!
//! Finding acknowledgements are awaited in batches of at most [`MAX_ACKS_IN_FLIGHT`] a
//! partition and [`INSTANCE_ACKS_IN_FLIGHT`] an instance (its partitions take permits from
//! one semaphore), and by an idle partition, never held until the checkpoint: the client
//! allows 5,000 in flight on the connection and makes a publish wait for a free one, so an
//! instance whose partitions held more between them blocked every partition and its own lease
//! renewals (16 partitions and a checkpoint interval of 15 s: no partition moved again).
//! A fetch is no-wait; a late delivery is waited for only while the connection that asked is
//! up and the lease holds, at most a lease (`owned.rs`). A finding larger than the server's
//! largest message is a dead letter: written locally, counted, logged, and the partition
//! moves on.
//!
//! Metrics: each partition counts into its own [`Metrics`] whose snapshot travels in the
//! partition's checkpoint; the instance serves the sum of the partitions it owns, so the sum
//! over instances is the total (see docs/scaling.md). The cluster series (partitions owned,
//! lease takeovers, checkpoint lag and failures, findings publish failures) are the
//! instance's own and are set on top of that sum ([`Metrics::set_cluster`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};

use super::FINDINGS_STREAM;
use super::deploy::Deploy;
use super::lease::Observer;
use super::membership::{claim_name, fair_share, heartbeat, member_key};
use super::partition::ensure_findings_stream;
use super::tend::{Ended, LeaseClock, Order, Tended};
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
    /// Held events a take could not read back (their messages were gone).
    pub held_lost: u64,
}

/// Finding acknowledgements awaited together (async-nats allows 5,000 in flight and blocks a
/// publish past that).
pub const MAX_ACKS_IN_FLIGHT: usize = 1_024;

/// Finding acknowledgements the instance's partitions may have in flight between them: below
/// the connection's 5,000, with room for the checkpoints', leases' and clock messages'.
pub const INSTANCE_ACKS_IN_FLIGHT: usize = 4_000;

/// What the instance's partition tasks count, together.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) messages: AtomicU64,
    pub(super) checkpoints: AtomicU64,
    pub(super) checkpoint_failures: AtomicU64,
    pub(super) publish_failures: AtomicU64,
    pub(super) dead_letters: AtomicU64,
    pub(super) replayed_unpublished: AtomicU64,
    pub(super) held_lost: AtomicU64,
    /// Partitions taken (by the partitions' own tasks).
    pub(super) takeovers: AtomicU64,
    /// The last checkpoint's duration of each partition being tended, summed (µs): their
    /// checkpoints share the instance's time.
    pub(super) checkpoint_us: AtomicU64,
}

/// What every partition of the instance uses: the connection, the buckets and streams, the
/// configuration, the instance's own outputs and counters. Cloned into each partition's task.
#[derive(Clone)]
pub(super) struct Shared {
    pub(super) js: jetstream::Context,
    pub(super) cfg: Arc<CollectConfig>,
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
    pub(super) counters: Arc<Counters>,
    /// Permits for finding acknowledgements in flight ([`INSTANCE_ACKS_IN_FLIGHT`]).
    pub(super) acks: Arc<tokio::sync::Semaphore>,
    /// Permits for the partitions' CPU work, one per core ([`super::cpu`]).
    pub(super) cpu: Arc<tokio::sync::Semaphore>,
    /// Permits for the partitions' fetches in flight ([`super::owned::fetches_in_flight`]).
    pub(super) fetches: Arc<tokio::sync::Semaphore>,
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
    let cfg = Arc::new(cfg);
    let Some(client) = cfg
        .nats
        .connect(&format!("retryscope-run {}", cfg.instance), &shutdown)
        .await?
    else {
        return Ok(CollectSummary::default());
    };
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
    let fetches = super::owned::fetches_in_flight(super::max_payload(&client));
    let sh = Shared {
        js: js.clone(),
        cfg: cfg.clone(),
        prices,
        states,
        events,
        findings_stream,
        client,
        findings,
        traces,
        counters: Arc::default(),
        acks: Arc::new(tokio::sync::Semaphore::new(INSTANCE_ACKS_IN_FLIGHT)),
        fetches: Arc::new(tokio::sync::Semaphore::new(fetches)),
        cpu: Arc::new(tokio::sync::Semaphore::new(
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        )),
    };
    let mut inst = Instance {
        sh,
        owners,
        me,
        observer: Observer::default(),
        owned: BTreeMap::new(),
        leaving: BTreeMap::new(),
        renewed: Instant::now(),
        partitions,
    };
    // Every few rounds and at the stop: the partitions' and the collector's series.
    let publish = |inst: &Instance| {
        publish_metrics(&served, receiver.as_deref(), inst);
    };
    let mut last_lease: Option<Instant> = None;
    let mut last_publish = Instant::now();
    let started = Instant::now();
    let round = (cfg.lease / 8).clamp(Duration::from_millis(10), Duration::from_millis(250));
    while !shutdown.load(Ordering::SeqCst) {
        if last_lease.is_none_or(|t| t.elapsed() >= cfg.lease / 4) {
            last_lease = Some(Instant::now());
            // The leases first: the heartbeat lists the bucket's keys, several round trips.
            inst.renew_all().await;
            inst.renewed = Instant::now();
            let members = heartbeat(&inst.owners, &mut inst.observer, &cfg, &inst.me).await;
            let share = fair_share(partitions, &members, &cfg.instance);
            inst.hand_over_excess(share);
            // Peers that start together see each other before anyone takes partitions.
            if started.elapsed() >= cfg.lease / 2 {
                inst.take_up_to(share).await;
            }
        }
        inst.reap().await;
        if last_publish.elapsed() >= cfg.checkpoint_every {
            last_publish = Instant::now();
            publish(&inst);
        }
        tokio::time::sleep(round).await;
    }
    // Orderly stop: checkpoint everything, then free the leases for the others at once.
    let owned = std::mem::take(&mut inst.owned);
    let leaving = std::mem::take(&mut inst.leaving);
    let ends = owned.into_iter().chain(leaving).map(|(p, t)| async move {
        let rev = t.lease_rev;
        (p, rev, t.end(Order::Checkpoint).await)
    });
    for (p, rev, ended) in futures_util::future::join_all(ends).await {
        if ended == Ended::Checkpointed {
            let _ = lease::renew(&inst.owners, p, &inst.me, rev, Duration::ZERO, wall_ms()).await;
        }
    }
    publish(&inst);
    let _ = inst.owners.delete(member_key(&cfg.instance)).await;
    Ok(inst.summary())
}

/// One collector's view of the cluster: what it owns and how it judges the others.
struct Instance {
    sh: Shared,
    owners: kv::Store,
    /// This process's owner id (instance name and incarnation).
    me: String,
    /// The revisions of others' leases and memberships, as this instance saw them.
    observer: Observer,
    owned: BTreeMap<u32, Tended>,
    /// Partitions being handed over: their tasks checkpoint them, their leases are renewed
    /// until the checkpoint is stored, and released then ([`Instance::reap`]).
    leaving: BTreeMap<u32, Tended>,
    /// When the leases were last renewed (a round of takes renews them when due).
    renewed: Instant,
    partitions: u32,
}

impl Instance {
    /// Renew every owned lease, all at once; a partition whose lease is not ours any more is
    /// dropped.
    ///
    /// At once, not one after the other: a collector busy catching up a backlog (every worker
    /// thread correlating) answers each round trip late, and sixteen renewals in a row took
    /// longer than the 7/8 of a lease its partitions' tasks trust their lease for. A single
    /// `bench_nats --backlog` collector lost each of its 16 leases one to three times in
    /// 25 s, and replayed each from its checkpoint.
    async fn renew_all(&mut self) {
        let lease = self.sh.cfg.lease;
        let asked = Instant::now();
        let (owners, me) = (&self.owners, self.me.as_str());
        let renewals = self.owned.iter().chain(&self.leaving).map(|(&p, t)| {
            let rev = t.lease_rev;
            async move { (p, lease::renew(owners, p, me, rev, lease, wall_ms()).await) }
        });
        let renewed = futures_util::future::join_all(renewals).await;
        let mut lost = Vec::new();
        for (p, rev) in renewed {
            let Some(t) = self.owned.get_mut(&p).or(self.leaving.get_mut(&p)) else {
                continue;
            };
            match rev {
                Some(rev) => {
                    t.lease_rev = rev;
                    // Counted from before the requests: the others' view of the lease starts
                    // later.
                    t.lease.extend(asked + lease * 7 / 8);
                }
                None => lost.push(p),
            }
        }
        for p in lost {
            tracing::warn!(partition = p, "lease lost; partition given up");
            if let Some(t) = self.owned.remove(&p).or(self.leaving.remove(&p)) {
                t.end(Order::Drop).await;
            }
        }
    }

    /// More than a fair share (a peer joined): hand the excess over, checkpointed on the
    /// partitions' own tasks ([`Instance::reap`] releases each lease once its checkpoint is
    /// stored). Not waited for here: a partition still being taken checkpoints once its take
    /// is done, seconds on a busy collector, and a checkpoint may take up to a lease; this
    /// loop meanwhile renews the leases of the partitions it keeps and of those it hands over.
    fn hand_over_excess(&mut self, share: u32) {
        while self.owned.len() as u32 > share {
            let Some((p, t)) = self.owned.pop_last() else {
                break;
            };
            t.order(Order::Checkpoint);
            self.leaving.insert(p, t);
        }
    }

    /// Take free or expired partitions up to `share`, starting at this instance's own place
    /// in the ring. Every partition not owned here is read, so that the age of every lease's
    /// revision is known by the time this instance may need it.
    async fn take_up_to(&mut self, share: u32) {
        let cfg = self.sh.cfg.clone();
        let first = (retryscope_core::fasthash::fnv1a(cfg.instance.as_bytes())
            % u64::from(self.partitions)) as u32;
        for i in 0..self.partitions {
            let p = (first + i) % self.partitions;
            if self.owned.contains_key(&p) || self.leaving.contains_key(&p) {
                continue;
            }
            // A round over many partitions outlasts a renewal interval: the leases taken at
            // its start ran out before it ended (64 partitions under a 1 s lease).
            if self.renewed.elapsed() >= cfg.lease / 4 {
                self.renew_all().await;
                self.renewed = Instant::now();
            }
            let asked = Instant::now();
            let want = (self.owned.len() as u32) < share;
            let acquired = if want {
                lease::acquire(
                    &self.owners,
                    &mut self.observer,
                    p,
                    &self.me,
                    cfg.lease,
                    wall_ms(),
                )
                .await
            } else {
                lease::observe(&self.owners, &mut self.observer, p)
                    .await
                    .map(|()| None)
            };
            match acquired {
                Ok(Some(rev)) => {
                    // Taken on the partition's own task: a take reads the checkpoint, the
                    // held events and the published findings back, seconds on a busy
                    // collector, while this loop goes on renewing the other leases.
                    let clock = LeaseClock::new(asked + cfg.lease * 7 / 8);
                    match Tended::take(self.sh.clone(), p, rev, clock) {
                        Ok(t) => {
                            self.owned.insert(p, t);
                        }
                        Err(e) => {
                            tracing::warn!(partition = p, error = %e, "cannot take partition")
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "lease check failed"),
            }
        }
    }

    /// Release the leases of the partitions handed over whose tasks have ended, and forget
    /// the partitions whose task ended by itself (a read or a checkpoint failed): their lease
    /// is kept, so this instance (or, once it lapses, another) takes the partition again from
    /// its stored checkpoint.
    async fn reap(&mut self) {
        for p in ended(&self.leaving) {
            let Some(t) = self.leaving.remove(&p) else {
                continue;
            };
            let rev = t.lease_rev;
            if t.finish().await == Ended::Checkpointed {
                tracing::info!(partition = p, "handed partition over");
            }
            // Released either way: the partition is no longer read here (a failed last
            // checkpoint is logged; the next owner replays from the stored one).
            let _ = lease::renew(&self.owners, p, &self.me, rev, Duration::ZERO, wall_ms()).await;
        }
        for p in ended(&self.owned) {
            if let Some(t) = self.owned.remove(&p) {
                t.end(Order::Drop).await;
            }
        }
    }

    fn summary(&self) -> CollectSummary {
        let c = &self.sh.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CollectSummary {
            messages: get(&c.messages),
            checkpoints: get(&c.checkpoints),
            checkpoint_failures: get(&c.checkpoint_failures),
            takeovers: get(&c.takeovers),
            publish_failures: get(&c.publish_failures),
            checkpoint_lag: self
                .owned
                .values()
                .chain(self.leaving.values())
                .map(|t| t.lag.load(Ordering::Relaxed))
                .sum(),
            dead_letters: get(&c.dead_letters),
            replayed_unpublished: get(&c.replayed_unpublished),
            held_lost: get(&c.held_lost),
        }
    }
}

/// The partitions of `tended` whose task has ended.
fn ended(tended: &BTreeMap<u32, Tended>) -> Vec<u32> {
    tended
        .iter()
        .filter(|(_, t)| t.ended())
        .map(|(&p, _)| p)
        .collect()
}

/// Serve the sum of the owned partitions' metrics, and this instance's cluster series.
fn publish_metrics(served: &Metrics, receiver: Option<&Metrics>, inst: &Instance) {
    // The partitions taken: one still being taken has no metrics yet (its checkpoint's are
    // restored by the take), and one whose take keeps failing is not owned in any useful sense.
    let taken = || {
        inst.owned
            .values()
            .chain(inst.leaving.values())
            .filter(|t| t.taken())
    };
    let snaps: Vec<_> = taken()
        .map(|t| t.metrics.snapshot())
        .chain(receiver.map(Metrics::snapshot))
        .collect();
    let sum = crate::sink::metrics::sum_snapshots(&snaps);
    if let Err(e) = served.restore(&sum) {
        tracing::warn!(error = %e, "cannot publish partition metrics");
    }
    let s = inst.summary();
    served.set_cluster(&ClusterStats {
        partitions: inst.partitions,
        owned: taken().count() as u32,
        takeovers: s.takeovers,
        checkpoint_lag: s.checkpoint_lag,
        publish_failures: s.publish_failures,
        checkpoint_writes: s.checkpoints,
        checkpoint_failures: s.checkpoint_failures,
        dead_letters: s.dead_letters,
        held_lost: s.held_lost,
    });
    if let Some(t) = inst.sh.traces.as_deref() {
        crate::engine::outputs::set_trace_stats(served, t);
    }
}
