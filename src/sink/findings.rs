//! Findings as JSON lines, for log-based alerting: to stdout or to a file.
//!
//! With a file, the sink knows its byte offset; the collector stores it in its checkpoint and,
//! on restart, cuts the file back to it before replaying, so a finding is written exactly once
//! even after a crash.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::finding::Finding;

/// Where findings go.
#[derive(Debug)]
pub enum FindingsSink {
    /// Nowhere.
    Off,
    /// Standard output.
    Stdout(BufWriter<io::Stdout>),
    /// A file, appended to.
    File {
        /// The path.
        path: PathBuf,
        /// The writer.
        writer: BufWriter<File>,
        /// Bytes in the file after everything written so far.
        offset: u64,
    },
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
                    _ => len,
                };
                Ok(FindingsSink::File {
                    path,
                    writer: BufWriter::new(file),
                    offset,
                })
            }
        }
    }

    /// Write one finding as a JSON line, flushed at once: a finding is visible (on stdout, in
    /// the file) as soon as it is known, with or without a data dir.
    pub fn write(&mut self, finding: &Finding) -> io::Result<()> {
        let mut line = serde_json::to_vec(finding).map_err(io::Error::other)?;
        line.push(b'\n');
        match self {
            FindingsSink::Off => Ok(()),
            FindingsSink::Stdout(w) => {
                w.write_all(&line)?;
                w.flush()
            }
            FindingsSink::File { writer, offset, .. } => {
                writer.write_all(&line)?;
                *offset += line.len() as u64;
                writer.flush()
            }
        }
    }

    /// Flush buffered lines.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            FindingsSink::Off => Ok(()),
            FindingsSink::Stdout(w) => w.flush(),
            FindingsSink::File { writer, .. } => writer.flush(),
        }
    }

    /// The file offset to checkpoint (flushed first), for file sinks.
    pub fn checkpoint_offset(&mut self) -> io::Result<Option<u64>> {
        self.flush()?;
        match self {
            FindingsSink::File { writer, offset, .. } => {
                writer.get_ref().sync_data()?;
                Ok(Some(*offset))
            }
            _ => Ok(None),
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
mod tests {
    use super::*;
    use crate::finding::FindingKind;

    #[test]
    fn a_written_finding_is_in_the_file_before_any_flush() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("findings.jsonl");
        let mut sink = FindingsSink::open(path.to_str().unwrap(), None).unwrap();
        let f = Finding::new(FindingKind::DuplicateEffect, "t", Some(1), "x".into());
        sink.write(&f).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1, "{text:?}");
    }

    #[test]
    fn file_sink_tracks_offset_and_resumes_by_truncating() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("findings.jsonl");
        let target = path.to_str().unwrap();
        let f = Finding::new(FindingKind::DuplicateEffect, "t", Some(1), "x".into());
        let mut sink = FindingsSink::open(target, None).unwrap();
        sink.write(&f).unwrap();
        let at = sink.checkpoint_offset().unwrap().unwrap();
        sink.write(&f).unwrap();
        sink.flush().unwrap();
        drop(sink);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
        // Restart from the checkpoint: the line written after it is cut, then written again.
        let mut sink = FindingsSink::open(target, Some(at)).unwrap();
        sink.write(&f).unwrap();
        sink.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        let parsed: Finding = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(parsed, f);
    }
}
