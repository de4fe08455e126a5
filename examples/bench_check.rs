//! Benchmark of `retryscope check --json` against a bare typed `serde_json` parse of the same
//! lines, and of memory per open turn. Prints figures; asserts nothing about speed.
//!
//! ```sh
//! cargo build --release && cargo run --release --example bench_check -- [--events N] [--log FILE]
//! ```
//! Without `--log`, a realistic log is generated with the demo fleet's bench preset
//! (interleaved turns, ~20 text fragments per attempt, tool calls, ~5% retries).

use std::borrow::Cow;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use retryscope::demo::{Fleet, FleetConfig};
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;

/// The typed shape a plain consumer would parse: borrowed strings, no correlation.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Bare<'a> {
    #[serde(borrow)]
    turn: Cow<'a, str>,
    #[serde(rename = "type", borrow)]
    ty: Cow<'a, str>,
    ts: Option<i64>,
    attempt: Option<u32>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    args: Option<&'a serde_json::value::RawValue>,
    #[serde(borrow)]
    reason: Option<Cow<'a, str>>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

fn bare_parse(path: &Path) -> (u64, Duration) {
    let start = Instant::now();
    let mut reader = BufReader::with_capacity(1 << 20, std::fs::File::open(path).unwrap());
    let mut line = Vec::new();
    let mut n = 0u64;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).unwrap() == 0 {
            break;
        }
        let l = line.strip_suffix(b"\n").unwrap_or(&line);
        if serde_json::from_slice::<Bare<'_>>(l).is_ok() {
            n += 1;
        }
    }
    (n, start.elapsed())
}

fn check_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/release/examples/bench_check → target/release/retryscope
    exe.parent().unwrap().parent().unwrap().join("retryscope")
}

fn peak_rss_kib(pid_status: &str) -> Option<u64> {
    pid_status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Memory per open turn: 100,000 turns with a few events each, no text, never closed.
fn open_turn_memory(turns: usize) -> f64 {
    let mut c = Correlator::new(
        CorrelatorConfig {
            idle_timeout_ms: None,
            max_open_turns: usize::MAX,
            ..CorrelatorConfig::default()
        },
        std::sync::Arc::new(PriceTable::builtin()),
    );
    let mut out: Vec<Output> = Vec::new();
    let mut skips = retryscope_core::decode::SkipCounts::default();
    let before = rss_kib();
    for i in 0..turns {
        for line in [
            format!(
                r#"{{"turn":"agent-{}-{i}","type":"turn_start","ts":{},"model":"gpt-4.1","provider":"openai","agent":"agent-{}"}}"#,
                i % 8,
                1_700_000_000_000u64 + i as u64,
                i % 8
            ),
            format!(
                r#"{{"turn":"agent-{}-{i}","type":"attempt_start","attempt":0,"ts":{}}}"#,
                i % 8,
                1_700_000_000_001u64 + i as u64
            ),
            format!(
                r#"{{"turn":"agent-{}-{i}","type":"tool_call","attempt":0,"id":"call_{i}","name":"lookup_order","args":{{"order":"ORD-{i}"}}}}"#,
                i % 8
            ),
        ] {
            if let Ok(retryscope_core::decode::native::NativeLine::Event(ev)) =
                retryscope_core::decode::native::decode_line(line.as_bytes(), &mut skips)
            {
                c.observe(&ev, 0, &mut out);
            }
        }
        out.clear();
    }
    let after = rss_kib();
    assert_eq!(c.open_turns(), turns);
    (after.saturating_sub(before) as f64 * 1024.0) / turns as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut events: u64 = 1_000_000;
    let mut log: Option<PathBuf> = None;
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--events" => {
                events = args[i + 1].parse().expect("--events N");
                i += 1;
            }
            "--log" => {
                log = Some(PathBuf::from(&args[i + 1]));
                i += 1;
            }
            other => panic!("unknown argument {other}"),
        }
        i += 1;
    }
    let dir = std::env::temp_dir().join("retryscope-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let path = match log {
        Some(p) => p,
        None => {
            let p = dir.join(format!("bench-{events}.jsonl"));
            if !p.exists() {
                let mut fleet = Fleet::new(FleetConfig::bench(1));
                let mut w = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
                let mut line = String::new();
                for _ in 0..events {
                    line.clear();
                    fleet.next_line(&mut line);
                    w.write_all(line.as_bytes()).unwrap();
                    w.write_all(b"\n").unwrap();
                }
                fleet.drain(&mut w).unwrap();
                w.flush().unwrap();
            }
            p
        }
    };
    let bytes = std::fs::metadata(&path).unwrap().len();
    let lines = BufReader::new(std::fs::File::open(&path).unwrap())
        .lines()
        .count() as u64;
    println!(
        "log: {} ({lines} lines, {:.1} MB, {:.1} bytes/line)",
        path.display(),
        bytes as f64 / 1e6,
        bytes as f64 / lines as f64
    );

    // Warm the page cache, then take the best of three of each.
    let _ = bare_parse(&path);
    let bare = (0..3).map(|_| bare_parse(&path).1).min().unwrap();
    let rate = |d: Duration| {
        (
            lines as f64 / d.as_secs_f64(),
            bytes as f64 / 1e6 / d.as_secs_f64(),
        )
    };
    let (ev_s, mb_s) = rate(bare);
    println!(
        "bare typed serde_json parse: {:.3} s  {:.2} M events/s  {:.0} MB/s",
        bare.as_secs_f64(),
        ev_s / 1e6,
        mb_s
    );

    let bin = check_binary();
    let mut best = Duration::MAX;
    let mut peak = 0;
    for _ in 0..3 {
        let start = Instant::now();
        let mut child = Command::new(&bin)
            .args(["check", "--json"])
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("build the release binary first: cargo build --release");
        // Sample the child's peak RSS while it runs (VmHWM is the high-water mark).
        let status_path = format!("/proc/{}/status", child.id());
        let mut hwm = 0;
        loop {
            if let Ok(s) = std::fs::read_to_string(&status_path)
                && let Some(v) = peak_rss_kib(&s)
            {
                hwm = hwm.max(v);
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        best = best.min(start.elapsed());
        peak = peak.max(hwm);
    }
    let (ev_s, mb_s) = rate(best);
    println!(
        "retryscope check --json:    {:.3} s  {:.2} M events/s  {:.0} MB/s  ({:.2}x the bare parse)  peak RSS {:.1} MiB",
        best.as_secs_f64(),
        ev_s / 1e6,
        mb_s,
        best.as_secs_f64() / bare.as_secs_f64(),
        peak as f64 / 1024.0
    );
    let per_turn = open_turn_memory(100_000);
    println!(
        "correlator memory per open turn (3 events, a tool call, no text): {per_turn:.0} bytes"
    );
}
