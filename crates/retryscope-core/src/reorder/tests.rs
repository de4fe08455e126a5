use super::*;
use crate::decode::SkipCounts;
use crate::decode::native::{self, NativeLine};
use crate::event::EventKind;

fn ev(turn: &str, ts: i64) -> Event<'static> {
    Event::owned(turn, Some(0), Some(ts), EventKind::RenderReset)
}

#[test]
fn released_one_turn_at_a_time_each_whole_in_time_order_turns_as_first_seen() {
    let mut h = TurnHold::new(1_000);
    let mut early = Vec::new();
    for (turn, ts, at) in [
        ("b", 7, 0),
        ("a", 3, 10),
        ("b", 2, 20),
        ("a", 1, 30),
        ("c", 9, 900),
    ] {
        h.push(ev(turn, ts), at, None, 0, None, &mut early);
    }
    let mut turns = Vec::new();
    h.release_each(1_100, false, |turn| {
        turns.push(
            std::mem::take(turn)
                .into_events()
                .iter()
                .map(|e| (e.event.turn.to_string(), e.event.ts_ms))
                .collect::<Vec<_>>(),
        );
    });
    // c is not quiet yet; b was seen first; each turn sorted by its own time.
    let at = |t: &str, ts: i64| (t.to_string(), Some(ts));
    assert_eq!(
        turns,
        vec![vec![at("b", 2), at("b", 7)], vec![at("a", 1), at("a", 3)]]
    );
    assert_eq!(h.len(), 1);
    let mut rest = Vec::new();
    h.release(i64::MAX, true, &mut rest);
    assert_eq!(rest.len(), 1);
    assert!(h.is_empty());
}

#[test]
fn a_quiet_turn_comes_out_in_time_order_and_a_busy_one_waits() {
    let mut h = TurnHold::new(1_000);
    let mut out: Vec<HeldEvent> = Vec::new();
    let mut early = Vec::new();
    // Turn a's second half first (ts 10, 11), its first half later (ts 1, 2).
    for (turn, ts, at) in [
        ("a", 10, 0),
        ("a", 11, 0),
        ("b", 5, 100),
        ("a", 1, 500),
        ("a", 2, 600),
    ] {
        h.push(ev(turn, ts), at, None, 0, None, &mut early);
    }
    h.release(1_050, false, &mut out);
    assert!(
        out.is_empty(),
        "a's last event came 450 ms ago, b's 950: neither is quiet"
    );
    // Held across a checkpoint.
    let snap = h.snapshot().expect("held");
    let mut h = TurnHold::restore(1_000, snap);
    h.release(1_600, false, &mut out);
    let got: Vec<(String, Option<i64>)> = out
        .iter()
        .map(|e| (e.event.turn.to_string(), e.event.ts_ms))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a".into(), Some(1)),
            ("a".into(), Some(2)),
            ("a".into(), Some(10)),
            ("a".into(), Some(11)),
            ("b".into(), Some(5)),
        ]
    );
    assert!(h.is_empty() && h.snapshot().is_none());
}

