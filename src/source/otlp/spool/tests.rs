//! The spool on a real folder: replay after a position, a torn last line, release.

use super::*;

fn rec(stream: &str, n: u32) -> Record {
    Record {
        stream: stream.to_owned(),
        line: format!("{{\"otlp\":\"log\",\"n\":{n}}}").into_bytes(),
    }
}

#[test]
fn what_was_appended_after_the_checkpoint_is_replayed_once_and_a_torn_line_is_not() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut spool, replay) = Spool::open(dir.path(), None).expect("open");
    assert!(replay.is_empty());
    let first = spool.append(&[rec("a", 1), rec("b", 2)]).expect("append");
    let second = spool.append(&[rec("a", 3)]).expect("append");
    assert!(second > first);
    drop(spool);
    // A crash mid-write leaves a line without its newline (never acknowledged).
    let seg = segment_path(dir.path(), first.segment);
    let mut f = OpenOptions::new().append(true).open(&seg).expect("segment");
    f.write_all(b"a\t{\"otlp\":\"lo").expect("torn");
    drop(f);
    // The checkpoint covered the first batch only.
    let (spool, replay) = Spool::open(dir.path(), Some(first)).expect("reopen");
    assert_eq!(replay.len(), 1);
    assert_eq!(replay[0].0, vec![rec("a", 3)]);
    assert_eq!(replay[0].1, second);
    // The new process writes a new segment, never after the torn line.
    assert_eq!(spool.position().segment, first.segment + 1);
    drop(spool);
    // Without a checkpoint, everything complete is replayed.
    let (_, all) = Spool::open(dir.path(), None).expect("reopen");
    let n: usize = all.iter().map(|(r, _)| r.len()).sum();
    assert_eq!(n, 3);
}

#[test]
fn release_deletes_only_segments_a_checkpoint_has_passed() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut s1, _) = Spool::open(dir.path(), None).expect("open");
    let p1 = s1.append(&[rec("a", 1)]).expect("append");
    drop(s1);
    let (mut s2, replay) = Spool::open(dir.path(), None).expect("open");
    assert_eq!(replay.len(), 1);
    let p2 = s2.append(&[rec("a", 2)]).expect("append");
    assert_eq!(segments(dir.path()).expect("list").len(), 2);
    s2.release(p1); // still in segment 1: nothing goes
    assert_eq!(segments(dir.path()).expect("list").len(), 2);
    s2.release(p2); // past segment 1
    assert_eq!(segments(dir.path()).expect("list"), vec![p2.segment]);
    let (_, replay) = Spool::open(dir.path(), Some(p2)).expect("open");
    assert!(replay.is_empty());
}

#[test]
fn bytes_on_disk_follow_appends_and_releases() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut spool, _) = Spool::open(dir.path(), None).expect("open");
    assert_eq!(spool.bytes(), 0);
    let first = spool.append(&[rec("a", 1), rec("b", 2)]).expect("append");
    assert_eq!(spool.bytes(), first.offset);
    drop(spool);
    // A restart counts the old segment (not released yet) and starts a new one.
    let (mut spool, _) = Spool::open(dir.path(), Some(first)).expect("reopen");
    assert_eq!(spool.bytes(), first.offset);
    let second = spool.append(&[rec("a", 3)]).expect("append");
    assert_eq!(spool.bytes(), first.offset + second.offset);
    // A checkpoint past the old segment deletes it; its bytes go with it.
    spool.release(second);
    assert_eq!(spool.bytes(), second.offset);
    let on_disk: u64 = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").metadata().expect("meta").len())
        .sum();
    assert_eq!(spool.bytes(), on_disk);
}
