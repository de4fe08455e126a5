//! Issue 26, cross-host order: one turn's parts come from two hosts' logs, and the host with
//! the first half lags: the second half (a retry that runs the refund again, and the turn's
//! end) reaches JetStream seconds before the first (the attempt that ran it first). The
//! collector holds an ended turn for `--end-grace-secs` (on its partition's clock) so the late
//! half still joins it: the findings stream equals `check` over both logs. Before, the late
//! half was dropped as events after the turn's close (428 findings lost, 99 doubled in the
//! issue's run).

use std::path::Path;
use std::time::Duration;

use crate::harness::{scrape, wait_for};
use crate::nats_support::{
    Proc, append, assert_findings, check, collector, collector_with, have_nats_server, log_text,
    partition_state, refund_log, server_in, shipper, with_js,
};

#[test]
fn a_turns_half_from_a_lagging_host_still_joins_it() {
    if !have_nats_server() {
        return;
    }
    const TURNS: usize = 30;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (host_a, host_b) = (d.join("a"), d.join("b"));
    for h in [&host_a, &host_b] {
        std::fs::create_dir_all(h).expect("host dir");
    }
    let (first, second) = refund_log("lag", TURNS, 20);
    let (log_a, log_b) = (host_a.join("agent.jsonl"), host_b.join("agent.jsonl"));
    let expected = {
        // The oracle: both logs on one machine, in the order the turns happened.
        let (a, b) = (d.join("oracle-a.jsonl"), d.join("oracle-b.jsonl"));
        append(&a, &first);
        append(&b, &second);
        check(&a, &b).0
    };
    assert!(
        expected.len() >= TURNS,
        "each turn has findings: {expected:?}"
    );
    let (server, url) = server_in(d);
    let (c1, _) = collector(d, &url, "c1", "4", "300");
    // Host B ships the second halves first; host A's first halves follow 3 s later.
    append(&log_b, &second);
    let ship_b = shipper(&host_b, &url, &log_b, "4");
    std::thread::sleep(Duration::from_secs(3));
    append(&log_a, &first);
    let ship_a = shipper(&host_a, &url, &log_a, "4");
    assert_findings(&url, &expected, Duration::from_secs(90));
    for p in [ship_a, ship_b, c1, server] {
        p.terminate();
    }
}

/// The events the stored checkpoints of partitions `0..4` keep by reference, by the stream
/// sequence of the message that carries them.
fn held_refs_by_message(url: &str) -> std::collections::BTreeMap<u64, usize> {
    let mut by_message = std::collections::BTreeMap::new();
    for p in 0..4 {
        let Some(held) = partition_state(url, p).and_then(|s| s.get("held").cloned()) else {
            continue;
        };
        for r in held["refs"].as_array().into_iter().flatten() {
            let runs = r["spans"].as_array().into_iter().flatten();
            let n = runs.filter_map(|s| s[2].as_u64()).sum::<u64>() as usize
                + r["lines"].as_array().map_or(0, Vec::len);
            *by_message
                .entry(r["msg"].as_u64().unwrap_or(0))
                .or_default() += n;
        }
    }
    by_message
}

/// What the stored checkpoints of partitions `0..4` hold of turns held to settle: events kept
/// by reference (as runs of lines), and events kept whole.
fn held_in_checkpoints(url: &str) -> (usize, usize) {
    let (mut refs, mut whole) = (0, 0);
    for p in 0..4 {
        let Some(held) = partition_state(url, p).and_then(|s| s.get("held").cloned()) else {
            continue;
        };
        for r in held["refs"].as_array().into_iter().flatten() {
            // Runs of lines, `[line, seq, count]` (older versions: one entry a line).
            let runs = r["spans"].as_array().into_iter().flatten();
            refs += runs.filter_map(|s| s[2].as_u64()).sum::<u64>() as usize;
            refs += r["lines"].as_array().map_or(0, Vec::len);
        }
        whole += held["by_value"].as_array().map_or(0, Vec::len);
    }
    (refs, whole)
}

/// Host B's halves shipped and held by c1 (a long settle), until its checkpoints keep every
/// one of them; then c1 is SIGKILLed. Its shipper, and how many events are kept by reference.
fn held_then_killed(d: &Path, url: &str, second: &[serde_json::Value]) -> (Vec<Proc>, usize) {
    let host_b = d.join("b");
    std::fs::create_dir_all(&host_b).expect("host dir");
    let log_b = host_b.join("agent.jsonl");
    let (c1, _) = collector_with(d, url, "c1", "2", "300", &["--settle-secs", "600"]);
    append(&log_b, second);
    let ship_b = shipper(&host_b, url, &log_b, "4");
    wait_for(
        "c1's checkpoints to keep every held event",
        Duration::from_secs(60),
        || {
            let (refs, whole) = held_in_checkpoints(url);
            refs + whole == second.len()
        },
    );
    // Every native line is kept by reference (a stream's first, decoded once its format is
    // sniffed, too).
    let (refs, whole) = held_in_checkpoints(url);
    assert_eq!(
        (refs, whole),
        (second.len(), 0),
        "native lines are kept by reference"
    );
    drop(c1); // SIGKILL
    (vec![ship_b], refs)
}

