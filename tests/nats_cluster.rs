//! Past one machine, for real: a `nats-server` 2.9 with JetStream on loopback, two `ship`
//! processes on two "hosts" (separate folders and data dirs) writing parts of the same turns
//! (attempt 0 and its tool execution on host A, the retry re-executing the tool on host B: the
//! duplicate effect exists only across the hosts), three `run --nats` collectors: one killed
//! with SIGKILL mid-way, one added later, the NATS server restarted once mid-run, and one
//! shipper restarted without its checkpoint (it sends everything again).
//!
//! Checked: the findings stream holds exactly `check`'s findings over the merged logs, each
//! once; the collectors' summed metrics give the same turn and finding counts.
//!
//! Needs `nats-server` on PATH (`.ci/run` installs Debian's); without it the test says so and
//! passes, except under CI (`CI` set), where it fails.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PARTITIONS: &str = "8";
const ROUNDS: usize = 6;
const TURNS_PER_ROUND: usize = 12;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A child process killed (SIGKILL) when dropped, so a failing test leaves nothing behind.
struct Proc {
    child: Child,
    name: String,
}

impl Proc {
    fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Proc {
        let err = std::fs::File::create(log).expect("log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Proc {
            child,
            name: name.to_string(),
        }
    }

    fn terminate(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{} did not stop on SIGTERM", self.name);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nats_server(port: u16, store: &Path, log: &Path) -> Proc {
    let p = Proc::spawn(
        "nats-server",
        Command::new("nats-server").args([
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-sd",
            &store.display().to_string(),
        ]),
        log,
    );
    wait_for("nats-server to listen", Duration::from_secs(20), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    p
}

fn retryscope(name: &str, args: &[&str], log: &Path) -> Proc {
    Proc::spawn(
        name,
        Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .args(args)
            .env("RUST_LOG", "info"),
        log,
    )
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn append(path: &Path, lines: &[serde_json::Value]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open log");
    for l in lines {
        writeln!(f, "{l}").expect("write log");
    }
}

/// The offset the shipper has checkpointed for `log` (only after JetStream's acks).
fn shipped_offset(data_dir: &Path) -> u64 {
    std::fs::read(data_dir.join("ship-checkpoint.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Vec<serde_json::Value>>(&b).ok())
        .and_then(|v| v.first().and_then(|c| c["offset"].as_u64()))
        .unwrap_or(0)
}

fn wait_shipped(log: &Path, data_dir: &Path) {
    let len = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    wait_for(
        "the shipper to be acknowledged",
        Duration::from_secs(30),
        || shipped_offset(data_dir) >= len,
    );
}

/// Round `r`'s lines: (host A, host B). Two turns in three are split across the hosts (the
/// refund runs in attempt 0 on A, the retry runs it again on B); the third stays on A.
fn round(r: usize) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    use serde_json::json;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..TURNS_PER_ROUND {
        let t = format!("turn-{r}-{i}");
        let ts = 1_700_000_000_000_i64 + (r * 1000 + i * 10) as i64 * 100;
        let args = json!({"order": format!("o-{r}-{i}"), "amount": 10 + i});
        a.push(json!({"turn": t, "type": "turn_start", "ts": ts, "model": "gpt-4o", "provider": "openai"}));
        if i % 3 == 2 {
            a.push(json!({"turn": t, "type": "text", "attempt": 0, "ts": ts + 1, "text": "Hel"}));
            a.push(json!({"turn": t, "type": "retry", "attempt": 1, "ts": ts + 2, "reason": "timeout"}));
            a.push(json!({"turn": t, "type": "text", "attempt": 1, "ts": ts + 3, "text": "Hello"}));
            a.push(
                json!({"turn": t, "type": "finish", "attempt": 1, "ts": ts + 4, "reason": "stop"}),
            );
            a.push(json!({"turn": t, "type": "turn_end", "ts": ts + 5}));
            continue;
        }
        a.push(json!({"turn": t, "type": "tool_call", "attempt": 0, "ts": ts + 1, "id": "c0", "name": "issue_refund", "args": args}));
        a.push(json!({"turn": t, "type": "tool_exec", "attempt": 0, "ts": ts + 2, "id": "c0", "name": "issue_refund", "args": args}));
        a.push(json!({"turn": t, "type": "error", "attempt": 0, "ts": ts + 3, "message": "connection reset"}));
        b.push(json!({"turn": t, "type": "retry", "attempt": 1, "ts": ts + 10, "reason": "connection reset"}));
        b.push(json!({"turn": t, "type": "tool_call", "attempt": 1, "ts": ts + 11, "id": "c1", "name": "issue_refund", "args": args}));
        b.push(json!({"turn": t, "type": "tool_exec", "attempt": 1, "ts": ts + 12, "id": "c1", "name": "issue_refund", "args": args}));
        b.push(json!({"turn": t, "type": "usage", "attempt": 1, "ts": ts + 13, "input_tokens": 100, "output_tokens": 20}));
        b.push(json!({"turn": t, "type": "finish", "attempt": 1, "ts": ts + 14, "reason": "stop"}));
        b.push(json!({"turn": t, "type": "turn_end", "ts": ts + 15}));
    }
    (a, b)
}

/// `name{labels}` → value, from a real scrape.
fn scrape(port: u16) -> Option<BTreeMap<String, f64>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let (head, text) = body.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    })
}

fn sum(m: &BTreeMap<String, f64>, prefix: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

/// Every finding in the findings stream, as canonical JSON text.
fn findings_in_stream(url: &str) -> Vec<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = async_nats::connect(url).await.expect("connect");
        let js = async_nats::jetstream::new(client);
        let Ok(mut stream) = js.get_stream("RETRYSCOPE_FINDINGS").await else {
            return Vec::new();
        };
        let info = stream.info().await.expect("stream info").state.clone();
        let mut out = Vec::new();
        for seq in info.first_sequence..=info.last_sequence {
            if info.messages == 0 {
                break;
            }
            if let Ok(m) = stream.get_raw_message(seq).await {
                let v: serde_json::Value =
                    serde_json::from_slice(&m.payload).expect("a finding is JSON");
                out.push(v.to_string());
            }
        }
        out
    })
}

