//! Integration tests of the file tailer on real files, with a real concurrent writer.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use retryscope::source::checkpoint_io::{read_checkpoint, write_atomic};
use retryscope::source::file::{
    FileCheckpoint, FileTailer, FileTailerConfig, Line, PollStats, ReadFrom, TailerEvents,
};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Ev {
    Added(PathBuf, u64),
    Resumed(PathBuf, u64),
    Rotated(PathBuf, Option<PathBuf>),
    Truncated(PathBuf, u64, u64),
    Released(PathBuf),
    TooLong(PathBuf, u64),
    ReadError(PathBuf, String),
    Mismatch(PathBuf),
    Orphaned(PathBuf, u64),
}

#[derive(Default)]
struct Rec(Vec<Ev>);

impl Rec {
    fn count(&self, f: impl Fn(&Ev) -> bool) -> usize {
        self.0.iter().filter(|e| f(e)).count()
    }
}

impl TailerEvents for Rec {
    fn file_added(&mut self, path: &Path, from_offset: u64) {
        self.0.push(Ev::Added(path.into(), from_offset));
    }
    fn file_resumed(&mut self, path: &Path, offset: u64) {
        self.0.push(Ev::Resumed(path.into(), offset));
    }
    fn file_rotated(&mut self, old_path: &Path, new_path: Option<&Path>) {
        self.0
            .push(Ev::Rotated(old_path.into(), new_path.map(Into::into)));
    }
    fn file_truncated(&mut self, path: &Path, old_offset: u64, new_size: u64) {
        self.0
            .push(Ev::Truncated(path.into(), old_offset, new_size));
    }
    fn file_drained_and_released(&mut self, path: &Path) {
        self.0.push(Ev::Released(path.into()));
    }
    fn line_too_long(&mut self, path: &Path, skipped_bytes: u64) {
        self.0.push(Ev::TooLong(path.into(), skipped_bytes));
    }
    fn read_error(&mut self, path: &Path, error: &std::io::Error) {
        self.0.push(Ev::ReadError(path.into(), error.to_string()));
    }
    fn open_failed(&mut self, path: &Path, error: &std::io::Error) {
        self.0.push(Ev::ReadError(path.into(), error.to_string()));
    }
    fn checkpoint_mismatch(&mut self, path: &Path) {
        self.0.push(Ev::Mismatch(path.into()));
    }
    fn checkpoint_orphaned(&mut self, path: &Path, offset: u64) {
        self.0.push(Ev::Orphaned(path.into(), offset));
    }
}

#[derive(Debug, Clone)]
struct Got {
    path: PathBuf,
    bytes: Vec<u8>,
    end: u64,
}

fn poll(t: &mut FileTailer, ev: &mut Rec, out: &mut Vec<Got>) -> PollStats {
    t.poll(
        &mut |l: Line<'_>| {
            out.push(Got {
                path: l.path.to_path_buf(),
                bytes: l.bytes.to_vec(),
                end: l.end_offset,
            })
        },
        ev,
    )
}

/// Poll (with short sleeps) until `done` holds, failing after `secs`.
fn poll_until(
    t: &mut FileTailer,
    ev: &mut Rec,
    out: &mut Vec<Got>,
    secs: u64,
    mut done: impl FnMut(&FileTailer, &Rec, &[Got]) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        poll(t, ev, out);
        if done(t, ev, out) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out; {} lines, events {:?}",
            out.len(),
            ev.0
        );
        thread::sleep(Duration::from_millis(5));
    }
}

fn config(include: &[PathBuf]) -> FileTailerConfig {
    FileTailerConfig {
        include: include.iter().map(|p| p.display().to_string()).collect(),
        rotate_wait: Duration::from_millis(200),
        // These tests are about lines with their newline: a last line without one waits for it
        // (its delivery after a quiet period is tested in src/source/file/watched.rs and
        // tests/live/trust_run.rs).
        partial_line_wait: Duration::from_secs(3600),
        ..FileTailerConfig::default()
    }
}

