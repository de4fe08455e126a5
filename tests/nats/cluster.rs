//! Past one machine, for real: a `nats-server` 2.9 with JetStream on loopback, two `ship`
//! processes on two "hosts" (separate folders and data dirs) writing parts of the same turns
//! (attempt 0 and its tool execution on host A, the retry re-executing the tool on host B: the
//! duplicate effect exists only across the hosts), three `run --nats` collectors: one killed
//! with SIGKILL mid-way, one added later, the NATS server restarted once mid-run, and one
//! shipper SIGKILLed while it reads a round and restarted from its checkpoint (a round it had in
//! flight is sent again as the same messages). A shipper started without its checkpoint
//! ships its files again: that is starting over, as `--reset-checkpoint` is.
//!
//! Checked: the findings stream holds exactly `check`'s findings over the merged logs, each
//! once; the collectors' summed metrics give the same turn and finding counts.
//!
//! Needs `nats-server` on PATH (`.ci/run` installs Debian's); without it the test says so and
//! passes, except under CI (`CI` set), where it fails.

use crate::nats_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nats_support::*;

const PARTITIONS: &str = "8";
const ROUNDS: usize = 6;
const TURNS_PER_ROUND: usize = 12;

/// Round `r`'s lines: (host A, host B). Two turns in three are split across the hosts (the
/// refund runs in attempt 0 on A, the retry runs it again on B); the third stays on A.
fn round(r: usize) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    use serde_json::json;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..TURNS_PER_ROUND {
        let t = format!("turn-{r}-{i}");
        let ts = 1_700_000_000_000_i64 + (r * 1000 + i * 10) as i64 * 100;
        let args = json!({"order": format!("o-{r}-{i}"), "amount": 10 + i});
        a.push(json!({"turn": t, "type": "turn_start", "ts": ts, "model": "gpt-4o", "provider": "openai"}));
        if i % 3 == 2 {
            a.push(json!({"turn": t, "type": "text", "attempt": 0, "ts": ts + 1, "text": "Hel"}));
            a.push(json!({"turn": t, "type": "retry", "attempt": 1, "ts": ts + 2, "reason": "timeout"}));
            a.push(json!({"turn": t, "type": "text", "attempt": 1, "ts": ts + 3, "text": "Hello"}));
            a.push(
                json!({"turn": t, "type": "finish", "attempt": 1, "ts": ts + 4, "reason": "stop"}),
            );
            a.push(json!({"turn": t, "type": "turn_end", "ts": ts + 5}));
            continue;
        }
        a.push(json!({"turn": t, "type": "tool_call", "attempt": 0, "ts": ts + 1, "id": "c0", "name": "issue_refund", "args": args}));
        a.push(json!({"turn": t, "type": "tool_exec", "attempt": 0, "ts": ts + 2, "id": "c0", "name": "issue_refund", "args": args}));
        a.push(json!({"turn": t, "type": "error", "attempt": 0, "ts": ts + 3, "message": "connection reset"}));
        b.push(json!({"turn": t, "type": "retry", "attempt": 1, "ts": ts + 10, "reason": "connection reset"}));
        b.push(json!({"turn": t, "type": "tool_call", "attempt": 1, "ts": ts + 11, "id": "c1", "name": "issue_refund", "args": args}));
        b.push(json!({"turn": t, "type": "tool_exec", "attempt": 1, "ts": ts + 12, "id": "c1", "name": "issue_refund", "args": args}));
        b.push(json!({"turn": t, "type": "usage", "attempt": 1, "ts": ts + 13, "input_tokens": 100, "output_tokens": 20}));
        b.push(json!({"turn": t, "type": "finish", "attempt": 1, "ts": ts + 14, "reason": "stop"}));
        b.push(json!({"turn": t, "type": "turn_end", "ts": ts + 15}));
    }
    (a, b)
}

