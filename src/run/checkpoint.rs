//! The collector's checkpoint: one versioned JSON file, written atomically, holding every
//! source's position (`sources`: file offsets, the OTLP spool), open-turn state, input
//! counters, metric values, streams' decoder states and every sink's position (`sinks`: the
//! findings file's length), all taken at the same instant between two polls.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::sink::metrics::MetricsSnapshot;
use crate::source::checkpoint_io::{self, ReadCheckpointError};
use crate::source::file::FileCheckpoint;
use retryscope_core::correlate::CorrelatorSnapshot;
use retryscope_core::decode::gemini_join::JoinerSnapshot;
use retryscope_core::ingest::StreamState;
use retryscope_core::pipeline::InputCounters;

/// Name of the checkpoint file inside the data directory.
pub const CHECKPOINT_FILE: &str = "checkpoint.json";

/// The format version this build writes. Version 1 (whose metrics snapshot carried unused
/// input baselines), version 2 (no held gemini-cli events: read as none held), version 3
/// (no routes: every open turn and closed id read as native, placed by its id) and version 4
/// (positions in fields of their own: `files`, `otlp_spool`, `findings_offset`, read into
/// `sources` and `sinks`) are still read.
pub const VERSION: u32 = 5;
/// The first version whose open turns and closed ids keep the route of the stream that feeds
/// them (`engine/sharded.rs`), so that resuming with several workers puts each where its next
/// events go.
pub const ROUTES_SINCE: u32 = 4;
/// The oldest version this build reads.
pub const OLDEST_VERSION: u32 = 1;

/// Everything needed to resume without losing or double-counting anything.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Format version.
    pub version: u32,
    /// Each source's position, by its name (`files`: identity and offset of every file read;
    /// `otlp`: how far the receiver's spool has been read).
    #[serde(default)]
    pub sources: BTreeMap<String, serde_json::Value>,
    /// Each sink's position, by its name (`findings`: the findings file's durable length).
    #[serde(default)]
    pub sinks: BTreeMap<String, serde_json::Value>,
    /// Open turns.
    pub correlator: CorrelatorSnapshot,
    /// Input counters.
    pub counters: InputCounters,
    /// The pipeline's logical clock.
    pub clock_ms: i64,
    /// Metric values.
    pub metrics: MetricsSnapshot,
    /// gemini-cli events held to be joined with their session's other output: already read
    /// past (file offsets, OTLP spool), so they must be carried over (since version 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joined: Option<JoinerSnapshot>,
    /// Streams' decoder states (a provider stream's call in progress, an agent output's
    /// thread): a stream read on after a restart decodes as if it had never stopped. A build
    /// before them ignores the field and starts those decoders afresh, as it always did.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamState>,
    /// Before version 5: the positions, in fields of their own (moved into `sources` and
    /// `sinks` when read; never written).
    #[serde(flatten, skip_serializing)]
    legacy: Legacy,
}

/// Where versions before 5 kept the positions.
#[derive(Debug, Clone, Default, Deserialize)]
struct Legacy {
    files: Option<Vec<FileCheckpoint>>,
    findings_offset: Option<u64>,
    otlp_spool: Option<crate::source::otlp::SpoolPos>,
}

impl Legacy {
    /// Move what an old version held into `sources` and `sinks`, under the names the sources
    /// and sinks of this version use.
    fn upgrade(
        &mut self,
        cp: &mut BTreeMap<String, serde_json::Value>,
        sinks: &mut BTreeMap<String, serde_json::Value>,
    ) {
        let json = |v: Result<serde_json::Value, serde_json::Error>| v.ok();
        if let Some(files) = self
            .files
            .take()
            .and_then(|f| json(serde_json::to_value(f)))
        {
            cp.insert("files".to_owned(), files);
        }
        if let Some(pos) = self
            .otlp_spool
            .take()
            .and_then(|p| json(serde_json::to_value(p)))
        {
            cp.insert("otlp".to_owned(), pos);
        }
        if let Some(offset) = self.findings_offset.take() {
            sinks.insert("findings".to_owned(), offset.into());
        }
    }
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
    /// The file is there but holds no usable checkpoint (empty, truncated, corrupt, NUL-filled,
    /// wrong types or values, another version). Starting fresh would append every finding
    /// again, so the collector refuses to start unless told to reset (see [`set_aside`]).
    #[error(
        "checkpoint {path} is unusable ({why}); refusing to start, because starting fresh would \
         write every finding again. Restart with --reset-checkpoint to move it and the findings \
         file aside and start over"
    )]
    Unusable {
        /// The file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
}

