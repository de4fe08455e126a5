//! `retryscope run --workers N` as a real process: the same /metrics values and findings as
//! one worker, and kill -9 and restart with another worker count losing and doubling nothing.
//! (The harness is `run_collector.rs`'s.)

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

struct Collector {
    child: Child,
    port: u16,
}

impl Collector {
    fn start(args: &[&str]) -> Collector {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .arg("run")
            .args(args)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start retryscope run");
        let c = Collector { child, port };
        c.wait_until(
            |m| m.keys().any(|k| k.starts_with("retryscope_build_info")),
            "first scrape",
        );
        c
    }

    fn scrape(&self) -> Option<BTreeMap<String, f64>> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).ok()?;
        let (head, text) = body.split_once("\r\n\r\n")?;
        if !head.starts_with("HTTP/1.1 200") {
            return None;
        }
        Some(parse_metrics(text))
    }

    fn wait_until(
        &self,
        pred: impl Fn(&BTreeMap<String, f64>) -> bool,
        what: &str,
    ) -> BTreeMap<String, f64> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(m) = self.scrape()
                && pred(&m)
            {
                return m;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "collector did not stop on SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name{labels}` → value.
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn get(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key).unwrap_or_else(|| panic!("no series {key}"))
}

fn sum(m: &BTreeMap<String, f64>, prefix: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/bookstore")
        .join(name)
}

/// `n` bookstore turns, cycling the three policies, each with its own turn id.
fn bookstore_turns(n: usize) -> Vec<String> {
    let policies: Vec<String> = ["naive.jsonl", "reset.jsonl", "reset-late-exec.jsonl"]
        .iter()
        .map(|f| std::fs::read_to_string(example(f)).unwrap())
        .collect();
    let mut lines = Vec::new();
    for i in 0..n {
        for l in policies[i % 3].lines() {
            lines.push(l.replace("\"bookstore-1\"", &format!("\"bookstore-{i}\"")));
        }
    }
    lines
}

fn append(path: &Path, lines: &[String]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for l in lines {
        f.write_all(l.as_bytes()).unwrap();
        f.write_all(b"\n").unwrap();
    }
    f.flush().unwrap();
}

/// The turn-level series, compared with a relative tolerance: shards add costs and durations
/// in another order, so float sums may differ in their last bits.
fn turn_level(m: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    m.iter()
        .filter(|(k, _)| {
            [
                "retryscope_turns_total",
                "retryscope_attempts_total",
                "retryscope_retries_total",
                "retryscope_findings_total",
                "retryscope_billed_tokens_total",
                "retryscope_billed_cost_usd_total",
                "retryscope_tool_executions_total",
                "retryscope_attempts_per_turn",
                "retryscope_turn_duration_seconds",
                "retryscope_attempt_duration_seconds",
                "retryscope_events_read_total",
                "retryscope_events_decoded_total",
                "retryscope_bad_lines_total",
            ]
            .iter()
            .any(|p| k.starts_with(p))
        })
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

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
