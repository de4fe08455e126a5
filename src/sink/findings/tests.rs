use super::*;
use retryscope_core::finding::FindingKind;

#[test]
fn a_written_finding_is_in_the_file_before_any_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("findings.jsonl");
    let mut sink = FindingsSink::open(path.to_str().unwrap(), None).unwrap();
    let f = Finding::new(FindingKind::DuplicateEffect, "t", Some(1), "x".into());
    sink.write(&f).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 1, "{text:?}");
}

#[test]
fn file_sink_tracks_offset_and_resumes_by_truncating() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("findings.jsonl");
    let target = path.to_str().unwrap();
    let f = Finding::new(FindingKind::DuplicateEffect, "t", Some(1), "x".into());
    let mut sink = FindingsSink::open(target, None).unwrap();
    sink.write(&f).unwrap();
    let at = sink.checkpoint_offset().unwrap().unwrap();
    sink.write(&f).unwrap();
    sink.flush().unwrap();
    drop(sink);
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
    // Restart from the checkpoint: the line written after it is cut, then written again.
    let mut sink = FindingsSink::open(target, Some(at)).unwrap();
    sink.write(&f).unwrap();
    sink.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 2);
    let parsed: Finding = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(parsed, f);
}

/// Issue 11.2: on a full disk, findings were dropped and the next checkpoint recorded an
/// offset past the gap. `/dev/full` fails every write with ENOSPC, like a full filesystem.
#[test]
fn findings_lost_on_a_full_disk_are_kept_and_never_checkpointed_past() {
    let full = Path::new("/dev/full");
    if !full.exists() {
        eprintln!("skipped: no /dev/full on this system");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("findings.jsonl");
    let mut sink = FindingsSink::open(good.to_str().unwrap(), None).unwrap();
    let f = |i: u32| {
        Finding::new(
            FindingKind::DuplicateEffect,
            &format!("t{i}"),
            Some(1),
            "x".into(),
        )
    };
    for i in 0..10 {
        sink.write(&f(i)).unwrap();
    }
    let before = sink.checkpoint_offset().unwrap().unwrap();
    // The disk fills up: swap in a file whose writes fail.
    let FindingsSink::File { file, .. } = &mut sink else {
        panic!("file sink")
    };
    let real = std::mem::replace(file, OpenOptions::new().append(true).open(full).unwrap());
    for i in 10..600 {
        let _ = sink.write(&f(i));
    }
    assert!(
        sink.checkpoint_offset().is_err(),
        "no offset while findings are queued"
    );
    assert!(sink.queued_bytes() > 0);
    // Space is freed: everything queued reaches the file, in order, once.
    let FindingsSink::File { file, .. } = &mut sink else {
        panic!("file sink")
    };
    *file = real;
    let after = sink.checkpoint_offset().unwrap().unwrap();
    assert!(after > before);
    let text = std::fs::read_to_string(&good).unwrap();
    assert_eq!(after, text.len() as u64);
    let turns: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<Finding>(l).unwrap().turn)
        .collect();
    assert_eq!(turns, (0..600).map(|i| format!("t{i}")).collect::<Vec<_>>());
}
