//! What can never be published: a server whose largest message (`max_payload`) is smaller
//! than a line or a finding. The shipper skips the line (logged with its file and offset,
//! counted), the collector writes the finding to its own findings output only (logged,
//! `retryscope_nats_dead_letters_total`), and both move on: the turns after them come
//! through whole.
//!
//! Before: a finding over `max_payload` wedged its partition for good (retaken 47 times in
//! 25 s, no checkpoint), and a line over it made the shipper retry forever. And a partition's
//! state over `max_payload` is stored in chunks, from the take's first checkpoint on.
//!
//! The log is invented: refund turns as `nats_support::refund_turn` builds them, one with
//! call ids of 3,000 characters (a duplicated refund's finding names both: 6.2 KB, over the
//! 6 KiB server's limit; the others name one: 3.2 KB, under it) and one with a 7,000
//! character text line (over the limit itself). No real client writes ids that long; a
//! real server with a small `max_payload` is the point.

use std::time::Duration;

use crate::nats_support::{
    Proc, check_json, chunked, collector, have_nats_server, log_text, nats_server_with,
    refund_turn, scrape, settled_findings_using, shipper, state_head, sum, wait_for,
};

/// The server's largest message for this test.
const MAX_PAYLOAD: usize = 6 * 1024;
/// What a message carries besides its body, as `ship` and the collector reserve it.
const ENVELOPE: usize = 512;

#[test]
fn what_is_larger_than_the_servers_largest_message_is_a_counted_dead_letter_and_the_partition_moves_on()
 {
    if !have_nats_server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let conf = d.join("nats.conf");
    std::fs::write(&conf, format!("max_payload: {MAX_PAYLOAD}\n")).expect("write config");

    // Refund turns before and after the two oversized ones, all in one partition.
    let mut lines = refunds("before", 1_700_000_000_000);
    let (mut a, mut b) = refund_turn("long-ids", 1_700_000_001_000, 10);
    for e in a.iter_mut().chain(b.iter_mut()) {
        if let Some(id) = e.get("id").and_then(|v| v.as_str()).map(str::to_string) {
            e["id"] = serde_json::json!(format!("{id}{}", "i".repeat(3000)));
        }
    }
    lines.extend(a);
    lines.extend(b);
    let ts = 1_700_000_002_000i64;
    lines.extend([
        serde_json::json!({"turn": "long-text", "type": "turn_start", "ts": ts, "model": "gpt-4o", "provider": "openai"}),
        serde_json::json!({"turn": "long-text", "type": "text", "attempt": 0, "ts": ts + 1, "text": "t".repeat(7000)}),
        serde_json::json!({"turn": "long-text", "type": "finish", "attempt": 0, "ts": ts + 2, "reason": "stop"}),
        serde_json::json!({"turn": "long-text", "type": "turn_end", "ts": ts + 3}),
    ]);
    lines.extend(refunds("after", 1_700_000_003_000));
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let too_long = text
        .lines()
        .filter(|l| l.len() + ENVELOPE > MAX_PAYLOAD)
        .count();
    assert_eq!(too_long, 1, "one line over the limit: the long text");
    let log = d.join("agent.jsonl");
    std::fs::write(&log, &text).expect("write log");

    // The oracle: `check` over the log without the line the shipper cannot ship (it changes
    // no finding: the long text's turn has none).
    let shippable: String = text
        .lines()
        .filter(|l| l.len() + ENVELOPE <= MAX_PAYLOAD)
        .map(|l| format!("{l}\n"))
        .collect();
    let oracle = d.join("oracle.jsonl");
    std::fs::write(&oracle, shippable).expect("write oracle log");
    let mut expected: Vec<String> = check_json(&[&oracle])
        .findings()
        .map(|f| f.to_string())
        .collect();
    expected.sort();
    let (fit, dead): (Vec<String>, Vec<String>) = expected
        .iter()
        .cloned()
        .partition(|f| f.len() + ENVELOPE <= MAX_PAYLOAD);
    assert_eq!(dead.len(), 1, "one finding over the limit: {dead:?}");
    assert!(
        dead[0].contains("duplicate_effect") && dead[0].contains("long-ids"),
        "the long ids' duplicated refund: {dead:?}"
    );
    assert!(
        fit.iter().any(|f| f.contains("long-ids")),
        "the long ids' other findings fit"
    );
    assert!(fit.iter().any(|f| f.contains("after-19")), "turns after it");

    let (server, url, ship, (c1, mport)) = start(d, &conf, &log);

    // The findings stream: every finding that fits, each once; the partition went past the
    // dead letter (the turns after it are there).
    let got = settled_findings_using(
        &url,
        async_nats::ConnectOptions::new,
        fit.len(),
        Duration::from_secs(90),
    );
    assert_eq!(
        got.len(),
        fit.len(),
        "the findings that fit, each exactly once (the stream took {} of {})",
        got.len(),
        fit.len()
    );
    assert!(got == fit, "the same findings as check");

    // Counted, logged, and kept in the collector's own findings output.
    wait_for("the dead letter counted", Duration::from_secs(30), || {
        scrape(mport).and_then(|m| m.get("retryscope_nats_dead_letters_total").copied())
            == Some(1.0)
    });
    let collector_log = log_text(d, "c1");
    assert!(
        collector_log.contains("finding larger than the server's largest message"),
        "the collector logs its dead letter:\n{collector_log}"
    );
    let local = std::fs::read_to_string(d.join("c1-findings.jsonl")).expect("findings output");
    let local: Vec<String> = local
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .expect("a finding is JSON")
                .to_string()
        })
        .collect();
    assert!(
        local.contains(&dead[0]),
        "the dead letter is in the collector's own findings output"
    );
    let ship_log = log_text(d, "ship");
    assert!(
        ship_log.contains("line larger than the server's largest message"),
        "the shipper logs the line it skipped:\n{ship_log}"
    );
    // Still live: the collector kept its partition (no retake loop) and checkpointed past it.
    let takeovers =
        scrape(mport).and_then(|m| m.get("retryscope_nats_lease_takeovers_total").copied());
    assert_eq!(takeovers, Some(1.0), "one take of the one partition");
    c1.terminate();
    ship.terminate();
    server.terminate();
}

