//! The task that tends one owned partition of `run --nats`: it polls the partition, keeps its
//! clock and checkpoints it on its own schedule, concurrently with the instance's other
//! partitions, until the instance tells it to hand the partition over, to drop it (lease lost)
//! or to stop, or until the partition fails (a read or a checkpoint), which ends it too.
//!
//! The instance's loop (`collect.rs`) keeps the leases: it renews them and moves each
//! partition's [`LeaseClock`] on, and the task checks that clock before every fetch,
//! checkpoint and published finding ([`super::owned`]), so a partition whose lease could have
//! ended is neither read, checkpointed nor published from, even while the loop is busy. The
//! task's own work is never timed against the lease (a collector short of CPU is not dead);
//! the loop's `Drop` order (the lease lost) ends it wherever it waits.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::NatsError;
use super::collect::Shared;
use super::owned::{Owned, await_acks, checkpoint, keep_time, poll, take};
use crate::sink::metrics::Metrics;

/// Until when a partition's lease is certainly still this instance's, by its monotonic clock
/// (7/8 of a lease past the last renewal request): moved on by the instance's loop at each
/// renewal, read by the partition's task before each fetch and checkpoint.
#[derive(Debug, Clone)]
pub(super) struct LeaseClock(Arc<Mutex<Instant>>);

impl LeaseClock {
    pub(super) fn new(until: Instant) -> Self {
        LeaseClock(Arc::new(Mutex::new(until)))
    }

    pub(super) fn until(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn extend(&self, until: Instant) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = until;
    }

    /// Whether the lease is still held now.
    pub(super) fn held(&self) -> Result<(), NatsError> {
        if Instant::now() < self.until() {
            Ok(())
        } else {
            Err(NatsError::new(
                "holding the partition",
                "its lease was not renewed in time",
            ))
        }
    }
}

/// What the instance asks of a partition's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Order {
    /// Go on.
    Run,
    /// Checkpoint and end (a peer takes the partition over, or the instance stops).
    Checkpoint,
    /// End without a checkpoint: the lease is lost; let the findings in flight land.
    Drop,
}

/// How a partition's task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// Checkpointed as asked: the lease may be released.
    Checkpointed,
    /// Without a checkpoint (dropped, or failed): the next owner replays from the stored one.
    Lost,
}

/// The instance's side of a partition's task.
pub(super) struct Tended {
    /// The lease's revision, for renewals and the release.
    pub(super) lease_rev: u64,
    pub(super) lease: LeaseClock,
    /// The partition's metrics (its share of what the instance serves).
    pub(super) metrics: Arc<Metrics>,
    /// Messages correlated and not yet covered by a stored checkpoint.
    pub(super) lag: Arc<AtomicU64>,
    /// Set once the take succeeded: until then the partition is leased here but not read.
    taken: Arc<AtomicBool>,
    order: watch::Sender<Order>,
    task: JoinHandle<Ended>,
}

impl Tended {
    /// Take partition `p`, whose lease this instance just acquired (at revision `lease_rev`,
    /// held as `lease` says), and tend it: both on the partition's own task. Taking reads the
    /// checkpoint, the events its hold keeps by reference and the findings published past it
    /// back: seconds on a collector busy with its other partitions. Taken in the instance's
    /// loop, a round of takes kept it from renewing the leases already held: a single
    /// `bench_nats --backlog` collector lost each of its 16 leases one to three times in
    /// 25 s, replaying each from its checkpoint, each replay another take.
    pub(super) fn take(
        sh: Shared,
        p: u32,
        lease_rev: u64,
        lease: LeaseClock,
    ) -> Result<Self, NatsError> {
        let (order, mut orders) = watch::channel(Order::Run);
        let metrics = Arc::new(
            Metrics::new(Default::default())
                .map_err(|e| NatsError::new("registering partition metrics", e))?,
        );
        let lag = Arc::new(AtomicU64::new(0));
        let taken = Arc::new(AtomicBool::new(false));
        let task = {
            let (lease, metrics, lag) = (lease.clone(), metrics.clone(), lag.clone());
            let is_taken = taken.clone();
            tokio::spawn(async move {
                let taken = take(&sh, p, lease_rev, lease, metrics);
                let o = match unless_dropped(&mut orders, taken).await {
                    None => return Ended::Lost,
                    Some(Err(e)) => {
                        tracing::warn!(partition = p, error = %e, "cannot take partition");
                        return Ended::Lost;
                    }
                    Some(Ok(o)) => o,
                };
                sh.counters.takeovers.fetch_add(1, Ordering::Relaxed);
                is_taken.store(true, Ordering::Relaxed);
                tracing::info!(partition = p, from_seq = o.source.seq, "took partition");
                tend(sh, p, o, orders, lag).await
            })
        };
        Ok(Tended {
            lease_rev,
            lease,
            metrics,
            lag,
            taken,
            order,
            task,
        })
    }

