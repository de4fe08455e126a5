//! Issue 11 regressions for `retryscope run` as a real process: bad checkpoints, an unwritable
//! data directory, a failed final checkpoint, hostile bytes in labels.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/bookstore")
        .join(name)
}

fn start(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .arg("run")
        .args(args)
        .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port())])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start retryscope run")
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status();
}

fn stop(mut child: Child, sig: &str) -> (ExitStatus, String) {
    signal(&child, sig);
    let status = wait_exit(&mut child, Duration::from_secs(20)).unwrap_or_else(|| {
        let _ = child.kill();
        panic!("run did not stop on {sig}")
    });
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    (status, stderr)
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn wait_for_lines(path: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while lines(path) < n {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {n} findings"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait until the checkpoint exists and records the findings file's offset (null when there
/// is no findings file).
fn wait_for_checkpoint(data: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // Parsed, not matched as text: a text match on `0,` let a checkpoint taken before any
        // finding through. The findings sink's position is absent without a findings file.
        if let Ok(t) = std::fs::read_to_string(data.join("checkpoint.json"))
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&t)
            && v.get("sinks").is_some_and(|s| {
                s.get("findings")
                    .is_none_or(|o| o.as_u64().is_some_and(|n| n > 0))
            })
        {
            return;
        }
        assert!(Instant::now() < deadline, "no checkpoint");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 11.3: a corrupt, empty, truncated or NUL-filled checkpoint (or one with a negative
/// or wrong-typed offset) meant "start fresh", and every finding was appended again.
#[test]
fn findings_doubled_after_a_bad_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.jsonl");
    std::fs::copy(example("naive.jsonl"), &log).unwrap();
    let data = dir.path().join("data");
    let findings = dir.path().join("findings.jsonl");
    let args = [
        log.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--findings-out",
        findings.to_str().unwrap(),
    ];
    let child = start(&args);
    wait_for_checkpoint(&data);
    let (status, _) = stop(child, "-TERM");
    assert!(status.success());
    let expected = lines(&findings);
    assert!(expected > 0);
    let good = std::fs::read_to_string(data.join("checkpoint.json")).unwrap();
    let with_offset = |offset: serde_json::Value| {
        let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
        v["sinks"]["findings"] = offset;
        serde_json::to_vec(&v).unwrap()
    };
    let bad_kinds: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("truncated", good.as_bytes()[..good.len() / 2].to_vec()),
        ("nul-filled", vec![0u8; good.len()]),
        ("corrupt", b"\xff\xfe not json at all".to_vec()),
        ("negative offset", with_offset((-5).into())),
        ("wrong-typed offset", with_offset("12".into())),
    ];
    for (kind, bytes) in &bad_kinds {
        std::fs::write(data.join("checkpoint.json"), bytes).unwrap();
        let mut child = start(&args);
        let status = wait_exit(&mut child, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{kind}: run started on an unusable checkpoint"));
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert_eq!(status.code(), Some(2), "{kind}: {stderr}");
        assert!(
            stderr.contains("unusable") && stderr.contains("--reset-checkpoint"),
            "{kind}: {stderr}"
        );
        assert_eq!(
            lines(&findings),
            expected,
            "{kind}: no finding written twice"
        );
    }
    // The explicit reset moves both aside and starts over: each finding once in the new file.
    let mut reset = args.to_vec();
    reset.push("--reset-checkpoint");
    std::fs::remove_file(data.join("checkpoint.json")).unwrap();
    std::fs::write(data.join("checkpoint.json"), b"").unwrap();
    let child = start(&reset);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read(data.join("checkpoint.json"))
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "no new checkpoint after the reset"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_for_lines(&findings, expected);
    wait_for_checkpoint(&data);
    let (status, stderr) = stop(child, "-TERM");
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("moved aside"), "{stderr}");
    assert_eq!(lines(&findings), expected);
    let aside: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .chain(std::fs::read_dir(&data).unwrap())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".unusable-"))
        .collect();
    assert_eq!(aside.len(), 2, "{aside:?}");
}

/// Issue 11.10: an unwritable `--data-dir` did not stop startup (and every checkpoint then
/// failed, logged every second).
#[test]
fn unwritable_data_dir_stops_startup() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.jsonl");
    std::fs::copy(example("naive.jsonl"), &log).unwrap();
    // A regular file where a directory should be: not writable even for root.
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, b"x").unwrap();
    let data = blocker.join("data");
    let mut child = start(&[log.to_str().unwrap(), "--data-dir", data.to_str().unwrap()]);
    let status = wait_exit(&mut child, Duration::from_secs(20)).expect("startup must stop");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("data directory"), "{stderr}");
}

/// Issue 11.10: SIGINT exited 0 although the final checkpoint failed; and the repeated
/// `checkpoint write failed` warning was logged once a second.
#[test]
fn sigint_exits_non_zero_when_the_final_checkpoint_failed() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.jsonl");
    std::fs::copy(example("naive.jsonl"), &log).unwrap();
    let data = dir.path().join("data");
    let child = start(&[
        log.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--findings-out",
        "",
    ]);
    wait_for_checkpoint(&data);
    // The data directory disappears and a file takes its place: every checkpoint now fails.
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::write(&data, b"not a directory").unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    let (status, stderr) = stop(child, "-INT");
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("final checkpoint"), "{stderr}");
    let failures = stderr.matches("checkpoint write failed").count();
    assert!(
        (1..=2).contains(&failures),
        "one rate-limited warning, not one a second: {failures}\n{stderr}"
    );
}