fn texts(out: &[Got]) -> Vec<String> {
    out.iter()
        .map(|g| String::from_utf8_lossy(&g.bytes).into_owned())
        .collect()
}

fn append(path: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

fn numbered(range: std::ops::Range<usize>) -> Vec<u8> {
    range
        .flat_map(|i| format!("{{\"n\":{i}}}\n").into_bytes())
        .collect()
}

/// The number in a `{"n":123,...}` line.
fn number(bytes: &[u8]) -> usize {
    let s = std::str::from_utf8(bytes).unwrap();
    let rest = s.strip_prefix("{\"n\":").unwrap();
    let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap();
    rest[..end].parse().unwrap()
}

const N: usize = 20_000;

/// A logger thread: writes `{"n":i,...}` lines with O_APPEND in batches, pausable through
/// `gate`; when `reopen` is set it writes 50 more lines to its old handle (the way a logger
/// notices rotation late), then opens `path` anew and records where the new generation starts.
struct Writer {
    progress: Arc<AtomicUsize>,
    reopen: Arc<AtomicBool>,
    gate: Arc<Mutex<()>>,
    boundaries: Arc<Mutex<Vec<usize>>>,
    handle: thread::JoinHandle<()>,
}

fn spawn_writer(path: PathBuf) -> Writer {
    let progress = Arc::new(AtomicUsize::new(0));
    let reopen = Arc::new(AtomicBool::new(false));
    let gate = Arc::new(Mutex::new(()));
    let boundaries = Arc::new(Mutex::new(vec![0]));
    let (p, r, g, b) = (
        progress.clone(),
        reopen.clone(),
        gate.clone(),
        boundaries.clone(),
    );
    let open = move |path: &Path| -> File {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
    };
    let handle = thread::spawn(move || {
        let mut file = open(&path);
        let mut late = 0;
        let mut guard = Some(g.lock().unwrap());
        for i in 0..N {
            if i % 100 == 0 {
                drop(guard.take());
                thread::sleep(Duration::from_millis(1));
                guard = Some(g.lock().unwrap());
            }
            if r.load(Ordering::SeqCst) {
                // Late lines trickle in, so the tailer sees the rename while they still come.
                thread::sleep(Duration::from_micros(500));
                late += 1;
                if late > 50 {
                    file = open(&path);
                    b.lock().unwrap().push(i);
                    late = 0;
                    r.store(false, Ordering::SeqCst);
                }
            }
            let line = format!("{{\"n\":{i},\"pad\":\"{}\"}}\n", "x".repeat(i % 40));
            file.write_all(line.as_bytes()).unwrap();
            p.store(i + 1, Ordering::SeqCst);
        }
        drop(guard);
    });
    Writer {
        progress,
        reopen,
        gate,
        boundaries,
        handle,
    }
}

/// Every number 0..N exactly once, and within each generation in order with no gap.
fn assert_exactly_once(out: &[Got], boundaries: &[usize]) {
    let nums: Vec<usize> = out.iter().map(|g| number(&g.bytes)).collect();
    let mut sorted = nums.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), nums.len(), "duplicates delivered");
    assert_eq!(sorted, (0..N).collect::<Vec<_>>(), "lines lost");
    let mut last: Vec<Option<usize>> = vec![None; boundaries.len()];
    for n in nums {
        let g = boundaries.partition_point(|&b| b <= n) - 1;
        let expected = last[g].map_or(boundaries[g], |l| l + 1);
        assert_eq!(n, expected, "out of order within generation {g}");
        last[g] = Some(n);
    }
}