    /// Whether the take succeeded: the partition is being read here.
    pub(super) fn taken(&self) -> bool {
        self.taken.load(Ordering::Relaxed)
    }

    /// Whether the task has ended: as ordered, or by itself (the partition failed).
    pub(super) fn ended(&self) -> bool {
        self.task.is_finished()
    }

    /// Tell the task to end as `order` says, without waiting: [`Tended::ended`] says when it
    /// has, and [`Tended::finish`] how.
    pub(super) fn order(&self, order: Order) {
        let _ = self.order.send(order);
    }

    /// Wait until the task has ended; how it ended.
    pub(super) async fn finish(self) -> Ended {
        self.task.await.unwrap_or(Ended::Lost)
    }

    /// Tell the task to end as `order` says, and wait until it has.
    pub(super) async fn end(self, order: Order) -> Ended {
        self.order(order);
        self.finish().await
    }
}

/// Poll, keep time and checkpoint partition `p` until told otherwise or until it fails.
async fn tend(
    sh: Shared,
    p: u32,
    mut o: Owned,
    mut orders: watch::Receiver<Order>,
    lag: Arc<AtomicU64>,
) -> Ended {
    let cfg = sh.cfg.clone();
    let mut share = CheckpointShare::enter(&sh);
    let mut last_checkpoint = Instant::now();
    let mut every = cfg.checkpoint_every;
    loop {
        let order = *orders.borrow_and_update();
        match order {
            Order::Run => {}
            Order::Checkpoint => {
                // Bounded by a lease, past which the partition may be another's (and this
                // write fenced off); a handover's is not waited for by the instance, which
                // renews the lease meanwhile, but its stop is. A lease lost meanwhile ends it
                // at once: the instance waits for that.
                let why = "last checkpoint failed; the next owner replays from the stored one";
                let last = checkpoint_or_give_up(&sh, p, &mut o, why, Some(cfg.lease));
                return match unless_dropped(&mut orders, last).await {
                    Some(ended) => ended,
                    None => {
                        settle_acks(&sh, p, &mut o).await;
                        Ended::Lost
                    }
                };
            }
            Order::Drop => {
                settle_acks(&sh, p, &mut o).await;
                return Ended::Lost;
            }
        }
        // Not timed: a poll ends when its work is done (a collector short of CPU keeps its
        // partitions), or when the lease is lost (a wait on an unreachable server, which
        // renews nothing, ends there).
        let Some(polled) = unless_dropped(&mut orders, poll(&sh, p, &mut o)).await else {
            settle_acks(&sh, p, &mut o).await;
            return Ended::Lost;
        };
        let idle = match polled {
            Ok(0) => {
                // Idle: its findings' acknowledgements land now, not at the checkpoint, so
                // their permits go back to the instance's busy partitions.
                if let Err(e) = await_acks(&sh, &mut o).await {
                    tracing::warn!(partition = p, error = %e, "publishing findings failed");
                    settle_acks(&sh, p, &mut o).await;
                    return Ended::Lost;
                }
                if let Err(e) = keep_time(&sh, p, &mut o).await {
                    tracing::warn!(partition = p, error = %e, "cannot keep the partition's clock");
                }
                true
            }
            Ok(_) => false,
            Err(e) => {
                tracing::warn!(partition = p, error = %e, "reading partition failed");
                settle_acks(&sh, p, &mut o).await;
                return Ended::Lost;
            }
        };
        let caught_up = idle && o.read_since(last_checkpoint);
        if checkpoint_due(
            last_checkpoint.elapsed(),
            every,
            cfg.checkpoint_every,
            caught_up,
        ) {
            let began = Instant::now();
            // What a new owner would replay had this instance died just now.
            lag.store(o.source.seq.saturating_sub(o.stored), Ordering::Relaxed);
            let why = "checkpoint failed; giving the partition up";
            let kept = unless_dropped(
                &mut orders,
                checkpoint_or_give_up(&sh, p, &mut o, why, None),
            )
            .await
            .unwrap_or(Ended::Lost);
            last_checkpoint = Instant::now();
            let all = share.took(last_checkpoint - began);
            every = checkpoint_interval(cfg.checkpoint_every, all);
            if kept == Ended::Lost {
                return Ended::Lost;
            }
        }
        if idle {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = orders.changed() => {}
            }
        }
    }
}

