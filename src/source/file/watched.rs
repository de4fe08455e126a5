//! One watched file: its open handle, identity, fingerprint and the line assembler.
//!
//! Invariants: `offset` is the position just after the last newline consumed (a delivered line
//! or a skipped over-long one); `pending` holds exactly the bytes `[offset, read_pos)` unless
//! an over-long line is being skipped, in which case `pending` is empty and the bytes
//! `[offset, read_pos)` are that line's head. So `pending` never exceeds `max_line_bytes + 1`.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::PathBuf;
use std::time::Instant;

use super::{FileCheckpoint, Line, PollStats, TailerEvents};

/// (device, inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    pub(crate) fn of(meta: &std::fs::Metadata) -> Self {
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

pub(crate) use retryscope_core::fasthash::fnv1a;

/// Read up to `len` bytes from the start of `file` (fewer at EOF).
pub(crate) fn read_prefix(file: &File, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// Whether the file still matches a (fingerprint, length) pair.
pub(crate) fn fingerprint_matches(file: &File, fingerprint: u64, len: u32) -> io::Result<bool> {
    let prefix = read_prefix(file, len as usize)?;
    Ok(prefix.len() == len as usize && fnv1a(&prefix) == fingerprint)
}

/// Whether the tailer still finds the file under an included name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Matched by the include globs at the last scan.
    Active,
    /// Rotated away, moved out of the globs or deleted: drained, then released.
    Detached,
}

pub(crate) struct Watched {
    pub path: PathBuf,
    pub file: File,
    pub id: FileId,
    pub fingerprint: u64,
    pub fingerprint_len: u32,
    pub offset: u64,
    pub read_pos: u64,
    pub size: u64,
    pending: Vec<u8>,
    /// `Some(bytes skipped so far)` while skipping an over-long line.
    skipping: Option<u64>,
    pub state: State,
    /// Last time the file grew (or was detached): the clock for releasing detached files.
    pub last_change: Instant,
    /// Size and modification time at the last poll that found nothing left to read: while
    /// both stay the same, nothing was written, and the poll reads nothing (no prefix check).
    idle_at: Option<(u64, std::time::SystemTime)>,
}

impl Watched {
    /// Start watching `file` at `offset` (which must be a line start).
    pub(crate) fn new(path: PathBuf, file: File, id: FileId, offset: u64, state: State) -> Self {
        Watched {
            path,
            file,
            id,
            fingerprint: fnv1a(&[]),
            fingerprint_len: 0,
            offset,
            read_pos: offset,
            size: 0,
            pending: Vec::new(),
            skipping: None,
            state,
            last_change: Instant::now(),
            idle_at: None,
        }
    }

    /// Whether the handle can be closed without losing anything: matched, read to its end with
    /// no partial line held, and unchanged for `idle`. Its checkpoint is then all there is.
    pub(crate) fn parkable(&self, idle: std::time::Duration) -> bool {
        self.state == State::Active
            && self.at_eof()
            && self.pending.is_empty()
            && self.skipping.is_none()
            && self.offset == self.read_pos
            && self.last_change.elapsed() >= idle
    }

    /// Treat the bytes from `offset` on as the tail of an over-long line (used when reading
    /// from the end lands inside a line longer than the maximum).
    pub(crate) fn skip_current_line(&mut self) {
        self.skipping = Some(0);
    }

    pub(crate) fn checkpoint(&self) -> FileCheckpoint {
        FileCheckpoint {
            path: self.path.clone(),
            dev: self.id.dev,
            ino: self.id.ino,
            fingerprint: self.fingerprint,
            fingerprint_len: self.fingerprint_len,
            offset: self.offset,
        }
    }

    fn restart_at_zero(&mut self) {
        self.offset = 0;
        self.read_pos = 0;
        self.pending.clear();
        self.skipping = None;
        self.fingerprint = fnv1a(&[]);
        self.fingerprint_len = 0;
    }

