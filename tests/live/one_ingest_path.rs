//! One ingest path: the same input read by `check`, by `run` tailing it as a file, and by
//! `run -` from stdin gives the same turns, findings and bad-line counts. These used to differ
//! (a blank line was a bad line for `run` on files only; `run -` read only the native format).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Proc, bin, by_label, check_json, example, fixture, free_port, scrape};

/// What all three paths must agree on.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    turns: u64,
    findings: BTreeMap<String, u64>,
    bad_lines: BTreeMap<String, u64>,
}

fn check(path: &Path) -> Seen {
    let checked = check_json(&[path]);
    Seen {
        turns: checked.number("turns") as u64,
        findings: checked.counts("findings"),
        bad_lines: checked.counts("bad_lines_by_reason"),
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
    let mut child = Proc::adopt("retryscope run", cmd.spawn().expect("start run"));
    if stdin {
        let bytes = std::fs::read(path).expect("read input");
        let mut pipe = child.child.stdin.take().expect("stdin pipe");
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
    let naive = std::fs::read_to_string(example("naive.jsonl")).unwrap();
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
