//! Issue 11.4 regression (the last part): polling 5,000 idle files cost a sizeable share of a
//! core, because every poll stat'ed every file. With change notification, an idle tailer checks
//! no file between events (until its safety sweep), checks only the written file after a write,
//! and still sees a write made right after start, a new file and a rotation promptly.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use retryscope::source::file::{FileTailer, FileTailerConfig, NoEvents};

const FILES: usize = 200;

fn tailer(dir: &Path) -> FileTailer {
    FileTailer::new(
        FileTailerConfig {
            include: vec![format!("{}/*.log", dir.display())],
            // As `run` configures it: rescans at most once a second.
            rescan_every: Duration::from_secs(1),
            ..FileTailerConfig::default()
        },
        Vec::new(),
    )
}

fn poll(t: &mut FileTailer) -> Vec<String> {
    let mut lines = Vec::new();
    t.poll(
        &mut |l| lines.push(String::from_utf8_lossy(l.bytes).into_owned()),
        &mut NoEvents,
    );
    lines
}

fn append(path: &Path, text: &str) {
    let mut f = OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn idle_tailer_checks_no_file_between_events_and_only_the_written_one_after() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..FILES {
        fs::write(dir.path().join(format!("f{i}.log")), format!("line {i}\n")).unwrap();
    }
    let mut t = tailer(dir.path());
    assert!(t.notifying(), "inotify is available on Linux");
    assert_eq!(poll(&mut t).len(), FILES);
    let after_start = t.file_checks();
    assert_eq!(
        after_start, FILES as u64,
        "the first poll looks at every file"
    );

    for _ in 0..10 {
        assert!(poll(&mut t).is_empty());
    }
    assert_eq!(
        t.file_checks(),
        after_start,
        "idle polls must not stat any file"
    );

    append(&dir.path().join("f7.log"), "more\n");
    assert_eq!(poll(&mut t), vec!["more".to_string()]);
    assert_eq!(t.file_checks(), after_start + 1, "only the written file");
}

#[test]
fn write_right_after_start_new_file_and_rotation_are_seen_at_the_next_poll() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.log");
    fs::write(&a, "one\n").unwrap();
    let mut t = tailer(dir.path());
    assert_eq!(poll(&mut t), vec!["one".to_string()]);

    // Written straight after the first poll: an event, read at the next poll.
    append(&a, "two\n");
    assert_eq!(poll(&mut t), vec!["two".to_string()]);

    // A new file, well within the 1 s rescan timer and the safety sweep: a directory event
    // makes the rescan due... once the rescan timer allows.
    std::thread::sleep(Duration::from_millis(1100));
    fs::write(dir.path().join("b.log"), "bee\n").unwrap();
    assert_eq!(poll(&mut t), vec!["bee".to_string()]);

    // Rename rotation: the old file is drained, the new one read from the start.
    std::thread::sleep(Duration::from_millis(1100));
    append(&a, "three\n");
    fs::rename(&a, dir.path().join("a.log.1")).unwrap();
    fs::write(&a, "fresh\n").unwrap();
    let mut got = poll(&mut t);
    got.sort();
    assert_eq!(got, vec!["fresh".to_string(), "three".to_string()]);
}

/// A file renamed into an empty watched folder just after a rescan: the directory event comes
/// while the 1 s rescan timer does not allow another, and must still make the rescan happen
/// once it does (it was dropped, and the file waited for the 5 s safety sweep).
#[test]
fn a_file_renamed_in_just_after_a_rescan_is_found_once_the_timer_allows() {
    let dir = tempfile::tempdir().unwrap();
    let staging = tempfile::tempdir_in(dir.path()).unwrap();
    let logs = dir.path().join("logs");
    fs::create_dir(&logs).unwrap();
    let mut t = tailer(&logs);
    assert!(t.notifying(), "inotify is available on Linux");
    assert!(poll(&mut t).is_empty(), "the first scan finds nothing");

    let staged = staging.path().join("a.log");
    fs::write(&staged, "one\n").unwrap();
    fs::rename(&staged, logs.join("a.log")).unwrap();
    // Well within the rescan timer: this poll takes the event and may not rescan yet.
    assert!(poll(&mut t).is_empty());

    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        poll(&mut t),
        vec!["one".to_string()],
        "found at the first poll the rescan timer allows, not at the safety sweep"
    );
}
