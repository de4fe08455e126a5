//! Findings as JSON lines, for log-based alerting: to stdout or to a file.
//!
//! With a file, the sink knows how many bytes the file durably holds; the collector stores that
//! offset in its checkpoint and, on restart, cuts the file back to it before replaying, so a
//! finding is written exactly once even after a crash.
//!
//! A write that fails (a full disk, an I/O error) loses nothing: the unwritten bytes stay
//! queued in memory, in order, and are retried on every later write and flush. The offset only
//! counts bytes the kernel accepted, and [`FindingsSink::checkpoint_offset`] refuses to give an
//! offset while anything is still queued, so a checkpoint can never point past a gap.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::sink::live_view::LiveView;
use retryscope_core::correlate::Output;
use retryscope_core::finding::Finding;

/// Where findings go.
#[derive(Debug)]
pub enum FindingsSink {
    /// Nowhere.
    Off,
    /// Standard output.
    Stdout(BufWriter<io::Stdout>),
    /// Standard output, for a person: sentences and summaries ([`LiveView`]).
    Human(Box<LiveView>),
    /// A file, appended to.
    File {
        /// The path.
        path: PathBuf,
        /// The file, opened for appending.
        file: File,
        /// Bytes not yet accepted by the kernel, oldest first.
        queued: Vec<u8>,
        /// Bytes in the file: everything the kernel accepted so far.
        offset: u64,
    },
}

/// Why no checkpoint offset can be given now.
#[derive(Debug, thiserror::Error)]
pub enum FindingsError {
    /// Findings are still queued (the last write failed): checkpointing now would record an
    /// offset past findings that are not in the file.
    #[error("{queued} bytes of findings not yet written: {source}")]
    Queued {
        /// Bytes still queued.
        queued: usize,
        /// The write error.
        source: io::Error,
    },
    /// The file could not be synced.
    #[error("cannot sync the findings file: {0}")]
    Sync(io::Error),
}

impl FindingsSink {
    /// `""` disables, `-` is stdout, anything else a file. With `resume_at`, the file is cut
    /// back to that offset first (the checkpointed position).
    pub fn open(target: &str, resume_at: Option<u64>) -> io::Result<Self> {
        match target {
            "" => Ok(FindingsSink::Off),
            "-" => Ok(FindingsSink::Stdout(BufWriter::new(io::stdout()))),
            path => {
                let path = Path::new(path).to_path_buf();
                let file = OpenOptions::new().create(true).append(true).open(&path)?;
                let len = file.metadata()?.len();
                let offset = match resume_at {
                    Some(at) if at <= len => {
                        file.set_len(at)?;
                        at
                    }
                    Some(at) => {
                        tracing::warn!(
                            path = %path.display(), checkpoint_offset = at, len,
                            "findings file is shorter than the checkpoint says (rotated or cut by hand?); appending after its end"
                        );
                        len
                    }
                    None => len,
                };
                Ok(FindingsSink::File {
                    path,
                    file,
                    queued: Vec::new(),
                    offset,
                })
            }
        }
    }

    /// Write one finding as a JSON line, handed to the kernel at once: a finding is visible (on
    /// stdout, in the file) as soon as it is known. An error means it is queued, not lost.
    pub fn write(&mut self, finding: &Finding) -> io::Result<()> {
        if let FindingsSink::Human(view) = self {
            return view.finding(finding);
        }
        let mut line = retryscope_core::sanitize::to_json_vec(finding).map_err(io::Error::other)?;
        line.push(b'\n');
        match self {
            FindingsSink::Off | FindingsSink::Human(_) => Ok(()),
            FindingsSink::Stdout(w) => {
                w.write_all(&line)?;
                w.flush()
            }
            FindingsSink::File { queued, .. } => {
                queued.extend_from_slice(&line);
                self.drain()
            }
        }
    }

    /// Hand queued bytes to the kernel; on error the rest stays queued.
    fn drain(&mut self) -> io::Result<()> {
        let FindingsSink::File {
            file,
            queued,
            offset,
            ..
        } = self
        else {
            return Ok(());
        };
        let mut done = 0;
        let result = loop {
            if done == queued.len() {
                break Ok(());
            }
            match file.write(&queued[done..]) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    done += n;
                    *offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        queued.drain(..done);
        result
    }

    /// Bytes of findings not yet in the file.
    pub fn queued_bytes(&self) -> usize {
        match self {
            FindingsSink::File { queued, .. } => queued.len(),
            _ => 0,
        }
    }

    /// Flush queued lines.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            FindingsSink::Off | FindingsSink::Human(_) => Ok(()),
            FindingsSink::Stdout(w) => w.flush(),
            FindingsSink::File { .. } => self.drain(),
        }
    }

    /// The file offset to checkpoint, for file sinks: everything queued is written and synced
    /// first, or there is no offset.
    pub fn checkpoint_offset(&mut self) -> Result<Option<u64>, FindingsError> {
        if let Err(source) = self.flush() {
            return Err(FindingsError::Queued {
                queued: self.queued_bytes(),
                source,
            });
        }
        match self {
            FindingsSink::File { file, offset, .. } => {
                file.sync_data().map_err(FindingsError::Sync)?;
                Ok(Some(*offset))
            }
            _ => Ok(None),
        }
    }

    /// The live view, when findings go to a person.
    pub fn view(&mut self) -> Option<&mut LiveView> {
        match self {
            FindingsSink::Human(v) => Some(v),
            _ => None,
        }
    }

    /// Every output, for the live view's counts.
    pub fn observe(&mut self, o: &Output) {
        if let Some(v) = self.view() {
            v.observe(o);
        }
    }

    /// The file path, for file sinks.
    pub fn path(&self) -> Option<&Path> {
        match self {
            FindingsSink::File { path, .. } => Some(path),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;