fn rename_rotation(include_rotated_names: bool) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let include = if include_rotated_names {
        dir.path().join("app.log*")
    } else {
        log.clone()
    };
    let w = spawn_writer(log.clone());
    let mut t = FileTailer::new(config(&[include]), Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    let rotations = 4;
    let mut rotated = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while out.len() < N {
        poll(&mut t, &mut ev, &mut out);
        let p = w.progress.load(Ordering::SeqCst);
        if rotated < rotations
            && p >= (rotated + 1) * N / (rotations + 1)
            && !w.reopen.load(Ordering::SeqCst)
        {
            rotated += 1;
            fs::rename(&log, dir.path().join(format!("app.log.{rotated}"))).unwrap();
            w.reopen.store(true, Ordering::SeqCst);
        }
        assert!(
            Instant::now() < deadline,
            "timed out at {} lines",
            out.len()
        );
        thread::sleep(Duration::from_millis(2));
    }
    w.handle.join().unwrap();
    assert_eq!(rotated, rotations);
    let boundaries = w.boundaries.lock().unwrap().clone();
    assert_eq!(boundaries.len(), rotations + 1);
    assert_exactly_once(&out, &boundaries);
    // Lines were delivered under the name the file had at the time.
    assert!(out.iter().all(|g| g.path.starts_with(dir.path())));
    // Some lines were read from a file after the tailer saw it renamed.
    assert!(
        out.iter().any(|g| g.path != log),
        "no line read after a rename"
    );
    let rotated_events = ev.count(|e| matches!(e, Ev::Rotated(old, Some(_)) if *old == log));
    assert_eq!(rotated_events, rotations, "{:?}", ev.0);
    if include_rotated_names {
        // Rotated files still match: they stay watched.
        assert_eq!(t.files_watched(), rotations + 1);
    } else {
        poll_until(&mut t, &mut ev, &mut out, 5, |t, _, _| {
            t.files_watched() == 1
        });
        assert_eq!(ev.count(|e| matches!(e, Ev::Released(_))), rotations);
    }
    assert_eq!(out.len(), N);
    assert_eq!(t.lag_bytes(), 0);
}

#[test]
fn rename_rotation_with_live_writer_is_exactly_once() {
    rename_rotation(false);
}

#[test]
fn rename_rotation_to_included_names_is_exactly_once() {
    rename_rotation(true);
}

#[test]
fn copytruncate_with_paused_writer_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let w = spawn_writer(log.clone());
    let mut t = FileTailer::new(config(std::slice::from_ref(&log)), Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    let rotations = 4;
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while out.len() < N {
        poll(&mut t, &mut ev, &mut out);
        let p = w.progress.load(Ordering::SeqCst);
        if done < rotations && p >= (done + 1) * N / (rotations + 1) {
            done += 1;
            // Pause the writer, let the tailer catch up, then copy and truncate: what is
            // appended between the tailer's last read and the truncation is what copytruncate
            // loses; with the writer paused and the tailer caught up, that is nothing.
            let paused = w.gate.lock().unwrap();
            poll_until(&mut t, &mut ev, &mut out, 5, |t, _, _| t.lag_bytes() == 0);
            fs::copy(&log, dir.path().join(format!("app.log.{done}"))).unwrap();
            OpenOptions::new()
                .write(true)
                .open(&log)
                .unwrap()
                .set_len(0)
                .unwrap();
            drop(paused);
        }
        assert!(
            Instant::now() < deadline,
            "timed out at {} lines",
            out.len()
        );
        thread::sleep(Duration::from_millis(2));
    }
    w.handle.join().unwrap();
    assert_eq!(done, rotations);
    // One file, one generation of numbers: all in order.
    assert_exactly_once(&out, &[0]);
    assert_eq!(
        ev.count(|e| matches!(e, Ev::Truncated(p, _, _) if *p == log)),
        rotations
    );
    // The copies are not included, so they were never read.
    assert!(out.iter().all(|g| g.path == log));
    assert_eq!(t.files_watched(), 1);
}