/// What `check` finds over the merged logs: sorted findings as canonical JSON, and turns.
fn check(a: &Path, b: &Path) -> (Vec<String>, f64) {
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["check", "--json"])
        .arg(a)
        .arg(b)
        .output()
        .expect("run check");
    let mut expected = Vec::new();
    let mut turns = 0.0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("check --json line");
        if let Some(fs) = v["findings"].as_array() {
            turns += 1.0;
            expected.extend(fs.iter().map(|f| f.to_string()));
        }
    }
    expected.sort();
    (expected, turns)
}

#[test]
fn turns_split_across_hosts_are_correlated_once_across_failover_and_a_server_restart() {
    if Command::new("nats-server")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "nats-server is missing in CI (.ci/run installs it)"
        );
        eprintln!("nats-server not installed: skipping");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // RETRYSCOPE_KEEP_NATS_TEST=1 keeps the folder (logs of every process) for a look.
    let d = &if std::env::var_os("RETRYSCOPE_KEEP_NATS_TEST").is_some() {
        let kept = dir.keep();
        eprintln!("keeping {}", kept.display());
        kept
    } else {
        dir.path().to_path_buf()
    };
    let (host_a, host_b) = (d.join("hostA"), d.join("hostB"));
    for p in [&host_a, &host_b] {
        std::fs::create_dir_all(p.join("logs")).expect("mkdir");
    }
    let (log_a, log_b) = (
        host_a.join("logs/agent.jsonl"),
        host_b.join("logs/agent.jsonl"),
    );
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let store = d.join("jetstream");
    let mut server = Some(nats_server(port, &store, &d.join("nats-1.log")));

    let shipper = |host: &Path, id: &str| {
        retryscope(
            id,
            &[
                "ship",
                &format!("{}/logs/*.jsonl", host.display()),
                "--nats",
                &url,
                "--data-dir",
                &host.join("data").display().to_string(),
                "--source-id",
                id,
                "--partitions",
                PARTITIONS,
            ],
            &host.join("ship.log"),
        )
    };
    let collector = |name: &str, checkpoint_ms: &str| {
        let mport = free_port();
        let p = retryscope(
            name,
            &[
                "run",
                "--nats",
                &url,
                "--instance",
                name,
                "--lease-secs",
                "2",
                "--checkpoint-ms",
                checkpoint_ms,
                "--metrics-addr",
                &format!("127.0.0.1:{mport}"),
                "--findings-out",
                &d.join(format!("{name}-findings.jsonl"))
                    .display()
                    .to_string(),
            ],
            &d.join(format!("{name}.log")),
        );
        (p, mport)
    };
    // Both logs exist before the shippers start (an empty file is fine).
    append(&log_a, &[]);
    append(&log_b, &[]);
    let mut ship_a = shipper(&host_a, "hostA");
    let ship_b = shipper(&host_b, "hostB");
    // c1 never checkpoints before it is killed: everything it published is replayed by the
    // new owners from sequence 0, and the findings' ids must make that replay invisible.
    let (c1, _) = collector("c1", "600000");
    let (c2, port2) = collector("c2", "700");
    let mut c1 = Some(c1);
    let log_has = |name: &str, what: &str| {
        std::fs::read_to_string(d.join(format!("{name}.log"))).is_ok_and(|t| t.contains(what))
    };
    for name in ["c1", "c2"] {
        wait_for(
            "both collectors to own partitions",
            Duration::from_secs(30),
            || log_has(name, "took partition"),
        );
    }
    let mut c3: Option<(Proc, u16)> = None;

    for r in 0..ROUNDS {
        let (a, b) = round(r);
        append(&log_a, &a);
        wait_shipped(&log_a, &host_a.join("data"));
        append(&log_b, &b);
        wait_shipped(&log_b, &host_b.join("data"));
        std::thread::sleep(Duration::from_millis(300));
        match r {
            // SIGKILL mid-way: its partitions are taken over when their leases end.
            1 => {
                let so_far = check(&log_a, &log_b).0.len();
                wait_for("c1 and c2 to publish", Duration::from_secs(30), || {
                    findings_in_stream(&url).len() >= so_far
                });
                drop(c1.take());
            }
            // The server goes down and comes back on the same store.
            2 => {
                if let Some(s) = server.take() {
                    s.terminate();
                }
                std::thread::sleep(Duration::from_millis(500));
                server = Some(nats_server(port, &store, &d.join("nats-2.log")));
            }
            // A collector joins: c2 hands it half of the partitions.
            3 => c3 = Some(collector("c3", "700")),
            // Host A's shipper restarts without its checkpoint (as after a crash before the
            // first one): it sends its whole log again, and the message ids must make
            // JetStream drop every line of it.
            4 => {
                ship_a.terminate();
                std::fs::remove_file(host_a.join("data/ship-checkpoint.json"))
                    .expect("host A's checkpoint");
                ship_a = shipper(&host_a, "hostA");
            }
            _ => {}
        }
    }

    let (expected, turns) = check(&log_a, &log_b);
    assert_eq!(turns, (ROUNDS * TURNS_PER_ROUND) as f64);
    assert!(
        expected.iter().any(|f| f.contains("\"duplicate_effect\"")),
        "the workload has cross-host duplicate effects"
    );

    let (_, port3) = c3.as_ref().map(|(p, port)| (p, *port)).expect("c3 started");
    let mut got = Vec::new();
    let mut summed = (0.0, 0.0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        got = findings_in_stream(&url);
        got.sort();
        let m2 = scrape(port2).unwrap_or_default();
        let m3 = scrape(port3).unwrap_or_default();
        summed = (
            sum(&m2, "retryscope_turns_total{") + sum(&m3, "retryscope_turns_total{"),
            sum(&m2, "retryscope_findings_total{") + sum(&m3, "retryscope_findings_total{"),
        );
        if got.len() >= expected.len() && summed == (turns, expected.len() as f64) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(got.len(), expected.len(), "findings, each exactly once");
    assert_eq!(
        got, expected,
        "the same findings as check over the merged logs"
    );
    assert_eq!(summed, (turns, expected.len() as f64), "summed metrics");
    let m3 = scrape(port3).unwrap_or_default();
    assert!(
        sum(&m3, "retryscope_turns_total{") > 0.0,
        "the collector added later took partitions over"
    );

    // The cluster series: c1 is dead, so c2 and c3 own every partition between them, and
    // they took at least every partition once (c1's after its leases ended).
    let parts: f64 = PARTITIONS.parse().unwrap();
    let cluster = |m: &BTreeMap<String, f64>, name: &str| m.get(name).copied().unwrap_or(-1.0);
    let mut seen = (0.0, 0.0);
    wait_for(
        "the owned partitions to add up",
        Duration::from_secs(30),
        || {
            let (m2, m3) = (
                scrape(port2).unwrap_or_default(),
                scrape(port3).unwrap_or_default(),
            );
            seen = (
                cluster(&m2, "retryscope_nats_partitions_owned")
                    + cluster(&m3, "retryscope_nats_partitions_owned"),
                cluster(&m2, "retryscope_nats_lease_takeovers_total")
                    + cluster(&m3, "retryscope_nats_lease_takeovers_total"),
            );
            seen.0 == parts
                && seen.1 >= parts
                && cluster(&m2, "retryscope_nats_partitions") == parts
                && cluster(&m3, "retryscope_nats_partitions") == parts
                && cluster(&m2, "retryscope_checkpoint_writes_total") > 0.0
                && cluster(&m3, "retryscope_nats_checkpoint_lag_messages") >= 0.0
                && cluster(&m2, "retryscope_nats_findings_publish_failures_total") >= 0.0
        },
    );
    assert_eq!(seen.0, parts, "partitions owned by c2 and c3");

    for p in [ship_a, ship_b, c2] {
        p.terminate();
    }
    if let Some((p, _)) = c3 {
        p.terminate();
    }
    if let Some(s) = server {
        s.terminate();
    }
}

