//! Change notification for the file tailer: which watched files may have changed since the last
//! poll, so a poll stats and reads only those instead of every file.
//!
//! On Linux, one non-blocking inotify instance watches the directories that hold matched files
//! (not the files: a directory watch reports writes to, and creation, renaming and deletion of,
//! every entry in it, and survives rotation). [`DirWatch::drain`] turns the queued events into
//! [`Changes`]: the paths written to, and whether the directory structure changed (a file
//! created, renamed or deleted: time to rescan the globs).
//!
//! What it cannot see is handled by the caller's safety sweep (a full poll every few seconds,
//! and at every rescan): files reached through symlinks into unwatched directories, new
//! subdirectories of unwatched directories, writes from other hosts on network filesystems.
//! When the event queue overflows (`IN_Q_OVERFLOW`), or a watch cannot be added (out of
//! watches), [`Changes::all`] says everything is to be treated as changed. Where inotify is not
//! available at all, [`DirWatch::new`] fails and the tailer polls every file, as before.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};

use super::SAFETY_SWEEP;
use super::watched::FileId;

/// What changed since the last drain.
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Events were lost (queue overflow, a watch that could not be added, a read error):
    /// treat every file as changed and rescan.
    pub all: bool,
    /// An entry of a watched directory was created, renamed or deleted, or a watched
    /// directory itself went away: rescan the globs.
    pub structure: bool,
    /// Paths (directory + entry name) that were written to, truncated or had attributes changed.
    pub written: HashSet<PathBuf>,
}

/// A set of watched directories on one inotify instance.
pub(crate) struct DirWatch {
    inotify: Inotify,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    watched: HashSet<PathBuf>,
    buf: Vec<u8>,
    /// A watch could not be added since the last drain.
    missed: bool,
}

impl DirWatch {
    /// A watcher, or the reason the platform gives none (the caller then polls every file).
    pub(crate) fn new() -> io::Result<Self> {
        Ok(DirWatch {
            inotify: Inotify::init()?,
            dirs: HashMap::new(),
            watched: HashSet::new(),
            buf: vec![0u8; 64 * 1024],
            missed: false,
        })
    }

    /// Watch `dir` (idempotent). A failure (no watches left, permission) is reported by the
    /// next [`DirWatch::drain`] as `all`, so that directory's files are still polled.
    pub(crate) fn watch(&mut self, dir: &Path) {
        if self.watched.contains(dir) {
            return;
        }
        let mask = WatchMask::MODIFY
            | WatchMask::ATTRIB
            | WatchMask::CLOSE_WRITE
            | WatchMask::CREATE
            | WatchMask::DELETE
            | WatchMask::MOVED_FROM
            | WatchMask::MOVED_TO
            | WatchMask::DELETE_SELF
            | WatchMask::MOVE_SELF;
        match self.inotify.watches().add(dir_or_dot(dir), mask) {
            Ok(wd) => {
                self.dirs.insert(wd, dir.to_path_buf());
                self.watched.insert(dir.to_path_buf());
            }
            Err(_) => self.missed = true,
        }
    }

    /// How many directories are watched.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.watched.len()
    }

    /// Everything queued since the last drain. Never blocks.
    pub(crate) fn drain(&mut self) -> Changes {
        let mut changes = Changes {
            all: std::mem::take(&mut self.missed),
            ..Changes::default()
        };
        let mut gone = Vec::new();
        loop {
            let events = match self.inotify.read_events(&mut self.buf) {
                Ok(events) => events,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    changes.all = true;
                    break;
                }
            };
            let mut any = false;
            for event in events {
                any = true;
                let mask = event.mask;
                if mask.contains(EventMask::Q_OVERFLOW) {
                    changes.all = true;
                    changes.structure = true;
                    continue;
                }
                if mask
                    .intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF)
                {
                    // The directory itself went away (or moved): forget it; a rescan re-adds
                    // whatever directory now holds matched files.
                    gone.push(event.wd.clone());
                    changes.structure = true;
                    continue;
                }
                if mask.intersects(
                    EventMask::CREATE
                        | EventMask::DELETE
                        | EventMask::MOVED_FROM
                        | EventMask::MOVED_TO,
                ) {
                    changes.structure = true;
                }
                let (Some(dir), Some(name)) = (self.dirs.get(&event.wd), event.name) else {
                    continue;
                };
                changes.written.insert(dir.join(OsString::from(name)));
            }
            if !any {
                break;
            }
        }
        for wd in gone {
            if let Some(dir) = self.dirs.remove(&wd) {
                self.watched.remove(&dir);
            }
            // Already removed by the kernel (IGNORED follows DELETE_SELF); an error is expected.
            let _ = self.inotify.watches().remove(wd);
        }
        changes
    }
}

