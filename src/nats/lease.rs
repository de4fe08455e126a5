//! Partition ownership: one live collector owns a partition at a time.
//!
//! A key-value bucket holds one key per partition (`p<N>`) whose value names the owner and
//! how long its lease lasts. Every change is a compare-and-set on the key's revision: taking a
//! free or expired partition, renewing one's own lease. A collector that fails to renew
//! (another took over, or the server is away) stops treating the partition as its own at once.
//!
//! **No clocks are compared between collectors.** Whether another's lease has ended is judged
//! the way Kubernetes' leader election judges it: by what the observer saw, on its own
//! monotonic clock. An [`Observer`] remembers, per key, the revision it last read and when it
//! first read it; a lease held by another is expired once its revision has stayed the same for
//! the lease's length as the observer measured it (its holder renews every quarter lease, each
//! renewal a new revision). The holder stops using a partition 7/8 of a lease after its last
//! renewal request by its own monotonic clock, before any observer can count a whole lease from
//! a revision written after that request. Only the clocks' rates must agree, not their
//! readings: a collector whose wall clock is an hour off owns and fails over like the others
//! (`tests/nats/clocks.rs`). The `until_ms` written beside is for collectors older than this,
//! which compare it with their wall clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::NatsError;

/// The bucket of partition owners.
pub const OWNERS_BUCKET: &str = "retryscope_owners";

/// A lease (or a membership heartbeat) as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lease {
    /// The owning process: its instance name and incarnation ([`owner_id`]), so that a second
    /// process given the same name owns nothing of the first's.
    pub owner: String,
    /// The writer's wall clock plus the lease: read only by collectors older than this one.
    pub until_ms: i64,
    /// How long the lease lasts past this revision, by any observer's clock (0: released).
    /// Absent in leases written by older collectors: the observer's own lease length stands in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// The owners bucket, opened or created.
pub async fn owners(
    js: &jetstream::Context,
    deploy: &super::deploy::Deploy,
) -> Result<kv::Store, NatsError> {
    super::kv_bucket(js, OWNERS_BUCKET, deploy).await
}

/// The owner id of one process run as `instance`: the name and an incarnation that differs
/// from run to run (start time and process id).
pub fn owner_id(instance: &str, started_ms: i64, pid: u32) -> String {
    format!("{instance}#{started_ms:x}.{pid:x}")
}

/// The instance name in an owner id (an owner id from before incarnations is a bare name).
pub fn instance_of(owner: &str) -> &str {
    owner.rsplit_once('#').map_or(owner, |(name, _)| name)
}

/// The key of partition `p`.
pub fn key(p: u32) -> String {
    format!("p{p}")
}

/// What one collector has seen of the keys it reads: per key, the revision and when (on this
/// process's monotonic clock) that revision was first read.
#[derive(Debug, Default)]
pub struct Observer {
    seen: HashMap<String, (u64, Instant)>,
}

impl Observer {
    /// Record that `key` is at `revision` at `now`; how long it has been at that revision as
    /// far as this observer knows (zero the first time it is seen there).
    pub fn observe(&mut self, key: &str, revision: u64, now: Instant) -> Duration {
        match self.seen.get(key) {
            Some(&(rev, since)) if rev == revision => now.saturating_duration_since(since),
            _ => {
                self.seen.insert(key.to_string(), (revision, now));
                Duration::ZERO
            }
        }
    }

    /// Forget `key` (deleted, or purged).
    pub fn forget(&mut self, key: &str) {
        self.seen.remove(key);
    }
}

/// Whether the lease `current` (if any) may be taken by `me`, its revision having been seen
/// unchanged for `unchanged` by this observer; `ttl` stands in for a lease that does not say
/// its own length.
pub fn takeable(current: Option<&Lease>, me: &str, unchanged: Duration, ttl: Duration) -> bool {
    match current {
        None => true,
        Some(l) => l.owner == me || unchanged >= l.ttl().unwrap_or(ttl),
    }
}

impl Lease {
    /// The lease's length past its revision, when it says so.
    pub fn ttl(&self) -> Option<Duration> {
        self.ttl_ms.map(Duration::from_millis)
    }
}

/// Try to take partition `p` for `ttl`; the revision held on success. `observer` decides
/// whether another's lease has ended.
pub async fn acquire(
    store: &kv::Store,
    observer: &mut Observer,
    p: u32,
    me: &str,
    ttl: Duration,
    wall_ms: i64,
) -> Result<Option<u64>, NatsError> {
    let k = key(p);
    let entry = store
        .entry(&k)
        .await
        .map_err(|e| NatsError::new("reading a lease", e))?;
    let value = encode(me, ttl, wall_ms);
    let live = entry.as_ref().filter(|e| e.operation == kv::Operation::Put);
    match live {
        None => match entry {
            // Deleted or purged key: set it if nobody did meanwhile.
            Some(e) => Ok(store.update(&k, value, e.revision).await.ok()),
            None => Ok(store.create(&k, value).await.ok()),
        },
        Some(e) => {
            let unchanged = observer.observe(&k, e.revision, Instant::now());
            let current: Option<Lease> = serde_json::from_slice(&e.value).ok();
            if takeable(current.as_ref(), me, unchanged, ttl) {
                Ok(store.update(&k, value, e.revision).await.ok())
            } else {
                Ok(None)
            }
        }
    }
}