    /// Check the file's prefix against the fingerprint, extending it while the file is shorter
    /// than `want`. Returns false if the prefix changed (the content was replaced).
    fn refresh_fingerprint(&mut self, size: u64, want: usize) -> io::Result<bool> {
        let len = (size.min(want as u64)) as usize;
        if len < self.fingerprint_len as usize {
            return Ok(false);
        }
        let prefix = read_prefix(&self.file, len)?;
        let old = self.fingerprint_len as usize;
        if prefix.len() < old || fnv1a(&prefix[..old]) != self.fingerprint {
            return Ok(false);
        }
        self.fingerprint = fnv1a(&prefix);
        self.fingerprint_len = u32::try_from(prefix.len()).unwrap_or(u32::MAX);
        Ok(true)
    }

    /// Detect truncation, then read up to `budget` bytes and hand out complete lines.
    /// Returns true if the budget ran out before the end of the file.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn read(
        &mut self,
        chunk: &mut [u8],
        budget: usize,
        max_line_bytes: usize,
        fingerprint_bytes: usize,
        on_line: &mut dyn FnMut(Line<'_>),
        events: &mut dyn TailerEvents,
        stats: &mut PollStats,
    ) -> bool {
        let (size, mtime) = match self.file.metadata() {
            Ok(m) => (m.len(), m.modified().ok()),
            Err(e) => {
                events.read_error(&self.path, &e);
                return false;
            }
        };
        let stamp = mtime.map(|t| (size, t));
        if stamp.is_some() && stamp == self.idle_at && self.read_pos >= size {
            // Unchanged since a poll that read it all: one fstat, no reads.
            return false;
        }
        self.idle_at = None;
        let prefix_ok = if size < self.read_pos {
            false
        } else {
            match self.refresh_fingerprint(size, fingerprint_bytes) {
                Ok(ok) => ok,
                Err(e) => {
                    events.read_error(&self.path, &e);
                    return false;
                }
            }
        };
        if !prefix_ok {
            events.file_truncated(&self.path, self.offset, size);
            self.restart_at_zero();
            if let Err(e) = self.refresh_fingerprint(size, fingerprint_bytes) {
                events.read_error(&self.path, &e);
                return false;
            }
        }
        if size != self.size {
            self.last_change = Instant::now();
        }
        self.size = size;

        let mut budget = budget.max(1);
        while self.read_pos < size {
            if budget == 0 {
                return true;
            }
            let want = chunk.len().min(budget).min((size - self.read_pos) as usize);
            let n = match self.file.read_at(&mut chunk[..want], self.read_pos) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    events.read_error(&self.path, &e);
                    break;
                }
            };
            budget -= n;
            stats.bytes += n as u64;
            self.consume(&chunk[..n], max_line_bytes, on_line, events, stats);
            self.read_pos += n as u64;
        }
        if self.read_pos >= size {
            self.idle_at = stamp;
        }
        false
    }

    /// Feed bytes that start at `read_pos`.
    fn consume(
        &mut self,
        mut rest: &[u8],
        max_line_bytes: usize,
        on_line: &mut dyn FnMut(Line<'_>),
        events: &mut dyn TailerEvents,
        stats: &mut PollStats,
    ) {
        let mut pos = self.read_pos;
        while !rest.is_empty() {
            let Some(i) = memchr::memchr(b'\n', rest) else {
                if let Some(skipped) = &mut self.skipping {
                    *skipped += rest.len() as u64;
                } else if self.pending.len() + rest.len() > max_line_bytes + 1 {
                    // +1: room for a '\r' that a '\n' may still follow.
                    self.skipping = Some((self.pending.len() + rest.len()) as u64);
                    self.pending = Vec::new();
                } else {
                    self.pending.extend_from_slice(rest);
                }
                return;
            };
            let end_offset = pos + i as u64 + 1;
            let head = &rest[..i];
            if let Some(skipped) = self.skipping.take() {
                events.line_too_long(&self.path, skipped + i as u64);
            } else {
                let cr = match head.last() {
                    Some(&b) => b == b'\r',
                    None => self.pending.last() == Some(&b'\r'),
                };
                let len = self.pending.len() + head.len() - usize::from(cr);
                // Checked before joining, so `pending` never exceeds `max_line_bytes + 1`.
                if len > max_line_bytes {
                    events.line_too_long(&self.path, len as u64);
                } else {
                    let line: &[u8] = if self.pending.is_empty() {
                        head
                    } else {
                        self.pending.extend_from_slice(head);
                        &self.pending
                    };
                    stats.lines += 1;
                    on_line(Line {
                        path: &self.path,
                        bytes: &line[..len],
                        end_offset,
                        unterminated: false,
                    });
                }
                self.pending.clear();
                if self.pending.capacity() > max_line_bytes.min(64 * 1024) * 2 {
                    self.pending.shrink_to(64 * 1024);
                }
            }
            self.offset = end_offset;
            rest = &rest[i + 1..];
            pos = end_offset;
        }
    }

    /// Deliver the unterminated last line once the file has been quiet for `quiet` with it
    /// read to its end (a writer that ends without a newline, or stopped mid-line). The bytes
    /// are consumed: `offset` moves past them, so a checkpoint never delivers them twice, and
    /// whatever completes the line later (the rest of it, or just its newline) is the next
    /// line. An over-long line being skipped is not delivered. Returns whether one was.
    pub(crate) fn flush_partial(
        &mut self,
        quiet: std::time::Duration,
        max_line_bytes: usize,
        on_line: &mut dyn FnMut(Line<'_>),
        stats: &mut PollStats,
    ) -> bool {
        if self.pending.is_empty()
            || self.skipping.is_some()
            || !self.at_eof()
            || self.last_change.elapsed() < quiet
        {
            return false;
        }
        // Written since the last read (not seen yet): read it first.
        if self
            .file
            .metadata()
            .map_or(true, |m| m.len() != self.read_pos)
        {
            return false;
        }
        let cr = self.pending.last() == Some(&b'\r');
        let len = (self.pending.len() - usize::from(cr)).min(max_line_bytes);
        stats.lines += 1;
        on_line(Line {
            path: &self.path,
            bytes: &self.pending[..len],
            end_offset: self.read_pos,
            unterminated: true,
        });
        self.pending.clear();
        self.offset = self.read_pos;
        true
    }

    /// Bytes not yet consumed as lines (size at last poll minus offset).
    pub(crate) fn lag(&self) -> u64 {
        self.size.saturating_sub(self.offset)
    }

    /// Whether everything the file held at the last poll has been read.
    pub(crate) fn at_eof(&self) -> bool {
        self.read_pos >= self.size
    }
}

/// The start of the last line of `file` at `size`: just after the last newline, found by
/// reading backwards at most `max_back` bytes. `None` if the tail is longer than that.
pub(crate) fn last_line_start(file: &File, size: u64, max_back: u64) -> io::Result<Option<u64>> {
    let mut end = size;
    let floor = size.saturating_sub(max_back);
    let mut buf = vec![0u8; 64 * 1024];
    while end > floor {
        let start = end.saturating_sub(buf.len() as u64).max(floor);
        let len = (end - start) as usize;
        file.read_exact_at(&mut buf[..len], start)?;
        if let Some(i) = buf[..len].iter().rposition(|&b| b == b'\n') {
            return Ok(Some(start + i as u64 + 1));
        }
        end = start;
    }
    Ok(if floor == 0 { Some(0) } else { None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::file::NoEvents;
    use std::io::Write;
    use std::path::Path;

    fn watched(path: &std::path::Path) -> Watched {
        let file = File::open(path).unwrap();
        let id = FileId::of(&file.metadata().unwrap());
        Watched::new(path.to_path_buf(), file, id, 0, State::Active)
    }

    #[test]
    fn pending_never_exceeds_max_line_plus_one() {
        let mut w = watched(Path::new("/dev/null"));
        let mut stats = PollStats::default();
        let mut lines = Vec::new();
        let mut on_line = |l: Line<'_>| lines.push(l.bytes.to_vec());
        // Pieces of lines of every length around the maximum (8), fed in odd-sized chunks.
        let input: Vec<u8> = (0..20)
            .flat_map(|n| {
                let mut l = vec![b'a'; n];
                l.push(b'\n');
                l
            })
            .collect();
        for piece in input.chunks(3) {
            w.consume(piece, 8, &mut on_line, &mut NoEvents, &mut stats);
            w.read_pos += piece.len() as u64;
            assert!(w.pending.len() <= 9);
        }
        assert_eq!(lines.len(), 9);
        assert_eq!(w.offset, input.len() as u64);
    }

    #[test]
    fn an_unterminated_last_line_is_delivered_once_after_quiet_and_its_completion_is_not_doubled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        f.write_all(b"one\ntw").unwrap();
        let mut w = watched(&path);
        let mut stats = PollStats::default();
        let mut chunk = vec![0u8; 64];
        let mut lines: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut read = |w: &mut Watched, lines: &mut Vec<(Vec<u8>, u64)>| {
            let mut on = |l: Line<'_>| lines.push((l.bytes.to_vec(), l.end_offset));
            w.read(
                &mut chunk,
                1 << 20,
                1024,
                256,
                &mut on,
                &mut NoEvents,
                &mut stats,
            );
        };
        read(&mut w, &mut lines);
        assert_eq!(lines, [(b"one".to_vec(), 4)]);
        let quiet = std::time::Duration::from_millis(50);
        let mut fstats = PollStats::default();
        let mut on = |l: Line<'_>| lines.push((l.bytes.to_vec(), l.end_offset));
        // Not quiet long enough yet.
        w.last_change = Instant::now();
        assert!(!w.flush_partial(quiet, 1024, &mut on, &mut fstats));
        std::thread::sleep(quiet * 2);
        assert!(w.flush_partial(quiet, 1024, &mut on, &mut fstats));
        assert!(!w.flush_partial(quiet, 1024, &mut on, &mut fstats), "once");
        assert_eq!(
            w.checkpoint().offset,
            6,
            "consumed: a restart does not read it again"
        );
        // The writer completes the line later: only what follows is a (new) line.
        f.write_all(b"o\nthree\n").unwrap();
        read(&mut w, &mut lines);
        let got: Vec<&[u8]> = lines.iter().map(|(l, _)| l.as_slice()).collect();
        assert_eq!(got, [&b"one"[..], b"tw", b"o", b"three"]);
        assert_eq!(w.checkpoint().offset, 14);
        // A file still growing is read, not flushed.
        f.write_all(b"fo").unwrap();
        std::thread::sleep(quiet * 2);
        let mut on = |l: Line<'_>| lines.push((l.bytes.to_vec(), l.end_offset));
        assert!(
            !w.flush_partial(quiet, 1024, &mut on, &mut stats),
            "unread bytes"
        );
    }

    #[test]
    fn fingerprint_grows_with_the_file_until_full_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = File::create(&path).unwrap();
        f.write_all(&[b'x'; 100]).unwrap();
        let mut w = watched(&path);
        let mut stats = PollStats::default();
        let mut chunk = vec![0u8; 64];
        w.read(
            &mut chunk,
            1 << 20,
            1024,
            256,
            &mut |_| {},
            &mut NoEvents,
            &mut stats,
        );
        assert_eq!(w.fingerprint_len, 100);
        assert_eq!(w.fingerprint, fnv1a(&[b'x'; 100]));
        f.write_all(&[b'y'; 300]).unwrap();
        w.read(
            &mut chunk,
            1 << 20,
            1024,
            256,
            &mut |_| {},
            &mut NoEvents,
            &mut stats,
        );
        assert_eq!(w.fingerprint_len, 256);
        assert!(fingerprint_matches(&w.file, w.fingerprint, 256).unwrap());
        assert!(!fingerprint_matches(&w.file, w.fingerprint, 255).unwrap());
    }
}