/// A native line of turn `turn` at `ts`, as a cluster message carries it.
fn line(turn: &str, ts: i64) -> String {
    format!(r#"{{"type":"render_reset","turn":"{turn}","attempt":0,"ts_ms":{ts}}}"#)
}

#[test]
fn events_that_can_be_read_again_are_checkpointed_by_reference_and_read_back() {
    // Two messages of lines; one event (a provider chunk's, say) that cannot be read again.
    let msgs: Vec<Vec<String>> = vec![
        vec![line("a", 10), line("b", 5), line("a", 11)],
        vec![line("b", 6), line("a", 1)],
    ];
    let input: Arc<str> = Arc::from("host-b:agent.jsonl");
    let mut h = TurnHold::new(1_000);
    let mut early = Vec::new();
    for (m, lines) in msgs.iter().enumerate() {
        for (i, l) in lines.iter().enumerate() {
            let mut skips = SkipCounts::default();
            let Ok(NativeLine::Event(ev)) = native::decode_line(l.as_bytes(), &mut skips) else {
                panic!("{l} decodes");
            };
            let place = Place {
                msg: 100 + m as u64 * 7,
                line: i as u32,
            };
            h.push(
                ev.into_owned(),
                50 * m as i64,
                Some(input.clone()),
                0,
                Some(place),
                &mut early,
            );
        }
    }
    h.push(ev("a", 2), 60, None, 3, None, &mut early);
    let want = {
        let mut all = Vec::new();
        h.clone().release(i64::MAX, true, &mut all);
        all
    };
    let snap = h.snapshot().expect("held");
    assert_eq!(
        snap.events.len(),
        1,
        "only the unplaced event is kept whole"
    );
    assert_eq!(snap.ref_count(), 5);
    assert_eq!(snap.ref_messages(), vec![100, 107]);
    let json = serde_json::to_string(&snap).expect("encodes");
    assert_eq!(
        json.matches("render_reset").count(),
        1,
        "only the whole event's text: {json}"
    );
    let mut back: HoldSnapshot = serde_json::from_str(&json).expect("decodes");
    let lost = back.resolve(|p| {
        let m = usize::try_from((p.msg - 100) / 7).ok()?;
        msgs.get(m)?.get(p.line as usize).map(|l| l.as_bytes())
    });
    assert_eq!(lost, 0);
    let mut got = Vec::new();
    TurnHold::restore(1_000, back).release(i64::MAX, true, &mut got);
    assert_eq!(got, want, "the same events, arrivals, order and origins");
    assert_eq!(got.len(), 6);

    // A message gone from the stream: its events are counted lost, the rest come back.
    let mut back: HoldSnapshot = serde_json::from_str(&json).expect("decodes");
    let lost = back.resolve(|p| (p.msg == 107).then(|| msgs[1][p.line as usize].as_bytes()));
    assert_eq!(lost, 3);
    assert_eq!(back.events.len(), 3);
}

#[test]
fn a_released_turn_leaves_the_references_and_held_again_keeps_only_its_new_events() {
    let mut h = TurnHold::new(1_000);
    let mut out: Vec<HeldEvent> = Vec::new();
    let mut early = Vec::new();
    let at = |msg, line| Some(Place { msg, line });
    h.push(ev("a", 1), 0, None, 0, at(1, 0), &mut early);
    h.push(ev("b", 1), 0, None, 0, at(1, 1), &mut early);
    h.push(ev("a", 2), 500, None, 0, at(2, 0), &mut early);
    h.release(1_200, false, &mut out); // b is quiet, a is not
    assert_eq!(out.len(), 1);
    h.release(1_600, false, &mut out); // now a
    assert_eq!(out.len(), 3);
    assert!(h.snapshot().is_none());
    // Turn a again, in a later message: only that event is referenced.
    h.push(ev("a", 9), 2_000, None, 0, at(3, 4), &mut early);
    let snap = h.snapshot().expect("held");
    assert_eq!(snap.ref_messages(), vec![3]);
    assert_eq!((snap.ref_count(), snap.events.len()), (1, 0));
    // Many turns released: the log is compacted and still right.
    for i in 0..5_000u32 {
        h.push(
            ev(&format!("t{i}"), 1),
            3_000,
            None,
            0,
            at(4, i),
            &mut early,
        );
    }
    h.release(3_500, false, &mut out); // a (last at 2,000) goes, the t-turns stay
    assert_eq!(
        h.placed.len(),
        5_004,
        "the four entries of released turns wait for more"
    );
    h.release(10_000, false, &mut out);
    h.push(ev("z", 1), 10_000, None, 0, at(5, 0), &mut early);
    assert!(
        h.placed.len() <= 1 + 1024,
        "compacted (at most 1,024 dead entries wait): {}",
        h.placed.len()
    );
    let snap = h.snapshot().expect("held");
    assert_eq!((snap.ref_messages(), snap.ref_count()), (vec![5], 1));
}

#[test]
fn an_event_held_past_the_reference_age_is_kept_whole() {
    let mut h = TurnHold::new(TurnHold::REF_MAX_AGE_MS * 4);
    let mut early = Vec::new();
    let place = |msg| Some(Place { msg, line: 0 });
    h.push(ev("long", 1), 0, None, 0, place(1), &mut early);
    h.push(
        ev("long", 2),
        TurnHold::REF_MAX_AGE_MS + 1,
        None,
        0,
        place(2),
        &mut early,
    );
    let snap = h.snapshot().expect("held");
    assert_eq!(snap.events.len(), 1);
    assert_eq!(snap.events[0].event.ts_ms, Some(1));
    assert_eq!(snap.ref_messages(), vec![2]);
}

#[test]
fn a_snapshot_of_the_old_shape_is_read_and_the_new_one_refused_by_it() {
    let old = r#"{"events":[],"seq":4}"#;
    let snap: HoldSnapshot = serde_json::from_str(old).expect("old shape read");
    assert_eq!(snap.seq, 4);
    // What a version before references reads: it must fail, not drop them.
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Before {
        events: Vec<HeldEvent>,
        seq: u64,
    }
    let new = serde_json::to_string(&snap).expect("encodes");
    assert!(serde_json::from_str::<Before>(&new).is_err(), "{new}");
}

#[test]
fn consecutive_lines_are_written_as_runs_and_read_back_each_in_its_place() {
    // Message 7: lines 0..1000 of turns t0..t9 interleaved; turn t3 released mid-way.
    let lines: Vec<String> = (0..1000)
        .map(|i| line(&format!("t{}", i % 10), i))
        .collect();
    let mut h = TurnHold::new(1_000);
    let mut early = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let mut skips = SkipCounts::default();
        let Ok(NativeLine::Event(ev)) = native::decode_line(l.as_bytes(), &mut skips) else {
            panic!("{l} decodes");
        };
        let at = Some(Place {
            msg: 7,
            line: i as u32,
        });
        h.push(ev.into_owned(), 5, None, 0, at, &mut early);
    }
    let snap = h.snapshot().expect("held");
    assert_eq!(snap.refs.len(), 1);
    assert_eq!(snap.refs[0].spans, vec![(0, 0, 1000)], "one run");
    assert!(snap.refs[0].lines.is_empty());
    // Release t3 alone: every tenth line leaves a gap.
    let t3 = h.take_turn(b"t3").expect("held");
    assert_eq!(t3.len(), 100);
    let want = {
        let mut all = Vec::new();
        h.clone().release(i64::MAX, true, &mut all);
        all
    };
    let snap = h.snapshot().expect("held");
    assert_eq!(snap.ref_count(), 900);
    assert_eq!(snap.refs[0].spans.len(), 101, "a run around each gap");
    assert_eq!(snap.refs[0].spans[0], (0, 0, 3));
    assert_eq!(
        snap.refs[0].spans[1],
        (2, 2, 9),
        "lines 4..=12 after line 2"
    );
    let json = serde_json::to_string(&snap).expect("encodes");
    let mut back: HoldSnapshot = serde_json::from_str(&json).expect("decodes");
    let lost = back.resolve(|p| {
        (p.msg == 7)
            .then(|| lines.get(p.line as usize))?
            .map(|l| l.as_bytes())
    });
    assert_eq!(lost, 0);
    let mut got = Vec::new();
    TurnHold::restore(1_000, back).release(i64::MAX, true, &mut got);
    assert_eq!(got, want);
}

