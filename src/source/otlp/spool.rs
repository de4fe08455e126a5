//! The OTLP receiver's write-ahead spool (with `--data-dir`): what was acknowledged survives
//! a kill -9.
//!
//! Owns: segment files `otlp-spool/<16-digit number>.log` in the data directory, one line per
//! record (`<stream>\t<json line>\n`), written and fsync'd before the receiver answers; the
//! replay at start-up of everything after the checkpoint's [`SpoolPos`]; and deleting the
//! segments a checkpoint has passed. A new process never appends to an old segment (its last
//! line may be torn by the crash; a torn line was never acknowledged, and is skipped).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::record::Record;

/// A segment rotates once it is this large.
const SEGMENT_BYTES: u64 = 16 << 20;

/// A position in the spool: segment number and byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SpoolPos {
    /// Segment number.
    pub segment: u64,
    /// Bytes of the segment covered.
    pub offset: u64,
}

/// The writer.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    segment: u64,
    file: File,
    len: u64,
    buf: Vec<u8>,
    /// Bytes of every segment on disk (written, not yet released by a checkpoint).
    on_disk: u64,
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:016}.log"))
}

/// Segment numbers present, ascending.
fn segments(dir: &Path) -> std::io::Result<Vec<u64>> {
    let mut v: Vec<u64> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    v.sort_unstable();
    Ok(v)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Records of the spool after `from` (everything when `None`), batch by segment, each with
/// the position after its last record.
pub type Replay = Vec<(Vec<Record>, SpoolPos)>;

impl Spool {
    /// Open the spool in `dir`: read back what comes after `from` (acknowledged, not yet
    /// covered by a checkpoint) and start a new segment after the last one.
    pub fn open(dir: &Path, from: Option<SpoolPos>) -> std::io::Result<(Spool, Replay)> {
        std::fs::create_dir_all(dir)?;
        let mut replay = Vec::new();
        let present = segments(dir)?;
        for &n in &present {
            let start = match from {
                Some(p) if n < p.segment => continue,
                Some(p) if n == p.segment => p.offset,
                _ => 0,
            };
            let mut f = File::open(segment_path(dir, n))?;
            f.seek(SeekFrom::Start(start))?;
            let mut r = BufReader::new(f);
            let mut offset = start;
            let mut records = Vec::new();
            let mut line = Vec::new();
            loop {
                line.clear();
                let got = r.read_until(b'\n', &mut line)?;
                if got == 0 || line.last() != Some(&b'\n') {
                    break; // end, or a torn last line (never acknowledged)
                }
                offset += got as u64;
                let body = &line[..line.len() - 1];
                if let Some(tab) = memchr::memchr(b'\t', body) {
                    records.push(Record {
                        stream: String::from_utf8_lossy(&body[..tab]).into_owned(),
                        line: body[tab + 1..].to_vec(),
                    });
                }
            }
            if !records.is_empty() {
                replay.push((records, SpoolPos { segment: n, offset }));
            }
        }
        let on_disk = present
            .iter()
            .filter_map(|&n| std::fs::metadata(segment_path(dir, n)).ok())
            .map(|m| m.len())
            .sum();
        let segment = present.last().map_or(1, |n| n + 1);
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(segment_path(dir, segment))?;
        sync_dir(dir)?;
        Ok((
            Spool {
                dir: dir.to_path_buf(),
                segment,
                file,
                len: 0,
                buf: Vec::new(),
                on_disk,
            },
            replay,
        ))
    }

    /// Bytes of the spool's segments on disk: acknowledged records a checkpoint has not
    /// released yet (the current segment included).
    pub fn bytes(&self) -> u64 {
        self.on_disk
    }

    /// Where the next record goes (everything before it is written).
    pub fn position(&self) -> SpoolPos {
        SpoolPos {
            segment: self.segment,
            offset: self.len,
        }
    }

    /// Append `records` and fsync; returns the position after them. On error the segment
    /// is cut back, so nothing half-written stays to be replayed.
    pub fn append(&mut self, records: &[Record]) -> std::io::Result<SpoolPos> {
        if self.len >= SEGMENT_BYTES {
            self.rotate()?;
        }
        self.buf.clear();
        for r in records {
            self.buf.extend_from_slice(r.stream.as_bytes());
            self.buf.push(b'\t');
            self.buf.extend_from_slice(&r.line);
            self.buf.push(b'\n');
        }
        let written = self
            .file
            .write_all(&self.buf)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        self.len += self.buf.len() as u64;
        self.on_disk += self.buf.len() as u64;
        if self.buf.capacity() > 4 << 20 {
            self.buf = Vec::new();
        }
        Ok(self.position())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let next = self.segment + 1;
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(segment_path(&self.dir, next))?;
        sync_dir(&self.dir)?;
        self.file = file;
        self.segment = next;
        self.len = 0;
        Ok(())
    }

    /// A checkpoint covers everything before `pos`: delete the segments before its segment
    /// (the current one is never deleted).
    pub fn release(&mut self, pos: SpoolPos) {
        let Ok(present) = segments(&self.dir) else {
            return;
        };
        for n in present {
            if n < pos.segment && n < self.segment {
                let path = segment_path(&self.dir, n);
                let len = std::fs::metadata(&path).map_or(0, |m| m.len());
                if std::fs::remove_file(&path).is_ok() {
                    self.on_disk = self.on_disk.saturating_sub(len);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "spool/tests.rs"]
mod tests;
