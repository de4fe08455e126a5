//! Partition ownership: one live collector owns a partition at a time.
//!
//! A key-value bucket holds one key per partition (`p<N>`) whose value names the owner and
//! when its lease ends. Every change is a compare-and-set on the key's revision: taking a free
//! or expired partition, renewing one's own lease. A collector that fails to renew (another
//! took over, or the server is away) stops treating the partition as its own at once. Leases
//! are judged by the wall clocks of the collectors, which must agree to well within a lease.

use std::time::Duration;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::NatsError;

/// The bucket of partition owners.
pub const OWNERS_BUCKET: &str = "retryscope_owners";

/// A lease as stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lease {
    /// The owning process: its instance name and incarnation ([`owner_id`]), so that a second
    /// process given the same name owns nothing of the first's.
    pub owner: String,
    /// Milliseconds since the epoch when the lease ends unless renewed.
    pub until_ms: i64,
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

/// Whether `current` (if any) may be taken by `me` at `now_ms`.
pub fn takeable(current: Option<&Lease>, me: &str, now_ms: i64) -> bool {
    match current {
        None => true,
        Some(l) => l.owner == me || l.until_ms <= now_ms,
    }
}

/// Try to take partition `p` for `ttl`; the revision held on success.
pub async fn acquire(
    store: &kv::Store,
    p: u32,
    me: &str,
    ttl: Duration,
    now_ms: i64,
) -> Result<Option<u64>, NatsError> {
    let entry = store
        .entry(key(p))
        .await
        .map_err(|e| NatsError::new("reading a lease", e))?;
    let value = encode(me, ttl, now_ms);
    let live = entry.as_ref().filter(|e| e.operation == kv::Operation::Put);
    match live {
        None => match entry {
            // Deleted or purged key: set it if nobody did meanwhile.
            Some(e) => Ok(store.update(key(p), value, e.revision).await.ok()),
            None => Ok(store.create(key(p), value).await.ok()),
        },
        Some(e) => {
            let current: Option<Lease> = serde_json::from_slice(&e.value).ok();
            if takeable(current.as_ref(), me, now_ms) {
                Ok(store.update(key(p), value, e.revision).await.ok())
            } else {
                Ok(None)
            }
        }
    }
}

/// Renew a held lease; `None` when it is no longer ours (or the server cannot confirm it).
pub async fn renew(
    store: &kv::Store,
    p: u32,
    me: &str,
    revision: u64,
    ttl: Duration,
    now_ms: i64,
) -> Option<u64> {
    store
        .update(key(p), encode(me, ttl, now_ms), revision)
        .await
        .ok()
}

fn encode(me: &str, ttl: Duration, now_ms: i64) -> Bytes {
    let lease = Lease {
        owner: me.to_string(),
        until_ms: now_ms.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
    };
    Bytes::from(serde_json::to_vec(&lease).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_free_own_or_expired_leases_are_takeable() {
        let l = Lease {
            owner: "a".into(),
            until_ms: 1000,
        };
        assert!(takeable(None, "b", 0));
        assert!(takeable(Some(&l), "a", 500));
        assert!(!takeable(Some(&l), "b", 999));
        assert!(takeable(Some(&l), "b", 1000));
    }

    #[test]
    fn two_runs_of_one_instance_name_are_two_owners() {
        let first = owner_id("c1", 1_000, 7);
        let second = owner_id("c1", 1_000, 8);
        assert_ne!(first, second);
        assert_eq!(instance_of(&first), "c1");
        assert_eq!(instance_of("old-style"), "old-style");
        let l = Lease {
            owner: first.clone(),
            until_ms: 1000,
        };
        assert!(takeable(Some(&l), &first, 500));
        assert!(!takeable(Some(&l), &second, 500));
    }
}
