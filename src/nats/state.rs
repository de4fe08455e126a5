//! A partition's checkpoint in a key-value bucket: its correlator state, input counters and
//! logical clock, with the stream sequence they cover.
//!
//! Owns the stored shape and its three rules:
//! - **Compare-and-set** on the head key's revision (`p<N>`), so a collector that lost the
//!   partition cannot overwrite its new owner's state. Taking a partition rewrites the head
//!   ([`fence`]), which moves the revision past the one the deposed owner holds.
//! - **Any size.** A state too large for one message (NATS refuses a message over the
//!   server's `max_payload`, 1 MiB by default: ~700 open turns) is written as chunks under
//!   `p<N>.c.<generation>.<i>` first, each at most [`CHUNK_BYTES`] and within the server's
//!   limit (`chunk_limit`), and the head then names the generation, its chunk count,
//!   length and hash. A writer that loses the compare-and-set removes its chunks; a winner
//!   removes the previous generation's. A take stores the state again (a chunked one as a
//!   new generation), and then sweeps away whatever was stored under `p<N>.c.` before it:
//!   chunks a writer killed or cut off between its chunks and its head left behind. Chunks
//!   are removed by purging the stream by subject (and sequence), which leaves no markers. A head written before
//!   chunking (the state inline) is still read.
//! - **What was published.** The state carries the findings stream sequence of the last
//!   finding acknowledged before it was stored, so a new owner can read exactly which
//!   findings the old one published past it (see `collect`), whatever the stream's duplicate
//!   window.

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::NatsError;
use crate::sink::metrics::MetricsSnapshot;
use retryscope_core::correlate::CorrelatorSnapshot;
use retryscope_core::decode::gemini_join::JoinerSnapshot;
use retryscope_core::pipeline::InputCounters;

/// The bucket of partition checkpoints.
pub const STATE_BUCKET: &str = "retryscope_state";

/// States up to this size are stored in the head itself; larger ones in chunks of this size
/// (less on a server whose largest message is smaller: `chunk_limit`).
pub const CHUNK_BYTES: usize = 256 * 1024;

/// What a key-value message carries besides its value: subject, headers, protocol line.
const ENVELOPE: usize = 512;

/// The largest value [`save`] writes in one message to a server whose largest message is
/// `max_payload`: a server configured below [`CHUNK_BYTES`] refused every checkpoint (even
/// an empty partition's, then 26 KB of zero metric series), so no partition could be taken.
fn chunk_limit(max_payload: usize) -> usize {
    CHUNK_BYTES.min(max_payload.saturating_sub(ENVELOPE)).max(1)
}

/// One partition's checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartitionState {
    /// Everything up to this stream sequence is in the state (0: nothing yet).
    pub seq: u64,
    /// Open turns.
    pub correlator: CorrelatorSnapshot,
    /// Input counters.
    pub counters: InputCounters,
    /// The pipeline's logical clock.
    pub clock_ms: i64,
    /// Publish time of the last message: the partition's clock.
    pub now_ms: i64,
    /// The partition clock at the last idle-timeout tick.
    pub tick_ms: i64,
    /// The partition's metric values.
    pub metrics: MetricsSnapshot,
    /// Findings stream sequence of the last finding acknowledged before this state was
    /// stored (0: none known; a new owner then reads the partition's findings from the start).
    #[serde(default)]
    pub findings_seq: u64,
    /// gemini-cli (and forks') events held for their session's join.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined: Option<JoinerSnapshot>,
    /// Turns' events held until each turn is quiet (`--settle-secs`), read past already.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<retryscope_core::reorder::HoldSnapshot>,
    /// Provider streams' decoder states (the call in progress, the calls so far), so a new
    /// owner decodes the rest of a stream as this one would have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<retryscope_core::ingest::StreamState>,
}

/// The head of a chunked state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct ChunkRef {
    /// The writer's generation (random): names its chunk keys.
    generation: String,
    /// How many chunks.
    parts: u32,
    /// Total length of the state's bytes.
    bytes: u64,
    /// `fnv1a` of the state's bytes.
    fnv: u64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Head {
    Chunked { chunked: ChunkRef },
    Inline(Box<PartitionState>),
}

