//! How the tailer reports what happens to files: the [`TailerEvents`] trait (every method
//! required), [`NoEvents`], and the bounded classes of its problems ([`FileErrorKind`]).

use std::io;
use std::path::Path;

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

/// The bounded class of a problem with a tailed file, as the app counts the tailer's events
/// (the `kind` label of `retryscope_file_errors_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileErrorKind {
    /// Out of file descriptors for this process (an open or a listing failed).
    Emfile,
    /// Out of file descriptors system-wide.
    Enfile,
    /// Permission denied.
    Eacces,
    /// Any other read or open failure.
    Read,
    /// A checkpointed inode holds another file ([`TailerEvents::checkpoint_mismatch`]).
    CheckpointMismatch,
    /// A checkpointed file is gone ([`TailerEvents::checkpoint_orphaned`]).
    CheckpointOrphaned,
}

impl FileErrorKind {
    /// Every kind.
    pub const ALL: [FileErrorKind; 6] = [
        FileErrorKind::Emfile,
        FileErrorKind::Enfile,
        FileErrorKind::Eacces,
        FileErrorKind::Read,
        FileErrorKind::CheckpointMismatch,
        FileErrorKind::CheckpointOrphaned,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FileErrorKind::Emfile => "emfile",
            FileErrorKind::Enfile => "enfile",
            FileErrorKind::Eacces => "eacces",
            FileErrorKind::Read => "read",
            FileErrorKind::CheckpointMismatch => "checkpoint_mismatch",
            FileErrorKind::CheckpointOrphaned => "checkpoint_orphaned",
        }
    }

    /// The class of an open or listing error ([`TailerEvents::open_failed`]): out of
    /// descriptors (per process, system-wide), permission denied, or anything else.
    pub fn of_open_error(e: &io::Error) -> FileErrorKind {
        match e.raw_os_error() {
            Some(24) => FileErrorKind::Emfile,
            Some(23) => FileErrorKind::Enfile,
            Some(13) | Some(1) => FileErrorKind::Eacces,
            _ => FileErrorKind::Read,
        }
    }
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
