//! CLI tests of what a person sees from `retryscope run`, `validate` and the argument parser:
//! live findings, clear warnings for inputs that match nothing, errors that name the flag to
//! change, log wording (no Rust debug text, no repeated OS errors, true counts, line
//! numbers), suggestions for typos, exit codes in the help, and a log that appears in an
//! empty watched folder read promptly.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_retryscope"));
    c.env("NO_COLOR", "1").env_remove("RUST_LOG");
    c
}

fn run_for(args: &[&str], dur: Duration) -> Output {
    let child = bin()
        .arg("run")
        .args(args)
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(dur);
    stop(child)
}

fn stop(child: Child) -> Output {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    child.wait_with_output().unwrap()
}

/// Log lines without their timestamp and level padding: `WARN target: message fields`.
fn log_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| match l.split_once("Z ") {
            Some((_, rest)) => rest.split_whitespace().collect::<Vec<_>>().join(" "),
            None => l.to_owned(),
        })
        .collect()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn run_warns_about_a_directory_a_missing_file_and_a_missing_folder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap().to_owned();
    let missing = format!("{d}/missing.jsonl");
    let glob = format!("{d}/nothere/*.jsonl");
    let out = run_for(&[&d, &missing, &glob], Duration::from_millis(1500));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let logs = log_lines(&out);
    let expect = [
        format!(
            "WARN retryscope::cli::run_cmd: `{d}` is a directory; run tails files: give a glob such as `{d}/*.jsonl`"
        ),
        format!("WARN retryscope::cli::run_cmd: `{missing}` does not exist; it will be read if it appears"),
        format!(
            "WARN retryscope::cli::run_cmd: no folder `{d}/nothere` for `{glob}`: nothing can match until it exists"
        ),
        format!(
            "WARN retryscope::run::file_source: no file matches the include patterns yet; waiting for one to appear patterns={d}, {missing}, {glob}"
        ),
        "INFO retryscope::cli::run_cmd: shutting down: stopping reads, closing open turns, flushing sinks".to_owned(),
    ];
    for line in expect {
        assert!(logs.contains(&line), "missing {line:?} in {logs:#?}");
    }
    assert!(
        !stderr(&out).contains("writing the checkpoint"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_busy_port_names_the_flag_to_change() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = bin()
        .args(["run", "--demo", "--metrics-addr", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = stderr(&out);
    let last = text.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        format!(
            "retryscope: error: cannot serve /metrics on {addr} (choose another address with \
             --metrics-addr or metrics_addr in the config): Address already in use (os error 98)"
        )
    );
}

#[test]
fn metrics_addr_takes_a_host_name() {
    let child = bin()
        .args([
            "run",
            "--demo",
            "--findings-out",
            "",
            "--metrics-addr",
            "localhost:0",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let out = stop(child);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        log_lines(&out)
            .iter()
            .any(|l| l.starts_with("INFO retryscope::cli::run_cmd: serving /metrics addr=")),
        "{}",
        stderr(&out)
    );
}

fn write_config(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    let path = dir.join("retryscope.toml");
    std::fs::write(&path, body).unwrap();
    path
}

#[test]
fn validate_rejects_what_run_would_reject() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let cases = [
        (
            format!("prices = \"{d}/nope.json\"\n"),
            format!(
                "retryscope: error: cannot read price table {d}/nope.json: No such file or directory (os error 2)\n"
            ),
        ),
        (
            format!("findings_out = \"{d}/no/such/folder/findings.jsonl\"\n"),
            format!(
                "retryscope: error: findings_out `{d}/no/such/folder/findings.jsonl`: the folder {d}/no/such/folder does not exist\n"
            ),
        ),
        (
            format!("findings_out = \"{d}\"\n"),
            format!("retryscope: error: findings_out `{d}` is a directory; give a file name\n"),
        ),
    ];
    for (body, message) in cases {
        let cfg = write_config(dir.path(), &body);
        let v = bin().arg("validate").arg(&cfg).output().unwrap();
        assert_eq!(v.status.code(), Some(2), "validate {body}");
        assert_eq!(stderr(&v), message, "validate {body}");
        let r = bin()
            .args(["run", "--demo", "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        assert_eq!(r.status.code(), Some(2), "run {body}");
        assert_eq!(stderr(&r), message, "run {body}");
    }
    let ok = write_config(dir.path(), "metrics_addr = \"localhost:9999\"\n");
    let v = bin().arg("validate").arg(&ok).output().unwrap();
    assert_eq!(v.status.code(), Some(0), "{}", stderr(&v));
}

#[test]
fn findings_reach_stdout_and_the_file_while_running_and_are_never_stamped_in_the_future() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("findings.jsonl");
    // To a file (no data dir): lines appear while the collector runs.
    let child = bin()
        .args([
            "run",
            "--demo",
            "--demo-retry-rate",
            "0.9",
            "--demo-turns-per-sec",
            "20",
        ])
        .args(["--metrics-addr", "127.0.0.1:0", "--findings-out"])
        .arg(&file)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut lines = 0;
    while start.elapsed() < Duration::from_secs(15) && lines < 3 {
        std::thread::sleep(Duration::from_millis(200));
        lines = std::fs::read_to_string(&file)
            .unwrap_or_default()
            .lines()
            .count();
    }
    let seen_at = now_ms();
    let text = std::fs::read_to_string(&file).unwrap();
    stop(child);
    assert!(
        lines >= 3,
        "no findings in the file while running: {text:?}"
    );
    for line in text.lines().take(lines) {
        let f: serde_json::Value = serde_json::from_str(line).unwrap();
        let ts = f["ts_ms"].as_i64().unwrap();
        assert!(
            ts <= seen_at,
            "finding stamped {} ms in the future: {line}",
            ts - seen_at
        );
        assert!(
            ts > seen_at - 60_000,
            "finding stamped a minute ago: {line}"
        );
    }
    // To stdout: the first line arrives while running, not at exit.
    let mut child = bin()
        .args([
            "run",
            "--demo",
            "--demo-retry-rate",
            "0.9",
            "--demo-turns-per-sec",
            "20",
        ])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut first = String::new();
        let _ = BufReader::new(stdout).read_line(&mut first);
        let _ = tx.send(first);
    });
    let first = rx.recv_timeout(Duration::from_secs(15));
    stop(child);
    let first = first.expect("no finding on stdout within 15 s");
    assert!(first.starts_with("{\"kind\":"), "{first:?}");
}

#[test]
fn stdin_counts_its_lines_and_bad_lines_have_line_numbers() {
    let mut child = bin()
        .args(["run", "-", "--exit-on-eof", "--findings-out", ""])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = String::new();
    for i in 0..16 {
        input.push_str(&format!("{{\"turn\":\"t{i}\",\"type\":\"turn_start\"}}\n"));
    }
    input.push_str("not json\n");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let logs = log_lines(&out);
    assert!(
        logs.iter().any(|l| l.starts_with(
            "WARN retryscope::internal_events: skipped a bad line input=<stdin> line=17 error="
        )),
        "{logs:#?}"
    );
    assert!(
        logs.iter()
            .any(|l| l.starts_with("INFO retryscope::cli::run_cmd: stopped lines=17 ")),
        "{logs:#?}"
    );
}

#[test]
fn logs_show_values_not_rust_debug_text() {
    let out = run_for(
        &[
            "--demo",
            "--findings-out",
            "",
            "--otlp-endpoint",
            "http://127.0.0.1:9",
            "--otlp-protocol",
            "grpc",
        ],
        Duration::from_millis(1500),
    );
    let text = stderr(&out);
    assert!(
        text.contains("exporting turn traces over OTLP endpoint=http://127.0.0.1:9"),
        "{text}"
    );
    assert!(text.contains("protocol=grpc"), "{text}");
    for debug in ["Some(", "Grpc", "None"] {
        assert!(!text.contains(debug), "{debug} in {text}");
    }
}

#[test]
fn typos_get_a_suggestion() {
    let out = bin().arg("chek").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("tip: a similar subcommand exists: 'check'"),
        "{}",
        stderr(&out)
    );
    let out = bin().args(["check", "--jsn", "x"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("tip: a similar argument exists: '--json'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_states_exit_codes_and_what_capture_content_exports() {
    for args in [
        &["--help"][..],
        &["check", "--help"][..],
        &["run", "--help"][..],
    ] {
        let out = bin().args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Exit status: 0"), "{args:?}: {text}");
    }
    let run = bin().args(["run", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(text.contains("(the attempt text prefix)"), "{text}");
    assert!(
        text.contains("or an empty string ('') to disable"),
        "{text}"
    );
    assert!(text.contains("openai-chat"), "{text}");
    let check = bin().args(["check", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&check.stdout);
    assert!(text.contains("(the attempt text prefix)"), "{text}");
    assert!(
        text.contains("[default: only turns with findings or retries]"),
        "{text}"
    );
}

#[test]
fn os_errors_are_said_once() {
    let out = bin()
        .args(["check", "--prices", "/nonexistent.json", "x.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "retryscope: error: loading --prices: cannot read price table /nonexistent.json: \
         No such file or directory (os error 2)\n"
    );
}

fn on_a_terminal(command: &str, no_color: Option<&str>) -> String {
    let mut c = Command::new("script");
    c.args(["-qec", command, "/dev/null"])
        .env("TERM", "xterm")
        .env_remove("RUST_LOG");
    match no_color {
        Some(v) => c.env("NO_COLOR", v),
        None => c.env_remove("NO_COLOR"),
    };
    let out = c.stdin(Stdio::null()).output().expect("util-linux script");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn logs_on_a_terminal_are_coloured_unless_no_color() {
    let cmd = format!(
        "{} run - --exit-on-eof --metrics-addr 127.0.0.1:0 < /dev/null",
        env!("CARGO_BIN_EXE_retryscope")
    );
    let coloured = on_a_terminal(&cmd, None);
    assert!(coloured.contains("serving /metrics"), "{coloured:?}");
    assert!(coloured.contains('\x1b'), "{coloured:?}");
    let plain = on_a_terminal(&cmd, Some("1"));
    assert!(plain.contains("serving /metrics"), "{plain:?}");
    assert!(!plain.contains('\x1b'), "{plain:?}");
}

/// Issue 23: with no source, `run` said "serving /metrics" and then failed.
#[test]
fn run_with_no_source_fails_before_serving_anything() {
    let out = bin()
        .args(["run", "--metrics-addr", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "retryscope: error: no source: give files or globs, `-` for stdin, --otlp-listen, or --demo\n"
    );
}

/// A log renamed into a watched folder that was empty at start is read within a couple of
/// seconds: it waited for the tailer's 5 s safety sweep when it arrived within a second of
/// the last scan (as it does right after `run` starts), the directory event being dropped.
#[test]
fn a_log_renamed_into_an_empty_watched_folder_is_read_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let findings = dir.path().join("findings.jsonl");
    let mut child = bin()
        .arg("run")
        .arg(format!("{}/*.jsonl", logs.display()))
        .args(["--metrics-addr", "127.0.0.1:0", "--findings-out"])
        .arg(&findings)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // The first scan has run once `run` says nothing matches yet.
    let mut said = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !said.iter().any(|l: &String| l.contains("no file matches")) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => said.push(line),
            Err(_) => {
                let _ = child.kill();
                panic!("run never said that no file matches yet: {said:#?}");
            }
        }
    }
    // Right after that scan, a log with a known finding (spliced_text) is renamed in.
    let staged = dir.path().join("staged.jsonl");
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/retries/retry-mid-word.jsonl"),
        &staged,
    )
    .unwrap();
    std::fs::rename(&staged, logs.join("agent.jsonl")).unwrap();
    let moved = Instant::now();
    let mut found = String::new();
    while moved.elapsed() < Duration::from_secs(3) && !found.contains("spliced_text") {
        std::thread::sleep(Duration::from_millis(50));
        found = std::fs::read_to_string(&findings).unwrap_or_default();
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    said.extend(rx.try_iter());
    assert!(
        found.contains("spliced_text"),
        "the renamed log's finding was not written within 3 s: {found:?}\n{said:#?}"
    );
}