#[test]
fn restart_from_checkpoints_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let ckpt = dir.path().join("checkpoint.json");
    append(&log, &numbered(0..500));
    let mut out = Vec::new();
    {
        let mut t = FileTailer::new(config(std::slice::from_ref(&log)), Vec::new());
        let mut ev = Rec::default();
        poll(&mut t, &mut ev, &mut out);
        assert_eq!(out.len(), 500);
        append(&log, &numbered(500..1000));
        // Written but not polled: not in the checkpoint.
        let cps = t.checkpoints();
        assert_eq!(cps.len(), 1);
        assert_eq!(cps[0].offset, out[499].end);
        write_atomic(&ckpt, &serde_json::to_vec(&cps).unwrap()).unwrap();
    }
    let bytes = read_checkpoint(&ckpt).unwrap().unwrap();
    let cps: Vec<FileCheckpoint> = serde_json::from_slice(&bytes).unwrap();
    let mut t = FileTailer::new(config(std::slice::from_ref(&log)), cps.clone());
    // Before the first poll the given checkpoints are handed back unchanged.
    assert_eq!(t.checkpoints(), cps);
    let mut ev = Rec::default();
    poll(&mut t, &mut ev, &mut out);
    assert_eq!(ev.0, vec![Ev::Resumed(log.clone(), cps[0].offset)]);
    let nums: Vec<usize> = out.iter().map(|g| number(&g.bytes)).collect();
    assert_eq!(nums, (0..1000).collect::<Vec<_>>());
}

#[test]
fn restart_after_rotation_while_down_drains_the_rotated_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let rotated = dir.path().join("app.log.1");
    append(&log, &numbered(0..500));
    let mut out = Vec::new();
    let cps = {
        let mut t = FileTailer::new(config(std::slice::from_ref(&log)), Vec::new());
        poll(&mut t, &mut Rec::default(), &mut out);
        t.checkpoints()
    };
    // While down: more lines, a rename rotation, and lines in the new file.
    append(&log, &numbered(500..700));
    fs::rename(&log, &rotated).unwrap();
    append(&log, &numbered(700..1000));
    // read_from=End must not skip the new generation at the checkpointed path.
    let mut cfg = config(std::slice::from_ref(&log));
    cfg.read_from = ReadFrom::End;
    let mut t = FileTailer::new(cfg, cps.clone());
    let mut ev = Rec::default();
    poll(&mut t, &mut ev, &mut out);
    assert_eq!(
        ev.0[..3],
        [
            Ev::Rotated(log.clone(), Some(rotated.clone())),
            Ev::Resumed(rotated.clone(), cps[0].offset),
            Ev::Added(log.clone(), 0),
        ]
    );
    let nums: Vec<usize> = out.iter().map(|g| number(&g.bytes)).collect();
    assert_eq!(nums, (0..1000).collect::<Vec<_>>());
    assert!(out[500..700].iter().all(|g| g.path == rotated));
    assert!(out[700..].iter().all(|g| g.path == log));
    // The rotated file is not included: drained, then released.
    poll_until(&mut t, &mut ev, &mut out, 5, |t, _, _| {
        t.files_watched() == 1
    });
    assert!(ev.0.contains(&Ev::Released(rotated)));
    assert_eq!(t.checkpoints().len(), 1);
    assert_eq!(t.checkpoints()[0].path, log);
}

#[test]
fn restart_with_reused_inode_starts_over_and_missing_file_is_orphaned() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let gone = dir.path().join("gone.log");
    append(&log, &numbered(0..10));
    append(&gone, &numbered(0..10));
    let cps = {
        let mut t = FileTailer::new(config(&[dir.path().join("*.log")]), Vec::new());
        poll(&mut t, &mut Rec::default(), &mut Vec::new());
        t.checkpoints()
    };
    assert_eq!(cps.len(), 2);
    fs::remove_file(&gone).unwrap();
    // Same inode, other content: simulate by overwriting in place (keeps the inode).
    fs::write(&log, numbered(100..110)).unwrap();
    let mut t = FileTailer::new(config(&[dir.path().join("*.log")]), cps);
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    poll(&mut t, &mut ev, &mut out);
    assert!(ev.0.contains(&Ev::Mismatch(log.clone())), "{:?}", ev.0);
    assert!(ev.0.contains(&Ev::Added(log.clone(), 0)));
    assert!(
        ev.0.iter()
            .any(|e| matches!(e, Ev::Orphaned(p, _) if *p == gone))
    );
    let nums: Vec<usize> = out.iter().map(|g| number(&g.bytes)).collect();
    assert_eq!(nums, (100..110).collect::<Vec<_>>());
}