/// A server whose largest message is smaller than even a fresh partition's state: the first
/// checkpoint (the take's) and every later one are stored in chunks that fit, so the partition
/// is taken once and checkpointed. Before a9ae5aa the take wrote its state in one message and
/// was refused, over and over. Since a fresh state shrank (pre-registered zero series left
/// out) the 6 KiB server above no longer needs chunks, so this one is smaller still. Its
/// findings (each over the 512 bytes left) are dead letters; the turns are counted.
#[test]
fn a_state_larger_than_the_servers_largest_message_is_taken_and_checkpointed_in_chunks() {
    if !have_nats_server() {
        return;
    }
    const TINY: usize = 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let conf = d.join("nats.conf");
    std::fs::write(&conf, format!("max_payload: {TINY}\n")).expect("write config");
    let lines: Vec<serde_json::Value> = (0..5)
        .flat_map(|i| {
            let (a, b) = refund_turn(&format!("tiny-{i}"), 1_700_000_000_000 + i * 20, 1);
            a.into_iter().chain(b)
        })
        .collect();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    assert!(
        text.lines().all(|l| l.len() + ENVELOPE <= TINY),
        "every line fits"
    );
    let log = d.join("agent.jsonl");
    std::fs::write(&log, &text).expect("write log");

    let (server, url, ship, (c1, mport)) = start(d, &conf, &log);
    wait_for("the five turns correlated", Duration::from_secs(60), || {
        scrape(mport).is_some_and(|m| sum(&m, "retryscope_turns_total{") == 5.0)
    });
    let wrote = || scrape(mport).map_or(0.0, |m| sum(&m, "retryscope_checkpoint_writes_total"));
    let first = wrote();
    wait_for(
        "a checkpoint after the turns",
        Duration::from_secs(30),
        || wrote() > first,
    );
    let m = scrape(mport).unwrap_or_default();
    assert_eq!(
        m.get("retryscope_checkpoint_failures_total"),
        Some(&0.0),
        "no checkpoint failed: {}",
        log_text(d, "c1")
    );
    assert_eq!(
        m.get("retryscope_nats_lease_takeovers_total"),
        Some(&1.0),
        "one take of the one partition: {}",
        log_text(d, "c1")
    );
    let head = state_head(&url, 0);
    assert!(
        chunked(&head),
        "a state over the server's largest message is stored in chunks: {head}"
    );
    c1.terminate();
    ship.terminate();
    server.terminate();
}

/// A server with the configuration `conf`, a shipper of `log` into one partition, and a
/// collector `c1` (and its metrics port).
fn start(
    d: &std::path::Path,
    conf: &std::path::Path,
    log: &std::path::Path,
) -> (Proc, String, Proc, (Proc, u16)) {
    let port = crate::nats_support::free_port();
    let conf_arg = conf.display().to_string();
    let server = nats_server_with(port, &d.join("js"), &d.join("nats.log"), &["-c", &conf_arg]);
    let url = format!("nats://127.0.0.1:{port}");
    let ship = shipper(d, &url, log, "1");
    let c1 = collector(d, &url, "c1", "4", "300");
    (server, url, ship, c1)
}

/// Twenty refund turns `<prefix>-<i>`, each whole, from `ts`.
fn refunds(prefix: &str, ts: i64) -> Vec<serde_json::Value> {
    (0..20)
        .flat_map(|i| {
            let (a, b) = refund_turn(&format!("{prefix}-{i}"), ts + i * 20, 10);
            a.into_iter().chain(b)
        })
        .collect()
}
