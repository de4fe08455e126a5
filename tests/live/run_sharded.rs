//! `retryscope run --workers N` as a real process: the same /metrics values and findings as
//! one worker, and kill -9 and restart with another worker count losing and doubling nothing;
//! non-native streams (providers' SSE, agents' files, a gemini-cli session's two outputs, OTLP
//! captures through the receiver), each read by one worker, giving what one worker and `check`
//! give. (The harness is `tests/live/run_harness`, shared with `run_collector.rs`.)

use crate::run_harness;
use run_harness::*;

#[path = "run_sharded/non_native.rs"]
mod non_native;

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

/// The bookstore turns of [`bookstore_turns`], each turn's lines apart.
fn turns_apart(n: usize) -> Vec<Vec<String>> {
    let mut turns: Vec<Vec<String>> = Vec::new();
    let mut current = String::new();
    for line in bookstore_turns(n) {
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let id = v["turn"].as_str().unwrap().to_owned();
        if id != current {
            turns.push(Vec::new());
            current = id;
        }
        turns.last_mut().unwrap().push(line);
    }
    turns
}

#[test]
fn a_dead_worker_stops_the_run_with_no_checkpoint_after_it_and_a_restart_loses_nothing() {
    if !cfg!(debug_assertions) {
        // The fault hook is read in debug builds only (src/engine/sharded/fault.rs).
        eprintln!("skipped: RETRYSCOPE_FAULT_WORKER_PANIC_AFTER needs a debug build");
        return;
    }
    let turns = turns_apart(60);
    // The first 8 lines of every turn, then the rest of every turn: at the checkpoint between
    // the two halves all 60 turns are open, about half of them owned by each worker.
    let first: Vec<String> = turns.iter().flat_map(|t| t[..8].to_vec()).collect();
    let rest: Vec<String> = turns.iter().flat_map(|t| t[8..].to_vec()).collect();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.jsonl");
    let data = dir.path().join("data");
    let findings = dir.path().join("findings.jsonl");
    let checkpoint = data.join("checkpoint.json");
    let args = run_args(&log, &findings, "2", Some(&data));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    // 1. The first halves, checkpointed with every turn open at a clean stop.
    append(&log, &first);
    let c = Collector::start(&args);
    c.wait_until(
        |m| {
            get(m, "retryscope_events_read_total{source=\"file\"}") >= first.len() as f64
                && get(m, "retryscope_open_turns") >= turns.len() as f64
        },
        "first halves read",
    );
    assert!(c.terminate().success());
    let good = std::fs::read(&checkpoint).expect("the checkpoint of the clean stop");

    // 2. The rest of every turn, and worker 1 panics a few lines into it. A periodic
    // checkpoint is made rare, so that none can fall between the start and the panic: the
    // only checkpoints this run could write are the ones after the death.
    append(&log, &rest);
    let config = dir.path().join("rare-checkpoints.toml");
    std::fs::write(&config, "checkpoint_interval_secs = 3600\n").unwrap();
    let stderr_path = dir.path().join("faulty.stderr");
    let mut faulty = std::process::Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .arg("run")
        .args(&args)
        .arg("--config")
        .arg(&config)
        .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port())])
        .env("RUST_LOG", "warn")
        .env("RETRYSCOPE_FAULT_WORKER_PANIC_AFTER", "1:5")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("start the faulty run");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = faulty.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stopped_by_itself = status.is_some();
    let status = status.unwrap_or_else(|| {
        // It kept going without worker 1: stop it as an operator would.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &faulty.id().to_string()])
            .status();
        faulty.wait().unwrap()
    });
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    let after = std::fs::read(&checkpoint).expect("a checkpoint after the faulty run");
    assert!(
        stopped_by_itself && !status.success(),
        "the run must stop with an error when a worker dies (stopped by itself: \
         {stopped_by_itself}, {status}); checkpoint unchanged: {}; stderr:\n{stderr}",
        after == good
    );
    assert!(
        stderr.contains("ingest worker 1") && stderr.contains("fault injected"),
        "stderr names the dead worker and its panic:\n{stderr}"
    );
    assert!(
        after == good,
        "no checkpoint is written after the death; stderr:\n{stderr}"
    );

    // 3. A restart without the fault resumes from the last good checkpoint: every turn is
    // there, each finding exactly once, the metrics as `check` counts the whole log.
    let checked = check_json(&[&log]);
    let want_findings = checked.finding_ids();
    assert_eq!(checked.number("turns") as usize, turns.len());
    let c = Collector::start(&args);
    c.wait_until(
        |m| sum(m, "retryscope_turns_total{") >= turns.len() as f64,
        "the restart",
    );
    std::thread::sleep(Duration::from_millis(500));
    let m = c.scrape().unwrap();
    assert!(c.terminate().success());
    assert_eq!(
        finding_ids(&findings),
        want_findings,
        "findings: none lost, none twice"
    );
    assert_eq!(
        by_label(&m, "retryscope_turns_total", "status"),
        checked.counts("turns_by_status")
    );
    assert_eq!(
        by_label(&m, "retryscope_findings_total", "kind"),
        checked.counts("findings")
    );
    assert_eq!(
        by_label(&m, "retryscope_attempts_total", "outcome"),
        checked.counts("attempts_by_outcome")
    );
    assert_eq!(
        sum(&m, "retryscope_retries_total{"),
        checked.number("retries")
    );
    assert_eq!(
        get(&m, "retryscope_events_read_total{source=\"file\"}"),
        checked.number("lines"),
        "every line read once (the faulty run's reads are not in the checkpoint)"
    );
    assert_eq!(get(&m, "retryscope_open_turns"), 0.0);
}