#[test]
fn ship_from_stdin_until_it_ends() {
    if Command::new("nats-server")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "nats-server is missing in CI"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let server = nats_server(port, &d.join("js"), &d.join("nats.log"));
    let (a, b) = round(0);
    let merged = d.join("merged.jsonl");
    append(&merged, &a);
    append(&merged, &b);
    let status = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["ship", "-", "--nats", &url, "--source-id", "pipe"])
        .stdin(std::fs::File::open(&merged).expect("merged log"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(d.join("ship.log")).expect("log"))
        .status()
        .expect("run ship -");
    assert!(status.success(), "ship - exits 0 when stdin ends");
    let mport = free_port();
    let collector = retryscope(
        "c",
        &[
            "run",
            "--nats",
            &url,
            "--lease-secs",
            "2",
            "--metrics-addr",
            &format!("127.0.0.1:{mport}"),
            "--findings-out",
            "",
        ],
        &d.join("c.log"),
    );
    let expected = check(&merged, Path::new("/dev/null")).0;
    assert!(!expected.is_empty());
    let mut got = Vec::new();
    wait_for(
        "the findings of stdin's lines",
        Duration::from_secs(30),
        || {
            got = findings_in_stream(&url);
            got.len() >= expected.len()
        },
    );
    got.sort();
    assert_eq!(got, expected);
    collector.terminate();
    server.terminate();
}
