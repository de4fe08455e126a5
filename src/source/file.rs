//! File tailer: a lossless, duplicate-free reader of complete lines from files chosen by globs,
//! across rename rotation, copytruncate/truncation, deletion and process restarts.
//!
//! Design: synchronous and polling. The caller runs [`FileTailer::poll`] on a blocking thread
//! every ~100 ms; each poll rescans the globs (when due), then reads watched files from where
//! they left off with positioned reads (`pread`), handing each complete line to a callback.
//! Where inotify is available (`notify`), a poll only looks at files written to since the
//! last one, rescans only when a watched directory's entries changed, and sweeps everything
//! (every file stat'ed, the globs rescanned) every [`SAFETY_SWEEP`] and after lost events;
//! elsewhere every poll looks at every file. The tailer
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
//! - A final unterminated line is delivered once its file has been quiet for
//!   `partial_line_wait` (OTel's filelog flushes after 500 ms too): a writer that ends without a
//!   newline is not left unread. It is then consumed (the checkpoint is past it); whatever
//!   completes it later is the next line, so nothing is delivered twice, before or after a
//!   restart. With `partial_line_wait` zero such a line stays pending (dropped if its file is
//!   released).
//! - Lines longer than `max_line_bytes` (not counting `\n` or a `\r` before it) are skipped
//!   without buffering them, and reported.
//! - Memory: per file at most `max_line_bytes + 1` bytes of pending line, plus one shared read
//!   chunk.

mod glob;
mod notify;
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