#[test]
fn turns_split_across_hosts_are_correlated_once_across_failover_and_a_server_restart() {
    if !have_nats_server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // RETRYSCOPE_KEEP_NATS_TEST=1 keeps the folder (logs of every process) for a look.
    let d = &if std::env::var_os("RETRYSCOPE_KEEP_NATS_TEST").is_some() {
        let kept = dir.keep();
        eprintln!("keeping {}", kept.display());
        kept
    } else {
        dir.path().to_path_buf()
    };
    let (host_a, host_b) = (d.join("hostA"), d.join("hostB"));
    for p in [&host_a, &host_b] {
        std::fs::create_dir_all(p.join("logs")).expect("mkdir");
    }
    let (log_a, log_b) = (
        host_a.join("logs/agent.jsonl"),
        host_b.join("logs/agent.jsonl"),
    );
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let store = d.join("jetstream");
    let mut server = Some(nats_server(port, &store, &d.join("nats-1.log")));

    let shipper = |host: &Path, id: &str| host_shipper(host, &url, id, PARTITIONS, "ship");
    let collector = |name: &str, checkpoint_ms: &str| collector(d, &url, name, "2", checkpoint_ms);
    // Both logs exist before the shippers start (an empty file is fine).
    append::<&str>(&log_a, &[]);
    append::<&str>(&log_b, &[]);
    let mut ship_a = Some(shipper(&host_a, "hostA"));
    let ship_b = shipper(&host_b, "hostB");
    // c1 never checkpoints before it is killed: everything it published is replayed by the
    // new owners from sequence 0, and the findings' ids must make that replay invisible.
    let (c1, _) = collector("c1", "600000");
    let (c2, port2) = collector("c2", "700");
    let mut c1 = Some(c1);
    let log_has = |name: &str, what: &str| {
        std::fs::read_to_string(d.join(format!("{name}.log"))).is_ok_and(|t| t.contains(what))
    };
    for name in ["c1", "c2"] {
        wait_for(
            "both collectors to own partitions",
            Duration::from_secs(30),
            || log_has(name, "took partition"),
        );
    }
    let mut c3: Option<(Proc, u16)> = None;

    for r in 0..ROUNDS {
        let (a, b) = round(r);
        append(&log_a, &a);
        if r == 4 {
            // Host A's shipper is SIGKILLed while it reads (or publishes) the round, and
            // restarts from its checkpoint: a round it had in flight is re-sent as the same
            // messages (the checkpoint records it before it is published), which JetStream
            // drops by their ids.
            std::thread::sleep(Duration::from_millis(30));
            drop(ship_a.take());
            ship_a = Some(shipper(&host_a, "hostA"));
        }
        wait_shipped(&log_a, &host_a.join("data"));
        append(&log_b, &b);
        wait_shipped(&log_b, &host_b.join("data"));
        std::thread::sleep(Duration::from_millis(300));
        match r {
            // SIGKILL mid-way: its partitions are taken over when their leases end.
            1 => {
                let so_far = check(&log_a, &log_b).0.len();
                wait_for("c1 and c2 to publish", Duration::from_secs(30), || {
                    findings_in_stream(&url).len() >= so_far
                });
                drop(c1.take());
            }
            // The server goes down and comes back on the same store.
            2 => {
                if let Some(s) = server.take() {
                    s.terminate();
                }
                std::thread::sleep(Duration::from_millis(500));
                server = Some(nats_server(port, &store, &d.join("nats-2.log")));
            }
            // A collector joins: c2 hands it half of the partitions.
            3 => c3 = Some(collector("c3", "700")),
            _ => {}
        }
    }

    let (expected, turns) = check(&log_a, &log_b);
    assert_eq!(turns, (ROUNDS * TURNS_PER_ROUND) as f64);
    assert!(
        expected.iter().any(|f| f.contains("\"duplicate_effect\"")),
        "the workload has cross-host duplicate effects"
    );

    let (_, port3) = c3.as_ref().map(|(p, port)| (p, *port)).expect("c3 started");
    let mut got = Vec::new();
    let mut summed = (0.0, 0.0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        got = findings_in_stream(&url);
        got.sort();
        let m2 = scrape(port2).unwrap_or_default();
        let m3 = scrape(port3).unwrap_or_default();
        summed = (
            sum(&m2, "retryscope_turns_total{") + sum(&m3, "retryscope_turns_total{"),
            sum(&m2, "retryscope_findings_total{") + sum(&m3, "retryscope_findings_total{"),
        );
        if got.len() >= expected.len() && summed == (turns, expected.len() as f64) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(got.len(), expected.len(), "findings, each exactly once");
    assert_eq!(
        got, expected,
        "the same findings as check over the merged logs"
    );
    assert_eq!(summed, (turns, expected.len() as f64), "summed metrics");
    let m3 = scrape(port3).unwrap_or_default();
    assert!(
        sum(&m3, "retryscope_turns_total{") > 0.0,
        "the collector added later took partitions over"
    );

    // The cluster series: c1 is dead, so c2 and c3 own every partition between them, and
    // they took at least every partition once (c1's after its leases ended).
    let parts: f64 = PARTITIONS.parse().unwrap();
    let cluster = |m: &BTreeMap<String, f64>, name: &str| m.get(name).copied().unwrap_or(-1.0);
    let mut seen = (0.0, 0.0);
    wait_for(
        "the owned partitions to add up",
        Duration::from_secs(30),
        || {
            let (m2, m3) = (
                scrape(port2).unwrap_or_default(),
                scrape(port3).unwrap_or_default(),
            );
            seen = (
                cluster(&m2, "retryscope_nats_partitions_owned")
                    + cluster(&m3, "retryscope_nats_partitions_owned"),
                cluster(&m2, "retryscope_nats_lease_takeovers_total")
                    + cluster(&m3, "retryscope_nats_lease_takeovers_total"),
            );
            seen.0 == parts
                && seen.1 >= parts
                && cluster(&m2, "retryscope_nats_partitions") == parts
                && cluster(&m3, "retryscope_nats_partitions") == parts
                && cluster(&m2, "retryscope_checkpoint_writes_total") > 0.0
                && cluster(&m3, "retryscope_nats_checkpoint_lag_messages") >= 0.0
                && cluster(&m2, "retryscope_nats_findings_publish_failures_total") >= 0.0
        },
    );
    assert_eq!(seen.0, parts, "partitions owned by c2 and c3");

    for p in ship_a.into_iter().chain([ship_b, c2]) {
        p.terminate();
    }
    if let Some((p, _)) = c3 {
        p.terminate();
    }
    if let Some(s) = server {
        s.terminate();
    }
}

#[test]
fn ship_from_stdin_until_it_ends() {
    if !have_nats_server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (server, url) = server_in(d);
    let (a, b) = round(0);
    let merged = d.join("merged.jsonl");
    append(&merged, &a);
    append(&merged, &b);
    let status = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["ship", "-", "--nats", &url, "--source-id", "pipe"])
        .stdin(std::fs::File::open(&merged).expect("merged log"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("ship.log")).expect("log"))
        .status()
        .expect("run ship -");
    assert!(status.success(), "ship - exits 0 when stdin ends");
    let mport = free_port();
    let collector = retryscope(
        "c",
        &[
            "run",
            "--nats",
            &url,
            "--lease-secs",
            "2",
            "--metrics-addr",
            &format!("127.0.0.1:{mport}"),
            "--findings-out",
            "",
        ],
        &d.join("c.log"),
    );
    let expected = check(&merged, Path::new("/dev/null")).0;
    assert!(!expected.is_empty());
    let mut got = Vec::new();
    wait_for(
        "the findings of stdin's lines",
        Duration::from_secs(30),
        || {
            got = findings_in_stream(&url);
            got.len() >= expected.len()
        },
    );
    got.sort();
    assert_eq!(got, expected);
    collector.terminate();
    server.terminate();
}

