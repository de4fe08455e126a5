//! File tailer: a lossless, duplicate-free reader of complete lines from files chosen by globs,
//! across rename rotation, copytruncate/truncation, deletion and process restarts.
//!
//! Design: synchronous and polling. The caller runs [`FileTailer::poll`] on a blocking thread
//! every ~250 ms; each poll rescans the globs, then reads every watched file from where it left
//! off with positioned reads (`pread`), handing each complete line to a callback. The tailer
//! never stores anything: [`FileTailer::checkpoints`] gives the caller identity + offset of what
//! has been delivered, to save atomically with its own state (see
//! [`crate::source::checkpoint_io`]).
//!
//! Identity: a file is its (device, inode), validated by an FNV-1a hash of its first
//! `fingerprint_bytes` bytes (fewer while the file is shorter; the hash is extended as it
//! grows). While a file is open its inode cannot be reused, so the fingerprint matters for
//! checkpoints (inode reuse across restarts) and for spotting content that was replaced in
//! place (copytruncate followed by regrowth beyond the old read position).
//!
//! Semantics and their limits:
//! - Rename rotation: the old handle stays open; the file is drained to EOF and released only
//!   after it has been idle for `rotate_wait`, so a writer that keeps appending to the old
//!   handle for a while loses nothing. If the new name still matches `include`, the file simply
//!   keeps being tailed under the new name. The new file at the old path is read from 0.
//! - Truncation / copytruncate: when the size drops below the read position (or the first bytes
//!   change), `file_truncated` is reported and reading restarts at 0. Lines appended after the
//!   last poll and before the truncation are lost: with copytruncate they are in the copy,
//!   which the tailer must not also read (keep copies out of `include`, or `exclude` them,
//!   otherwise the copy is a new file and is read from 0: duplicates). Truncation followed by
//!   regrowth beyond the old position within one poll is noticed only if the first bytes
//!   differ.
//! - Deletion: a deleted file is drained through its open handle and released after
//!   `rotate_wait` of idleness.
//! - Partial lines are never delivered; a final unterminated line stays pending, and is dropped
//!   if its file is released.
//! - Lines longer than `max_line_bytes` (not counting `\n` or a `\r` before it) are skipped
//!   without buffering them, and reported.
//! - Memory: per file at most `max_line_bytes + 1` bytes of pending line, plus one shared read
//!   chunk.

mod glob;
mod watched;

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use glob::Pattern;
use watched::{FileId, State, Watched, fingerprint_matches, last_line_start};

/// Size of the shared read buffer.
const CHUNK_BYTES: usize = 64 * 1024;

/// Where to start files that have no checkpoint and exist at the first scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadFrom {
    /// From offset 0.
    #[default]
    Beginning,
    /// From the start of the file's last (possibly incomplete) line: lines already complete
    /// are skipped, a line being written is delivered once complete.
    End,
}

impl std::str::FromStr for ReadFrom {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "beginning" => Ok(ReadFrom::Beginning),
            "end" => Ok(ReadFrom::End),
            other => Err(format!("`{other}` is not beginning or end")),
        }
    }
}

/// How the tailer chooses and reads files.
#[derive(Debug, Clone)]
pub struct FileTailerConfig {
    /// Glob patterns of files to tail (`*`, `?`, `[..]`, `**`).
    pub include: Vec<String>,
    /// Glob patterns of files never to pick up. A pattern without `/` matches the file name.
    /// A watched file that is renamed to an excluded name is still drained, then released.
    pub exclude: Vec<String>,
    /// Applies only to files without a checkpoint that exist at the first scan. Files that
    /// appear later are read from the start, and so is a file found at the path of a checkpoint
    /// whose file it is not (a generation created while the collector was down).
    pub read_from: ReadFrom,
    /// Longest line delivered; longer lines are skipped to the next newline and reported.
    pub max_line_bytes: usize,
    /// How many leading bytes are hashed to validate a (device, inode) identity.
    pub fingerprint_bytes: usize,
    /// Most bytes read from one file in one poll (fairness between files).
    pub max_read_bytes_per_poll: usize,
    /// How long a rotated-away or deleted file must stay idle at EOF before it is released.
    pub rotate_wait: Duration,
}

