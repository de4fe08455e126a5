//! `retryscope run --workers N` as a real process: the same /metrics values and findings as
//! one worker, and kill -9 and restart with another worker count losing and doubling nothing.
//! (The harness is `tests/run_harness`, shared with `run_collector.rs`.)

mod run_harness;
use run_harness::*;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

fn assert_close(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>, what: &str) {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{what}: same series"
    );
    for (k, x) in a {
        let y = b[k];
        assert!(
            (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
            "{what}: {k} = {x} vs {y}"
        );
    }
}

fn run_args(log: &Path, findings: &Path, workers: &str, data: Option<&Path>) -> Vec<String> {
    let mut args = vec![
        log.to_str().unwrap().to_string(),
        "--findings-out".into(),
        findings.to_str().unwrap().into(),
        "--idle-timeout-secs".into(),
        "3600".into(),
        "--workers".into(),
        workers.into(),
    ];
    if let Some(d) = data {
        args.push("--data-dir".into());
        args.push(d.to_str().unwrap().into());
    }
    args
}

fn sorted_lines(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort();
    v
}

#[test]
fn sharded_run_matches_one_worker_and_survives_kill_9_with_other_worker_counts() {
    let turns = 120;
    let mut lines = bookstore_turns(turns);
    // Bad lines are counted by exactly one worker.
    lines.insert(10, "{not json".to_owned());
    lines.insert(500, r#"{"type":"text","text":"no turn"}"#.to_owned());

    // Reference: one worker, uninterrupted.
    let ref_dir = tempfile::tempdir().unwrap();
    let ref_log = ref_dir.path().join("agent.jsonl");
    append(&ref_log, &lines);
    let ref_findings = ref_dir.path().join("findings.jsonl");
    let args = run_args(&ref_log, &ref_findings, "1", None);
    let c = Collector::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let reference = c.wait_until(
        |m| sum(m, "retryscope_turns_total{") >= turns as f64,
        "reference run",
    );
    assert!(c.terminate().success());

    // Three workers, uninterrupted: the same values.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.jsonl");
    append(&log, &lines);
    let findings = dir.path().join("findings.jsonl");
    let args = run_args(&log, &findings, "3", None);
    let c = Collector::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let sharded = c.wait_until(
        |m| sum(m, "retryscope_turns_total{") >= turns as f64,
        "sharded run",
    );
    assert!(c.terminate().success());
    assert_close(&turn_level(&sharded), &turn_level(&reference), "3 workers");
    assert_eq!(sorted_lines(&findings), sorted_lines(&ref_findings));

    // Two workers, killed after a checkpoint mid-input, resumed with three.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.jsonl");
    let data = dir.path().join("data");
    let findings = dir.path().join("findings.jsonl");
    let half = lines.len() / 2 + 7;
    append(&log, &lines[..half]);
    let args = run_args(&log, &findings, "2", Some(&data));
    let c = Collector::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    c.wait_until(
        |m| {
            get(m, "retryscope_events_read_total{source=\"file\"}") >= half as f64
                && get(m, "retryscope_checkpoint_writes_total") >= 2.0
        },
        "half read and checkpointed",
    );
    c.kill9();
    append(&log, &lines[half..]);
    let args = run_args(&log, &findings, "3", Some(&data));
    let c = Collector::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let resumed = c.wait_until(
        |m| sum(m, "retryscope_turns_total{") >= turns as f64,
        "resumed run",
    );
    std::thread::sleep(Duration::from_millis(500));
    let resumed_final = c.scrape().unwrap();
    assert!(c.terminate().success());
    assert_close(&turn_level(&resumed), &turn_level(&reference), "resumed");
    assert_close(
        &turn_level(&resumed_final),
        &turn_level(&reference),
        "nothing counted twice later",
    );
    assert_eq!(
        sorted_lines(&findings),
        sorted_lines(&ref_findings),
        "same findings, each exactly once"
    );
}