/// A writer that keeps `ship -`'s pipe open and stops without a final newline (a real
/// Anthropic SSE body, whose `message_stop` event has neither its newline nor its blank
/// line): the last line is shipped once the pipe has been quiet, as a file's last line, and
/// ends its event, so the turn completes as `check` has it. Before, it waited for the pipe
/// to close, and the collector closed the turn incomplete at its idle timeout.
#[test]
fn ship_from_a_held_open_pipe_sends_its_unterminated_last_line() {
    use std::io::Write;
    if !have_nats_server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (server, url) = server_in(d);
    let sse = fixture("tests/fixtures/recorded/anthropic-sdk-python__basic_response.sse");
    let body = std::fs::read(&sse).expect("recorded body");
    assert_ne!(
        body.last(),
        Some(&b'\n'),
        "the recording ends without a newline"
    );
    let checked = check_json(&[sse.as_path()]);
    let expected = checked.counts("turns_by_status");
    assert_eq!(expected.get("completed"), Some(&1), "{}", checked.summary);
    let mut ship = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["ship", "-", "--nats", &url, "--source-id", "pipe"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("ship.log")).expect("log"))
        .spawn()
        .expect("run ship -");
    let mut pipe = ship.stdin.take().expect("stdin");
    pipe.write_all(&body).expect("write");
    pipe.flush().expect("flush");
    let (collector, mport) =
        collector_with(d, &url, "c", "2", "500", &["--idle-timeout-secs", "1"]);
    let mut got = BTreeMap::new();
    wait_for("the pipe's turn to close", Duration::from_secs(60), || {
        got = scrape(mport).map_or_else(BTreeMap::new, |m| {
            by_label(&m, "retryscope_turns_total", "status")
        });
        !got.is_empty()
    });
    assert_eq!(
        got, expected,
        "turns by status, the collector against check"
    );
    drop(pipe);
    let status = ship.wait().expect("ship exits");
    assert!(status.success(), "ship - exits 0 once its pipe closes");
    collector.terminate();
    server.terminate();
}

