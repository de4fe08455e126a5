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
