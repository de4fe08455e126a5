//! Benchmark of the live collector (`retryscope run`), as a real process tailing a real file
//! with metrics on. Prints figures; asserts nothing about speed.
//!
//! ```sh
//! cargo build --release && cargo run --release --example bench_run -- [--events N] [--workers W] [--throughput-only]
//! ```
//! `--workers W` is passed to the collector (`run --workers`, default its own: 1);
//! `--throughput-only` stops after the first figure.
//! - sustained throughput: N demo-fleet events appended to a tailed file, until
//!   `retryscope_events_read_total` shows them all;
//! - delay from a line being written to it showing in `/metrics` (a retry line moving
//!   `retryscope_retries_total`), over 30 samples;
//! - resident memory with 100,000 open turns.

#[path = "support/scrape.rs"]
mod scrape;
use scrape::{scrape, spawn_run, value};
use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use retryscope::demo::{Fleet, FleetConfig};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn start(log: &Path, port: u16, workers: Option<&str>) -> Child {
    let extra = workers.map(|w| vec!["--workers", w]).unwrap_or_default();
    let child = spawn_run(log.as_os_str(), port, &extra)
        .expect("build the release binary first: cargo build --release");
    let deadline = Instant::now() + Duration::from_secs(10);
    while scrape(port).is_none() {
        assert!(Instant::now() < deadline, "collector did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let events: usize = args
        .iter()
        .position(|a| a == "--events")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let workers: Option<&str> = args
        .iter()
        .position(|a| a == "--workers")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str);
    let throughput_only = args.iter().any(|a| a == "--throughput-only");
    let dir = tempfile::tempdir().unwrap();

    // Sustained throughput.
    let log = dir.path().join("agent.log");
    std::fs::write(&log, b"").unwrap();
    let mut fleet = Fleet::new(FleetConfig::bench(3));
    let mut body = String::with_capacity(events * 150);
    let mut line = String::new();
    for _ in 0..events {
        line.clear();
        fleet.next_line(&mut line);
        body.push_str(&line);
        body.push('\n');
    }
    let port = free_port();
    let mut child = start(&log, port, workers);
    let rss_idle = rss_kib(child.id());
    let started = Instant::now();
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(body.as_bytes()).unwrap();
    f.flush().unwrap();
    let written = started.elapsed();
    let mut peak_rss = 0;
    loop {
        peak_rss = peak_rss.max(rss_kib(child.id()));
        let m = scrape(port).unwrap_or_default();
        if value(&m, "retryscope_events_read_total{source=\"file\"}") >= events as f64 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = started.elapsed();
    println!(
        "tailing with metrics: {events} events ({:.0} MB) in {:.2} s = {:.2} M events/s, {:.0} MB/s (append took {:.2} s); RSS idle {:.1} MiB, peak {:.1} MiB",
        body.len() as f64 / 1e6,
        took.as_secs_f64(),
        events as f64 / took.as_secs_f64() / 1e6,
        body.len() as f64 / 1e6 / took.as_secs_f64(),
        written.as_secs_f64(),
        rss_idle as f64 / 1024.0,
        peak_rss as f64 / 1024.0,
    );
    if throughput_only {
        let _ = child.kill();
        let _ = child.wait();
        return;
    }

    // Line-to-metrics delay.
    let mut delays = Vec::new();
    for i in 0..30 {
        let before = value(
            &scrape(port).unwrap_or_default(),
            "retryscope_retries_total{",
        );
        let t0 = Instant::now();
        writeln!(
            f,
            r#"{{"turn":"latency-{i}","type":"retry","attempt":1,"reason":"bench"}}"#
        )
        .unwrap();
        f.flush().unwrap();
        loop {
            let m = scrape(port).unwrap_or_default();
            if value(&m, "retryscope_retries_total{") > before {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        delays.push(t0.elapsed());
        std::thread::sleep(Duration::from_millis(37));
    }
    delays.sort();
    println!(
        "line written -> visible in /metrics: median {:.0} ms, p95 {:.0} ms, max {:.0} ms (default poll interval 100 ms)",
        delays[delays.len() / 2].as_secs_f64() * 1e3,
        delays[delays.len() * 95 / 100].as_secs_f64() * 1e3,
        delays[delays.len() - 1].as_secs_f64() * 1e3,
    );
    let _ = child.kill();
    let _ = child.wait();

    // Memory with 100,000 open turns.
    let log2 = dir.path().join("open.log");
    std::fs::write(&log2, b"").unwrap();
    let port = free_port();
    let mut child = start(&log2, port, workers);
    let base = rss_kib(child.id());
    let mut open = String::new();
    for i in 0..100_000u64 {
        let ts = 1_794_477_600_000u64 + i;
        open.push_str(&format!(
            "{{\"turn\":\"agent-{}-{i}\",\"type\":\"turn_start\",\"ts\":{ts},\"model\":\"claude-sonnet-4-5\",\"provider\":\"anthropic\",\"agent\":\"agent-{}\"}}\n{{\"turn\":\"agent-{}-{i}\",\"type\":\"attempt_start\",\"attempt\":0,\"ts\":{ts}}}\n",
            i % 8,
            i % 8,
            i % 8
        ));
    }
    let mut f2 = std::fs::OpenOptions::new()
        .append(true)
        .open(&log2)
        .unwrap();
    f2.write_all(open.as_bytes()).unwrap();
    loop {
        let m = scrape(port).unwrap_or_default();
        if value(&m, "retryscope_open_turns") >= 100_000.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let rss = rss_kib(child.id());
    println!(
        "100,000 open turns (no text): RSS {:.1} MiB ({:.1} MiB before; {:.0} bytes per open turn)",
        rss as f64 / 1024.0,
        base as f64 / 1024.0,
        (rss.saturating_sub(base)) as f64 * 1024.0 / 100_000.0
    );
    let _ = child.kill();
    let _ = child.wait();
}