#[test]
fn references_line_by_line_as_older_versions_wrote_them_are_read_and_runs_refused_by_them() {
    let lines = [line("a", 1), line("b", 2), line("a", 3)];
    // Lines 0 and 2 of message 9, arrival numbers 4 and 6, as a version before runs wrote.
    let old = r#"{"by_value":[],"refs":[{"msg":9,"arrival_ms":5,"input":null,"route":0,
        "lines":[0,2],"seqs":[4,2]}],"seq":7}"#;
    let mut snap: HoldSnapshot = serde_json::from_str(old).expect("old shape read");
    assert_eq!(snap.ref_count(), 2);
    let lost = snap.resolve(|p| {
        (p.msg == 9)
            .then(|| lines.get(p.line as usize))?
            .map(|l| l.as_bytes())
    });
    assert_eq!(lost, 0);
    let got: Vec<(u32, u64)> = snap
        .events
        .iter()
        .map(|e| (e.place.map_or(99, |p| p.line), e.seq))
        .collect();
    assert_eq!(got, vec![(0, 4), (2, 6)]);

    // What a version before runs reads: it must fail, not drop the lines.
    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct BeforeLines {
        msg: u64,
        lines: Vec<u32>,
        seqs: Vec<i64>,
    }
    let mut h = TurnHold::new(1_000);
    let at = Some(Place { msg: 9, line: 0 });
    h.push(ev("a", 1), 0, None, 0, at, &mut Vec::new());
    let refs = h.snapshot().expect("held").refs;
    let new = serde_json::to_string(&refs[0]).expect("encodes");
    assert!(serde_json::from_str::<BeforeLines>(&new).is_err(), "{new}");

    // A run too long to be a message's is counted lost, not walked, and the next run is
    // still read from where it ends (past this message's three lines: lost too).
    let hostile = r#"{"by_value":[],"refs":[{"msg":9,"arrival_ms":5,"input":null,"route":0,
        "spans":[[1,0,4194305],[0,0,1]]}],"seq":7}"#;
    let mut snap: HoldSnapshot = serde_json::from_str(hostile).expect("read");
    let lost = snap.resolve(|p| lines.get(p.line as usize).map(|l| l.as_bytes()));
    assert_eq!((lost, snap.events.len()), (4_194_306, 0));
    // Runs of the longest length, thousands of them, against a message of three lines:
    // the three are read back, the rest counted at once (not walked, nothing allocated).
    let runs = vec!["[0,0,4194304]"; 5_000].join(",");
    let bomb = format!(
        r#"{{"by_value":[],"refs":[{{"msg":9,"arrival_ms":5,"input":null,"route":0,
        "spans":[{runs}]}}],"seq":7}}"#
    );
    let mut snap: HoldSnapshot = serde_json::from_str(&bomb).expect("read");
    let lost = snap.resolve(|p| lines.get(p.line as usize).map(|l| l.as_bytes()));
    assert_eq!(snap.events.len(), 3);
    assert_eq!(lost, 5_000 * 4_194_304 - 3);
}

