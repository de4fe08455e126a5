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

//!
//! Modules: `events` (what the tailer reports), `scan` (what the globs match now: new,
//! renamed and gone files), `resume` (checkpoints and files waiting for a descriptor),
//! `watched` (one file's reading), `glob`, `notify` (inotify).

mod events;
mod glob;
mod notify;
mod resume;
mod scan;
mod watched;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::config::ReadFrom;
pub use events::{FileErrorKind, NoEvents, TailerEvents};
use glob::Pattern;
use watched::{FileId, State, Watched};

/// Size of the shared read buffer.
const CHUNK_BYTES: usize = 64 * 1024;

/// With change notification, how often every file is still stat'ed and the globs rescanned
/// anyway (what events cannot show: symlinked files, new subdirectories, network filesystems).
pub const SAFETY_SWEEP: Duration = Duration::from_secs(5);

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