/// Issue 26: a partition whose open turns make a checkpoint larger than one NATS message (2,000
/// open turns, ~1.5 MiB of state) is checkpointed (in chunks) without a failure, and a new
/// owner after a SIGKILL resumes from that checkpoint, not from the start.
#[test]
fn a_checkpoint_larger_than_a_message_is_chunked_and_resumed_after_a_kill() {
    if !have_nats_server() {
        return;
    }
    const TURNS: usize = 2_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (server, url) = server_in(d);
    let log = d.join("agent.jsonl");
    let (first, second) = refund_log("big", TURNS, 600);
    append(&log, &first);
    let ship = shipper(d, &url, &log, "1");
    wait_shipped(&log, &d.join("ship-data"));
    let (c1, m1) = collector(d, &url, "c1", "2", "300");
    wait_for(
        "c1 to hold every open turn",
        Duration::from_secs(60),
        || scrape(m1).is_some_and(|m| m.get("retryscope_open_turns") == Some(&(TURNS as f64))),
    );
    // A checkpoint after every turn was held (the partition's clock messages keep coming
    // while turns are open, so a checkpoint never covers the very last message for long; a
    // partition with a state this large checkpoints about every second, not every 300 ms).
    let writes = |m: &BTreeMap<String, f64>| {
        m.get("retryscope_checkpoint_writes_total")
            .copied()
            .unwrap_or(0.0)
    };
    let held_at = writes(&scrape(m1).unwrap_or_default());
    let mut metrics = BTreeMap::new();
    wait_for(
        "a checkpoint after every turn was held",
        Duration::from_secs(30),
        || {
            metrics = scrape(m1).unwrap_or_default();
            writes(&metrics) > held_at
        },
    );
    assert_eq!(
        metrics.get("retryscope_checkpoint_failures_total"),
        Some(&0.0),
        "no checkpoint failed: {}",
        log_text(d, "c1")
    );
    let head = state_head(&url, 0);
    assert!(
        chunked(&head),
        "a state over a message is stored in chunks: {head}"
    );
    drop(c1); // SIGKILL
    // What a writer killed between its chunks and its head leaves: chunks no head names.
    put_state_key(&url, "p0.c.0d0d0d0d0d0d0d0d.0", b"orphan");
    append(&log, &second);
    wait_shipped(&log, &d.join("ship-data"));
    // A longer lease: its last checkpoint at SIGTERM, bounded by a lease, must complete for
    // the bucket to hold exactly what its head names.
    let (c2, _) = collector(d, &url, "c2", "10", "300");
    let expected = check(&log, Path::new("/dev/null")).0;
    assert!(expected.len() >= TURNS, "each turn has findings");
    assert_findings(&url, &expected, Duration::from_secs(90));
    // c1's checkpoint covered every line then: c2 starts after them, not at 0 (the lines came
    // in batches, and clock messages have sequences too, so the number is not the line count).
    let c2_log = log_text(d, "c2");
    let from_seq: u64 = c2_log
        .split("from_seq=")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(from_seq > 0, "c2 resumed from c1's checkpoint: {c2_log}");
    // Once c2 has handed over: the bucket holds the chunks its head names, once each, and
    // nothing else (c2's take swept the orphan; replaced generations left no markers).
    c2.terminate();
    let head = state_head(&url, 0);
    let named: BTreeMap<String, usize> = match head.get("chunked") {
        Some(c) => (0..c["parts"].as_u64().unwrap_or(0))
            .map(|i| {
                let generation = c["generation"].as_str().unwrap_or_default();
                (format!("$KV.retryscope_state.p0.c.{generation}.{i}"), 1)
            })
            .collect(),
        None => BTreeMap::new(),
    };
    assert_eq!(chunk_subjects(&url, 0), named, "head: {head}");
    for p in [ship, server] {
        p.terminate();
    }
}