#[test]
fn truncation_restarts_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, &numbered(0..10));
    let mut t = FileTailer::new(config(std::slice::from_ref(&log)), Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    poll(&mut t, &mut ev, &mut out);
    let old_offset = out[9].end;
    fs::write(&log, b"").unwrap();
    append(&log, &numbered(10..13));
    let size = fs::metadata(&log).unwrap().len();
    poll(&mut t, &mut ev, &mut out);
    assert!(ev.0.contains(&Ev::Truncated(log.clone(), old_offset, size)));
    let nums: Vec<usize> = out.iter().map(|g| number(&g.bytes)).collect();
    assert_eq!(nums, (0..13).collect::<Vec<_>>());
    assert_eq!(out[12].end, size);
    // Truncated and regrown past the old offset between two polls: the changed first bytes
    // give it away.
    fs::write(&log, b"").unwrap();
    append(&log, &numbered(1000..1100));
    poll(&mut t, &mut ev, &mut out);
    assert_eq!(ev.count(|e| matches!(e, Ev::Truncated(..))), 2);
    assert_eq!(out.len(), 113);
    assert_eq!(number(&out[13].bytes), 1000);
}

#[test]
fn partial_lines_wait_for_their_newline() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, b"abc");
    let mut t = FileTailer::new(config(std::slice::from_ref(&log)), Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    poll(&mut t, &mut ev, &mut out);
    assert!(out.is_empty());
    append(&log, b"def\nghi");
    poll(&mut t, &mut ev, &mut out);
    assert_eq!(texts(&out), ["abcdef"]);
    assert_eq!(out[0].end, 7);
    assert_eq!(t.checkpoints()[0].offset, 7);
    assert_eq!(t.lag_bytes(), 3);
    // The final unterminated line stays pending however often we poll.
    poll(&mut t, &mut ev, &mut out);
    assert_eq!(out.len(), 1);
    append(&log, b"\n");
    poll(&mut t, &mut ev, &mut out);
    assert_eq!(texts(&out), ["abcdef", "ghi"]);
    assert_eq!(out[1].end, 11);
}

#[test]
fn over_long_line_is_skipped_with_exact_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let long = 10 * 1024 * 1024;
    append(&log, b"first\n");
    let mut t = FileTailer::new(config(std::slice::from_ref(&log)), Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    poll(&mut t, &mut ev, &mut out);
    // Written in pieces, so the skip spans polls.
    let piece = vec![b'x'; long / 4];
    for _ in 0..4 {
        append(&log, &piece);
        poll(&mut t, &mut ev, &mut out);
        assert_eq!(
            t.checkpoints()[0].offset,
            6,
            "offset stays at the line start"
        );
    }
    append(&log, b"\nnext\n");
    poll_until(&mut t, &mut ev, &mut out, 5, |_, _, out| out.len() == 2);
    assert_eq!(texts(&out), ["first", "next"]);
    assert_eq!(ev.0[1..], [Ev::TooLong(log.clone(), long as u64)]);
    let size = (6 + long + 1 + 5) as u64;
    assert_eq!(out[1].end, size);
    assert_eq!(t.checkpoints()[0].offset, size);
    // A line of exactly the maximum (plus CRLF) is still delivered.
    let mut cfg = config(std::slice::from_ref(&log));
    cfg.max_line_bytes = 8;
    fs::write(&log, b"12345678\r\n123456789\nok\n").unwrap();
    let mut t = FileTailer::new(cfg, Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    poll(&mut t, &mut ev, &mut out);
    assert_eq!(texts(&out), ["12345678", "ok"]);
    assert_eq!(ev.0[1..], [Ev::TooLong(log.clone(), 9)]);
}

#[test]
fn bytes_pass_through_and_crlf_is_stripped() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, b"caf\xe9 \xff\xfe\r\nplain\n\r\n\nlone\rcr\n");
    let mut t = FileTailer::new(config(std::slice::from_ref(&log)), Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    poll(&mut t, &mut ev, &mut out);
    let bytes: Vec<&[u8]> = out.iter().map(|g| g.bytes.as_slice()).collect();
    assert_eq!(
        bytes,
        [&b"caf\xe9 \xff\xfe"[..], b"plain", b"", b"", b"lone\rcr"]
    );
    let ends: Vec<u64> = out.iter().map(|g| g.end).collect();
    assert_eq!(ends, [9, 15, 17, 18, 26]);
}

