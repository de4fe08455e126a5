//! Issue 24 (item 6) through the real binary: no invisible character (C0, C1, bidi controls,
//! zero-width, line separators, BOM) reaches a terminal raw from `check` (text and `--json`) or
//! from `run`'s findings on stdout; the bearer scheme is case-insensitive; a token without TLS
//! beyond loopback is warned about; a checkpoint whose OTLP spool position lies past the
//! spool's end names itself and `--reset-checkpoint`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use retryscope_core::sanitize::is_invisible;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One character of every class, put into every string field the bookstore example has that
/// reaches a finding or the report: turn id, model, tool name, retry reason, error message.
const HOSTILE: &str =
    "\u{9b}2J\u{202e}\u{2066}\u{200b}\u{200d}\u{2028}\u{2029}\u{feff}\u{61c}\x1b[31m\x7f";

fn hostile_example() -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookstore/naive.jsonl"),
    )
    .expect("example");
    let esc = |s: &str| serde_json::to_string(s).expect("json");
    let inner = |s: &str| {
        let q = esc(s);
        q[1..q.len() - 1].to_owned()
    };
    text.replace("bookstore-1", &format!("book{}store-1", inner(HOSTILE)))
        .replace("issue_refund", &format!("issue{}refund", inner(HOSTILE)))
        .replace("claude-sonnet-4-5", &format!("claude{}", inner(HOSTILE)))
        .replace("connection_reset", &format!("conn{}reset", inner(HOSTILE)))
        .replace(
            "connection reset by peer",
            &format!("reset {} by peer", inner(HOSTILE)),
        )
}

fn assert_no_invisible(what: &str, text: &str) {
    if let Some(c) = text.chars().find(|&c| c != '\n' && is_invisible(c)) {
        panic!("{what}: raw {c:?} in output:\n{text}");
    }
}

#[test]
fn check_text_and_json_carry_no_raw_invisible_character() {
    let dir = tempfile::tempdir().expect("tmp");
    let input = dir.path().join("hostile.jsonl");
    std::fs::write(&input, hostile_example()).expect("write");
    for args in [vec!["check"], vec!["check", "--json"], vec!["check", "-v"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .args(&args)
            .arg(&input)
            .env("NO_COLOR", "1")
            .output()
            .expect("check");
        let stdout = String::from_utf8(out.stdout).expect("utf-8");
        let stderr = String::from_utf8(out.stderr).expect("utf-8");
        assert!(stdout.contains("refund"), "{args:?}: {stdout}");
        assert_no_invisible(&format!("{args:?} stdout"), &stdout);
        assert_no_invisible(&format!("{args:?} stderr"), &stderr);
        if args.contains(&"--json") {
            // Still JSON, and the characters come back unchanged when parsed.
            let mut seen = false;
            for line in stdout.lines() {
                let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
                seen |= v["findings"][0]["tool"].as_str() == Some(&format!("issue{HOSTILE}refund"));
            }
            assert!(seen, "the tool name reads back exactly: {stdout}");
        }
    }
}

#[test]
fn run_findings_on_stdout_carry_no_raw_invisible_character() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["run", "-", "--findings-out", "-"])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port())])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(hostile_example().as_bytes())
        .expect("write");
    let mut out = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    std::thread::sleep(Duration::from_secs(3));
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let stdout = reader.join().expect("reader");
    assert!(stdout.contains("abandoned_tool_executed"), "{stdout}");
    assert_no_invisible("run stdout", &stdout);
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON finding");
        assert!(
            v["turn"].as_str().is_some_and(|t| t.contains(HOSTILE)),
            "{line}"
        );
    }
}

struct Run {
    child: Child,
}