/// What a load found: the state, and what [`save`] and [`fence`] need to replace it.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The state (none: never checkpointed, or deleted).
    pub state: Option<PartitionState>,
    /// The head's revision (0: no key yet).
    pub revision: u64,
    /// The state's bytes as stored (to store them again unchanged, [`fence`]).
    bytes: Option<Bytes>,
    /// The chunks the head names, to remove once a newer generation replaces them.
    chunks: Option<ChunkRef>,
}

/// What a stored state holds, for the next [`save`]: its revision and chunks.
#[derive(Debug, Default, Clone)]
pub struct Stored {
    /// The head's revision (0: none yet).
    pub revision: u64,
    chunks: Option<ChunkRef>,
    /// The lowest stream sequence of those chunks, when this writer stored them.
    chunks_from: Option<u64>,
}

impl Stored {
    /// Stream sequences under `p<N>.c.` before this are chunks no head names, or will.
    fn named_from(&self) -> u64 {
        self.chunks_from.unwrap_or(self.revision)
    }
}

impl Loaded {
    /// What the next [`save`] replaces.
    pub fn stored(&self) -> Stored {
        Stored {
            revision: self.revision,
            chunks: self.chunks.clone(),
            chunks_from: None,
        }
    }
}

/// The state bucket, opened or created.
pub async fn bucket(
    js: &jetstream::Context,
    deploy: &super::deploy::Deploy,
) -> Result<kv::Store, NatsError> {
    super::kv_bucket(js, STATE_BUCKET, deploy).await
}

fn chunk_key(p: u32, generation: &str, i: u32) -> String {
    format!("{}.c.{generation}.{i}", super::lease::key(p))
}

/// The stored state of partition `p`.
pub async fn load(store: &kv::Store, p: u32) -> Result<Loaded, NatsError> {
    let entry = store
        .entry(super::lease::key(p))
        .await
        .map_err(|e| NatsError::new("reading a partition checkpoint", e))?;
    let Some(e) = entry else {
        return absent_head(p, last_in_history(store, p).await?);
    };
    if e.operation != kv::Operation::Put {
        return Ok(Loaded {
            revision: e.revision,
            ..Loaded::default()
        });
    }
    let head: Head = serde_json::from_slice(&e.value)
        .map_err(|err| NatsError::new("decoding a partition checkpoint", err))?;
    let (state, bytes, chunks) = match head {
        Head::Inline(s) => (*s, e.value, None),
        Head::Chunked { chunked } => {
            let bytes = read_chunks(store, p, &chunked).await?;
            let state = serde_json::from_slice(&bytes)
                .map_err(|e| NatsError::new("decoding a partition checkpoint", e))?;
            (state, bytes, Some(chunked))
        }
    };
    Ok(Loaded {
        state: Some(state),
        revision: e.revision,
        bytes: Some(bytes),
        chunks,
    })
}

/// The revision of the last entry the bucket's stream holds for partition `p`'s head, read
/// through a consumer (which scans the stream, not the server's per-key index). A consumer
/// says at once how many messages it has waiting: none for a partition never checkpointed, so
/// that case costs one request, not a fetch's expiry.
async fn last_in_history(store: &kv::Store, p: u32) -> Result<Option<u64>, NatsError> {
    use async_nats::jetstream::consumer::{DeliverPolicy, pull};
    let config = pull::Config {
        filter_subject: format!("{}{}", store.prefix, super::lease::key(p)),
        deliver_policy: DeliverPolicy::LastPerSubject,
        ..Default::default()
    };
    let mut last = None;
    let what = "reading a partition checkpoint's history";
    super::read_pending(&store.stream, config, what, |m| {
        if let Ok(info) = m.info() {
            last = Some(info.stream_sequence);
        }
        true
    })
    .await?;
    Ok(last)
}

