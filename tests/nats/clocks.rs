//! Collectors whose wall clocks disagree by an hour share the partitions and fail over as if
//! they agreed: leases and memberships are judged by revisions observed on each collector's
//! own monotonic clock (`src/nats/lease.rs`), never by comparing one collector's wall clock
//! with a time another wrote.
//!
//! The wall clocks are faked with libfaketime (Debian's `faketime`, which `.ci/run` installs),
//! preloaded into two of the three collectors with the monotonic clock left alone. With wall
//! clock leases, the collector an hour ahead read every other lease as expired and took every
//! partition, and the one an hour behind read the others' memberships as ended: the fair
//! shares never settled, and a dead owner's partitions waited an hour for a new owner.

use crate::nats_support;

use std::time::{Duration, Instant};

use nats_support::*;

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// libfaketime's environment for a wall clock `offset` seconds off, the monotonic clock real.
fn skewed(offset: &str) -> [(&str, &str); 3] {
    [
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME", offset),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]
}

/// Whether libfaketime is here; without it the test says so and passes, except under CI.
fn have_faketime() -> bool {
    if std::path::Path::new(LIBFAKETIME).exists() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "libfaketime is missing in CI (.ci/run installs Debian's faketime)"
    );
    eprintln!("libfaketime not installed (apt-get install faketime): skipping");
    false
}

fn owned(port: u16) -> f64 {
    scrape(port).map_or(-1.0, |m| sum(&m, "retryscope_nats_partitions_owned"))
}

/// The partitions each collector owns once two scrapes in a row agree and add up to `total`.
fn settled(ports: &[u16], total: f64, limit: Duration) -> Vec<f64> {
    let counts = || -> Vec<f64> { ports.iter().map(|p| owned(*p)).collect() };
    let deadline = Instant::now() + limit;
    let mut last = counts();
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        let now = counts();
        if now == last && now.iter().sum::<f64>() == total {
            return now;
        }
        last = now;
    }
    last
}

#[test]
fn collectors_an_hour_apart_share_the_partitions_and_fail_over_as_if_their_clocks_agreed() {
    if !have_nats_server() || !have_faketime() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let d = dir.path();
    let (_server, url) = server_in(d);
    let log = d.join("agent.jsonl");
    let (first, second) = refund_log("skew", 60, 10);
    append(&log, &first);
    let ship = shipper(d, &url, &log, "9");
    let (c1, p1) = collector(d, &url, "c1", "3", "200");
    let (c2, p2) = collector_logged(d, &url, "c2", "c2", "3", "200", &[], &skewed("+3600"));
    let (c3, p3) = collector_logged(d, &url, "c3", "c3", "3", "200", &[], &skewed("-3600"));

    let shares = settled(&[p1, p2, p3], 9.0, Duration::from_secs(60));
    assert_eq!(
        shares,
        vec![3.0, 3.0, 3.0],
        "partitions owned by c1 (real clock), c2 (+1 h) and c3 (-1 h)"
    );
    for name in ["c1", "c2", "c3"] {
        assert!(
            !log_text(d, name).contains("lease lost"),
            "{name} lost a lease while every collector was alive:\n{}",
            log_text(d, name)
        );
    }

    // The collector an hour ahead dies: its leases were written with its clock, an hour
    // late for the others, yet they are taken over within a few leases.
    drop(c2);
    let killed = Instant::now();
    let shares = settled(&[p1, p3], 9.0, Duration::from_secs(60));
    assert_eq!(
        shares.iter().sum::<f64>(),
        9.0,
        "c1 and c3 own every partition after c2's death: {shares:?}"
    );
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(30),
        "taken over in {took:?}, not within a few 3 s leases"
    );

    // And the work is done once: the turns' second halves, correlated by the survivors.
    append(&log, &second);
    let empty = d.join("empty.jsonl");
    append::<&str>(&empty, &[]);
    let (expected, _) = check(&log, &empty);
    assert!(!expected.is_empty(), "the workload has findings");
    assert_findings(&url, &expected, Duration::from_secs(60));
    for p in [ship, c1, c3] {
        p.terminate();
    }
}
