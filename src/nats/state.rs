//! A partition's checkpoint in a key-value bucket: its correlator state, input counters and
//! logical clock, with the stream sequence they cover. Written by compare-and-set on the key's
//! revision, so a collector that lost the partition cannot overwrite its new owner's state.

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::NatsError;
use crate::correlate::CorrelatorSnapshot;
use crate::pipeline::InputCounters;
use crate::sink::metrics::MetricsSnapshot;

/// The bucket of partition checkpoints.
pub const STATE_BUCKET: &str = "retryscope_state";

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
}

/// The state bucket, opened or created.
pub async fn bucket(js: &jetstream::Context) -> Result<kv::Store, NatsError> {
    super::kv_bucket(js, STATE_BUCKET).await
}

/// The stored state of partition `p` and the revision to update it at (0: none yet).
pub async fn load(store: &kv::Store, p: u32) -> Result<(Option<PartitionState>, u64), NatsError> {
    let entry = store
        .entry(super::lease::key(p))
        .await
        .map_err(|e| NatsError::new("reading a partition checkpoint", e))?;
    match entry {
        Some(e) if e.operation == kv::Operation::Put => {
            match serde_json::from_slice::<PartitionState>(&e.value) {
                Ok(s) => Ok((Some(s), e.revision)),
                Err(err) => Err(NatsError::new("decoding a partition checkpoint", err)),
            }
        }
        Some(e) => Ok((None, e.revision)),
        None => Ok((None, 0)),
    }
}

/// Store `state` if the key is still at `revision`; the new revision.
pub async fn save(
    store: &kv::Store,
    p: u32,
    state: &PartitionState,
    revision: u64,
) -> Result<u64, NatsError> {
    let bytes = Bytes::from(
        serde_json::to_vec(state).map_err(|e| NatsError::new("encoding a checkpoint", e))?,
    );
    let key = super::lease::key(p);
    if revision == 0 {
        store
            .create(key, bytes)
            .await
            .map_err(|e| NatsError::new("writing a partition checkpoint", e))
    } else {
        store
            .update(key, bytes, revision)
            .await
            .map_err(|e| NatsError::new("writing a partition checkpoint", e))
    }
}
