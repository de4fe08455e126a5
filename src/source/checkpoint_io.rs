//! Crash-safe checkpoint storage: the bytes of one checkpoint file, written atomically.
//!
//! This module owns only the bytes on disk. What goes in them (file offsets, correlator state)
//! and how they are parsed is the caller's job, so that one checkpoint can hold everything that
//! has to move forward together.
//!
//! [`write_atomic`] writes a temporary file in the same directory, fsyncs it, renames it over
//! the target and fsyncs the directory. A crash at any point leaves either the old checkpoint or
//! the new one, never a mix; a leftover temporary file never takes the checkpoint's name.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a checkpoint could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadCheckpointError {
    /// The file exists but is empty (e.g. a crash on a filesystem without rename atomicity, or
    /// an operator's `: > checkpoint`). Callers usually start as if there were no checkpoint,
    /// but should say so.
    #[error("checkpoint {path} is empty")]
    Empty {
        /// The checkpoint's path.
        path: PathBuf,
    },
    /// The file exists but could not be read.
    #[error("checkpoint {path} is unreadable: {source}")]
    Unreadable {
        /// The checkpoint's path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replace the file at `path` with `bytes`, atomically and durably.
///
/// The temporary file is `.<name>.tmp.<pid>.<n>` in the same directory (so the rename never
/// crosses filesystems); it is removed if anything fails before the rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("checkpoint path {} has no file name", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let (tmp_path, mut tmp) = create_temp(&dir, name)?;
    let result = (|| {
        tmp.write_all(bytes)?;
        tmp.sync_all()?;
        drop(tmp);
        fs::rename(&tmp_path, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp_path);
        return Err(e);
    }
    // Make the rename itself durable.
    File::open(&dir)?.sync_all()
}

fn create_temp(dir: &Path, name: &std::ffi::OsStr) -> io::Result<(PathBuf, File)> {
    loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(format!(".tmp.{}.{n}", std::process::id()));
        let tmp_path = dir.join(tmp_name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp_path)
        {
            Ok(f) => return Ok((tmp_path, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Read a checkpoint's bytes.
///
/// - `Ok(None)`: there is no checkpoint (first run).
/// - `Ok(Some(bytes))`: the bytes, non-empty; parsing them is the caller's job.
/// - `Err(ReadCheckpointError::Empty)`: treat as no checkpoint, but report it.
/// - `Err(ReadCheckpointError::Unreadable)`: do not start from scratch silently.
pub fn read_checkpoint(path: &Path) -> Result<Option<Vec<u8>>, ReadCheckpointError> {
    match fs::read(path) {
        Ok(bytes) if bytes.is_empty() => Err(ReadCheckpointError::Empty {
            path: path.to_path_buf(),
        }),
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ReadCheckpointError::Unreadable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_empty_and_present_are_distinguished() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ckpt.json");
        assert!(read_checkpoint(&p).unwrap().is_none());
        fs::write(&p, b"").unwrap();
        assert!(matches!(
            read_checkpoint(&p),
            Err(ReadCheckpointError::Empty { .. })
        ));
        write_atomic(&p, b"{\"v\":1}").unwrap();
        assert_eq!(read_checkpoint(&p).unwrap().unwrap(), b"{\"v\":1}");
    }

    #[test]
    fn unreadable_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        // A directory in the checkpoint's place cannot be read as a file.
        let p = dir.path().join("ckpt");
        fs::create_dir(&p).unwrap();
        assert!(matches!(
            read_checkpoint(&p),
            Err(ReadCheckpointError::Unreadable { .. })
        ));
    }

    #[test]
    fn partial_temp_file_never_replaces_a_good_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ckpt.json");
        write_atomic(&p, b"good").unwrap();
        // A crash mid-write leaves a partial temporary file behind, with the name a writer in
        // this process would pick next.
        let n = TEMP_COUNTER.load(Ordering::Relaxed);
        let tmp = dir
            .path()
            .join(format!(".ckpt.json.tmp.{}.{n}", std::process::id()));
        fs::write(&tmp, b"go").unwrap();
        assert_eq!(read_checkpoint(&p).unwrap().unwrap(), b"good");
        // The next write does not reuse or rename the stale temporary file.
        write_atomic(&p, b"better").unwrap();
        assert_eq!(read_checkpoint(&p).unwrap().unwrap(), b"better");
        assert_eq!(fs::read(&tmp).unwrap(), b"go");
        // A write that fails before the rename leaves the good checkpoint untouched and no
        // temporary file behind.
        let blocker = dir.path().join("sub");
        fs::create_dir(&blocker).unwrap();
        fs::write(blocker.join("x"), b"x").unwrap();
        assert!(write_atomic(&blocker, b"bad").is_err());
        assert_eq!(read_checkpoint(&p).unwrap().unwrap(), b"better");
        let leftovers = fs::read_dir(dir.path())
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with(".sub.tmp")
            })
            .count();
        assert_eq!(leftovers, 0);
    }
}
