//! Who collects: each instance's membership heartbeat in the owners bucket, the live members
//! as this instance observes them, its fair share of the partitions, and the refusal of a
//! second live collector under one name.
//!
//! Liveness is observed, not read off clocks (see [`super::lease`]): a member whose key's
//! revision has not moved for its lease length, as this instance measured it, is gone; its
//! key is purged once it has stood still a minute longer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::kv;
use futures_util::StreamExt;

use super::collect::CollectConfig;
use super::lease::{self, Lease, Observer};
use super::{NatsError, wall_ms};

/// How long past its lease a dead member's key is removed (by any live member).
const EXPIRED_MEMBER_GRACE: Duration = Duration::from_secs(60);

/// The membership key of `instance`.
pub(super) fn member_key(instance: &str) -> String {
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
pub(super) async fn claim_name(
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
            && serde_json::from_slice::<Lease>(&now.value).is_ok_and(|l| l.owner != me)
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
pub(super) fn fair_share(partitions: u32, members: &[String], me: &str) -> u32 {
    let m = (members.len() as u32).max(1);
    let rank = members.iter().filter(|n| n.as_str() < me).count() as u32;
    partitions / m + u32::from(rank < partitions % m)
}

/// What a member's key says, as this instance sees it now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// Renewed within its lease (or first seen less than a lease ago).
    Live,
    /// Its lease has ended, by this observer's clock.
    Gone,
    /// Gone for a minute past its lease: its key may be purged.
    Stale,
}

/// Judge a member key that has stood at its revision for `unchanged` (as observed), with the
/// lease it states (or `ttl`, for an older collector's).
pub(super) fn judge(lease: &Lease, unchanged: Duration, ttl: Duration) -> Seen {
    let ttl = lease.ttl().unwrap_or(ttl);
    if unchanged < ttl {
        Seen::Live
    } else if unchanged < ttl + EXPIRED_MEMBER_GRACE {
        Seen::Gone
    } else {
        Seen::Stale
    }
}

/// Renew this instance's membership; the names of the live members, sorted (this one always
/// among them).
pub(super) async fn heartbeat(
    owners: &kv::Store,
    observer: &mut Observer,
    cfg: &CollectConfig,
    me: &str,
) -> Vec<String> {
    if let Err(e) = owners
        .put(
            member_key(&cfg.instance),
            lease::encode(me, cfg.lease, wall_ms()),
        )
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
            let Ok(Some(e)) = owners.entry(&k).await else {
                continue;
            };
            if e.operation != kv::Operation::Put {
                observer.forget(&k);
                continue;
            }
            let Ok(l) = serde_json::from_slice::<Lease>(&e.value) else {
                continue;
            };
            let unchanged = observer.observe(&k, e.revision, Instant::now());
            match judge(&l, unchanged, cfg.lease) {
                Seen::Live => {
                    let name = lease::instance_of(&l.owner);
                    if name != cfg.instance {
                        live.push(name.to_string());
                    }
                }
                Seen::Gone => {}
                Seen::Stale => {
                    // A member that died without a goodbye: its key would stay forever.
                    if owners.purge(&k).await.is_ok() {
                        observer.forget(&k);
                    }
                }
            }
        }
    }
    live.sort();
    live.dedup();
    live
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_member_is_gone_after_its_key_stood_still_a_lease_and_stale_a_minute_later() {
        let l = Lease {
            owner: "c2#1.1".into(),
            // The writer's wall clock, however far off, is not read.
            until_ms: i64::MIN,
            ttl_ms: Some(4_000),
        };
        let ttl = Duration::from_secs(10);
        assert_eq!(judge(&l, Duration::ZERO, ttl), Seen::Live);
        assert_eq!(judge(&l, Duration::from_millis(3_999), ttl), Seen::Live);
        assert_eq!(judge(&l, Duration::from_secs(4), ttl), Seen::Gone);
        assert_eq!(judge(&l, Duration::from_secs(64), ttl), Seen::Stale);
        let old = Lease { ttl_ms: None, ..l };
        assert_eq!(judge(&old, Duration::from_secs(9), ttl), Seen::Live);
    }
}