/// `work`'s result, or `None` once the instance orders the partition dropped (its lease was
/// lost) or is gone: a poll or a checkpoint is left wherever it waits, and its half-done
/// state with it (the next owner replays from the stored checkpoint).
async fn unless_dropped<T>(
    orders: &mut watch::Receiver<Order>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        done = work => Some(done),
        _ = orders.wait_for(|o| *o == Order::Drop) => None,
    }
}

/// The most of the instance's time its partitions' checkpoints may take together: a tenth
/// (the rest is for reading them).
const CHECKPOINT_SHARE: u32 = 10;
/// The longest interval between checkpoints however large the state: well inside the
/// consumer's acknowledgement wait (60 s), whose messages are acknowledged at checkpoints.
const LONGEST_INTERVAL: Duration = Duration::from_secs(15);

/// The interval until the next checkpoint, when the last checkpoints of the instance's
/// partitions took `all` together: `configured`, or longer when the states are so large
/// (thousands of open or held turns) that the checkpoints would take more than a tenth of the
/// instance's time; a failover then replays more. A share per partition instead let 16
/// partitions with held turns spend a twelfth of a busy collector's CPU on checkpoints; a
/// share of the partition count (each partition's own time × the count) stretched one slow
/// partition's interval as if all were as slow.
fn checkpoint_interval(configured: Duration, all: Duration) -> Duration {
    configured
        .max(all.saturating_mul(CHECKPOINT_SHARE))
        .min(LONGEST_INTERVAL.max(configured))
}

/// Whether a checkpoint is due `since` the last: after `every` (the budgeted interval), or
/// after `configured` when the partition has `caught_up` (nothing to read now, lines read
/// since the last checkpoint): the budget keeps checkpoints from slowing the reading down,
/// and a partition that has caught up has no reading to slow.
fn checkpoint_due(since: Duration, every: Duration, configured: Duration, caught_up: bool) -> bool {
    since >= every || (caught_up && since >= configured)
}

/// A tended partition's part of the instance's checkpoint time: its last checkpoint's
/// duration, in the instance's sum while it lives.
struct CheckpointShare {
    counters: Arc<super::collect::Counters>,
    last_us: u64,
}

impl CheckpointShare {
    fn enter(sh: &Shared) -> Self {
        CheckpointShare {
            counters: sh.counters.clone(),
            last_us: 0,
        }
    }