/// Issue 26: more findings between two checkpoints than the client allows acknowledgements in
/// flight (5,000): the collector neither blocks nor loses its partition, and every finding is
/// published once.
#[test]
fn more_findings_between_checkpoints_than_acks_in_flight_do_not_block() {
    // Two findings a turn: 7,000. No checkpoint during the run: every acknowledgement would
    // wait for one.
    one_collector_publishes_every_finding_taking_once(3_500, false, "5", "600000");
}

/// A poll whose own work (correlating a backlog's batch: 200 messages of up to 1,000 lines)
/// takes longer than a lease does not lose the partition: only a lost lease ends a poll. A
/// bound on the whole poll gave the partition up after every such poll, and each retake
/// replayed the same batch from the same checkpoint. Here a debug build correlates 60,000
/// lines (the whole log, shipped before the collector starts) in one poll under a 1 s lease.
#[test]
fn a_poll_longer_than_a_lease_keeps_its_partition() {
    one_collector_publishes_every_finding_taking_once(6_000, true, "1", "1000");
}

/// `turns` refund turns (ten lines, two findings each) shipped to one partition, `backlog`:
/// all of them before the collector starts; one collector (`lease_secs`, `checkpoint_ms`)
/// publishes every finding `check` finds, once, having taken the partition once.
fn one_collector_publishes_every_finding_taking_once(
    turns: usize,
    backlog: bool,
    lease_secs: &'static str,
    checkpoint_ms: &'static str,
) {
    OneCollector {
        turns,
        backlog,
        lease_secs,
        checkpoint_ms,
        ..OneCollector::default()
    }
    .publishes_every_finding_taking_each_once();
}

/// One collector reading `turns` refund turns (ten lines, two findings each, their text `pad`
/// bytes) shipped to `partitions` partitions, `backlog`: all of them before the collector
/// starts; the server run with the configuration `server_conf` when given.
struct OneCollector {
    turns: usize,
    backlog: bool,
    lease_secs: &'static str,
    checkpoint_ms: &'static str,
    partitions: &'static str,
    pad: usize,
    server_conf: Option<&'static str>,
}

impl Default for OneCollector {
    fn default() -> Self {
        OneCollector {
            turns: 1_000,
            backlog: false,
            lease_secs: "5",
            checkpoint_ms: "1000",
            partitions: "1",
            pad: 4,
            server_conf: None,
        }
    }
}

