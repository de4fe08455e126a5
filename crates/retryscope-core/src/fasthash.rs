//! Every hash retryscope computes: a fast, per-process seeded hasher for the correlator's
//! maps keyed by turn ids, and [`fnv1a`], the stable hash for what is persisted or must be the
//! same in every process.
//!
//! SipHash (the std default) showed up at ~5% of `check` time. This word-at-a-time
//! multiply-rotate hash (the FxHash construction) is several times faster; a random per-process
//! seed keeps crafted turn ids from colliding on purpose across runs.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

const K: u64 = 0xf135_7aea_2e62_a9c5;

/// The hasher.
#[derive(Debug, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // A final avalanche so the low bits (hashbrown's bucket index) mix in the high ones.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
}

/// Builds [`FastHasher`]s with this process's seed.
#[derive(Debug, Clone, Copy)]
pub struct FastState(u64);

impl Default for FastState {
    fn default() -> Self {
        static SEED: OnceLock<u64> = OnceLock::new();
        FastState(*SEED.get_or_init(|| RandomState::new().hash_one(0x5eed_u64)))
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;
    #[inline]
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

/// FNV-1a, 64 bit: a hash that never changes across processes or versions, for values that
/// are persisted (file fingerprints in checkpoints) or must not depend on the process (which
/// `check` worker owns a turn).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A `HashMap` with the fast hasher.
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastState>;
/// A `HashSet` with the fast hasher.
pub type FastSet<K> = std::collections::HashSet<K, FastState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_keys_hash_equal_and_different_keys_spread() {
        let s = FastState::default();
        assert_eq!(s.hash_one("agent-1-42"), s.hash_one("agent-1-42"));
        let mut buckets = [0u32; 64];
        for i in 0..64_000 {
            buckets[(s.hash_one(format!("agent-{}-{i}", i % 8)) % 64) as usize] += 1;
        }
        assert!(
            buckets.iter().all(|&b| (700..1300).contains(&b)),
            "{buckets:?}"
        );
        assert_ne!(s.hash_one("ab"), s.hash_one("ab\0"));
    }
}
