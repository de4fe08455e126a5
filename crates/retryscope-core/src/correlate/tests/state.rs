//! The correlator's state: its size per open turn, and checkpoints (snapshot and
//! restore, and a checkpoint the previous version wrote).

use super::*;

/// NAIVE's reports when a checkpoint is taken after `split` lines, passed through `edit` as
/// JSON, and restored for the rest.
fn resumed_at(split: usize, edit: &mut dyn FnMut(&mut serde_json::Value)) -> Vec<TurnReport> {
    let lines: Vec<&str> = NAIVE.lines().collect();
    let prices = Arc::new(PriceTable::builtin());
    let mut c = Correlator::new(cfg(), prices.clone());
    let mut out = Vec::new();
    let mut skips = SkipCounts::default();
    for (i, l) in lines[..split].iter().enumerate() {
        if let Ok(NativeLine::Event(ev)) = decode_line(l.as_bytes(), &mut skips) {
            c.observe(&ev, 1_000 + i as i64, &mut out);
        }
    }
    let mut snap = serde_json::to_value(c.snapshot()).unwrap();
    edit(&mut snap);
    let mut c = Correlator::restore(cfg(), prices, serde_json::from_value(snap).unwrap());
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate().skip(split) {
        if let Ok(NativeLine::Event(ev)) = decode_line(l.as_bytes(), &mut skips) {
            c.observe(&ev, 1_000 + i as i64, &mut out);
        }
    }
    c.close_all(&mut out);
    out.into_iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .collect()
}

#[test]
fn snapshot_restore_resumes_exactly() {
    let (_, whole) = run(NAIVE);
    for split in 0..NAIVE.lines().count() {
        assert_eq!(resumed_at(split, &mut |_| {}), whole, "split at {split}");
    }
}

/// Open turns are the correlator's memory: keep its per-turn structs from creeping up
/// unnoticed (the benchmark reports the resulting bytes per open turn).
#[test]
fn per_turn_state_stays_small() {
    assert!(std::mem::size_of::<turn::TurnState>() <= 384);
    // 312: one pointer for a continuation's texts (issue 21), boxed so that it costs 8 bytes.
    assert!(std::mem::size_of::<attempt::AttemptState>() <= 312);
    assert!(std::mem::size_of::<attempt::CallState>() <= 88);
}

#[test]
fn an_open_turn_its_attempt_and_call_fit_their_allocation_size_classes() {
    // Open turns are `check`'s and `run`'s memory (issue 24: at most 1 KiB each). The
    // allocator's size classes step from 256 to 320 bytes: one field more costs 64 per turn.
    assert!(std::mem::size_of::<super::turn::TurnState>() <= 256);
    assert!(std::mem::size_of::<super::attempt::AttemptState>() <= 256);
    assert!(std::mem::size_of::<super::attempt::CallState>() <= 64);
}

#[test]
fn an_open_turn_checkpointed_by_the_previous_version_reads_back() {
    // Before `StreamHash` lost its `tail_len` and the turn's times their `Option` (both kept
    // their serialised form), a checkpoint carried `tail_len`: such a checkpoint, taken with
    // texts of every length mod 8 open, must resume exactly as the current one does.
    let (_, whole) = run(NAIVE);
    let mut total = 0;
    for split in 1..NAIVE.lines().count() {
        let mut hashes = 0;
        let resumed = resumed_at(split, &mut |snap| add_tail_len(snap, &mut hashes));
        assert_eq!(resumed, whole, "split at {split} ({hashes} hashes)");
        total += hashes;
    }
    assert!(total > 0, "no open text was checkpointed");
}

/// Puts the old `tail_len` (`len % 8`) into every serialised `StreamHash`.
fn add_tail_len(v: &mut serde_json::Value, n: &mut usize) {
    match v {
        serde_json::Value::Object(o) => {
            if let (Some(len), true, true) = (
                o.get("len").and_then(serde_json::Value::as_u64),
                o.contains_key("acc"),
                o.contains_key("tail"),
            ) {
                o.insert("tail_len".into(), (len % 8).into());
                *n += 1;
            }
            o.values_mut().for_each(|v| add_tail_len(v, n));
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(|v| add_tail_len(v, n)),
        _ => {}
    }
}