impl Default for FileTailerConfig {
    fn default() -> Self {
        FileTailerConfig {
            include: Vec::new(),
            exclude: Vec::new(),
            read_from: ReadFrom::Beginning,
            max_line_bytes: 1024 * 1024,
            fingerprint_bytes: 256,
            max_read_bytes_per_poll: 4 * 1024 * 1024,
            rotate_wait: Duration::from_secs(5),
        }
    }
}

/// Identity and position of one file: everything delivered ends at `offset`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileCheckpoint {
    /// The path the file had when the checkpoint was taken.
    pub path: PathBuf,
    /// Device number.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// FNV-1a 64 of the first `fingerprint_len` bytes.
    pub fingerprint: u64,
    /// How many bytes `fingerprint` covers.
    pub fingerprint_len: u32,
    /// Position just after the last consumed newline.
    pub offset: u64,
}

/// One complete line.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    /// The file's current path.
    pub path: &'a Path,
    /// The line without its `\n` (and without a `\r` before it). Raw bytes, not decoded.
    pub bytes: &'a [u8],
    /// Offset just after the line's newline: the checkpoint offset once this line is processed.
    pub end_offset: u64,
}

/// What one poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollStats {
    /// Lines delivered.
    pub lines: u64,
    /// Bytes read (lines, newlines and skipped bytes).
    pub bytes: u64,
    /// Some file hit `max_read_bytes_per_poll` with more to read: poll again soon.
    pub throttled: bool,
}

/// How the tailer reports what happens to files. It never touches metrics itself; every
/// method is required, so a new event cannot go unhandled (the app's answer is
/// `internal_events::TailerReport`).
pub trait TailerEvents {
    /// A file is watched from `from_offset` (a new file, or one whose checkpoint did not match).
    fn file_added(&mut self, path: &Path, from_offset: u64);
    /// A file is watched again from its checkpoint.
    fn file_resumed(&mut self, path: &Path, offset: u64);
    /// A watched file left `old_path`: renamed to `new_path`, or gone from its directory.
    fn file_rotated(&mut self, old_path: &Path, new_path: Option<&Path>);
    /// A file shrank below (or changed before) the read position; reading restarts at 0.
    fn file_truncated(&mut self, path: &Path, old_offset: u64, new_size: u64);
    /// A rotated-away or deleted file was read to its end and closed.
    fn file_drained_and_released(&mut self, path: &Path);
    /// A line longer than `max_line_bytes` was skipped.
    fn line_too_long(&mut self, path: &Path, skipped_bytes: u64);
    /// Reading or checking a file failed; it is retried at the next poll.
    fn read_error(&mut self, path: &Path, error: &io::Error);
    /// A checkpoint's inode exists but its first bytes differ: the inode was reused, the file
    /// is read from 0.
    fn checkpoint_mismatch(&mut self, path: &Path);
    /// A checkpoint's file was not found at startup (deleted while down): unread lines of it
    /// are lost.
    fn checkpoint_orphaned(&mut self, path: &Path, offset: u64);
}

/// Events that go nowhere (for tests and tools that only want the lines).
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEvents;
impl TailerEvents for NoEvents {
    fn file_added(&mut self, _: &Path, _: u64) {}
    fn file_resumed(&mut self, _: &Path, _: u64) {}
    fn file_rotated(&mut self, _: &Path, _: Option<&Path>) {}
    fn file_truncated(&mut self, _: &Path, _: u64, _: u64) {}
    fn file_drained_and_released(&mut self, _: &Path) {}
    fn line_too_long(&mut self, _: &Path, _: u64) {}
    fn read_error(&mut self, _: &Path, _: &io::Error) {}
    fn checkpoint_mismatch(&mut self, _: &Path) {}
    fn checkpoint_orphaned(&mut self, _: &Path, _: u64) {}
}

/// The tailer. See the module docs.
pub struct FileTailer {
    config: FileTailerConfig,
    include: Vec<Pattern>,
    exclude: Vec<Pattern>,
    /// Checkpoints given to `new`, until the first scan consumes them.
    initial: Option<Vec<FileCheckpoint>>,
    /// Watched files, oldest first: the read order.
    files: Vec<Watched>,
    chunk: Vec<u8>,
}