#[test]
fn read_from_end_applies_only_to_files_present_at_first_scan() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("old.log");
    append(&old, b"one\ntwo\npar");
    let mut cfg = config(&[dir.path().join("*.log")]);
    cfg.read_from = ReadFrom::End;
    let mut t = FileTailer::new(cfg, Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    poll(&mut t, &mut ev, &mut out);
    assert!(out.is_empty());
    // Started at the last line's start: the line being written is delivered whole.
    assert_eq!(ev.0, [Ev::Added(old.clone(), 8)]);
    append(&old, b"tial\nthree\n");
    // A file appearing mid-run is read from its start.
    let new = dir.path().join("new.log");
    append(&new, b"n1\nn2\n");
    poll(&mut t, &mut ev, &mut out);
    assert_eq!(texts(&out), ["partial", "three", "n1", "n2"]);
    assert_eq!(ev.0[1], Ev::Added(new.clone(), 0));
    assert_eq!(t.files_watched(), 2);
}

#[test]
fn exclude_globs_are_never_read() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    append(&dir.path().join("a.log"), b"a\n");
    append(&dir.path().join("a.log.gz"), b"gz\n");
    append(&dir.path().join("skip.log"), b"skip\n");
    append(&dir.path().join("sub/b.log"), b"b\n");
    let mut cfg = config(&[dir.path().join("**/*.log*")]);
    cfg.exclude = vec![
        "*.gz".into(),
        dir.path().join("skip*").display().to_string(),
    ];
    let mut t = FileTailer::new(cfg, Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    poll(&mut t, &mut ev, &mut out);
    let mut got = texts(&out);
    got.sort();
    assert_eq!(got, ["a", "b"]);
    assert_eq!(t.files_watched(), 2);
}

#[test]
fn deleted_file_is_drained_then_released() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    append(&log, &numbered(0..10));
    let mut t = FileTailer::new(config(std::slice::from_ref(&log)), Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    poll(&mut t, &mut ev, &mut out);
    // A writer still holding the file appends, and the file is deleted before the next poll.
    let mut writer = OpenOptions::new().append(true).open(&log).unwrap();
    writer.write_all(&numbered(10..20)).unwrap();
    fs::remove_file(&log).unwrap();
    poll(&mut t, &mut ev, &mut out);
    writer.write_all(&numbered(20..25)).unwrap();
    poll_until(&mut t, &mut ev, &mut out, 5, |t, _, _| {
        t.files_watched() == 0
    });
    let nums: Vec<usize> = out.iter().map(|g| number(&g.bytes)).collect();
    assert_eq!(nums, (0..25).collect::<Vec<_>>());
    assert_eq!(ev.count(|e| matches!(e, Ev::Released(p) if *p == log)), 1);
    assert!(t.checkpoints().is_empty());
}

#[test]
fn per_poll_budget_is_fair_between_files() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.log");
    let b = dir.path().join("b.log");
    append(&a, &numbered(0..1000));
    append(&b, &numbered(0..1000));
    let mut cfg = config(&[dir.path().join("*.log")]);
    cfg.max_read_bytes_per_poll = 1000;
    let mut t = FileTailer::new(cfg, Vec::new());
    let (mut ev, mut out) = (Rec::default(), Vec::new());
    let stats = poll(&mut t, &mut ev, &mut out);
    assert!(stats.throttled);
    assert_eq!(stats.bytes, 2000);
    assert!(out.iter().any(|g| g.path == a) && out.iter().any(|g| g.path == b));
    let mut polls = 1;
    while poll(&mut t, &mut ev, &mut out).throttled {
        polls += 1;
    }
    assert!(polls > 5);
    assert_eq!(out.len(), 2000);
    assert_eq!(t.lag_bytes(), 0);
}
