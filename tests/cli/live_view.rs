//! `run`'s view for a person: on a terminal (or with `--output human`) findings are the
//! coloured sentences `check` prints, filtered by `--min-severity`, with a summary line every
//! `--summary-every` seconds and one at Ctrl-C instead of a burst of `incomplete_turn` lines;
//! piped, stdout stays JSON lines.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn naive() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/bookstore/naive.jsonl")
        .display()
        .to_string()
}

fn start(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .arg("run")
        .args(args)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start run")
}

fn interrupt(child: Child, after: Duration) -> Output {
    std::thread::sleep(after);
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    child.wait_with_output().expect("run output")
}

#[test]
fn human_output_prints_sentences_at_or_above_the_minimum_and_a_summary_at_ctrl_c() {
    let out = interrupt(
        start(&["--output", "human", "--summary-every", "0", &naive()]),
        Duration::from_millis(1500),
    );
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        "\
CRITICAL abandoned_tool_executed: turn bookstore-1: issue_refund (call c1) from attempt 0 ran and then a retry abandoned it: its effect happened for an answer the user never got
CRITICAL duplicate_effect: turn bookstore-1: issue_refund (call c7) from attempt 1 repeats an effect that already happened (same effect as call c1 of attempt 0)
HIGH     unfinished_tool_executed: turn bookstore-1: issue_refund (call c1) from attempt 0 ran although that attempt never finished (a retry replaced it): the client did not hold the call until the finish event
HIGH     spliced_text: turn bookstore-1: the user saw attempt 0's abandoned text together with the retry's (the client's logged output holds both)
retryscope: 1 turn closed (0 open), 1 retry; findings: critical 2, high 2, warning 2 (2 below high not shown; --min-severity)
"
    );
}

#[test]
fn min_severity_info_shows_everything() {
    let out = interrupt(
        start(&[
            "--output",
            "human",
            "--min-severity",
            "info",
            "--summary-every",
            "0",
            &naive(),
        ]),
        Duration::from_millis(1500),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.matches("WARNING  early_execution: turn bookstore-1")
            .count(),
        2,
        "{text}"
    );
    assert!(
        text.ends_with("findings: critical 2, high 2, warning 2\n"),
        "{text}"
    );
}

#[test]
fn a_turn_open_at_ctrl_c_is_summed_up_not_listed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("open.jsonl");
    std::fs::write(
        &log,
        concat!(
            r#"{"turn":"o1","type":"turn_start","ts":1}"#,
            "\n",
            r#"{"turn":"o2","type":"turn_start","ts":1}"#,
            "\n"
        ),
    )
    .expect("write");
    let out = interrupt(
        start(&[
            "--output",
            "human",
            "--min-severity",
            "info",
            "--summary-every",
            "0",
            log.to_str().expect("utf-8"),
        ]),
        Duration::from_millis(1500),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("incomplete_turn"), "{text}");
    assert!(
        text.ends_with("; 2 turns still open at the stop, closed as incomplete\n"),
        "{text}"
    );
}

#[test]
fn the_summary_line_repeats_every_n_seconds() {
    let out = interrupt(
        start(&["--output", "human", "--summary-every", "1", &naive()]),
        Duration::from_millis(3500),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let summaries = text
        .lines()
        .filter(|l| l.starts_with("retryscope: "))
        .count();
    // ~3 periodic ones and the one at the stop; timing on a loaded machine may drop one.
    assert!(summaries >= 3, "{text}");
}

#[test]
fn piped_stdout_stays_json_lines_by_default() {
    let out = interrupt(start(&[&naive()]), Duration::from_millis(1500));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.is_empty());
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert!(v.get("kind").is_some(), "{line}");
    }
}

/// On a real terminal (a pty from `script`), `auto` is the human view, coloured.
#[test]
fn a_terminal_gets_the_human_view_in_colour() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to give run a terminal");
        return;
    }
    let cmd = format!(
        "{} run --metrics-addr 127.0.0.1:0 --summary-every 0 {}",
        env!("CARGO_BIN_EXE_retryscope"),
        naive()
    );
    let child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script");
    let mut child = child;
    std::thread::sleep(Duration::from_millis(1500));
    // Ctrl-C on the terminal: the pty turns it into SIGINT for retryscope.
    if let Some(stdin) = child.stdin.as_mut() {
        use std::io::Write;
        let _ = stdin.write_all(b"\x03");
        let _ = stdin.flush();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && child.try_wait().ok().flatten().is_none() {
        std::thread::sleep(Duration::from_millis(100));
    }
    if child.try_wait().ok().flatten().is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("script output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\x1b[1;31mCRITICAL\x1b[0m abandoned_tool_executed: turn bookstore-1"),
        "{text}"
    );
    assert!(!text.contains("{\"kind\""), "{text}");
}
