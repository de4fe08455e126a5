//! The floor benchmark (issue 16): on ONE generated log, in one run, the times of
//! - a bare single-thread typed `serde_json` parse of every line (what any consumer pays),
//! - `retryscope check --json` sharded (the default) and `--single-thread`, with a checksum of
//!   each report (they must be equal) and peak RSS,
//! - `retryscope run` ingesting the file from a cold start (process spawn, empty state) until
//!   every turn of the log is counted in `/metrics` (`retryscope_turns_total`), with one worker
//!   and with the default worker count, and peak RSS.
//!
//! Each figure is the best of `--runs` (default 3). Prints figures and whether the targets
//! hold; asserts nothing about speed.
//!
//! ```sh
//! cargo build --release && cargo run --release --example bench_floor -- [--events N] [--log FILE] [--runs K]
//! ```

#[path = "support/scrape.rs"]
mod scrape;
use scrape::{scrape, value};
use std::borrow::Cow;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use retryscope::demo::{Fleet, FleetConfig};
use sha2::Digest;

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

fn binary() -> PathBuf {
    if let Ok(bin) = std::env::var("RETRYSCOPE_BIN") {
        // Another build to compare with (e.g. a copy of the binary before a change).
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().unwrap();
    // target/release/examples/bench_floor → target/release/retryscope
    exe.parent().unwrap().parent().unwrap().join("retryscope")
}

/// (peak RSS KiB, CPU seconds) of a running process, from /proc.
fn proc_figures(pid: u32) -> Option<(u64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some((hwm, ticks / 100.0))
}

struct Measured {
    wall: Duration,
    peak_kib: u64,
    cpu_s: f64,
}

/// `check --json` (plus `extra`), stdout hashed; best wall time of `runs`.
fn check(path: &Path, extra: &[&str], runs: usize) -> (Measured, String) {
    let mut best: Option<Measured> = None;
    let mut digest = String::new();
    for _ in 0..runs {
        let start = Instant::now();
        let mut child = Command::new(binary())
            .args(["check", "--json"])
            .args(extra)
            .arg(path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("build the release binary first: cargo build --release");
        let mut stdout = child.stdout.take().unwrap();
        let pid = child.id();
        let reader = std::thread::spawn(move || {
            let mut hash = sha2::Sha256::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => hash.update(&buf[..n]),
                }
            }
            hash.finalize()
                .iter()
                .take(8)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        });
        let (mut peak, mut cpu) = (0, 0.0);
        loop {
            if let Some((hwm, c)) = proc_figures(pid) {
                peak = peak.max(hwm);
                cpu = c;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let wall = start.elapsed();
        digest = reader.join().unwrap();
        if best.as_ref().is_none_or(|b| wall < b.wall) {
            best = Some(Measured {
                wall,
                peak_kib: peak,
                cpu_s: cpu,
            });
        }
    }
    (best.unwrap(), digest)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `run` from a cold start over the whole file until `/metrics` counts every turn; best of
/// `runs`. `None` when the binary exits first (an older build without `--workers`).
fn run(path: &Path, turns: u64, workers: Option<usize>, runs: usize) -> Option<Measured> {
    let mut best: Option<Measured> = None;
    for _ in 0..runs {
        let port = free_port();
        let start = Instant::now();
        let mut cmd = Command::new(binary());
        cmd.arg("run")
            .arg(path)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(["--findings-out", "", "--idle-timeout-secs", "3600"])
            .args(["--max-open-turns", "200000"]);
        if let Some(w) = workers {
            cmd.args(["--workers", &w.to_string()]);
        }
        let mut child = cmd
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("build the release binary first: cargo build --release");
        let (mut peak, mut cpu) = (0, 0.0);
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            if let Some((hwm, c)) = proc_figures(child.id()) {
                peak = peak.max(hwm);
                cpu = c;
            }
            if let Some(m) = scrape(port)
                && value(&m, "retryscope_turns_total{") >= turns as f64
            {
                break;
            }
            assert!(Instant::now() < deadline, "run did not finish in time");
            if child.try_wait().ok().flatten().is_some() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let wall = start.elapsed();
        let _ = child.kill();
        let _ = child.wait();
        if best.as_ref().is_none_or(|b| wall < b.wall) {
            best = Some(Measured {
                wall,
                peak_kib: peak,
                cpu_s: cpu,
            });
        }
    }
    best
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let events: u64 = arg("--events").map_or(1_000_000, |v| v.parse().expect("--events N"));
    let runs: usize = arg("--runs").map_or(3, |v| v.parse().expect("--runs K"));
    let path = match arg("--log") {
        Some(p) => PathBuf::from(p),
        None => {
            let dir = std::env::temp_dir().join("retryscope-bench");
            std::fs::create_dir_all(&dir).unwrap();
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
    let (mut lines, mut turns) = (0u64, 0u64);
    for l in BufReader::new(std::fs::File::open(&path).unwrap()).lines() {
        let l = l.unwrap();
        lines += 1;
        if l.contains(r#""type":"turn_end""#) {
            turns += 1;
        }
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "log: {} ({lines} lines, {turns} turns, {:.1} MB); {cores} cores; best of {runs}",
        path.display(),
        bytes as f64 / 1e6
    );
    let rate = |d: Duration| lines as f64 / d.as_secs_f64() / 1e6;

    let _ = bare_parse(&path); // warm the page cache
    let bare = (0..runs).map(|_| bare_parse(&path).1).min().unwrap();
    println!(
        "bare typed serde_json parse (1 thread):  {:.3} s  {:.2} M lines/s",
        bare.as_secs_f64(),
        rate(bare)
    );

    let (sharded, sum_sharded) = check(&path, &[], runs);
    let (single, sum_single) = check(&path, &["--single-thread"], runs);
    for (name, m, sum) in [
        ("check --json (sharded)      ", &sharded, &sum_sharded),
        ("check --json --single-thread", &single, &sum_single),
    ] {
        println!(
            "{name}:  {:.3} s  {:.2} M lines/s  {:.2}x bare  cpu {:.2} s  peak RSS {:.1} MiB  report sha256 {sum}",
            m.wall.as_secs_f64(),
            rate(m.wall),
            m.wall.as_secs_f64() / bare.as_secs_f64(),
            m.cpu_s,
            m.peak_kib as f64 / 1024.0,
        );
    }
    println!(
        "reports identical: {}",
        if sum_sharded == sum_single {
            "yes"
        } else {
            "NO"
        }
    );

    let one = run(&path, turns, Some(1), runs);
    let many = run(&path, turns, None, runs);
    for (name, m) in [
        ("run --workers 1        ", &one),
        ("run (default workers)  ", &many),
    ] {
        let Some(m) = m else {
            println!("{name}:  n/a (this binary has no --workers)");
            continue;
        };
        println!(
            "{name}:  {:.3} s  {:.2} M events/s  cpu {:.2} s  peak RSS {:.1} MiB  (cold start until every turn is in /metrics)",
            m.wall.as_secs_f64(),
            rate(m.wall),
            m.cpu_s,
            m.peak_kib as f64 / 1024.0,
        );
    }

    let ratio = sharded.wall.as_secs_f64() / bare.as_secs_f64();
    println!("targets:");
    println!(
        "  check wall <= 1.0x bare parse: {ratio:.2}x  {}",
        if ratio <= 1.0 { "met" } else { "NOT met" }
    );
    let run_rate = many.as_ref().map_or(0.0, |m| rate(m.wall));
    println!(
        "  run >= 1.5 M events/s:        {run_rate:.2} M/s  {}",
        if run_rate >= 1.5 { "met" } else { "NOT met" }
    );
    println!(
        "  check peak RSS < 32 MiB:      {:.1} MiB  {}",
        sharded.peak_kib.max(single.peak_kib) as f64 / 1024.0,
        if sharded.peak_kib.max(single.peak_kib) < 32 * 1024 {
            "met"
        } else {
            "NOT met"
        }
    );
}
