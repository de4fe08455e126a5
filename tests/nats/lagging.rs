//! Issue 26, cross-host order: one turn's parts come from two hosts' logs, and the host with
//! the first half lags: the second half (a retry that runs the refund again, and the turn's
//! end) reaches JetStream seconds before the first (the attempt that ran it first). The
//! collector holds an ended turn for `--end-grace-secs` (on its partition's clock) so the late
//! half still joins it: the findings stream equals `check` over both logs. Before, the late
//! half was dropped as events after the turn's close (428 findings lost, 99 doubled in the
//! issue's run).

use std::time::Duration;

use crate::nats_support::{
    append, assert_findings, check, collector, have_nats_server, refund_log, server_in, shipper,
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
