//! `run --nats --otlp-listen`: a collector's OTLP receiver publishes what it accepts into the
//! events stream (the session's partition), and the findings stream then holds what a single
//! `run --otlp-listen` finds in the same requests. Before, the collector refused the receiver.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::nats_support::{
    collector_with, findings_in_stream, free_port, have_nats_server, partition_state, retryscope,
    scrape, server_in, shipper, sum, wait_for,
};
use crate::otlp_post::{capture, post};

/// Findings of a findings file as canonical JSON (sorted keys), as the stream's are read.
fn findings_file(path: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v.to_string())
        .collect()
}

/// Post every request of gemini-cli 0.61.0's real capture (a turn cut after a tool ran).
fn post_capture(port: u16) {
    for (signal, body) in capture("otlp-after-tool-reset") {
        let (status, head, _) = post(
            port,
            &format!("/v1/{signal}"),
            &[("Content-Type", "application/json")],
            &body,
            true,
        );
        assert_eq!(status, 200, "{signal}: {head}");
    }
}

#[test]
fn a_collector_receives_otlp_and_finds_what_run_finds() {
    if !have_nats_server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // Reference: one `run` with the receiver (gemini-cli's records end no turn: they close
    // when idle, on the wall clock here and on the partition's clock in the collector).
    let (http, mport) = (free_port(), free_port());
    let reference = d.join("reference.jsonl");
    let (h, m, r) = (
        format!("127.0.0.1:{http}"),
        format!("127.0.0.1:{mport}"),
        reference.display().to_string(),
    );
    let run = retryscope(
        "run",
        &[
            "run",
            "--otlp-listen",
            &h,
            "--metrics-addr",
            &m,
            "--findings-out",
            &r,
            "--idle-timeout-secs",
            "2",
        ],
        &d.join("run.log"),
    );
    wait_for("the receiver", Duration::from_secs(30), || {
        scrape(mport).is_some()
    });
    post_capture(http);
    wait_for("run's turns", Duration::from_secs(60), || {
        scrape(mport).is_some_and(|m| sum(&m, "retryscope_turns_total") >= 3.0)
    });
    run.terminate();
    let expected = findings_file(&reference);
    assert!(!expected.is_empty(), "the cut turn has findings");

    // A shipper only creates the events stream (it ships nothing); the collector receives.
    let (server, url) = server_in(d);
    let empty = d.join("nothing.jsonl");
    std::fs::write(&empty, b"").expect("empty log");
    let ship = shipper(d, &url, &empty, "4");
    let http = free_port();
    let listen = format!("127.0.0.1:{http}");
    let (c1, port) = collector_with(
        d,
        &url,
        "c1",
        "4",
        "500",
        &["--otlp-listen", &listen, "--idle-timeout-secs", "2"],
    );
    wait_for("the collector's receiver", Duration::from_secs(30), || {
        scrape(port).is_some_and(|m| sum(&m, "retryscope_nats_partitions_owned") >= 4.0)
    });
    post_capture(http);
    wait_for(
        "the findings in the stream",
        Duration::from_secs(90),
        || findings_in_stream(&url).len() >= expected.len(),
    );
    // A moment more: a duplicate would come after the count was reached.
    std::thread::sleep(Duration::from_millis(1500));
    let got: Vec<String> = findings_in_stream(&url);
    assert_eq!(got.len(), expected.len(), "each finding once: {got:#?}");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), expected);
    // The receiver's own counters are served beside the partitions'.
    let m = scrape(port).expect("scrape");
    assert!(
        sum(
            &m,
            "retryscope_otlp_receiver_records_total{signal=\"logs\"}"
        ) > 0.0,
        "{m:?}"
    );
    // The session's stream closes once quiet for the idle timeout (2 s, on the partition's
    // clock), as `run`'s receiver closes its own: the checkpoint keeps no open stream of it,
    // only its decoder's state, parked for its next record (`ingest/parked.rs`). Before, a
    // partition kept every session's stream it had seen open, for good.
    let sessions = || {
        let (mut open, mut parked) = (0, 0);
        for st in (0..4)
            .filter_map(|p| partition_state(&url, p))
            .flat_map(|s| s["streams"].as_array().cloned().unwrap_or_default())
            .filter(|st| st["name"].as_str().is_some_and(|n| n.starts_with("otlp:")))
        {
            if st["parked"] == true {
                parked += 1;
            } else {
                open += 1;
            }
        }
        (open, parked)
    };
    wait_for(
        "the quiet session's stream to be parked in the checkpoints",
        Duration::from_secs(30),
        || {
            let (open, parked) = sessions();
            open == 0 && parked > 0
        },
    );
    c1.terminate();
    ship.terminate();
    server.terminate();
}

