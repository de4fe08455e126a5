//! The collector's checkpoint: one versioned JSON file, written atomically, holding file
//! offsets, open-turn state, input counters, metric values and the findings file offset, all
//! taken at the same instant between two polls.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::correlate::CorrelatorSnapshot;
use crate::pipeline::InputCounters;
use crate::sink::metrics::MetricsSnapshot;
use crate::source::checkpoint_io::{self, ReadCheckpointError};
use crate::source::file::FileCheckpoint;

/// Name of the checkpoint file inside the data directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";

/// The format version this build writes. Version 1 (whose metrics snapshot carried unused
/// input baselines) is still read.
pub const VERSION: u32 = 2;
/// The oldest version this build reads.
pub const OLDEST_VERSION: u32 = 1;

/// Everything needed to resume without losing or double-counting anything.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version.
    pub version: u32,
    /// Identity and offset of every file read.
    pub files: Vec<FileCheckpoint>,
    /// Open turns.
    pub correlator: CorrelatorSnapshot,
    /// Input counters.
    pub counters: InputCounters,
    /// The pipeline's logical clock.
    pub clock_ms: i64,
    /// Metric values.
    pub metrics: MetricsSnapshot,
    /// Byte offset of the findings file.
    pub findings_offset: Option<u64>,
}

/// A checkpoint that exists but cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The file could not be read (permissions, I/O).
    #[error("cannot read checkpoint {path}: {source}")]
    Unreadable {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

impl Checkpoint {
    /// Open turns held.
    pub fn open_turns(&self) -> usize {
        self.correlator.open_turns()
    }

    /// Load the checkpoint. Missing, empty, corrupt or other-version checkpoints are logged
    /// clearly and mean "start fresh"; an unreadable one is an error (starting over could
    /// double-count everything).
    pub fn load(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
        let bytes = match checkpoint_io::read_checkpoint(path) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                tracing::info!(path = %path.display(), "no checkpoint; starting fresh");
                return Ok(None);
            }
            Err(ReadCheckpointError::Empty { .. }) => {
                tracing::warn!(path = %path.display(), "checkpoint is empty; starting fresh");
                return Ok(None);
            }
            Err(ReadCheckpointError::Unreadable { source, .. }) => {
                return Err(CheckpointError::Unreadable {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        match serde_json::from_slice::<Checkpoint>(&bytes) {
            Ok(cp) if (OLDEST_VERSION..=VERSION).contains(&cp.version) => Ok(Some(cp)),
            Ok(cp) => {
                tracing::warn!(path = %path.display(), version = cp.version, "checkpoint has another version; starting fresh");
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "checkpoint is corrupt; starting fresh");
                Ok(None)
            }
        }
    }

    /// Write atomically (temp file, fsync, rename, directory fsync).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let bytes = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        checkpoint_io::write_atomic(path, &bytes)
    }
}