/// The tailer's use of a [`DirWatch`]: whether a poll rescans, which files it checks, and how
/// many checks were made. Without a watcher, every poll checks every file and rescans by the
/// timer alone.
pub(crate) struct Changed {
    watch: Option<DirWatch>,
    /// When every file was last checked.
    last_sweep: Option<Instant>,
    /// Files to check next poll whatever the events say (their read budget ran out).
    hot: HashSet<FileId>,
    /// Files checked since start.
    checks: u64,
    /// This poll checks every file.
    full: bool,
    /// Paths written to since the last poll.
    written: HashSet<PathBuf>,
    /// A directory changed (or events were lost) since the last rescan: rescan once the timer
    /// allows. Kept across polls: the events are drained at every poll, most of which the
    /// timer does not allow to rescan, and a change seen then would otherwise wait for the
    /// next safety sweep (a file renamed into an empty folder was found ~5 s late).
    rescan_wanted: bool,
}

impl Changed {
    /// With inotify where it can be initialised; otherwise says so once and polls.
    pub(crate) fn new() -> Self {
        let watch = match DirWatch::new() {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::warn!(error = %e, "no file change notification here: polling every file");
                None
            }
        };
        Changed {
            watch,
            last_sweep: None,
            hot: HashSet::new(),
            checks: 0,
            full: true,
            written: HashSet::new(),
            rescan_wanted: false,
        }
    }

    pub(crate) fn notifying(&self) -> bool {
        self.watch.is_some()
    }

    pub(crate) fn checks(&self) -> u64 {
        self.checks
    }

    /// Start a poll: take the queued events and say whether to rescan. `timer_due`: the
    /// rescan timer allows one; `follow_timer`: rescans must follow the timer whatever the
    /// events say (first scan, continuous rescans, files waiting for descriptors). A change
    /// of directory entries seen while the timer does not allow a rescan is remembered until
    /// it does.
    pub(crate) fn begin_poll(&mut self, timer_due: bool, follow_timer: bool) -> bool {
        let changes = self.watch.as_mut().map(DirWatch::drain);
        let events_ok = changes.as_ref().is_some_and(|c| !c.all);
        let sweep_due = self.last_sweep.is_none_or(|t| t.elapsed() >= SAFETY_SWEEP);
        self.rescan_wanted |= changes.as_ref().is_some_and(|c| c.structure || c.all);
        let due = timer_due && (!events_ok || follow_timer || sweep_due || self.rescan_wanted);
        if due {
            self.rescan_wanted = false;
        }
        self.full = !events_ok || due || sweep_due;
        if self.full {
            self.last_sweep = Some(Instant::now());
        }
        self.written = changes.map(|c| c.written).unwrap_or_default();
        due
    }

    /// Watch these directories (after a scan, before the files are read, so that a write
    /// after the read is an event).
    pub(crate) fn watch_dirs<'a>(&mut self, dirs: impl Iterator<Item = &'a Path>) {
        if let Some(w) = &mut self.watch {
            dirs.for_each(|d| w.watch(d));
        }
    }

    /// Whether this poll checks the file (counted when it does). Detached files (rotated
    /// away, maybe out of the watched directories) are always checked while they drain.
    pub(crate) fn should_check(&mut self, id: FileId, path: &Path, detached: bool) -> bool {
        let check = self.full
            || detached
            || self.hot.contains(&id)
            || (!self.written.is_empty() && self.written.contains(path));
        self.checks += u64::from(check);
        check
    }

    /// After a check: a file whose budget ran out is checked again next poll.
    pub(crate) fn checked(&mut self, id: FileId, throttled: bool) {
        if throttled {
            self.hot.insert(id);
        } else if !self.hot.is_empty() {
            self.hot.remove(&id);
        }
    }
}

/// The directory to hand to the kernel for a path's parent (`""` is the current directory).
fn dir_or_dot(dir: &Path) -> &Path {
    if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_writes_by_path_and_renames_as_structure() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.log");
        std::fs::write(&a, b"x\n").unwrap();
        let mut w = DirWatch::new().unwrap();
        w.watch(dir.path());
        w.watch(dir.path());
        assert_eq!(w.len(), 1);
        let idle = w.drain();
        assert!(!idle.all && !idle.structure && idle.written.is_empty());

        std::fs::OpenOptions::new()
            .append(true)
            .open(&a)
            .and_then(|mut f| io::Write::write_all(&mut f, b"y\n"))
            .unwrap();
        let c = w.drain();
        assert!(c.written.contains(&a), "{c:?}");
        assert!(!c.structure);

        std::fs::rename(&a, dir.path().join("a.log.1")).unwrap();
        let c = w.drain();
        assert!(c.structure, "{c:?}");
    }
}