/// With change notification, how often every file is still stat'ed and the globs rescanned
/// anyway (what events cannot show: symlinked files, new subdirectories, network filesystems).
pub const SAFETY_SWEEP: Duration = Duration::from_secs(5);

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
    /// Globs are rescanned (directories listed, every match stat'ed) at most this often;
    /// watched files are still read at every poll. Zero rescans at every poll.
    pub rescan_every: Duration,
    /// Most files held open at once. Files beyond it stay pending (reported as EMFILE) so the
    /// process keeps descriptors for its checkpoint, findings and HTTP connections.
    pub max_open_files: usize,
    /// With `max_open_files` reached and files waiting, handles idle this long at their end are
    /// closed (parked) and reopened in turn.
    pub park_idle_after: Duration,
    /// An unterminated last line is delivered once its file has been quiet this long
    /// (zero: never).
    pub partial_line_wait: Duration,
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
            rescan_every: Duration::ZERO,
            max_open_files: usize::MAX,
            park_idle_after: Duration::from_secs(2),
            partial_line_wait: Duration::from_millis(500),
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
    /// The file's last line, without its newline, delivered after the file stayed quiet
    /// (`partial_line_wait`): a record (an SSE event) it belongs to ends here too.
    pub unterminated: bool,
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
    /// Reading or checking a file failed; it is retried at the next event on it or the next
    /// full sweep (every few seconds; every poll where inotify is unavailable).
    fn read_error(&mut self, path: &Path, error: &io::Error);
    /// A matched file (or a directory of the globs) could not be opened: out of file
    /// descriptors (EMFILE, ENFILE), permission denied (EACCES)... Not a rotation: the file
    /// stays pending and its open is retried at the next poll, from where it was.
    fn open_failed(&mut self, path: &Path, error: &io::Error);
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
    fn open_failed(&mut self, _: &Path, _: &io::Error) {}
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
    /// Checkpoints whose files could not be opened yet (out of descriptors): kept, retried
    /// every poll, and written back into every checkpoint until then.
    pending: Vec<FileCheckpoint>,
    /// Paths named by the startup checkpoints (a new file there is read from the start).
    checkpoint_paths: HashSet<PathBuf>,
    /// Checkpointed identities whose content did not match (read from the start).
    mismatched: HashSet<FileId>,
    /// When the globs were last scanned.
    last_scan: Option<Instant>,
    /// Files whose handles were closed to make room (see [`FileTailer::park_idle`]).
    parked: HashSet<FileId>,
    /// A matched file could not be opened for want of descriptors at the last scan.
    starved: bool,
    /// Which files changed (inotify), or every file where the platform cannot say.
    changed: notify::Changed,
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
            pending: Vec::new(),
            checkpoint_paths: HashSet::new(),
            mismatched: HashSet::new(),
            last_scan: None,
            parked: HashSet::new(),
            starved: false,
            changed: notify::Changed::new(),
        }
    }

    /// How many times a watched file was checked (one fstat, then reads if it changed) since
    /// the tailer started. With change notification, idle files cost none between sweeps.
    pub fn file_checks(&self) -> u64 {
        self.changed.checks()
    }

    /// Whether change notification is in use (otherwise every poll checks every file).
    pub fn notifying(&self) -> bool {
        self.changed.notifying()
    }

    /// Rescan globs, then read every complete new line of every watched file and hand each to
    /// `on_line` in file order (files oldest first).
    pub fn poll(
        &mut self,
        on_line: &mut dyn FnMut(Line<'_>),
        events: &mut dyn TailerEvents,
    ) -> PollStats {
        let timer = self
            .last_scan
            .is_none_or(|t| t.elapsed() >= self.config.rescan_every);
        let follow_timer = self.last_scan.is_none()
            || self.config.rescan_every.is_zero()
            || self.starved
            || !self.pending.is_empty();
        let due = self.changed.begin_poll(timer, follow_timer);
        if due {
            self.last_scan = Some(Instant::now());
            let (matched, complete) = self.scan_globs(events);
            match self.initial.take() {
                Some(checkpoints) => self.first_scan(matched, checkpoints, events),
                None => self.rescan(matched, complete, events),
            }
            let roots: Vec<PathBuf> = self.include.iter().map(|p| p.root().0).collect();
            let parents = self.files.iter().filter_map(|f| f.path.parent());
            self.changed
                .watch_dirs(roots.iter().map(PathBuf::as_path).chain(parents));
        }
        let mut stats = PollStats::default();
        for f in &mut self.files {
            if !self
                .changed
                .should_check(f.id, &f.path, f.state == State::Detached)
            {
                continue;
            }
            let throttled = f.read(
                &mut self.chunk,
                self.config.max_read_bytes_per_poll,
                self.config.max_line_bytes,
                self.config.fingerprint_bytes,
                on_line,
                events,
                &mut stats,
            );
            self.changed.checked(f.id, throttled);
            stats.throttled |= throttled;
        }
        if !self.config.partial_line_wait.is_zero() {
            for f in &mut self.files {
                f.flush_partial(
                    self.config.partial_line_wait,
                    self.config.max_line_bytes,
                    on_line,
                    &mut stats,
                );
            }
        }
        self.release_drained(events);
        stats
    }

    /// Identity + offset of everything delivered so far. Before the first poll, the
    /// checkpoints given to [`FileTailer::new`].
    pub fn checkpoints(&self) -> Vec<FileCheckpoint> {
        match &self.initial {
            Some(initial) => initial.clone(),
            None => self
                .files
                .iter()
                .map(Watched::checkpoint)
                .chain(self.pending.iter().cloned())
                .collect(),
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

    /// Included, not excluded files with their identity, deduplicated, sorted by path; and
    /// whether the scan was complete (every directory could be listed).
    fn scan_globs(&self, events: &mut dyn TailerEvents) -> (Vec<(PathBuf, FileId)>, bool) {
        let mut paths = Vec::new();
        let mut errors = Vec::new();
        for p in &self.include {
            p.expand_checked(&mut paths, &mut errors);
        }
        for (dir, e) in &errors {
            events.open_failed(dir, e);
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
        (out, errors.is_empty())
    }

    /// Open `path` and check that it is still `id` (it may have been rotated since the stat).
    /// `None` when it is gone or is another file now; an open that fails otherwise (EMFILE,
    /// ENFILE, EACCES) is reported, and the file stays pending for the next poll.
    fn open_as(path: &Path, id: FileId, events: &mut dyn TailerEvents) -> Option<File> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                events.open_failed(path, &e);
                return None;
            }
        };
        let meta = file.metadata().ok()?;
        (FileId::of(&meta) == id).then_some(file)
    }

    /// Resume one checkpointed file. `Err(cp)` when it could not be opened for a reason that
    /// may pass (out of descriptors): the checkpoint stays pending, tried again next poll.
    fn resume(
        &mut self,
        cp: FileCheckpoint,
        by_id: &HashMap<FileId, &PathBuf>,
        mismatched: &mut HashSet<FileId>,
        events: &mut dyn TailerEvents,
    ) -> Result<(), FileCheckpoint> {
        let id = FileId {
            dev: cp.dev,
            ino: cp.ino,
        };
        if self.files.iter().any(|f| f.id == id) {
            return Ok(());
        }
        if self.files.len() >= self.config.max_open_files {
            // No descriptor to spare: it stays pending, with its offset, until one is free.
            return Err(cp);
        }
        let included = by_id.contains_key(&id);
        let found = match by_id.get(&id) {
            Some(p) => Some((*p).clone()),
            None => match find_in_dir(&cp.path, id) {
                Ok(found) => found,
                Err(e) => {
                    events.open_failed(&cp.path, &e);
                    return Err(cp);
                }
            },
        };
        let Some(path) = found else {
            events.checkpoint_orphaned(&cp.path, cp.offset);
            return Ok(());
        };
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                events.checkpoint_orphaned(&cp.path, cp.offset);
                return Ok(());
            }
            Err(e) => {
                events.open_failed(&path, &e);
                return Err(cp);
            }
        };
        if !file.metadata().is_ok_and(|m| FileId::of(&m) == id) {
            events.checkpoint_orphaned(&cp.path, cp.offset);
            return Ok(());
        }
        match fingerprint_matches(&file, cp.fingerprint, cp.fingerprint_len) {
            Ok(true) => {}
            Ok(false) => {
                events.checkpoint_mismatch(&path);
                mismatched.insert(id);
                return Ok(());
            }
            Err(e) => {
                events.read_error(&path, &e);
                // Not provably the same file: leave it to the new-file path if included.
                mismatched.insert(id);
                return Ok(());
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
        if !self.parked.remove(&id) {
            events.file_resumed(&w.path, cp.offset);
        }
        self.files.push(w);
        Ok(())
    }

    /// Out of descriptors with files waiting: close the handles of idle files read to their
    /// end (their checkpoints hold everything) and queue them behind the waiting ones, so every
    /// file gets read in turn instead of the first thousand forever.
    fn park_idle(&mut self) {
        let waiting = !self.pending.is_empty() || std::mem::take(&mut self.starved);
        if !waiting || self.files.len() < self.config.max_open_files {
            return;
        }
        let idle = self.config.park_idle_after;
        let mut parked = Vec::new();
        self.files.retain(|f| {
            if parked.len() < 1024 && f.parkable(idle) {
                parked.push(f.checkpoint());
                false
            } else {
                true
            }
        });
        for cp in parked {
            self.parked.insert(FileId {
                dev: cp.dev,
                ino: cp.ino,
            });
            self.pending.push(cp);
        }
    }

    /// Checkpointed files that could not be opened yet, by identity.
    fn pending_ids(&self) -> HashSet<FileId> {
        self.pending
            .iter()
            .map(|cp| FileId {
                dev: cp.dev,
                ino: cp.ino,
            })
            .collect()
    }

    /// Retry the checkpoints whose files could not be opened (see [`FileTailer::resume`]).
    fn retry_pending(&mut self, matched: &[(PathBuf, FileId)], events: &mut dyn TailerEvents) {
        if self.pending.is_empty() {
            return;
        }
        let by_id: HashMap<FileId, &PathBuf> = matched.iter().map(|(p, id)| (*id, p)).collect();
        let mut mismatched = HashSet::new();
        for cp in std::mem::take(&mut self.pending) {
            if let Err(cp) = self.resume(cp, &by_id, &mut mismatched, events) {
                self.pending.push(cp);
            }
        }
        self.mismatched.extend(mismatched);
    }

    fn first_scan(
        &mut self,
        matched: Vec<(PathBuf, FileId)>,
        checkpoints: Vec<FileCheckpoint>,
        events: &mut dyn TailerEvents,
    ) {
        let by_id: HashMap<FileId, &PathBuf> = matched.iter().map(|(p, id)| (*id, p)).collect();
        self.checkpoint_paths = checkpoints.iter().map(|c| c.path.clone()).collect();
        let mut mismatched = HashSet::new();
        for cp in checkpoints {
            if let Err(cp) = self.resume(cp, &by_id, &mut mismatched, events) {
                self.pending.push(cp);
            }
        }
        self.mismatched.extend(mismatched);
        self.add_new(matched, true, events);
    }

    /// Start watching matched files not watched yet. Checkpointed files still pending are
    /// left to [`FileTailer::retry_pending`], never read again from the start.
    fn add_new(
        &mut self,
        matched: Vec<(PathBuf, FileId)>,
        first: bool,
        events: &mut dyn TailerEvents,
    ) -> HashSet<FileId> {
        let pending = self.pending_ids();
        let mut seen = HashSet::new();
        for (path, id) in matched {
            seen.insert(id);
            if pending.contains(&id) {
                continue;
            }
            if let Some(f) = self.files.iter_mut().find(|f| f.id == id) {
                if !first {
                    if f.path != path {
                        events.file_rotated(&f.path, Some(&path));
                        f.path = path;
                    }
                    f.state = State::Active;
                }
                continue;
            }
            if self.files.len() >= self.config.max_open_files {
                self.starved = true;
                events.open_failed(&path, &io::Error::from_raw_os_error(24));
                continue;
            }
            let Some(file) = Self::open_as(&path, id, events) else {
                continue;
            };
            let from_start = !first
                || self.mismatched.contains(&id)
                || self.checkpoint_paths.contains(&path)
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
        seen
    }

    fn rescan(
        &mut self,
        matched: Vec<(PathBuf, FileId)>,
        complete: bool,
        events: &mut dyn TailerEvents,
    ) {
        // Files never opened go first, then the pending checkpoints (parked files queue last).
        self.park_idle();
        let by_path: Vec<(PathBuf, FileId)> = matched.clone();
        let seen = self.add_new(matched, false, events);
        self.retry_pending(&by_path, events);
        if !complete {
            // A directory could not be listed: a file missing from the scan may still be
            // there. Nothing is taken for rotated until a complete scan says so.
            return;
        }
        for f in &mut self.files {
            if f.state == State::Detached || seen.contains(&f.id) {
                continue;
            }
            let deleted = f.file.metadata().is_ok_and(|m| m.nlink() == 0);
            let found = if deleted {
                Ok(None)
            } else {
                find_in_dir(&f.path, f.id)
            };
            let found = match found {
                Ok(found) => found,
                Err(e) => {
                    // Cannot tell (out of descriptors?): keep it as it is, ask again later.
                    events.open_failed(&f.path, &e);
                    continue;
                }
            };
            f.state = State::Detached;
            f.last_change = Instant::now();
            if deleted {
                continue;
            }
            match found {
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
fn find_in_dir(old_path: &Path, id: FileId) -> io::Result<Option<PathBuf>> {
    let dir = match old_path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    for entry in entries.flatten() {
        if entry.ino() != id.ino {
            continue;
        }
        let path = entry.path();
        if fs::symlink_metadata(&path).is_ok_and(|m| FileId::of(&m) == id) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}
