//! Coverage, stated: what the inputs cannot show reaches the `check` summary (text, JSON,
//! HTML), `--require-coverage` fails a gate on inputs blind to cuts, and `run`'s `/metrics`
//! has `retryscope_input_blind_spots`. Inputs are the real gemini-cli and Claude Code
//! recordings in `tests/fixtures/agents/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn recording(client: &str, scenario: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents")
        .join(client)
        .join(scenario)
        .join(file)
}

fn check(args: &[&str], files: &[PathBuf]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .arg("check")
        .args(args)
        .args(files)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .output()
        .expect("run retryscope check")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const BLIND: &str = "  blind spot: gemini-cli-stream-json cannot show attempts, cuts: add \
gemini-cli's telemetry file (or its OTLP export), or use the proxy\n  warning: no input can \
show a cut stream, so no finding about one (unfinished or abandoned executions, spliced text) \
could be raised: \"none\" is not \"healthy\"\n";

#[test]
fn stream_json_alone_says_it_cannot_show_cuts_and_the_gate_fails_with_require_coverage() {
    let stream = recording("gemini-cli", "after-tool-reset", "stream.jsonl");
    // The gate of the issue: --fail-on high passes (nothing could be seen) ...
    let out = check(
        &["--color", "never", "--fail-on", "high"],
        std::slice::from_ref(&stream),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("  findings: none\n"), "{text}");
    assert!(text.ends_with(BLIND), "{text}");
    // ... and --require-coverage makes it fail, with a sentence.
    let out = check(
        &["--fail-on", "high", "--require-coverage"],
        std::slice::from_ref(&stream),
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "retryscope: coverage: no input can show cuts (--require-coverage): a finding about them \
         could not have been raised; see the summary's blind spots for what to add\n"
    );
    let out = check(
        &["--require-coverage=executions"],
        std::slice::from_ref(&stream),
    );
    assert_eq!(out.status.code(), Some(0), "stream-json shows executions");
    let out = check(&["--require-coverage=attempts,cuts"], &[stream]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no input can show attempts or cuts"));
}

#[test]
fn with_the_telemetry_file_nothing_is_blind_and_the_findings_appear() {
    let files = [
        recording("gemini-cli", "after-tool-reset", "telemetry.log"),
        recording("gemini-cli", "after-tool-reset", "stream.jsonl"),
    ];
    let out = check(&["--color", "never", "--require-coverage"], &files);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains("blind spot"), "{text}");
    assert!(text.contains("abandoned_tool_executed 1"), "{text}");
}

#[test]
fn the_json_summary_lists_inputs_by_kind_and_blind_spots() {
    let stream = recording("gemini-cli", "after-tool-reset", "stream.jsonl");
    let out = check(&["--json"], &[stream]);
    let last = stdout(&out).lines().last().unwrap_or_default().to_owned();
    let v: serde_json::Value = serde_json::from_str(&last).expect("summary line");
    assert_eq!(
        v["summary"]["inputs_by_kind"],
        serde_json::json!({"gemini-cli-stream-json": 1})
    );
    let add = "add gemini-cli's telemetry file (or its OTLP export), or use the proxy";
    assert_eq!(
        v["summary"]["blind_spots"],
        serde_json::json!([
            {"input_kind": "gemini-cli-stream-json", "cannot_show": "attempts", "add": add},
            {"input_kind": "gemini-cli-stream-json", "cannot_show": "cuts", "add": add},
        ])
    );
    // Claude Code's stream-json shows every sight: no blind spot.
    let claude = recording("claude-code", "after-tool-reset", "stream.jsonl");
    let out = check(&["--json", "--require-coverage"], &[claude]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let last = stdout(&out).lines().last().unwrap_or_default().to_owned();
    let v: serde_json::Value = serde_json::from_str(&last).expect("summary line");
    assert_eq!(v["summary"]["blind_spots"], serde_json::json!([]));
}

#[test]
fn the_html_report_names_the_blind_spot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("r.html");
    let stream = recording("gemini-cli", "after-tool-reset", "stream.jsonl");
    let out = check(
        &["--summary", "--html", page.to_str().expect("utf-8 path")],
        &[stream],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(
        html.contains(
            "<li class=\"warning\"><b>BLIND SPOT</b> gemini-cli-stream-json cannot show attempts, \
             cuts: add gemini-cli&#39;s telemetry file (or its OTLP export), or use the proxy</li>"
        ),
        "{html}"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn scrape(port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

#[test]
fn run_exports_the_blind_spots_of_what_it_tails() {
    let port = free_port();
    let stream = recording("gemini-cli", "after-tool-reset", "stream.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["run", "--findings-out", "", "--metrics-addr"])
        .arg(format!("127.0.0.1:{port}"))
        .arg(&stream)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start run");
    let want = "retryscope_input_blind_spots{input_kind=\"gemini-cli-stream-json\",cannot_show=\"cuts\"} 1";
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Some(m) = scrape(port) {
            last = m;
            if last.contains(want) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(last.contains(want), "{last}");
    assert!(last.contains(
        "retryscope_input_blind_spots{input_kind=\"gemini-cli-stream-json\",cannot_show=\"attempts\"} 1"
    ));
    // Pre-registered at 0 for kinds not read.
    assert!(last.contains(
        "retryscope_input_blind_spots{input_kind=\"otlp-claude-code\",cannot_show=\"cuts\"} 0"
    ));
}