/// Issue 11.1: file names (and every other field) in `run`'s log lines reached stderr with
/// their control characters.
#[test]
fn log_lines_escape_control_characters_in_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent\u{1b}]0;pwned\u{7}\r.jsonl");
    std::fs::write(&log, b"not json\n").unwrap();
    let child = start(&[log.to_str().unwrap(), "--findings-out", ""]);
    std::thread::sleep(Duration::from_millis(1500));
    let (_, stderr) = stop(child, "-TERM");
    assert!(
        stderr.contains("agent\\x1b]0;pwned\\x07\\r.jsonl"),
        "{stderr}"
    );
    assert!(
        !stderr.chars().any(|c| c.is_control() && c != '\n'),
        "{stderr:?}"
    );
}

/// Issue 11.10: the OTLP library's own warnings were not rate-limited (32 in 25 s with the
/// backend down): every WARN/ERROR, ours or a library's, goes through one limiter.
#[test]
fn otlp_library_warnings_are_rate_limited() {
    // Port 9 (discard) is closed here: every export fails at once.
    let child = start(&[
        "--demo",
        "--demo-turns-per-sec",
        "50",
        "--otlp-endpoint",
        "http://127.0.0.1:9",
        "--findings-out",
        "",
    ]);
    std::thread::sleep(Duration::from_secs(12));
    let (_, stderr) = stop(child, "-TERM");
    let library = stderr
        .lines()
        .filter(|l| l.contains("WARN opentelemetry") || l.contains("ERROR opentelemetry"))
        .filter(|l| l.contains("Export.Failed.Exhausted"))
        .count();
    // 12 s of failures plus the shutdown's flush (up to 10 s): at most one line per 10 s.
    assert!(
        (1..=3).contains(&library),
        "one line per 10 s, not one per failed export: {library}\n{stderr}"
    );
}

/// Issue 24.7: a recorded Anthropic SSE stream whose last line has no newline (the SDK's
/// fixture ends so). `check` reads it as a clean turn; `run` never read the last line and
/// reported `incomplete_turn`. Now it reads it once the file has been quiet
/// (`--partial-line-wait-ms`), and a later completion of the line (its newline, then a second
/// stream) is not a second copy of it, through a restart too.
#[test]
fn an_unterminated_last_line_is_read_after_quiet_and_never_twice() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/recorded/anthropic-sdk-python__basic_response.sse");
    let body = std::fs::read(&fixture).unwrap();
    assert_ne!(body.last(), Some(&b'\n'), "the recording ends mid-line");
    // `check`: one clean turn.
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["check", "--json", "--format", "anthropic"])
        .arg(&fixture)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\"status\":\"completed\""), "{text}");
    assert!(!text.contains("incomplete_turn\":1"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stream.sse");
    std::fs::write(&log, &body).unwrap();
    let data = dir.path().join("data");
    let findings = dir.path().join("findings.jsonl");
    let metrics = free_port();
    let run = |metrics: u16| {
        Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .arg("run")
            .arg(&log)
            .args(["--format", "anthropic", "--idle-timeout-secs", "2"])
            .args(["--partial-line-wait-ms", "300"])
            .arg("--data-dir")
            .arg(&data)
            .arg("--findings-out")
            .arg(&findings)
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let scrape = |port: u16, name: &str| -> f64 {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            return -1.0;
        };
        let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let wait_for = |port: u16, name: &str, want: f64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = scrape(port, name);
            if got >= want {
                return got;
            }
            assert!(Instant::now() < deadline, "{name} stayed at {got}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let child = run(metrics);
    let guard = KillOnPanic(child.id());
    // The turn closes (idle timeout) as completed: its message_stop was read.
    wait_for(metrics, "retryscope_turns_total{", 1.0);
    assert_eq!(
        scrape(
            metrics,
            "retryscope_turns_total{agent=\"unknown\",model=\"claude-3-opus-latest\",provider=\"anthropic\",status=\"completed\"}"
        ),
        1.0
    );
    // The writer completes the line and streams another message: the completion (an empty
    // rest of line) is not a second copy of the line, and the next message is a turn of its own.
    let mut more = b"\n\n".to_vec();
    more.extend_from_slice(&body);
    more.extend_from_slice(b"\n\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut f| f.write_all(&more))
        .unwrap();
    let completed = "retryscope_turns_total{agent=\"unknown\",model=\"claude-3-opus-latest\",provider=\"anthropic\",status=\"completed\"}";
    wait_for(metrics, completed, 2.0);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(scrape(metrics, completed), 2.0);
    assert_eq!(scrape(metrics, "retryscope_turns_total{"), 2.0);
    assert_eq!(scrape(metrics, "retryscope_after_close_events_total"), 0.0);
    assert_eq!(scrape(metrics, "retryscope_bad_lines_total"), 0.0);
    let read = scrape(metrics, "retryscope_events_read_total{source=\"file\"}");
    let (status, err) = stop(child, "-TERM");
    std::mem::forget(guard);
    assert!(status.success(), "{err}");
    // A restart from the checkpoint reads nothing again.
    let metrics = free_port();
    let child = run(metrics);
    let guard = KillOnPanic(child.id());
    wait_for(metrics, "retryscope_turns_total{", 2.0);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        scrape(metrics, "retryscope_events_read_total{source=\"file\"}"),
        read
    );
    assert_eq!(scrape(metrics, "retryscope_turns_total{"), 2.0);
    let (status, err) = stop(child, "-TERM");
    std::mem::forget(guard);
    assert!(status.success(), "{err}");
    let found = std::fs::read_to_string(&findings).unwrap_or_default();
    assert!(!found.contains("incomplete_turn"), "{found}");
}

/// Kills a child process left running when the test fails before stopping it.
struct KillOnPanic(u32);

impl Drop for KillOnPanic {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-9", &self.0.to_string()])
            .status();
    }
}