/// Move an unusable checkpoint (and the findings file it vouched for, when there is one) aside
/// as `<name>.unusable-<unix seconds>`, so a fresh start neither trusts nor duplicates them.
/// Returns the new names.
pub fn set_aside(
    checkpoint: &Path,
    findings: Option<&Path>,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut moved = Vec::new();
    for path in std::iter::once(checkpoint).chain(findings) {
        if !path.exists() {
            continue;
        }
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".unusable-{stamp}"));
        let to = std::path::PathBuf::from(name);
        std::fs::rename(path, &to)?;
        moved.push(to);
    }
    Ok(moved)
}

/// Make sure `dir` can hold checkpoints: create it and write, sync and remove a probe file.
/// Run at start-up, so an unwritable data directory stops the collector at once instead of
/// failing every checkpoint later.
pub fn probe_data_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(".write-probe");
    checkpoint_io::write_atomic(&probe, b"probe")?;
    std::fs::remove_file(&probe)
}

impl Checkpoint {
    /// A checkpoint of this version.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        sources: BTreeMap<String, serde_json::Value>,
        sinks: BTreeMap<String, serde_json::Value>,
        correlator: CorrelatorSnapshot,
        counters: InputCounters,
        clock_ms: i64,
        metrics: MetricsSnapshot,
        joined: Option<JoinerSnapshot>,
        streams: Vec<StreamState>,
    ) -> Self {
        Checkpoint {
            version: VERSION,
            sources,
            sinks,
            correlator,
            counters,
            clock_ms,
            metrics,
            joined,
            streams,
            legacy: Legacy::default(),
        }
    }

    /// The OTLP spool position it holds, if any.
    pub fn otlp_spool(&self) -> Option<crate::source::otlp::SpoolPos> {
        self.sources
            .get("otlp")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
    }

    /// Open turns held.
    pub fn open_turns(&self) -> usize {
        self.correlator.open_turns()
    }

    /// Load the checkpoint: `None` when there is none (first run). A checkpoint that exists
    /// but cannot be used is an error, never "start fresh" (see `CheckpointError::Unusable`).
    pub fn load(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
        let unusable = |why: String| CheckpointError::Unusable {
            path: path.display().to_string(),
            why,
        };
        let bytes = match checkpoint_io::read_checkpoint(path) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                tracing::info!(path = %path.display(), "no checkpoint; starting fresh");
                return Ok(None);
            }
            Err(ReadCheckpointError::Empty { .. }) => return Err(unusable("empty".to_owned())),
            Err(ReadCheckpointError::Unreadable { source, .. }) => {
                return Err(CheckpointError::Unreadable {
                    path: path.display().to_string(),
                    source,
                });
            }
        };
        if bytes.iter().all(|b| *b == 0) {
            return Err(unusable(format!("{} NUL bytes", bytes.len())));
        }
        match serde_json::from_slice::<Checkpoint>(&bytes) {
            Ok(mut cp) if (OLDEST_VERSION..=VERSION).contains(&cp.version) => {
                let mut legacy = std::mem::take(&mut cp.legacy);
                legacy.upgrade(&mut cp.sources, &mut cp.sinks);
                Ok(Some(cp))
            }
            Ok(cp) => Err(unusable(format!(
                "version {}, this build reads versions {OLDEST_VERSION} to {VERSION}",
                cp.version
            ))),
            // The error names a line, a column and a category; never the checkpoint's text.
            Err(e) => Err(unusable(format!(
                "{:?} error at line {} column {}",
                e.classify(),
                e.line(),
                e.column()
            ))),
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

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
