//! One ingest path: the same input read by `check`, by `run` tailing it as a file, and by
//! `run -` from stdin gives the same turns, findings and bad-line counts. These used to differ
//! (a blank line was a bad line for `run` on files only; `run -` read only the native format).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_retryscope")
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// What all three paths must agree on.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    turns: u64,
    findings: BTreeMap<String, u64>,
    bad_lines: BTreeMap<String, u64>,
}

fn check(path: &Path) -> Seen {
    let out = Command::new(bin())
        .args(["check", "--json"])
        .arg(path)
        .output()
        .expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().expect("a summary line");
    let v: serde_json::Value = serde_json::from_str(last).expect("summary JSON");
    let s = &v["summary"];
    let counts = |key: &str| -> BTreeMap<String, u64> {
        s[key]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
                    .filter(|(_, v)| *v > 0)
                    .collect()
            })
            .unwrap_or_default()
    };
    Seen {
        turns: s["turns"].as_u64().unwrap_or(0),
        findings: counts("findings"),
        bad_lines: counts("bad_lines_by_reason"),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn scrape(port: u16) -> Option<BTreeMap<String, f64>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let (_, text) = body.split_once("\r\n\r\n")?;
    Some(
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_owned(), v.parse().ok()?))
            })
            .collect(),
    )
}

/// Sum of a family's series by the value of one label.
fn by_label(m: &BTreeMap<String, f64>, family: &str, label: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (k, v) in m {
        let Some(rest) = k.strip_prefix(family).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let needle = format!("{label}=\"");
        let Some(start) = rest.find(&needle) else {
            continue;
        };
        let value = &rest[start + needle.len()..];
        let value = &value[..value.find('"').unwrap_or(value.len())];
        if *v > 0.0 {
            *out.entry(value.to_owned()).or_insert(0) += *v as u64;
        }
    }
    out
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run the collector on `path` (as a tailed file, or piped to stdin) until it has seen
/// `want.turns` turns, then read what it reports.
fn run(path: &Path, stdin: bool, want: &Seen) -> Seen {
    let port = free_port();
    let mut cmd = Command::new(bin());
    cmd.arg("run")
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .args(["--findings-out", "", "--idle-timeout-secs", "1"])
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if stdin {
        cmd.arg("-").stdin(Stdio::piped());
    } else {
        cmd.arg(path).stdin(Stdio::null());
    }
    let mut child = Running(cmd.spawn().expect("start run"));
    if stdin {
        let bytes = std::fs::read(path).expect("read input");
        let mut pipe = child.0.stdin.take().expect("stdin pipe");
        pipe.write_all(&bytes).expect("write stdin");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = Seen::default();
    while Instant::now() < deadline {
        if let Some(m) = scrape(port) {
            last = Seen {
                turns: by_label(&m, "retryscope_turns_total", "status")
                    .values()
                    .sum(),
                findings: by_label(&m, "retryscope_findings_total", "kind"),
                bad_lines: by_label(&m, "retryscope_bad_lines_total", "reason"),
            };
            if last == *want {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    last
}

fn same_everywhere(path: &Path) {
    let checked = check(path);
    assert!(checked.turns > 0, "{}: check saw no turn", path.display());
    assert_eq!(
        run(path, false, &checked),
        checked,
        "run on the file vs check"
    );
    assert_eq!(run(path, true, &checked), checked, "run - vs check");
}

#[test]
fn native_lines_with_blank_crlf_and_bad_lines_read_alike() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.jsonl");
    let naive = std::fs::read_to_string(fixture("examples/bookstore/naive.jsonl")).unwrap();
    let mut text = String::new();
    for (i, line) in naive.lines().enumerate() {
        text.push_str(line);
        text.push_str(if i % 2 == 0 { "\r\n" } else { "\n" });
        if i == 2 {
            text.push_str("\n   \n{\"turn\": \n[not json\n");
        }
    }
    std::fs::write(&path, text).unwrap();
    let checked = check(&path);
    // The two broken lines are bad; the blank and whitespace-only lines are not lines at all.
    assert_eq!(checked.bad_lines.values().sum::<u64>(), 2, "{checked:?}");
    same_everywhere(&path);
}

#[test]
fn a_provider_stream_reads_alike_from_a_file_and_from_stdin() {
    same_everywhere(&fixture(
        "tests/fixtures/providers/anthropic/spliced-message-start.chunks.txt",
    ));
}

#[test]
fn multi_line_telemetry_records_read_alike() {
    // A real gemini-cli outfile: pretty-printed spans, log records and metrics.
    same_everywhere(&fixture(
        "tests/fixtures/agents/gemini-cli/after-tool-reset/telemetry.log",
    ));
}
