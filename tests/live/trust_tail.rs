//! Issue 11.4 regression: out of file descriptors looked like a rotation. Under a budget of
//! open files far below the number of files, the tailer must report the failed opens, never a
//! rotation, and still read every line of every file exactly once (closing idle handles in
//! turn), across a restart from its checkpoints.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use retryscope::source::file::{FileCheckpoint, FileTailer, FileTailerConfig, TailerEvents};

#[derive(Default)]
struct Counts {
    rotated: u64,
    open_failed: u64,
    truncated: u64,
}

impl TailerEvents for Counts {
    fn file_added(&mut self, _: &Path, _: u64) {}
    fn file_resumed(&mut self, _: &Path, _: u64) {}
    fn file_drained_and_released(&mut self, _: &Path) {}
    fn line_too_long(&mut self, _: &Path, _: u64) {}
    fn read_error(&mut self, _: &Path, _: &io::Error) {}
    fn checkpoint_mismatch(&mut self, _: &Path) {}
    fn checkpoint_orphaned(&mut self, _: &Path, _: u64) {}
    fn file_rotated(&mut self, _old: &Path, _new: Option<&Path>) {
        self.rotated += 1;
    }
    fn file_truncated(&mut self, _path: &Path, _old: u64, _new: u64) {
        self.truncated += 1;
    }
    fn open_failed(&mut self, _path: &Path, error: &io::Error) {
        assert_eq!(error.raw_os_error(), Some(24), "EMFILE");
        self.open_failed += 1;
    }
}

fn tailer(dir: &Path, checkpoints: Vec<FileCheckpoint>) -> FileTailer {
    FileTailer::new(
        FileTailerConfig {
            include: vec![format!("{}/*.log", dir.display())],
            max_open_files: 10,
            park_idle_after: Duration::ZERO,
            ..FileTailerConfig::default()
        },
        checkpoints,
    )
}

fn poll_all(
    t: &mut FileTailer,
    seen: &mut BTreeMap<String, u32>,
    events: &mut Counts,
    polls: usize,
) {
    for _ in 0..polls {
        t.poll(
            &mut |line| {
                *seen
                    .entry(String::from_utf8_lossy(line.bytes).into_owned())
                    .or_insert(0) += 1;
            },
            events,
        );
        assert!(t.files_watched() <= 10);
    }
}

#[test]
fn out_of_descriptors_is_not_a_rotation_and_every_file_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..60)
        .map(|i| dir.path().join(format!("f{i:02}.log")))
        .collect();
    for (i, p) in paths.iter().enumerate() {
        std::fs::write(p, format!("{i}-a\n{i}-b\n")).unwrap();
    }
    let mut seen = BTreeMap::new();
    let mut events = Counts::default();
    let mut t = tailer(dir.path(), Vec::new());
    poll_all(&mut t, &mut seen, &mut events, 3);
    assert!(events.open_failed > 0, "failed opens are reported");
    // A restart halfway, from the tailer's checkpoints (pending and parked files included).
    let checkpoints = t.checkpoints();
    drop(t);
    let mut t = tailer(dir.path(), checkpoints);
    poll_all(&mut t, &mut seen, &mut events, 20);
    // More lines arrive in every file: read once too.
    for (i, p) in paths.iter().enumerate() {
        let mut text = std::fs::read_to_string(p).unwrap();
        text.push_str(&format!("{i}-c\n"));
        std::fs::write(p, text).unwrap();
    }
    poll_all(&mut t, &mut seen, &mut events, 20);
    assert_eq!(events.rotated, 0, "no bogus rotations");
    assert_eq!(events.truncated, 0);
    assert_eq!(seen.len(), 180, "every line of every file");
    assert!(seen.values().all(|n| *n == 1), "each line once: {seen:?}");
}