    /// This partition's checkpoint took `d`: the instance's sum of last checkpoints now.
    fn took(&mut self, d: Duration) -> Duration {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let sum = &self.counters.checkpoint_us;
        sum.fetch_sub(self.last_us, Ordering::Relaxed);
        let before = sum.fetch_add(us, Ordering::Relaxed);
        self.last_us = us;
        Duration::from_micros(before.saturating_add(us))
    }
}

impl Drop for CheckpointShare {
    fn drop(&mut self) {
        self.counters
            .checkpoint_us
            .fetch_sub(self.last_us, Ordering::Relaxed);
    }
}

/// Checkpoint partition `p`, within `bound` if given; when that fails (or takes longer),
/// count it, say `why` and let the findings in flight land, for the partition to be given up.
async fn checkpoint_or_give_up(
    sh: &Shared,
    p: u32,
    o: &mut Owned,
    why: &str,
    bound: Option<Duration>,
) -> Ended {
    let done = match bound {
        Some(bound) => tokio::time::timeout(bound, checkpoint(sh, p, o))
            .await
            .unwrap_or_else(|_| Err(NatsError::new("checkpointing", "timed out"))),
        None => checkpoint(sh, p, o).await,
    };
    match done {
        Ok(()) => Ended::Checkpointed,
        Err(e) => {
            sh.counters
                .checkpoint_failures
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(partition = p, error = %e, "{why}");
            settle_acks(sh, p, o).await;
            Ended::Lost
        }
    }
}

/// Before a partition is dropped: let the findings in flight land (or fail), so that the next
/// owner's reading of what was published is complete.
async fn settle_acks(sh: &Shared, p: u32, o: &mut Owned) {
    let settled = tokio::time::timeout(Duration::from_secs(5), await_acks(sh, o)).await;
    if !matches!(settled, Ok(Ok(()))) {
        tracing::warn!(
            partition = p,
            "findings in flight not acknowledged before the partition was dropped"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_take_at_most_a_tenth_of_the_instances_time_up_to_a_longest_interval() {
        let ms = Duration::from_millis;
        // Small states: the configured interval.
        assert_eq!(checkpoint_interval(ms(1000), ms(5)), ms(1000));
        // The partitions' last checkpoints took 300 ms together: the next one in 3 s.
        assert_eq!(checkpoint_interval(ms(1000), ms(300)), ms(3000));
        // However slow, no longer than the longest interval (or the configured one).
        assert_eq!(checkpoint_interval(ms(1000), ms(9000)), LONGEST_INTERVAL);
        assert_eq!(checkpoint_interval(ms(20_000), ms(9000)), ms(20_000));
    }

    #[test]
    fn the_instance_sums_each_tended_partitions_last_checkpoint() {
        let counters = Arc::new(super::super::collect::Counters::default());
        let share = |c: &Arc<super::super::collect::Counters>| CheckpointShare {
            counters: c.clone(),
            last_us: 0,
        };
        let ms = Duration::from_millis;
        let (mut slow, mut fast) = (share(&counters), share(&counters));
        assert_eq!(slow.took(ms(50)), ms(50));
        assert_eq!(fast.took(ms(2)), ms(52));
        // a partition's newer checkpoint replaces its older one in the sum
        assert_eq!(fast.took(ms(3)), ms(53));
        assert_eq!(slow.took(ms(40)), ms(43));
        // a partition no longer tended leaves the sum
        drop(slow);
        assert_eq!(fast.took(ms(3)), ms(3));
        drop(fast);
        assert_eq!(counters.checkpoint_us.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_partition_that_caught_up_stores_what_it_read_at_the_configured_interval() {
        let ms = Duration::from_millis;
        // Reading: the budgeted interval.
        assert!(!checkpoint_due(ms(2000), ms(8000), ms(1000), false));
        assert!(checkpoint_due(ms(8000), ms(8000), ms(1000), false));
        // Caught up: the configured one, not sooner.
        assert!(checkpoint_due(ms(2000), ms(8000), ms(1000), true));
        assert!(!checkpoint_due(ms(500), ms(8000), ms(1000), true));
    }
}
