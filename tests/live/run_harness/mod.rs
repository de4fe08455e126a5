//! The harness the `run` end-to-end tests share: a real `retryscope run` process with a free
//! metrics port and the turn-level series of its scrapes; the rest (ports, processes,
//! scrapes, the bookstore turns, `check` as the oracle) is `tests/common/harness.rs`, shared
//! with the NATS tests.
#![allow(dead_code)]

pub use crate::harness::*;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A `retryscope run` process with its own metrics port.
pub struct Collector {
    pub proc: Proc,
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
        let (proc, port) = spawn_run(args, Stdio::null(), stderr);
        let c = Collector { proc, port };
        c.wait_until(
            |m| m.keys().any(|k| k.starts_with("retryscope_build_info")),
            "first scrape",
        );
        c
    }

    pub fn scrape(&self) -> Option<Scrape> {
        scrape(self.port)
    }

    pub fn wait_until(&self, pred: impl Fn(&Scrape) -> bool, what: &str) -> Scrape {
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

    pub fn terminate(self) -> std::process::ExitStatus {
        self.proc.terminate()
    }

    pub fn kill9(self) {
        drop(self.proc);
    }
}

/// The turn-level series, which must not depend on how the run was interrupted.
pub fn turn_level(m: &Scrape) -> Scrape {
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