/// Read partition `p`'s lease only to note its revision (and so its age) in `observer`.
pub async fn observe(store: &kv::Store, observer: &mut Observer, p: u32) -> Result<(), NatsError> {
    let k = key(p);
    match store
        .entry(&k)
        .await
        .map_err(|e| NatsError::new("reading a lease", e))?
    {
        Some(e) if e.operation == kv::Operation::Put => {
            observer.observe(&k, e.revision, Instant::now());
        }
        _ => observer.forget(&k),
    }
    Ok(())
}

/// Renew a held lease; `None` when it is no longer ours (or the server cannot confirm it).
/// A `ttl` of zero releases it: any observer may take it at once.
pub async fn renew(
    store: &kv::Store,
    p: u32,
    me: &str,
    revision: u64,
    ttl: Duration,
    wall_ms: i64,
) -> Option<u64> {
    store
        .update(key(p), encode(me, ttl, wall_ms), revision)
        .await
        .ok()
}

/// A lease (or heartbeat) of `me` for `ttl`, written at `wall_ms` on the writer's clock.
pub fn encode(me: &str, ttl: Duration, wall_ms: i64) -> Bytes {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let lease = Lease {
        owner: me.to_string(),
        until_ms: wall_ms.saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX)),
        ttl_ms: Some(ttl_ms),
    };
    Bytes::from(serde_json::to_vec(&lease).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(owner: &str, ttl_ms: Option<u64>) -> Lease {
        Lease {
            owner: owner.into(),
            until_ms: 0,
            ttl_ms,
        }
    }

    #[test]
    fn only_free_own_or_expired_leases_are_takeable() {
        let ttl = Duration::from_secs(10);
        let l = lease("a", Some(10_000));
        assert!(takeable(None, "b", Duration::ZERO, ttl));
        assert!(takeable(Some(&l), "a", Duration::ZERO, ttl));
        assert!(!takeable(Some(&l), "b", Duration::from_millis(9_999), ttl));
        assert!(takeable(Some(&l), "b", Duration::from_secs(10), ttl));
        // Released (ttl 0): at once.
        assert!(takeable(
            Some(&lease("a", Some(0))),
            "b",
            Duration::ZERO,
            ttl
        ));
        // An older collector's lease, without its length: the observer's own stands in.
        let old = lease("a", None);
        assert!(!takeable(Some(&old), "b", Duration::from_secs(9), ttl));
        assert!(takeable(Some(&old), "b", Duration::from_secs(10), ttl));
    }

    #[test]
    fn a_lease_ends_for_an_observer_only_after_its_revision_stood_still_a_whole_lease() {
        let mut o = Observer::default();
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        // First seen: no time has passed as far as this observer knows, whatever the value
        // says about the writer's clock.
        assert_eq!(o.observe("p1", 7, t0), Duration::ZERO);
        assert_eq!(o.observe("p1", 7, t0 + 3 * s), 3 * s);
        // Renewed: counted again from when the new revision was first read.
        assert_eq!(o.observe("p1", 9, t0 + 4 * s), Duration::ZERO);
        assert_eq!(o.observe("p1", 9, t0 + 14 * s), 10 * s);
        // Keys are independent; a forgotten key starts again.
        assert_eq!(o.observe("p2", 9, t0 + 14 * s), Duration::ZERO);
        o.forget("p1");
        assert_eq!(o.observe("p1", 9, t0 + 20 * s), Duration::ZERO);
    }

    #[test]
    fn the_wall_clock_in_a_lease_decides_nothing() {
        // A lease whose writer's wall clock is an hour ahead (or behind): what it says of
        // that clock is not read; only the observed revision's age is.
        let mut l = lease("a", Some(10_000));
        for until in [i64::MIN, 0, i64::MAX] {
            l.until_ms = until;
            assert!(!takeable(
                Some(&l),
                "b",
                Duration::from_secs(5),
                Duration::ZERO
            ));
            assert!(takeable(
                Some(&l),
                "b",
                Duration::from_secs(10),
                Duration::ZERO
            ));
        }
    }

    #[test]
    fn an_encoded_lease_says_its_length_and_reads_back() {
        let l: Lease =
            serde_json::from_slice(&encode("c1#1.2", Duration::from_secs(4), 1000)).expect("json");
        assert_eq!(l, lease_with("c1#1.2", 5000, Some(4000)));
        // A lease from a collector before observed leases reads as one without its length.
        let old: Lease = serde_json::from_str(r#"{"owner":"c0","until_ms":5}"#).expect("json");
        assert_eq!(old.ttl(), None);
    }

    fn lease_with(owner: &str, until_ms: i64, ttl_ms: Option<u64>) -> Lease {
        Lease {
            owner: owner.into(),
            until_ms,
            ttl_ms,
        }
    }

    #[test]
    fn two_runs_of_one_instance_name_are_two_owners() {
        let first = owner_id("c1", 1_000, 7);
        let second = owner_id("c1", 1_000, 8);
        assert_ne!(first, second);
        assert_eq!(instance_of(&first), "c1");
        assert_eq!(instance_of("old-style"), "old-style");
        let l = lease(&first, Some(1000));
        assert!(takeable(Some(&l), &first, Duration::ZERO, Duration::ZERO));
        assert!(!takeable(Some(&l), &second, Duration::ZERO, Duration::ZERO));
    }
}
