//! A session that pauses past the idle timeout and then goes on, through `run`'s OTLP
//! receiver: Codex 0.169.0's real export (`tests/fixtures/agents/codex/otlp-after-tool-reset`,
//! the bodies as it POSTed them), its first model call's log records sent, then nothing until
//! that call's turn has timed out (a tool running longer than the idle timeout sends nothing
//! either), then the rest: the break of the first call and the second call.
//!
//! Regression: the receiver ended a session's stream once quiet and a later record started it
//! afresh, so Codex's second model call was named as its first (`<conversation.id>`, already
//! closed) and dropped as after-close: one turn where `check` of the same records finds two.
//! Found by the NATS conformance test on CI, where posting a 500 KB trace body took longer
//! than its 1 s idle timeout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::otlp_post;
use crate::run_harness::*;

#[test]
fn a_codex_session_quiet_past_the_idle_timeout_goes_on_as_check_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let capture = fixture("tests/fixtures/agents/codex/otlp-after-tool-reset");
    let lines = dir.path().join("otlp.jsonl");
    std::fs::write(&lines, otlp_post::receiver_lines(&capture)).unwrap();
    let checked = check_json(&[&lines]);
    let turns = checked.number("turns");
    assert_eq!(turns, 2.0, "{}", checked.summary);
    let bodies = otlp_post::capture_in(&capture);
    // The first model call's records are the first two log bodies; the third body on (its
    // spans, then the log records of the break and of the second call) come after the pause.
    assert!(bodies.len() >= 3 && bodies[..2].iter().all(|(s, _)| s == "logs"));
    let json = [("Content-Type", "application/json")];
    for workers in ["1", "2"] {
        let port = free_port();
        let findings = dir.path().join(format!("findings-{workers}.jsonl"));
        let listen = format!("127.0.0.1:{port}");
        let c = Collector::start(&[
            "--otlp-listen",
            &listen,
            "--idle-timeout-secs",
            "1",
            "--workers",
            workers,
            "--findings-out",
            findings.to_str().unwrap(),
        ]);
        let post = |(signal, body): &(String, Vec<u8>)| {
            let (status, head, _) =
                otlp_post::post(port, &format!("/v1/{signal}"), &json, body, false);
            assert_eq!(status, 200, "{signal}: {head}");
        };
        bodies[..2].iter().for_each(post);
        // The pause: the first call's turn times out, and the session's stream with it.
        c.wait_until(
            |m| sum(m, "retryscope_turns_total{") >= 1.0,
            "the first call's turn to time out",
        );
        std::thread::sleep(Duration::from_millis(2_500));
        bodies[2..].iter().for_each(post);
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = (BTreeMap::new(), Vec::new());
        let mut since = Instant::now();
        let m = loop {
            let m = c.scrape().unwrap_or_default();
            let now = (turn_level(&m), finding_ids(&findings));
            if now != last {
                (last, since) = (now, Instant::now());
            } else if (sum(&m, "retryscope_turns_total{") >= turns
                && since.elapsed() >= Duration::from_secs(3))
                // Short of the turns, but nothing has moved for a while: say what is missing.
                || since.elapsed() >= Duration::from_secs(10)
            {
                break m;
            }
            assert!(Instant::now() < deadline, "{workers} workers: not settled");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(c.terminate().success());
        let what = format!("{workers} workers");
        assert_eq!(sum(&m, "retryscope_turns_total{"), turns, "{what}: turns");
        assert_eq!(
            finding_ids(&findings),
            checked.finding_ids(),
            "{what}: findings"
        );
        // The first call's break is reported after its turn timed out: its attempt stays open
        // (unknown), where `check`, with no idle timeout, saw it fail; the break's records
        // are counted after close. The second call is whole.
        let mut attempts = checked.counts("attempts_by_outcome");
        let failed = attempts.remove("failed");
        assert_eq!(failed, Some(1), "{}", checked.summary);
        attempts.insert("open".into(), 1);
        assert_eq!(
            by_label(&m, "retryscope_attempts_total", "outcome"),
            attempts,
            "{what}: attempts"
        );
        let mut statuses = checked.counts("turns_by_status");
        statuses.remove("failed");
        statuses.insert("incomplete".into(), 1);
        assert_eq!(
            by_label(&m, "retryscope_turns_total", "status"),
            statuses,
            "{what}: turns"
        );
        assert_eq!(
            sum(&m, "retryscope_after_close_events_total"),
            1.0,
            "{what}: the break, after close"
        );
    }
}
