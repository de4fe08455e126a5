//! What the globs match now: new files (from the start, or from their last line with
//! `read_from = end`), files renamed or gone (detached, drained, released later), and a file
//! looked for by identity in its old directory.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::watched::{FileId, State, Watched, last_line_start};
use super::{FileTailer, ReadFrom, TailerEvents};

impl FileTailer {
    /// Included, not excluded files with their identity, deduplicated, sorted by path; and
    /// whether the scan was complete (every directory could be listed).
    pub(super) fn scan_globs(
        &self,
        events: &mut dyn TailerEvents,
    ) -> (Vec<(PathBuf, FileId)>, bool) {
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

    /// Start watching matched files not watched yet. Checkpointed files still pending are
    /// left to [`FileTailer::retry_pending`], never read again from the start.
    pub(super) fn add_new(
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

    pub(super) fn rescan(
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
}

/// Look in the directory of `old_path` for the file `id` (a rotation to a name that the globs
/// do not match).
pub(super) fn find_in_dir(old_path: &Path, id: FileId) -> io::Result<Option<PathBuf>> {
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
