//! Every hash retryscope computes: a fast, per-process seeded hasher for the correlator's
//! maps keyed by turn ids; `StreamHash`, the same word mixing over a stream of fragments
//! (attempt text, checkpointed with open turns); and [`fnv1a`], the stable byte hash for file
//! fingerprints (persisted) and `check`'s shard routing (the same in every process).
//!
//! SipHash (the std default) showed up at ~5% of `check` time. This word-at-a-time
//! multiply-rotate hash (the FxHash construction) is several times faster; a random per-process
//! seed keeps crafted turn ids from colliding on purpose across runs.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

/// The one word-mixing step of both word-at-a-time hashes here (the FxHash construction).
const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

#[inline]
fn mix(acc: u64, word: u64) -> u64 {
    (acc ^ word).wrapping_mul(MUL).rotate_left(29)
}

/// The hasher.
#[derive(Debug, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = mix(self.0, word);
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

/// A streaming hash of a byte stream, eight bytes at a time: fragments hash exactly like
/// their concatenation, whatever the split. Serializable, so open turns can be checkpointed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StreamHash {
    acc: u64,
    /// The last `len % 8` bytes, not yet mixed in.
    tail: u64,
    len: u64,
}

impl StreamHash {
    /// Add bytes.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        // Bytes in the tail: what does not fill a word (8 bytes of state fewer than keeping
        // the count: open turns hold one of these per text).
        let mut tail_len = (self.len % 8) as u32;
        self.len += bytes.len() as u64;
        while tail_len > 0 && !bytes.is_empty() {
            self.tail |= u64::from(bytes[0]) << (8 * tail_len);
            tail_len += 1;
            bytes = &bytes[1..];
            if tail_len == 8 {
                self.acc = mix(self.acc, self.tail);
                self.tail = 0;
                tail_len = 0;
            }
        }
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut buf = [0u8; 8];
            buf.copy_from_slice(w);
            self.acc = mix(self.acc, u64::from_le_bytes(buf));
        }
        for &b in words.remainder() {
            self.tail |= u64::from(b) << (8 * tail_len);
            tail_len += 1;
        }
    }

    /// The hash of everything pushed so far.
    pub(crate) fn value(&self) -> u64 {
        let mut h = mix(mix(self.acc, self.tail), self.len);
        h ^= h >> 32;
        h = h.wrapping_mul(MUL);
        h ^ (h >> 29)
    }
}

/// FNV-1a, 64 bit: a hash that never changes across processes or versions, for values that
/// are persisted (file fingerprints in checkpoints) or must not depend on the process (which
/// `check` worker owns a turn).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = Fnv1a::new();
    bytes.iter().for_each(|&b| hash.write_byte(b));
    hash.finish()
}

/// [`fnv1a`] a byte at a time, for a caller that looks at each byte anyway.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fnv1a(u64);

impl Fnv1a {
    /// The FNV-1a offset basis: the hash of no bytes.
    pub(crate) const fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    /// Mixes in the next byte.
    pub(crate) fn write_byte(&mut self, b: u8) {
        self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }

    /// The hash of the bytes written so far.
    pub(crate) const fn finish(self) -> u64 {
        self.0
    }
}

impl Default for Fnv1a {
    fn default() -> Self {
        Self::new()
    }
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
