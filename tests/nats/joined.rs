//! Time in a partition: the collector's clock is the publish time of a partition's messages, so
//! what waits for time (a gemini-cli session's telemetry and stream-json, joined once the
//! session has been quiet; an idle turn's timeout) needs the clock to move after the agent's
//! last line. The partition's owner publishes clock messages into it while it is quiet.
//!
//! Before: the collector held a joined session's events and never correlated them (its loop
//! never released joined sessions, and its clock stopped with the last line), so a real
//! gemini-cli session shipped through NATS gave no turn and no finding.

use std::time::Duration;

use crate::nats_support::{
    assert_findings, check, collector_with, have_nats_server, retryscope, scrape, server_in, sum,
    wait_for,
};

#[test]
fn a_gemini_cli_session_shipped_through_nats_is_joined_as_check_joins_it() {
    if !have_nats_server() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // A real gemini-cli 0.61.0 session cut after a tool ran (tests/fixtures/agents/README.md).
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents/gemini-cli/after-tool-reset");
    let (telemetry, stream) = (d.join("telemetry.log"), d.join("stream.jsonl"));
    std::fs::copy(fixture.join("telemetry.log"), &telemetry).expect("copy telemetry");
    std::fs::copy(fixture.join("stream.jsonl"), &stream).expect("copy stream-json");
    let (expected, turns) = check(&telemetry, &stream);
    assert!(
        !expected.is_empty() && turns >= 1.0,
        "check finds the cut: {expected:?}"
    );
    let (server, url) = server_in(d);
    let data = d.join("ship-data").display().to_string();
    let (t, s) = (
        telemetry.display().to_string(),
        stream.display().to_string(),
    );
    let ship = retryscope(
        "ship",
        &[
            "ship",
            &t,
            &s,
            "--nats",
            &url,
            "--data-dir",
            &data,
            "--source-id",
            "host",
            "--partitions",
            "4",
        ],
        &d.join("ship.log"),
    );
    let (c1, port) = collector_with(d, &url, "c1", "4", "500", &["--idle-timeout-secs", "30"]);
    // Both outputs of the session went to one partition and were joined there: the same
    // findings as `check`, each once, in the findings stream.
    assert_findings(&url, &expected, Duration::from_secs(90));
    wait_for("the joined turn counted", Duration::from_secs(30), || {
        scrape(port).is_some_and(|m| sum(&m, "retryscope_turns_total") >= turns)
    });
    c1.terminate();
    ship.terminate();
    server.terminate();
}