impl OneCollector {
    /// The collector publishes every finding `check` finds, once, having taken each
    /// partition once (no lease lost, no partition given up and taken again).
    fn publishes_every_finding_taking_each_once(self) {
        if !have_nats_server() {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let conf = d.join("nats.conf");
        let (server, url) = match self.server_conf {
            Some(text) => {
                std::fs::write(&conf, text).expect("write the server configuration");
                server_in_with(d, &["-c", &conf.display().to_string()])
            }
            None => server_in(d),
        };
        let log = d.join("agent.jsonl");
        let (first, second) = refund_log("many", self.turns, self.pad);
        append(&log, &first);
        append(&log, &second);
        let expected = check(&log, Path::new("/dev/null")).0;
        assert!(
            expected.len() >= 2 * self.turns,
            "{} findings",
            expected.len()
        );
        let ship = shipper(d, &url, &log, self.partitions);
        if self.backlog {
            wait_shipped(&log, &d.join("ship-data"));
        }
        let (c1, m1) = collector(d, &url, "c1", self.lease_secs, self.checkpoint_ms);
        assert_findings(&url, &expected, Duration::from_secs(120));
        let c1_log = log_text(d, "c1");
        assert_eq!(
            c1_log.matches("took partition").count(),
            self.partitions.parse::<usize>().unwrap_or(1),
            "each partition was taken once and never lost: {c1_log}"
        );
        assert!(scrape(m1).is_some(), "c1 still serves /metrics");
        for p in [ship, c1, server] {
            p.terminate();
        }
    }
}

/// More findings between checkpoints than the connection allows acknowledgements in flight
/// (5,000), spread over 16 partitions so that none reaches its own batch (1,024): the
/// partitions share the instance's permits and none blocks. Before, each held its
/// acknowledgements until its checkpoint, every publish waited for a free slot, and no
/// partition (nor the lease renewals) moved again.
#[test]
fn more_findings_than_acks_in_flight_over_many_partitions_do_not_block() {
    OneCollector {
        turns: 3_500,
        checkpoint_ms: "600000",
        partitions: "16",
        ..OneCollector::default()
    }
    .publishes_every_finding_taking_each_once();
}

/// A collector catching up a backlog over 64 partitions under a 1 s lease keeps every lease:
/// each partition is taken once. Before, the instance's loop took the partitions one after
/// the other (a take reads the checkpoint and the findings back, several round trips) and
/// renewed the leases one after the other, while the partitions already taken kept the cores
/// busy: the first leases ran out before the loop came round to renew them, and each retake
/// replayed from a checkpoint (a `bench_nats --backlog` collector lost each of its 16 leases
/// one to three times in 25 s).
#[test]
fn a_backlog_over_many_partitions_under_a_short_lease_keeps_every_lease() {
    OneCollector {
        turns: 2_000,
        backlog: true,
        lease_secs: "1",
        partitions: "64",
        ..OneCollector::default()
    }
    .publishes_every_finding_taking_each_once();
}

/// A backlog of large batches (text of 200 KB a line, so the shipper's messages near its
/// 512 KiB) is read in fetches bounded in bytes (`fetch_bytes` in src/nats/owned.rs, 2 MiB),
/// from a server that lets 4 MB wait for a client before it closes the connection as a slow
/// consumer (the default is 64 MiB; 16 partitions asked for 16 times what one does here).
/// Unbounded, a fetch asked for 200 such messages at once and the connection was closed
/// whenever the collector read slower than the server sent: every request in flight timed out
/// and the partition was taken again. Bounded, the server ends each fetch where its next
/// message would pass the bound, with a status the client passes on as an error, and the
/// partition goes on from there, taken once.
#[test]
fn fetches_bounded_in_bytes_read_a_backlog_of_large_batches() {
    OneCollector {
        turns: 40,
        backlog: true,
        pad: 200_000,
        server_conf: Some("max_pending: 4MB\n"),
        ..OneCollector::default()
    }
    .publishes_every_finding_taking_each_once();
}

/// A collector whose checkpoints are slow (half a second each, as a large state or a busy
/// JetStream makes them) hands half of its 8 partitions over when a peer joins, and keeps
/// every other lease (2 s): each handover's last checkpoint is made on the partition's task
/// while the instance's loop goes on renewing. Before, the loop waited for each handed-over
/// partition's checkpoint in turn, renewing nothing: four in a row outlasted the lease of the
/// partitions it kept, which it lost and took again from their checkpoints. (A take is as
/// slow on a collector busy with a backlog: a handover of a partition still being taken held
/// the loop the same way.) Every finding is then published once.
#[test]
fn a_slow_handover_keeps_the_other_leases() {
    if !have_nats_server() {
        return;
    }
    const TURNS: usize = 400;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (server, url) = server_in(d);
    let log = d.join("agent.jsonl");
    let (first, second) = refund_log("handover", TURNS, 40);
    append(&log, &first);
    let ship = shipper(d, &url, &log, "8");
    wait_shipped(&log, &d.join("ship-data"));
    let slow = [("RETRYSCOPE_FAULT_SLOW_CHECKPOINT_MS", "500")];
    let start = |name: &str| collector_logged(d, &url, name, name, "2", "300", &[], &slow);
    let (c1, m1) = start("c1");
    let gauge = |port: u16, name: &str| scrape(port).and_then(|m| m.get(name).copied());
    // Its open turns are counted at its checkpoints, which the slow ones space out (to a
    // tenth of the instance's time): the events decoded are counted as they come.
    let lines = std::fs::read_to_string(&log).map_or(0, |t| t.lines().count());
    wait_for("c1 to read every line", Duration::from_secs(60), || {
        scrape(m1).is_some_and(|m| sum(&m, "retryscope_events_decoded_total") >= lines as f64)
    });
    // Clock messages for the partitions' last checkpoints to leave uncovered (a checkpoint
    // with nothing to store is not slow): the owner sends one a second after a partition's
    // last line, and the slow checkpoints came every few seconds at most by now.
    std::thread::sleep(Duration::from_secs(3));
    let (c2, m2) = start("c2");
    wait_for(
        "c1 to hand half over to c2",
        Duration::from_secs(60),
        || {
            gauge(m2, "retryscope_nats_partitions_owned") == Some(4.0)
                && gauge(m1, "retryscope_nats_partitions_owned") == Some(4.0)
        },
    );
    append(&log, &second);
    let expected = check(&log, Path::new("/dev/null")).0;
    assert_findings(&url, &expected, Duration::from_secs(120));
    // One build serves the four partitions' summed metrics.
    let served = scrape(m1).unwrap_or_default();
    assert_eq!(sum(&served, "retryscope_build_info"), 1.0);
    let (c1_log, c2_log) = (log_text(d, "c1"), log_text(d, "c2"));
    assert_eq!(
        (
            c1_log.matches("took partition").count(),
            c1_log.matches("handed partition over").count(),
            c2_log.matches("took partition").count(),
        ),
        (8, 4, 4),
        "c1 took each partition once and handed four over, c2 took those: {c1_log}\n{c2_log}"
    );
    for p in [ship, c1, c2, server] {
        p.terminate();
    }
}

/// A partition whose take keeps failing (its checkpoint cannot be decoded: damaged, or a
/// newer build's) is not counted owned: `retryscope_nats_partitions_owned` says one of two,
/// so the unowned-partition alert can fire, and the log says why. Before, a partition counted
/// from its lease's acquisition, and one whose take failed every round counted as owned
/// whenever a scrape came between the acquisition and the failure.
#[test]
fn a_partition_that_cannot_be_taken_is_not_counted_owned() {
    if !have_nats_server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (server, url) = server_in(d);
    let log = d.join("agent.jsonl");
    let (first, second) = refund_log("untakeable", 20, 4);
    append(&log, &first);
    append(&log, &second);
    let ship = shipper(d, &url, &log, "2");
    let owned =
        |port: u16| scrape(port).and_then(|m| m.get("retryscope_nats_partitions_owned").copied());
    let (c1, m1) = collector(d, &url, "c1", "2", "300");
    wait_for("c1 to own both partitions", Duration::from_secs(30), || {
        owned(m1) == Some(2.0)
    });
    drop(c1); // SIGKILL
    put_state_key(&url, "p1", b"{\"not a checkpoint");
    let (c2, m2) = collector(d, &url, "c2", "2", "300");
    wait_for(
        "c2 to fail to take partition 1",
        Duration::from_secs(30),
        || log_text(d, "c2").contains("cannot take partition"),
    );
    wait_for("c2 to own partition 0", Duration::from_secs(30), || {
        owned(m2) == Some(1.0)
    });
    // Its takes of partition 1 keep failing, a round (half a second) apart: scraped between
    // them and during them, it is never counted.
    let seen: Vec<Option<f64>> = (0..12)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(150));
            owned(m2)
        })
        .collect();
    assert!(seen.iter().all(|o| *o == Some(1.0)), "owned: {seen:?}");
    for p in [ship, c2, server] {
        p.terminate();
    }
}