impl FileTailer {
    /// A tailer that will resume from `checkpoints` at its first poll.
    pub fn new(config: FileTailerConfig, checkpoints: Vec<FileCheckpoint>) -> Self {
        let include = config.include.iter().map(|p| Pattern::new(p)).collect();
        let exclude = config.exclude.iter().map(|p| Pattern::new(p)).collect();
        let chunk = vec![0u8; CHUNK_BYTES.min(config.max_read_bytes_per_poll.max(1))];
        FileTailer {
            config,
            include,
            exclude,
            initial: Some(checkpoints),
            files: Vec::new(),
            chunk,
        }
    }

    /// Rescan globs, then read every complete new line of every watched file and hand each to
    /// `on_line` in file order (files oldest first).
    pub fn poll(
        &mut self,
        on_line: &mut dyn FnMut(Line<'_>),
        events: &mut dyn TailerEvents,
    ) -> PollStats {
        let matched = self.scan_globs();
        match self.initial.take() {
            Some(checkpoints) => self.first_scan(matched, checkpoints, events),
            None => self.rescan(matched, events),
        }
        let mut stats = PollStats::default();
        for f in &mut self.files {
            stats.throttled |= f.read(
                &mut self.chunk,
                self.config.max_read_bytes_per_poll,
                self.config.max_line_bytes,
                self.config.fingerprint_bytes,
                on_line,
                events,
                &mut stats,
            );
        }
        self.release_drained(events);
        stats
    }

    /// Identity + offset of everything delivered so far. Before the first poll, the
    /// checkpoints given to [`FileTailer::new`].
    pub fn checkpoints(&self) -> Vec<FileCheckpoint> {
        match &self.initial {
            Some(initial) => initial.clone(),
            None => self.files.iter().map(Watched::checkpoint).collect(),
        }
    }

    /// Files currently open (including rotated-away ones still being drained).
    pub fn files_watched(&self) -> usize {
        self.files.len()
    }

    /// Sum over watched files of (size at the last poll − offset).
    pub fn lag_bytes(&self) -> u64 {
        self.files.iter().map(Watched::lag).sum()
    }

    /// Included, not excluded files with their identity, deduplicated, sorted by path.
    fn scan_globs(&self) -> Vec<(PathBuf, FileId)> {
        let mut paths = Vec::new();
        for p in &self.include {
            p.expand(&mut paths);
        }
        paths.sort();
        paths.dedup();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for path in paths {
            if self.exclude.iter().any(|e| e.matches(&path)) {
                continue;
            }
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            let id = FileId::of(&meta);
            if seen.insert(id) {
                out.push((path, id));
            }
        }
        out
    }

    /// Open `path` and check that it is still `id` (it may have been rotated since the stat).
    fn open_as(path: &Path, id: FileId) -> Option<File> {
        let file = File::open(path).ok()?;
        let meta = file.metadata().ok()?;
        (FileId::of(&meta) == id).then_some(file)
    }

    fn first_scan(
        &mut self,
        matched: Vec<(PathBuf, FileId)>,
        checkpoints: Vec<FileCheckpoint>,
        events: &mut dyn TailerEvents,
    ) {
        let by_id: HashMap<FileId, &PathBuf> = matched.iter().map(|(p, id)| (*id, p)).collect();
        let checkpoint_paths: HashSet<&Path> =
            checkpoints.iter().map(|c| c.path.as_path()).collect();
        let mut mismatched = HashSet::new();
        for cp in &checkpoints {
            let id = FileId {
                dev: cp.dev,
                ino: cp.ino,
            };
            if self.files.iter().any(|f| f.id == id) {
                continue;
            }
            let included = by_id.contains_key(&id);
            let found = match by_id.get(&id) {
                Some(p) => Some((*p).clone()),
                None => find_in_dir(&cp.path, id),
            };
            let Some(path) = found else {
                events.checkpoint_orphaned(&cp.path, cp.offset);
                continue;
            };
            let Some(file) = Self::open_as(&path, id) else {
                events.checkpoint_orphaned(&cp.path, cp.offset);
                continue;
            };
            match fingerprint_matches(&file, cp.fingerprint, cp.fingerprint_len) {
                Ok(true) => {}
                Ok(false) => {
                    events.checkpoint_mismatch(&path);
                    mismatched.insert(id);
                    continue;
                }
                Err(e) => {
                    events.read_error(&path, &e);
                    // Not provably the same file: leave it to the new-file path if included.
                    mismatched.insert(id);
                    continue;
                }
            }
            if path != cp.path {
                events.file_rotated(&cp.path, Some(&path));
            }
            let state = if included {
                State::Active
            } else {
                State::Detached
            };
            let mut w = Watched::new(path, file, id, cp.offset, state);
            w.fingerprint = cp.fingerprint;
            w.fingerprint_len = cp.fingerprint_len;
            // A size below the offset is reported as a truncation by the first read.
            events.file_resumed(&w.path, cp.offset);
            self.files.push(w);
        }
        for (path, id) in matched {
            if self.files.iter().any(|f| f.id == id) {
                continue;
            }
            let Some(file) = Self::open_as(&path, id) else {
                continue;
            };
            let from_start = mismatched.contains(&id)
                || checkpoint_paths.contains(path.as_path())
                || self.config.read_from == ReadFrom::Beginning;
            let mut skip_tail = false;
            let offset = if from_start {
                0
            } else {
                let size = file.metadata().map(|m| m.len()).unwrap_or(0);
                let max_back = self.config.max_line_bytes as u64 + 2;
                match last_line_start(&file, size, max_back) {
                    Ok(Some(o)) => o,
                    Ok(None) => {
                        skip_tail = true;
                        size
                    }
                    Err(e) => {
                        events.read_error(&path, &e);
                        continue;
                    }
                }
            };
            let mut w = Watched::new(path, file, id, offset, State::Active);
            if skip_tail {
                w.skip_current_line();
            }
            events.file_added(&w.path, offset);
            self.files.push(w);
        }
    }

    fn rescan(&mut self, matched: Vec<(PathBuf, FileId)>, events: &mut dyn TailerEvents) {
        let mut seen = HashSet::new();
        for (path, id) in matched {
            seen.insert(id);
            if let Some(f) = self.files.iter_mut().find(|f| f.id == id) {
                if f.path != path {
                    events.file_rotated(&f.path, Some(&path));
                    f.path = path;
                }
                f.state = State::Active;
                continue;
            }
            let Some(file) = Self::open_as(&path, id) else {
                continue;
            };
            events.file_added(&path, 0);
            self.files
                .push(Watched::new(path, file, id, 0, State::Active));
        }
        for f in &mut self.files {
            if f.state == State::Detached || seen.contains(&f.id) {
                continue;
            }
            f.state = State::Detached;
            f.last_change = Instant::now();
            let deleted = f.file.metadata().is_ok_and(|m| m.nlink() == 0);
            if deleted {
                continue;
            }
            match find_in_dir(&f.path, f.id) {
                Some(new_path) if new_path != f.path => {
                    events.file_rotated(&f.path, Some(&new_path));
                    f.path = new_path;
                }
                // Still there under its name, but excluded or no longer matched.
                Some(_) => {}
                None => events.file_rotated(&f.path, None),
            }
        }
    }

    fn release_drained(&mut self, events: &mut dyn TailerEvents) {
        let wait = self.config.rotate_wait;
        self.files.retain(|f| {
            let release =
                f.state == State::Detached && f.at_eof() && f.last_change.elapsed() >= wait;
            if release {
                events.file_drained_and_released(&f.path);
            }
            !release
        });
    }
}

/// Look in the directory of `old_path` for the file `id` (a rotation to a name that the globs
/// do not match).
fn find_in_dir(old_path: &Path, id: FileId) -> Option<PathBuf> {
    let dir = match old_path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    for entry in fs::read_dir(dir).ok()?.flatten() {
        if entry.ino() != id.ino {
            continue;
        }
        let path = entry.path();
        if fs::symlink_metadata(&path).is_ok_and(|m| FileId::of(&m) == id) {
            return Some(path);
        }
    }
    None
}
