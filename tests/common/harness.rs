//! What the tests that run the real binary share (the `live` and `nats` binaries, by path):
//! free loopback ports, child processes killed when dropped, `/metrics` scrapes and the
//! series summed by label, log lines appended, and `check --json` as the oracle.
#![allow(dead_code)] // each test binary uses a different part of it

use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A scrape: `name{labels}` → value.
pub type Scrape = BTreeMap<String, f64>;

/// The `retryscope` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_retryscope")
}

/// A path in the repository (`../shared/...` for the shared folder beside it).
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A free loopback port for a child process to listen on.
///
/// Below the kernel's ephemeral range (32768 and up by default), and never the same twice in
/// one test process: a port the kernel gave out for `:0` and took back is the next `:0`
/// bind's too, and the processes a test starts bind `:0` for their other listeners, so two
/// of them could end up on one port (seen: a pair's scrape read another pair's `run`, whose
/// port it had been handed first).
pub fn free_port() -> u16 {
    use std::sync::Mutex;
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    // A start that differs between test processes run at once (by pid), then every port.
    let span = 32768 - 20000;
    let start = (std::process::id() as usize * 7919) % span;
    for i in 0..span {
        let port = (20000 + (start + i * 97) % span) as u16;
        if given.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A child process killed (SIGKILL) when dropped, so a failing test leaves nothing behind.
pub struct Proc {
    pub child: Child,
    name: String,
}

impl Proc {
    /// Start `cmd` with no stdin or stdout, its stderr written to `log`.
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Proc {
        let err = std::fs::File::create(log).expect("log file");
        Self::spawn_with(name, cmd.stdin(Stdio::null()).stderr(err))
    }

    /// Start `cmd` as it is set up (stdin and stderr included), with no stdout.
    pub fn spawn_with(name: &str, cmd: &mut Command) -> Proc {
        let child = cmd
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Self::adopt(name, child)
    }

    /// Own a child started elsewhere.
    pub fn adopt(name: &str, child: Child) -> Proc {
        Proc {
            child,
            name: name.to_string(),
        }
    }

    /// SIGTERM, then the exit status (20 s at most).
    pub fn terminate(mut self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        match self.wait_exit(Duration::from_secs(20)) {
            Some(status) => status,
            None => panic!("{} did not stop on SIGTERM", self.name),
        }
    }

    /// The exit status once the process has stopped by itself, or `None` after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `retryscope run <args>` serving `/metrics` on a free port (logging at warn), with `stdin`
/// and `stderr` as given: the process and its metrics port.
pub fn spawn_run<A: AsRef<std::ffi::OsStr>>(
    args: &[A],
    stdin: Stdio,
    stderr: Stdio,
) -> (Proc, u16) {
    let port = free_port();
    let proc = Proc::spawn_with(
        "retryscope run",
        Command::new(bin())
            .arg("run")
            .args(args)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdin(stdin)
            .stderr(stderr),
    );
    (proc, port)
}

pub fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A real scrape of `/metrics` on 127.0.0.1:`port`.
pub fn scrape(port: u16) -> Option<Scrape> {
    scrape_text(port).map(|text| parse_metrics(&text))
}

/// The text of a real scrape of `/metrics` on 127.0.0.1:`port` (a 200 answer's body).
pub fn scrape_text(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let (head, text) = body.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| text.to_owned())
}

/// `name{labels}` → value.
pub fn parse_metrics(text: &str) -> Scrape {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

pub fn get(m: &Scrape, key: &str) -> f64 {
    *m.get(key).unwrap_or_else(|| panic!("no series {key}"))
}

pub fn sum(m: &Scrape, prefix: &str) -> f64 {
    m.iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

/// Sum of a family's series by one label's value, zeros left out.
pub fn by_label(m: &Scrape, family: &str, label: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let needle = format!("{label}=\"");
    for (k, v) in m {
        let Some(labels) = k.strip_prefix(family).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let Some(at) = labels.find(&needle) else {
            continue;
        };
        let value = &labels[at + needle.len()..];
        let value = &value[..value.find('"').unwrap_or(value.len())];
        if *v > 0.0 {
            *out.entry(value.to_owned()).or_insert(0) += *v as u64;
        }
    }
    out
}

/// Append `lines` to `path`, one a line.
pub fn append<L: Display>(path: &Path, lines: &[L]) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open log");
    for l in lines {
        writeln!(f, "{l}").expect("write log");
    }
    f.flush().expect("flush log");
}

/// One of the bookstore examples (`examples/bookstore/<name>`).
pub fn example(name: &str) -> PathBuf {
    fixture("examples/bookstore").join(name)
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

/// A finding's identity: kind, turn, attempt, call.
pub fn identity(f: &serde_json::Value) -> String {
    format!(
        "{} {} {} {}",
        f["kind"], f["turn"], f["attempt"], f["call_id"]
    )
}

/// The identities of the findings in a findings file (JSON lines), sorted.
pub fn finding_ids(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| identity(&serde_json::from_str(l).expect("a finding line")))
        .collect();
    v.sort();
    v
}

/// What `check --json` reported: one JSON object per turn, then the summary.
pub struct Checked {
    pub turns: Vec<serde_json::Value>,
    pub summary: serde_json::Value,
}

/// `check --json` over `inputs`.
pub fn check_json<P: AsRef<std::ffi::OsStr>>(inputs: &[P]) -> Checked {
    let out = Command::new(bin())
        .args(["check", "--json"])
        .args(inputs)
        .output()
        .expect("run check");
    let mut checked = Checked {
        turns: Vec::new(),
        summary: serde_json::Value::Null,
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("check --json line");
        if v.get("summary").is_some() {
            checked.summary = v["summary"].clone();
        } else {
            checked.turns.push(v);
        }
    }
    assert!(
        !checked.summary.is_null(),
        "check printed no summary: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    checked
}

impl Checked {
    /// Every finding, in the order printed.
    pub fn findings(&self) -> impl Iterator<Item = &serde_json::Value> {
        self.turns
            .iter()
            .flat_map(|t| t["findings"].as_array().into_iter().flatten())
    }

    /// The findings' identities, sorted.
    pub fn finding_ids(&self) -> Vec<String> {
        let mut v: Vec<String> = self.findings().map(identity).collect();
        v.sort();
        v
    }

    /// A summary's `{name: count}` object (`findings`, `attempts_by_outcome`, …), zeros left
    /// out.
    pub fn counts(&self, key: &str) -> BTreeMap<String, u64> {
        self.summary[key]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
            .filter(|(_, v)| *v > 0)
            .collect()
    }

    /// A summary number.
    pub fn number(&self, key: &str) -> f64 {
        self.summary[key].as_f64().unwrap_or(0.0)
    }
}

/// Findings (JSON, one each) without their time, sorted: a line without a time is stamped
/// with its arrival by a live source and with the logical clock by `check`.
pub fn untimed<S: AsRef<str>>(findings: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut out: Vec<String> = findings
        .into_iter()
        .map(|f| {
            let mut v: serde_json::Value =
                serde_json::from_str(f.as_ref()).expect("a finding is JSON");
            if let Some(o) = v.as_object_mut() {
                o.remove("ts_ms");
            }
            v.to_string()
        })
        .collect();
    out.sort();
    out
}
