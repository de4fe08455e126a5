//! Resuming from checkpoints: each checkpointed file found again by identity (renamed,
//! orphaned, its inode reused), and the checkpoints whose files wait for a descriptor (kept,
//! retried every poll, idle handles parked to make room).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::path::PathBuf;

use super::scan::find_in_dir;
use super::watched::{FileId, State, Watched, fingerprint_matches};
use super::{FileCheckpoint, FileTailer, TailerEvents};

impl FileTailer {
    pub(super) fn first_scan(
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

    /// Retry the checkpoints whose files could not be opened (see [`FileTailer::resume`]).
    pub(super) fn retry_pending(
        &mut self,
        matched: &[(PathBuf, FileId)],
        events: &mut dyn TailerEvents,
    ) {
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

    /// Checkpointed files that could not be opened yet, by identity.
    pub(super) fn pending_ids(&self) -> HashSet<FileId> {
        self.pending
            .iter()
            .map(|cp| FileId {
                dev: cp.dev,
                ino: cp.ino,
            })
            .collect()
    }

    /// Out of descriptors with files waiting: close the handles of idle files read to their
    /// end (their checkpoints hold everything) and queue them behind the waiting ones, so every
    /// file gets read in turn instead of the first thousand forever.
    pub(super) fn park_idle(&mut self) {
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
}