/// Turns held to settle are checkpointed by reference to the lines that carried them (a
/// message and line of the events stream), not copied: a new owner after a SIGKILL reads them
/// back, and the late halves from the lagging host still join them.
#[test]
fn held_turns_are_read_back_by_a_new_owner_after_a_kill() {
    if !have_nats_server() {
        return;
    }
    const TURNS: usize = 30;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (first, second) = refund_log("held", TURNS, 20);
    let expected = {
        let (a, b) = (d.join("oracle-a.jsonl"), d.join("oracle-b.jsonl"));
        append(&a, &first);
        append(&b, &second);
        check(&a, &b).0
    };
    let (server, url) = server_in(d);
    let (mut procs, _) = held_then_killed(d, &url, &second);
    let host_a = d.join("a");
    std::fs::create_dir_all(&host_a).expect("host dir");
    let log_a = host_a.join("agent.jsonl");
    append(&log_a, &first);
    procs.push(shipper(&host_a, &url, &log_a, "4"));
    let (c2, m2) = collector_with(d, &url, "c2", "2", "300", &["--settle-secs", "3"]);
    assert_findings(&url, &expected, Duration::from_secs(90));
    let lost = scrape(m2).and_then(|m| m.get("retryscope_nats_held_events_lost_total").copied());
    assert_eq!(lost, Some(0.0), "{}", log_text(d, "c2"));
    procs.extend([c2, server]);
    for p in procs {
        p.terminate();
    }
}

/// A held event whose message is gone from the events stream when a new owner takes over (a
/// purge here; the stream's max age in life) cannot be read back: it is counted and logged,
/// not silently dropped (those kept whole are not lost), and the partition goes on.
#[test]
fn held_events_whose_messages_are_gone_are_counted_lost() {
    held_events_gone_are_counted_lost(Gone::Purged);
}

/// The same when the messages were deleted one by one (`nats stream rmm`, or a purge of one
/// partition's subject) while the stream's first message stays: they are gone although the
/// stream starts before them. Before, that was taken for a read that missed messages still
/// there, and the take failed for ever: the partition stayed leased and was never read.
#[test]
fn held_events_whose_messages_were_deleted_one_by_one_are_counted_lost() {
    held_events_gone_are_counted_lost(Gone::DeletedButTheFirst);
}

/// How the held events' messages go.
#[derive(Clone, Copy)]
enum Gone {
    /// The whole stream purged.
    Purged,
    /// Each message deleted on its own, but for the stream's first.
    DeletedButTheFirst,
}

fn held_events_gone_are_counted_lost(gone: Gone) {
    if !have_nats_server() {
        return;
    }
    const TURNS: usize = 10;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (_, second) = refund_log("gone", TURNS, 20);
    let (server, url) = server_in(d);
    let (mut procs, refs) = held_then_killed(d, &url, &second);
    let by_message = held_refs_by_message(&url);
    assert_eq!(by_message.values().sum::<usize>(), refs);
    let lost_refs = with_js(&url, async |js| {
        let events = js
            .get_stream("RETRYSCOPE_EVENTS")
            .await
            .expect("events stream");
        match gone {
            Gone::Purged => {
                events.purge().await.expect("purge");
                refs
            }
            Gone::DeletedButTheFirst => {
                let first = events.get_info().await.expect("info").state.first_sequence;
                let mut lost = 0;
                for (&seq, &n) in by_message.iter().filter(|(seq, _)| **seq != first) {
                    events.delete_message(seq).await.expect("delete");
                    lost += n;
                }
                assert!(lost > 0, "held messages past the first: {by_message:?}");
                lost
            }
        }
    });
    let (c2, m2) = collector_with(d, &url, "c2", "2", "300", &["--settle-secs", "3"]);
    let mut lost = None;
    wait_for(
        "c2 to count the lost events",
        Duration::from_secs(30),
        || {
            lost =
                scrape(m2).and_then(|m| m.get("retryscope_nats_held_events_lost_total").copied());
            lost == Some(lost_refs as f64)
        },
    );
    wait_for("c2 to log the loss", Duration::from_secs(10), || {
        log_text(d, "c2").contains("held events could not be read back")
    });
    procs.extend([c2, server]);
    for p in procs {
        p.terminate();
    }
}