/// What a head the server does not find means, given the last revision its history holds for
/// the key: nothing (a partition never checkpointed), or a checkpoint the server has and
/// cannot read by key. nats-server 2.9.10 loses a key's index in a crash (SIGKILL, power
/// loss; nats-io/nats-server#4643): the history still holds the head, a read by key finds
/// nothing and every compare-and-set on it fails. Starting the partition over from nothing
/// would overwrite its checkpoint with an empty one and lose every finding since the stream's
/// start (`tests/nats/faults.rs` saw it), so the take fails, saying why.
fn absent_head(p: u32, in_history: Option<u64>) -> Result<Loaded, NatsError> {
    match in_history {
        None => Ok(Loaded::default()),
        Some(revision) => Err(NatsError::new(
            "reading a partition checkpoint",
            format!(
                "partition {p}'s checkpoint is in the bucket's history (revision {revision}) but \
                 the server cannot read it by its key: nats-server 2.9 loses a key's index in a \
                 crash; restart it with 2.10 or later, which reads the same store. The \
                 partition is not started over from nothing"
            ),
        )),
    }
}

/// The state's bytes that `r` names, checked against it.
async fn read_chunks(store: &kv::Store, p: u32, r: &ChunkRef) -> Result<Bytes, NatsError> {
    let mut bytes = Vec::with_capacity(usize::try_from(r.bytes).unwrap_or(0).min(1 << 30));
    for i in 0..r.parts {
        let part = store
            .get(chunk_key(p, &r.generation, i))
            .await
            .map_err(|e| NatsError::new("reading a checkpoint chunk", e))?
            .ok_or_else(|| {
                NatsError::new(
                    "reading a checkpoint chunk",
                    format!(
                        "chunk {i} of {} (generation {}) is missing",
                        r.parts, r.generation
                    ),
                )
            })?;
        bytes.extend_from_slice(&part);
    }
    if bytes.len() as u64 != r.bytes || retryscope_core::fasthash::fnv1a(&bytes) != r.fnv {
        return Err(NatsError::new(
            "reading a chunked checkpoint",
            "its chunks do not match the head (length or hash)",
        ));
    }
    Ok(Bytes::from(bytes))
}

/// Store the state again as it is (or an empty one), so the head's revision moves on: a
/// deposed owner's next [`save`], at the revision it held, fails. The new [`Stored`].
/// Stored as [`save`] stores a state, within the server's `max_payload`: a chunked state in
/// chunks of a new generation, after which everything under `p<N>.c.` stored before them is
/// named by no head and is swept.
pub async fn fence(
    store: &kv::Store,
    p: u32,
    loaded: &Loaded,
    empty: &PartitionState,
    max_payload: usize,
) -> Result<Stored, NatsError> {
    let bytes = match &loaded.bytes {
        Some(bytes) => bytes.clone(),
        None => encode(empty)?,
    };
    let stored = store_bytes(store, p, bytes, &loaded.stored(), max_payload).await?;
    sweep(store, p, stored.named_from()).await;
    Ok(stored)
}

async fn put_head(
    store: &kv::Store,
    p: u32,
    value: Bytes,
    revision: u64,
) -> Result<u64, NatsError> {
    let key = super::lease::key(p);
    if revision == 0 {
        store
            .create(key, value)
            .await
            .map_err(|e| NatsError::new("writing a partition checkpoint", e))
    } else {
        store
            .update(key, value, revision)
            .await
            .map_err(|e| NatsError::new("writing a partition checkpoint", e))
    }
}

/// Store `state` if the head is still at `prev.revision`, in one message if it fits within
/// a server whose largest message is `max_payload` (`chunk_limit`), else in chunks that
/// do; what is stored now.
pub async fn save(
    store: &kv::Store,
    p: u32,
    state: &PartitionState,
    prev: &Stored,
    max_payload: usize,
    permits: &tokio::sync::Semaphore,
) -> Result<Stored, NatsError> {
    let bytes = super::cpu(permits, || encode(state)).await?;
    store_bytes(store, p, bytes, prev, max_payload).await
}

fn encode(state: &PartitionState) -> Result<Bytes, NatsError> {
    let bytes =
        serde_json::to_vec(state).map_err(|e| NatsError::new("encoding a checkpoint", e))?;
    Ok(Bytes::from(bytes))
}

