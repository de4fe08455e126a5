//! The harness the `run` end-to-end tests share: a real `retryscope run` process with a free
//! metrics port, scrapes of its /metrics, the bookstore examples as appended turns.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub struct Collector {
    pub child: Child,
    pub port: u16,
}

impl Collector {
    pub fn start(args: &[&str]) -> Collector {
        Self::start_with(args, Stdio::null())
    }

    /// [`Collector::start`], its log lines (stderr) written to `stderr`.
    pub fn start_logging(args: &[&str], stderr: &Path) -> Collector {
        let file = std::fs::File::create(stderr).expect("create the stderr file");
        Self::start_with(args, Stdio::from(file))
    }

    fn start_with(args: &[&str], stderr: Stdio) -> Collector {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .arg("run")
            .args(args)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start retryscope run");
        let c = Collector { child, port };
        c.wait_until(
            |m| m.keys().any(|k| k.starts_with("retryscope_build_info")),
            "first scrape",
        );
        c
    }

    pub fn scrape(&self) -> Option<BTreeMap<String, f64>> {
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

    pub fn wait_until(
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

    pub fn terminate(mut self) -> std::process::ExitStatus {
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

    pub fn kill9(mut self) {
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
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

pub fn get(m: &BTreeMap<String, f64>, key: &str) -> f64 {
    *m.get(key).unwrap_or_else(|| panic!("no series {key}"))
}

pub fn sum(m: &BTreeMap<String, f64>, prefix: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

pub fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/bookstore")
        .join(name)
}

/// `n` bookstore turns, cycling the three policies, each with its own turn id.
pub fn bookstore_turns(n: usize) -> Vec<String> {
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

pub fn append(path: &Path, lines: &[String]) {
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

/// The turn-level series, which must not depend on how the run was interrupted.
pub fn turn_level(m: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
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