#[test]
fn a_snapshot_written_from_kept_groups_equals_one_walking_every_entry() {
    // Lines of 40 turns over 300 messages, turns released as they go quiet, snapshots
    // taken in between: each must equal a walk of the whole log (what `unordered` does).
    let mut h = TurnHold::new(400);
    let mut out: Vec<HeldEvent> = Vec::new();
    let mut early = Vec::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut snapshots = 0;
    for msg in 0..300u64 {
        let now = msg as i64 * 50;
        for line in 0..(1 + next(8)) as u32 {
            let turn = format!("t{}", (msg / 10) * 4 + next(4));
            let place = Some(Place { msg, line });
            h.push(ev(&turn, now), now, None, 0, place, &mut early);
        }
        if next(3) == 0 {
            h.release(now, false, &mut out);
        }
        if next(2) == 0 {
            let mut walked = h.clone();
            walked.unordered = true;
            assert_eq!(h.snapshot(), walked.snapshot(), "after message {msg}");
            snapshots += 1;
        }
    }
    assert!(snapshots > 100 && !out.is_empty() && !h.is_empty());
    assert!(!h.unordered && h.groups.len() > 1);
    // Places out of order: snapshots walk the log, and still name every held event.
    h.push(
        ev("late", 1),
        15_000,
        None,
        0,
        Some(Place { msg: 3, line: 0 }),
        &mut early,
    );
    assert!(h.unordered);
    let snap = h.snapshot().expect("held");
    assert_eq!(snap.ref_count() + snap.events.len(), h.len());
}

#[test]
fn past_the_bound_the_longest_quiet_turn_goes_first() {
    let mut h = TurnHold::new(60_000);
    let mut early = Vec::new();
    for i in 0..=TurnHold::MAX_EVENTS {
        let turn = if i == 0 {
            "old".to_string()
        } else {
            format!("t{}", i % 1000)
        };
        h.push(ev(&turn, i as i64), 1 + i as i64, None, 0, None, &mut early);
    }
    let out: Vec<HeldEvent> = early
        .into_iter()
        .flat_map(ReleasedTurn::into_events)
        .collect();
    // The quietest turns go, "old" first, until a tenth of the bound is free: the turns
    // quiet the longest, whole.
    assert_eq!(&*out[0].event.turn, "old");
    let target = TurnHold::MAX_EVENTS - TurnHold::MAX_EVENTS / 10;
    assert!(h.len() <= target, "{} held", h.len());
    assert_eq!(h.len() + out.len(), TurnHold::MAX_EVENTS + 1, "none lost");
    // Counted, once.
    let turns = out
        .iter()
        .map(|e| &e.event.turn)
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    let early = h.take_released_early();
    assert_eq!(
        early,
        crate::reorder::ReleasedEarly {
            turns,
            events: out.len() as u64
        }
    );
    assert!(turns > 1);
    assert_eq!(h.take_released_early(), Default::default());
    let last_released = out.iter().map(|e| e.arrival_ms).max().unwrap_or(0);
    let first_held = h
        .turns
        .values()
        .map(|t| t.last_arrival_ms)
        .min()
        .unwrap_or(0);
    let released_quiet = out
        .iter()
        .map(|e| &e.event.turn)
        .collect::<std::collections::HashSet<_>>()
        .into_iter()
        .all(|t| !h.turns.contains_key(t.as_bytes()));
    assert!(released_quiet, "released turns are released whole");
    assert!(
        last_released <= first_held,
        "the released turns were quiet longer than any held: last released event at \
         {last_released}, quietest held turn's last at {first_held}"
    );
}