impl Run {
    fn start(args: &[&str], stderr: Stdio) -> (Run, u16) {
        let (metrics, http) = (free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .args(["run", "--findings-out", ""])
            .args(args)
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args(["--otlp-listen", &format!("127.0.0.1:{http}")])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start");
        (Run { child }, http)
    }

    fn stop(mut self) -> (std::process::ExitStatus, String) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().expect("wait");
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (status, err)
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// POST an OTLP/JSON logs request; the status code (0 when there is no answer yet).
fn post_logs(port: u16, authorization: &str) -> u16 {
    let body = br#"{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"t"}}]},"scopeLogs":[{"logRecords":[{"body":{"stringValue":"x"}}]}]}]}"#;
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let head = format!(
        "POST /v1/logs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nAuthorization: {authorization}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body))
        .is_err()
    {
        return 0;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf)
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn the_bearer_scheme_is_accepted_in_any_case() {
    let dir = tempfile::tempdir().expect("tmp");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("token");
    let (run, http) = Run::start(
        &["--otlp-listen-token-file", token.to_str().expect("utf-8")],
        Stdio::null(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while post_logs(http, "Bearer s3cret") != 200 {
        assert!(Instant::now() < deadline, "the receiver never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    for auth in ["BEARER s3cret", "bearer s3cret", "bEaReR s3cret"] {
        assert_eq!(post_logs(http, auth), 200, "{auth}");
    }
    for auth in ["BEARER wrong", "Basic s3cret", "s3cret"] {
        assert_eq!(post_logs(http, auth), 401, "{auth}");
    }
    drop(run);
}

#[test]
fn a_token_without_tls_beyond_loopback_warns_at_start() {
    let dir = tempfile::tempdir().expect("tmp");
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").expect("token");
    let (metrics, http) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["run", "--findings-out", ""])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        // Bound on every interface (as the existing no-token test does); nothing connects.
        .args(["--otlp-listen", &format!("0.0.0.0:{http}")])
        .args(["--otlp-listen-token-file", token.to_str().expect("utf-8")])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    std::thread::sleep(Duration::from_secs(2));
    let (_, err) = Run { child }.stop();
    assert!(err.contains("without TLS"), "{err}");
    assert!(err.contains("clear text"), "{err}");
    assert!(!err.contains("without a token"), "{err}");
}

#[test]
fn a_spool_position_past_the_end_names_the_checkpoint_and_the_reset() {
    let dir = tempfile::tempdir().expect("tmp");
    let data = dir.path().join("data");
    let data_s = data.to_str().expect("utf-8").to_owned();
    // A first run writes a checkpoint with its spool position.
    let (run, http) = Run::start(&["--data-dir", &data_s], Stdio::piped());
    let deadline = Instant::now() + Duration::from_secs(60);
    while post_logs(http, "") != 200 {
        assert!(Instant::now() < deadline, "the receiver never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, err) = run.stop();
    assert!(status.success(), "{err}");
    let cp_path = data.join("checkpoint.json");
    let text = std::fs::read_to_string(&cp_path).expect("checkpoint");
    let mut cp: serde_json::Value = serde_json::from_str(&text).expect("json");
    let pos = cp["sources"]["otlp"].clone();
    assert!(pos["offset"].as_u64().is_some(), "{text}");
    // Past the end of its segment (the issue's case: "Invalid argument" from a far seek).
    cp["sources"]["otlp"]["offset"] = serde_json::json!(u64::MAX / 2);
    std::fs::write(&cp_path, serde_json::to_vec(&cp).expect("json")).expect("write");
    let (run, _) = Run::start(&["--data-dir", &data_s], Stdio::piped());
    let mut run = run;
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Ok(Some(s)) = run.child.try_wait() {
            break s;
        }
        assert!(Instant::now() < deadline, "run did not refuse to start");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (_, err) = run.stop();
    assert!(!status.success());
    assert!(err.contains(&cp_path.display().to_string()), "{err}");
    assert!(err.contains("--reset-checkpoint"), "{err}");
    assert!(err.contains("past the end"), "{err}");
    assert!(!err.contains("Invalid argument"), "{err}");
    // --reset-checkpoint sets it aside and starts.
    let (run, http) = Run::start(
        &["--data-dir", &data_s, "--reset-checkpoint"],
        Stdio::piped(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while post_logs(http, "") != 200 {
        assert!(Instant::now() < deadline, "the reset run never answered");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, err) = run.stop();
    assert!(status.success(), "{err}");
    assert!(
        std::fs::read_dir(&data)
            .expect("data")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains("unusable")),
        "the checkpoint was moved aside"
    );
}