/// Issue 26: a new owner that replays past the findings stream's duplicate window (set to 1 s
/// here) still publishes nothing twice: it reads which findings the dead owner published, and
/// checkpoints taken mid-replay keep that knowledge.
#[test]
fn a_replay_after_the_duplicate_window_publishes_nothing_twice() {
    if !have_nats_server() {
        return;
    }
    const TURNS: usize = 600;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (server, url) = server_in(d);
    with_js(&url, async |js| {
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "RETRYSCOPE_FINDINGS".to_string(),
            subjects: vec!["retryscope.findings.>".to_string()],
            duplicate_window: Duration::from_secs(1),
            ..Default::default()
        })
        .await
        .expect("findings stream with a 1 s window");
    });
    let log = d.join("agent.jsonl");
    let (first, second) = refund_log("late", TURNS, 4);
    append(&log, &first);
    append(&log, &second);
    let expected = check(&log, Path::new("/dev/null")).0;
    let ship = shipper(d, &url, &log, "2");
    // c1 publishes every finding and never checkpoints; then it dies.
    let (c1, _) = collector(d, &url, "c1", "2", "600000");
    assert_findings(&url, &expected, Duration::from_secs(60));
    drop(c1);
    std::thread::sleep(Duration::from_secs(3)); // the lease and the duplicate window pass
    // Checkpoints every 10 ms: several land mid-replay, and what c1 published past them must
    // still not be published again.
    let (c2, m2) = collector(d, &url, "c2", "2", "10");
    wait_for("c2 to replay every turn", Duration::from_secs(60), || {
        scrape(m2).is_some_and(|m| sum(&m, "retryscope_turns_total{") == TURNS as f64)
    });
    assert_findings(&url, &expected, Duration::from_secs(5));
    for p in [ship, c2, server] {
        p.terminate();
    }
}

