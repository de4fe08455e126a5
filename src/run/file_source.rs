//! The file tailer as a [`LiveSource`]: each file is a stream (`Source::File`, named by its
//! path), an unterminated last line ends its record, over-long lines are counted on their
//! stream, and the tailer's offsets are the checkpoint position (`files`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::engine::{Core, LiveSource, Polled};
use crate::internal_events::TailerReport;
use crate::sink::metrics::Metrics;
use crate::source::file::{FileCheckpoint, FileTailer};
use retryscope_core::ingest::{Source, StreamId};

/// Tailed files.
pub struct FileSource {
    tailer: FileTailer,
    metrics: Arc<Metrics>,
    /// The include patterns, for the warning when none matches.
    patterns: String,
    /// Whether "no file matches" was said (once per run).
    said_no_files: bool,
}

impl FileSource {
    /// Read what `tailer` finds, counting its events into `metrics`.
    pub fn new(tailer: FileTailer, metrics: Arc<Metrics>, include: &[String]) -> Self {
        FileSource {
            tailer,
            metrics,
            patterns: include.join(", "),
            said_no_files: false,
        }
    }

    /// The position a checkpoint restores (see [`LiveSource::position`]).
    pub fn restore(position: Option<serde_json::Value>) -> Result<Vec<FileCheckpoint>, String> {
        match position {
            None => Ok(Vec::new()),
            Some(v) => serde_json::from_value(v).map_err(|e| format!("sources.files: {e}")),
        }
    }
}

impl LiveSource for FileSource {
    fn name(&self) -> &'static str {
        "files"
    }

    fn kind(&self) -> Source {
        Source::File
    }

    fn poll(&mut self, core: &mut Core, now: i64) -> Polled {
        let metrics = &*self.metrics;
        let mut too_long = Vec::new();
        // One stream per path; the last path's handle is kept, since lines of one file come
        // in runs.
        let mut last: Option<(PathBuf, StreamId)> = None;
        // Lines read are counted once per poll (a lock of the metrics per line cost ~5% of
        // the engine thread).
        let mut read = 0u64;
        let stats = self.tailer.poll(
            &mut |line| {
                read += 1;
                let stream = match &last {
                    Some((path, id)) if path == line.path => *id,
                    _ => {
                        let id = core.stream(Source::File, &line.path.display().to_string());
                        last = Some((line.path.to_path_buf(), id));
                        id
                    }
                };
                core.line(stream, line.bytes, now);
                if line.unterminated {
                    // The writer stopped without a newline: whatever record the line belongs
                    // to ends with it, as at the end of a file `check` reads (an SSE event
                    // without its blank line is dispatched). Every format skips an empty line.
                    core.line(stream, b"", now);
                }
            },
            &mut TailerReport {
                metrics,
                too_long: &mut too_long,
            },
        );
        if read > 0 {
            metrics.add_events_read(Source::File, read);
        }
        for (path, len) in too_long {
            let stream = core.stream(Source::File, &path.display().to_string());
            core.too_long(stream, len);
        }
        if self.tailer.files_watched() == 0 && !self.said_no_files {
            self.said_no_files = true;
            tracing::warn!(
                patterns = %retryscope_core::sanitize::display(&self.patterns),
                "no file matches the include patterns yet; waiting for one to appear"
            );
        }
        metrics.set_files_watched(self.tailer.files_watched() as u64);
        metrics.set_source_lag_bytes(Source::File, self.tailer.lag_bytes());
        Polled {
            lines: stats.lines,
            busy: stats.throttled,
            ended: false,
        }
    }

    fn position(&mut self) -> Option<serde_json::Value> {
        serde_json::to_value(self.tailer.checkpoints()).ok()
    }
}