/// A Codex session (0.169.0's real export, `tests/fixtures/agents/codex/otlp-after-tool-reset`)
/// whose first model call is received, times out and is parked in the partition's checkpoint;
/// then the collector is SIGKILLed, and the rest of the session (the break of the first call,
/// the second call) goes to another collector's receiver. The new owner reads the parked state
/// from the checkpoint: the second call is `<conversation.id>#2`, as `check` names it, and the
/// findings stream holds `check`'s findings once each. Before parking, the quiet session's
/// state was dropped and the second call was named as the first (`tests/live/otlp_pause.rs`
/// shows the same through `run`).
#[test]
fn a_codex_session_parked_before_a_takeover_goes_on_at_the_new_owner() {
    if !have_nats_server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let capture = crate::harness::fixture("tests/fixtures/agents/codex/otlp-after-tool-reset");
    let lines = d.join("otlp.jsonl");
    std::fs::write(&lines, crate::otlp_post::receiver_lines(&capture)).expect("lines");
    let checked = crate::harness::check_json(&[&lines]);
    let expected = checked.finding_ids();
    assert_eq!(checked.number("turns"), 2.0, "{}", checked.summary);
    let bodies = crate::otlp_post::capture_in(&capture);
    let json = [("Content-Type", "application/json")];
    let post_to = |port: u16, bodies: &[(String, Vec<u8>)]| {
        for (signal, body) in bodies {
            let (status, head, _) = post(port, &format!("/v1/{signal}"), &json, body, false);
            assert_eq!(status, 200, "{signal}: {head}");
        }
    };
    let (server, url) = server_in(d);
    let empty = d.join("nothing.jsonl");
    std::fs::write(&empty, b"").expect("empty log");
    let ship = shipper(d, &url, &empty, "4");
    let receiving = |name: &str| {
        let http = free_port();
        let listen = format!("127.0.0.1:{http}");
        let extra = ["--otlp-listen", listen.as_str(), "--idle-timeout-secs", "2"];
        let (c, port) = collector_with(d, &url, name, "4", "500", &extra);
        wait_for(
            &format!("{name}'s partitions"),
            Duration::from_secs(60),
            || scrape(port).is_some_and(|m| sum(&m, "retryscope_nats_partitions_owned") >= 4.0),
        );
        (c, http, port)
    };
    let (c1, http, _) = receiving("c1");
    // The first call's records (the first two log bodies).
    post_to(http, &bodies[..2]);
    let parked = || {
        (0..4)
            .filter_map(|p| partition_state(&url, p))
            .flat_map(|s| s["streams"].as_array().cloned().unwrap_or_default())
            .any(|st| {
                st["parked"] == true
                    && st["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("otlp:codex_exec/01a23784"))
            })
    };
    wait_for(
        "the quiet session parked in a checkpoint",
        Duration::from_secs(60),
        parked,
    );
    drop(c1); // SIGKILL
    // A peer takes the partitions over (the lease, 4 s, runs out) and receives the rest.
    let (c2, http, metrics) = receiving("c2");
    post_to(http, &bodies[2..]);
    let identities = || {
        let mut ids: Vec<String> = findings_in_stream(&url)
            .iter()
            .filter_map(|f| serde_json::from_str(f).ok())
            .map(|f| crate::harness::identity(&f))
            .collect();
        ids.sort();
        ids
    };
    wait_for("check's findings", Duration::from_secs(60), || {
        identities().len() >= expected.len()
    });
    // The second call has no finding of its own: its turn is what shows it was read as the
    // session's second (the partition's counts came over with its checkpoint).
    let turns = || scrape(metrics).map_or(0.0, |m| sum(&m, "retryscope_turns_total"));
    let waited = std::time::Instant::now();
    while turns() < 2.0 && waited.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
    }
    // A moment more: a duplicate would come after the count was reached.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(identities(), expected);
    let m = scrape(metrics).expect("c2's metrics");
    let by_status = crate::harness::by_label(&m, "retryscope_turns_total", "status");
    assert_eq!(sum(&m, "retryscope_turns_total"), 2.0, "{by_status:?}");
    assert_eq!(by_status.get("completed"), Some(&1), "{by_status:?}");
    drop(c2);
    ship.terminate();
    server.terminate();
}