/// Issue 26: `ship` refuses an unusable checkpoint (starting over would ship every line
/// again) unless told to reset, as `run` does; before it connects to anything.
#[test]
fn ship_refuses_a_corrupt_checkpoint_unless_told_to_reset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let data = d.join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::write(data.join("ship-checkpoint.json"), b"{\"trunc").expect("corrupt checkpoint");
    let log = d.join("agent.jsonl");
    append::<&str>(&log, &[]);
    let ship = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .args(["ship", &log.display().to_string(), "--nats"])
            // nothing listens there: the refusal comes before any connection
            .arg(format!("nats://127.0.0.1:{}", free_port()))
            .arg("--data-dir")
            .arg(&data)
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .expect("run ship")
    };
    let out = ship(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("ship-checkpoint.json is unusable"), "{err}");
    assert!(err.contains("--reset-checkpoint"), "{err}");
    assert!(
        data.join("ship-checkpoint.json").exists(),
        "left where it was"
    );
    if !have_nats_server() {
        return;
    }
    // With --reset-checkpoint it is moved aside and shipping starts.
    let (server, url) = server_in(d);
    let p = retryscope(
        "ship",
        &[
            "ship",
            &log.display().to_string(),
            "--nats",
            &url,
            "--data-dir",
            &data.display().to_string(),
            "--reset-checkpoint",
        ],
        &d.join("ship.log"),
    );
    wait_for(
        "the checkpoint to be moved aside",
        Duration::from_secs(20),
        || {
            std::fs::read_dir(&data).is_ok_and(|entries| {
                entries
                    .flatten()
                    .any(|e| e.file_name().to_string_lossy().contains(".unusable-"))
            })
        },
    );
    p.terminate();
    server.terminate();
}

/// Issues 22 and 26: a collector refuses, with the reason and exit 2, what it cannot honour,
/// instead of accepting the flag and ignoring it.
#[test]
fn a_collector_refuses_flags_it_cannot_honour() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    for (flags, said) in [
        (vec!["--workers", "4"], "--workers"),
        (vec!["--data-dir", "/tmp/x"], "--data-dir"),
        (vec!["--output", "human"], "--output human"),
    ] {
        let err = refused(&["run", "--nats", &url], &flags);
        assert!(
            err.contains("with --nats") && err.contains(said),
            "{flags:?}: {err}"
        );
    }
}

/// `proxy --nats-publish` leaves correlation to the cluster: a flag that configures a local
/// engine is refused (exit 2, naming it and where it belongs), as is a NATS flag without
/// `--nats-publish`; nothing is started.
#[test]
fn a_publishing_proxy_refuses_what_only_a_local_engine_does() {
    let url = format!("nats://127.0.0.1:{}", free_port());
    let upstream = "http://127.0.0.1:9";
    for (flags, said) in [
        (
            vec!["--nats-publish", &url, "--findings-out", "x"],
            "--findings-out",
        ),
        (
            vec!["--nats-publish", &url, "--data-dir", "/tmp/x"],
            "--data-dir",
        ),
        (
            vec!["--nats-publish", &url, "--max-attempts", "3"],
            "--max-attempts",
        ),
        (vec!["--nats-ca", "/tmp/ca.pem"], "--nats-ca"),
    ] {
        let proxy = ["proxy", "--upstream", upstream, "--listen", "127.0.0.1:0"];
        let err = refused(&proxy, &flags);
        assert!(
            err.contains(said) && err.contains("--nats-publish"),
            "{flags:?}: {err}"
        );
    }
}

/// The command `args` with `flags` exits 2 without starting; its stderr.
fn refused(args: &[&str], flags: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(args)
        .args(flags)
        .stdin(Stdio::null())
        .output()
        .expect("retryscope");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{flags:?}: {err}");
    err
}