/// [`save`] of a state's bytes.
async fn store_bytes(
    store: &kv::Store,
    p: u32,
    bytes: Bytes,
    prev: &Stored,
    max_payload: usize,
) -> Result<Stored, NatsError> {
    let limit = chunk_limit(max_payload);
    if bytes.len() <= limit {
        let revision = put_head(store, p, bytes, prev.revision).await?;
        remove_chunks(store, p, prev.chunks.as_ref()).await;
        return Ok(Stored {
            revision,
            ..Stored::default()
        });
    }
    let r = ChunkRef {
        generation: format!("{:016x}", rand_u64()),
        parts: u32::try_from(bytes.len().div_ceil(limit))
            .map_err(|e| NatsError::new("encoding a checkpoint", e))?,
        bytes: bytes.len() as u64,
        fnv: retryscope_core::fasthash::fnv1a(&bytes),
    };
    // All chunks in flight at once: one round trip, not one per chunk.
    let puts = (0..r.parts).map(|i| {
        let from = i as usize * limit;
        let part = bytes.slice(from..(from + limit).min(bytes.len()));
        store.put(chunk_key(p, &r.generation, i), part)
    });
    let chunks_from = match futures_util::future::try_join_all(puts).await {
        Ok(revisions) => revisions.into_iter().min(),
        Err(e) => {
            remove_chunks(store, p, Some(&r)).await;
            return Err(NatsError::new("writing a checkpoint chunk", e));
        }
    };
    let head = serde_json::to_vec(&Head::Chunked { chunked: r.clone() })
        .map_err(|e| NatsError::new("encoding a checkpoint", e))?;
    match put_head(store, p, Bytes::from(head), prev.revision).await {
        Ok(revision) => {
            remove_chunks(store, p, prev.chunks.as_ref()).await;
            Ok(Stored {
                revision,
                chunks: Some(r),
                chunks_from,
            })
        }
        Err(e) => {
            remove_chunks(store, p, Some(&r)).await;
            Err(e)
        }
    }
}

/// Remove a generation's chunks (best effort: a leftover costs space, not correctness, and
/// the next take sweeps it, [`sweep`]). One purge of the bucket's stream by subject, which
/// leaves nothing behind: a key-value purge per chunk would leave a marker per chunk, and
/// every checkpoint's generation has new keys, so markers would pile up for good.
async fn remove_chunks(store: &kv::Store, p: u32, r: Option<&ChunkRef>) {
    let Some(r) = r else { return };
    let filter = format!(
        "{}{}.c.{}.>",
        store.prefix,
        super::lease::key(p),
        r.generation
    );
    if let Err(e) = store.stream.purge().filter(filter).await {
        tracing::debug!(partition = p, error = %e, "removing an old checkpoint's chunks");
    }
}

/// Remove partition `p`'s chunks stored before stream sequence `before` (the lowest of
/// those a take just stored; with none, its head's): chunks no head names, left by a writer
/// killed or cut off between its chunks and its head (best effort). One purge by subject
/// and sequence, however many there are (versions that removed chunks key by key left a
/// marker for each); chunks stored after `before`, by an owner that took the partition
/// since, are never touched.
async fn sweep(store: &kv::Store, p: u32, before: u64) {
    let filter = format!("{}{}.c.>", store.prefix, super::lease::key(p));
    match store.stream.purge().filter(filter).sequence(before).await {
        Ok(r) if r.purged > 0 => tracing::info!(
            partition = p,
            messages = r.purged,
            "removed checkpoint chunks no head names (a writer cut off mid-checkpoint)"
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!(partition = p, error = %e, "sweeping old checkpoint chunks"),
    }
}

/// A random generation name (std's per-process random hash keys, the time and the pid).
fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i64(super::wall_ms());
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_the_server_cannot_read_but_its_history_holds_is_never_taken_for_none() {
        // Never checkpointed: an empty state from the stream's start.
        let fresh = absent_head(3, None).expect("a fresh partition");
        assert!(fresh.state.is_none() && fresh.revision == 0);
        // nats-server 2.9's lost index after a crash: refused, with the reason.
        let Err(e) = absent_head(3, Some(41)) else {
            panic!("a head the history holds was taken for none");
        };
        let text = e.to_string();
        assert!(
            text.contains("partition 3") && text.contains("revision 41"),
            "{text}"
        );
        assert!(text.contains("2.10 or later"), "{text}");
    }
}
