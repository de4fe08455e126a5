//! The real coding agents' output files through the binary: `check --format auto` (gemini-cli's
//! two outputs joined), and `run` detecting each file's format while the files are written.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{free_port, scrape_text};

fn recording(client: &str, scenario: &str, file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents")
        .join(client)
        .join(scenario)
        .join(file)
}

fn check_json(files: &[PathBuf], extra: &[&str]) -> (Option<i32>, Vec<Value>) {
    let out = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .arg("check")
        .arg("--json")
        .args(extra)
        .args(files)
        .output()
        .expect("run retryscope check");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let lines = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    (out.status.code(), lines)
}

fn kinds(turn: &Value) -> Vec<String> {
    let mut k: Vec<String> = turn["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["kind"].as_str().map(str::to_owned))
        .collect();
    k.sort();
    k
}

#[test]
fn check_joins_gemini_cli_telemetry_and_stream_json_of_one_session() {
    let files = [
        recording("gemini-cli", "after-tool-reset", "telemetry.log"),
        recording("gemini-cli", "after-tool-reset", "stream.jsonl"),
    ];
    let (code, lines) = check_json(&files, &["--fail-on", "critical"]);
    assert_eq!(code, Some(1), "a critical finding");
    let turns: Vec<&Value> = lines.iter().filter(|l| l.get("turn").is_some()).collect();
    let first = turns
        .iter()
        .find(|t| {
            let id = t["turn"].as_str().unwrap_or("");
            !id.contains('#') && !id.contains('~')
        })
        .expect("the first model call");
    assert_eq!(
        kinds(first),
        [
            "abandoned_tool_executed",
            "spliced_text",
            "unfinished_tool_executed"
        ]
    );
    let ran: Vec<(u64, String)> = first["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| {
            let n = a["attempt"].as_u64().unwrap();
            a["executed"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |e| (n, e["id"].as_str().unwrap().to_owned()))
        })
        .collect();
    // The Gemini API streams no call ids: gemini-cli makes them up, one per call it received,
    // in order (`tool_use` lines of its stream-json); the abandoned attempt's is the first.
    let stream = std::fs::read_to_string(&files[1]).expect("stream.jsonl");
    let made_up: Vec<String> = stream
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "tool_use")
        .filter_map(|v| v["tool_id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(made_up.len(), 2, "{made_up:?}");
    assert!(
        made_up[0].ends_with("_0") && made_up[1].ends_with("_1"),
        "{made_up:?}"
    );
    assert_eq!(ran, [(0, made_up[0].clone()), (1, made_up[1].clone())]);
    let summary = &lines.last().unwrap()["summary"];
    assert_eq!(summary["bad_lines"], 0, "{summary}");
}

/// A turn report's attempts' outcomes, in order.
fn outcomes(turn: &Value) -> Vec<&str> {
    turn["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["outcome"].as_str())
        .collect()
}

/// A copy of a real recording's `telemetry.log` that ends before the record holding byte
/// `at`, as a client that exits before its telemetry is flushed leaves it. Records are
/// pretty-printed objects, each opening with `{` alone on a line.
fn telemetry_cut_before(telemetry: &str, at: usize) -> (tempfile::TempDir, PathBuf) {
    let cut = telemetry[..at].rfind("\n{").expect("its record") + 1;
    let tmp = tempfile::tempdir().expect("tempdir");
    let cut_file = tmp.path().join("telemetry.log");
    std::fs::write(&cut_file, &telemetry[..cut]).expect("write");
    (tmp, cut_file)
}

/// The real `before-finish-reset` recording's directory, and its telemetry cut before the
/// last call's logged response.
fn telemetry_cut_before_the_last_response() -> (PathBuf, tempfile::TempDir, PathBuf) {
    let dir = recording("gemini-cli", "before-finish-reset", "");
    let telemetry = std::fs::read_to_string(dir.join("telemetry.log")).expect("telemetry.log");
    let last_response = telemetry
        .rfind("\"gemini_cli.api_response\"")
        .expect("a logged response");
    let (tmp, cut_file) = telemetry_cut_before(&telemetry, last_response);
    (dir, tmp, cut_file)
}

/// gemini-cli on a loaded machine (CI, stop 41) exited before its telemetry outfile was
/// flushed: the file ended after the last call's `api_request`, its `api_response` never
/// written. The real recording cut the same way: the stream-json shows that call's answer and
/// the `result`, so it completed; the turn is not called incomplete.
#[test]
fn gemini_cli_telemetry_that_lost_its_tail_still_finishes_the_call_the_screen_finished() {
    let (dir, _tmp, cut_file) = telemetry_cut_before_the_last_response();
    let (code, lines) = check_json(&[cut_file, dir.join("stream.jsonl")], &[]);
    assert_eq!(code, Some(0));
    let turns: Vec<&Value> = lines.iter().filter(|l| l.get("turn").is_some()).collect();
    let last_call = turns
        .iter()
        .find(|t| t["turn"].as_str().is_some_and(|id| id.ends_with("#2")))
        .expect("the call after the tool ran");
    let outcomes = outcomes(last_call);
    assert_eq!(outcomes, ["completed"], "{last_call}");
    assert_eq!(last_call["status"], "completed", "{last_call}");
    let found: Vec<String> = turns.iter().flat_map(|t| kinds(t)).collect();
    assert!(!found.contains(&"incomplete_turn".to_owned()), "{found:?}");
    // The abandoned attempt's findings are still there: the cut lost nothing before it.
    assert!(
        found.contains(&"abandoned_tool_executed".to_owned()),
        "{found:?}"
    );
}

/// The same real recording cut earlier: after the first attempt's failure, before the
/// retry's request (and before the `network_retry_attempt` record). The screen still streamed
/// the retry's answer and finished it: the report must be the one the whole file gives, an
/// abandoned attempt and a completed retry, not one failed attempt holding both attempts'
/// calls.
#[test]
fn gemini_cli_telemetry_cut_after_a_failure_still_shows_the_retry_the_screen_streamed() {
    let dir = recording("gemini-cli", "before-finish-reset", "");
    let telemetry = std::fs::read_to_string(dir.join("telemetry.log")).expect("telemetry.log");
    let whole = check_json(&[dir.join("telemetry.log"), dir.join("stream.jsonl")], &[]).1;
    let first_call = |lines: &[Value]| -> (Vec<String>, Vec<String>, Value) {
        let turn = lines
            .iter()
            .find(|t| {
                t.get("attempts").is_some()
                    && t["turn"]
                        .as_str()
                        .is_some_and(|id| !id.contains('#') && !id.contains('~'))
            })
            .expect("the first call")
            .clone();
        let outcomes = turn["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["outcome"].as_str().unwrap().to_owned())
            .collect();
        let mut found = kinds(&turn);
        found.sort();
        (outcomes, found, turn["status"].clone())
    };
    let (outcomes, found, status) = first_call(&whole);
    assert_eq!(outcomes, ["abandoned", "completed"]);
    assert!(
        found.contains(&"abandoned_tool_executed".to_owned()),
        "{found:?}"
    );
    let error = telemetry
        .find("\"gemini_cli.api_error\"")
        .expect("the failure");
    for record in [
        "\"gemini_cli.network_retry_attempt\"",
        "\"gemini_cli.api_request\"",
    ] {
        let at = error + telemetry[error..].find(record).expect("a record after it");
        let (_tmp, cut_file) = telemetry_cut_before(&telemetry, at);
        let (code, lines) = check_json(&[cut_file, dir.join("stream.jsonl")], &[]);
        assert_eq!(code, Some(0), "{record}");
        let got = first_call(&lines);
        assert_eq!(
            got,
            (outcomes.clone(), found.clone(), status.clone()),
            "cut before {record}"
        );
    }
}

/// The telemetry alone, cut after the last call's request: that call began an attempt the
/// file never saw end. It is reported as that open attempt (and an incomplete turn), not as
/// a turn of no attempts.
#[test]
fn gemini_cli_telemetry_cut_after_a_request_reports_the_attempt_it_began() {
    let (_, _tmp, cut_file) = telemetry_cut_before_the_last_response();
    let (code, lines) = check_json(&[cut_file], &[]);
    assert_eq!(code, Some(0));
    let last_call = lines
        .iter()
        .find(|t| {
            t.get("attempts").is_some() && t["turn"].as_str().is_some_and(|id| id.ends_with("#2"))
        })
        .expect("the call after the tool ran");
    let outcomes = outcomes(last_call);
    assert_eq!(outcomes, ["open"], "{last_call}");
    assert!(kinds(last_call).contains(&"incomplete_turn".to_owned()));
}

#[test]
fn check_reads_claude_code_and_codex_and_flags_the_unfinished_call() {
    for (client, file) in [("claude-code", "stream.jsonl"), ("codex", "exec.jsonl")] {
        let (code, lines) = check_json(
            &[recording(client, "after-tool-eof", file)],
            &["--fail-on", "high"],
        );
        assert_eq!(code, Some(1), "{client}");
        let found: Vec<String> = lines
            .iter()
            .filter(|l| l.get("turn").is_some())
            .flat_map(kinds)
            .collect();
        assert!(
            found.contains(&"unfinished_tool_executed".to_owned()),
            "{client}: {found:?}"
        );
    }
}

fn value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn run_detects_each_agent_file_and_reads_files_written_while_tailing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        recording("claude-code", "after-tool-reset", "stream.jsonl"),
        dir.path().join("claude.log"),
    )
    .unwrap();
    std::fs::copy(
        recording("codex", "before-finish-eof", "exec.jsonl"),
        dir.path().join("codex.log"),
    )
    .unwrap();
    // The telemetry outfile is pretty-printed and starts with a span; it is written in two
    // halves, the second while the collector tails it.
    let telemetry =
        std::fs::read(recording("gemini-cli", "after-tool-eof", "telemetry.log")).unwrap();
    let half = telemetry.len() / 2;
    let cut = half + telemetry[half..].iter().position(|b| *b == b'\n').unwrap() + 1;
    let gemini = dir.path().join("gemini.log");
    std::fs::write(&gemini, &telemetry[..cut]).unwrap();
    let port = free_port();
    let glob = format!("{}/*.log", dir.path().display());
    let _run = Run(Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args([
            "run",
            &glob,
            "--findings-out",
            "",
            "--idle-timeout-secs",
            "1",
        ])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start retryscope run"));
    // Each finding names the agent whose decoder recognised the client.
    let unfinished = |agent: &str, tool: &str| {
        format!(
            "retryscope_findings_total{{agent=\"{agent}\",kind=\"unfinished_tool_executed\",severity=\"high\",tool=\"{tool}\"}}"
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut appended = false;
    loop {
        let m = scrape_text(port).unwrap_or_default();
        if !appended && m.contains("retryscope_build_info") {
            std::thread::sleep(Duration::from_millis(300));
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&gemini)
                .unwrap();
            f.write_all(&telemetry[cut..]).unwrap();
            appended = true;
        }
        let done = value(&m, &unfinished("claude-code", "Bash")) == 1.0
            && value(&m, &unfinished("codex", "command_execution")) == 1.0
            && value(&m, &unfinished("gemini-cli", "run_shell_command")) == 1.0;
        if done {
            let bad: f64 = m
                .lines()
                .filter(|l| l.starts_with("retryscope_bad_lines_total{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum();
            assert_eq!(bad, 0.0, "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "timed out; last scrape:\n{m}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Findings by kind from a scrape (summed over severity and tool).
fn findings_by_kind(metrics: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for l in metrics.lines() {
        let Some(rest) = l
            .strip_prefix("retryscope_findings_total{")
            .and_then(|l| l.split_once("kind=\""))
            .map(|(_, rest)| rest)
        else {
            continue;
        };
        let kind = rest.split('"').next().unwrap_or("").to_owned();
        let v: f64 = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        if v > 0.0 {
            *out.entry(kind).or_insert(0.0) += v;
        }
    }
    out
}

#[test]
fn run_joins_gemini_cli_telemetry_and_stream_json_like_check() {
    // Without the join the stream-json's turn never sees the retry, so `spliced_text` (what the
    // user saw carries the abandoned attempt's text) cannot fire; `check` finds it.
    let dir = tempfile::tempdir().unwrap();
    let files = ["telemetry.log", "stream.jsonl"];
    for f in files {
        std::fs::copy(
            recording("gemini-cli", "mid-word-reset", f),
            dir.path().join(f),
        )
        .unwrap();
    }
    let (_, lines) = check_json(
        &files.map(|f| recording("gemini-cli", "mid-word-reset", f)),
        &[],
    );
    let mut want = std::collections::BTreeMap::new();
    for t in lines.iter().filter(|l| l.get("turn").is_some()) {
        for k in kinds(t) {
            *want.entry(k).or_insert(0.0) += 1.0;
        }
    }
    assert!(want.contains_key("spliced_text"), "{want:?}");
    let port = free_port();
    let _run = Run(Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .arg("run")
        .arg(dir.path().join("telemetry.log"))
        .arg(dir.path().join("stream.jsonl"))
        .args(["--findings-out", "", "--idle-timeout-secs", "2"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start retryscope run"));
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let got = findings_by_kind(&scrape_text(port).unwrap_or_default());
        if got == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "run found {got:?}, check found {want:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Sum of a family's samples in a scrape.
fn total(metrics: &str, family: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(family) && l[family.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn qwen_code_files_give_run_and_check_the_same_retry_and_splice() {
    // Qwen Code 0.24.4, each output on its own (docs/clients/qwen-code.md): its telemetry
    // shows the continuation after a reset and the splice it sent back to the model; its
    // stream-json shows the resend after a clean end of body and the splice on screen.
    for (scenario, file) in [
        ("mid-word-reset", "telemetry.log"),
        ("mid-word-eof", "stream.jsonl"),
    ] {
        let path = recording("qwen-code", scenario, file);
        let (code, lines) = check_json(std::slice::from_ref(&path), &[]);
        assert!(matches!(code, Some(0 | 1)), "{scenario}/{file}: {code:?}");
        let mut want = std::collections::BTreeMap::new();
        let mut retries = 0;
        for t in lines.iter().filter(|l| l.get("turn").is_some()) {
            retries += t["retries"].as_u64().unwrap_or(0);
            for k in kinds(t) {
                *want.entry(k).or_insert(0.0) += 1.0;
            }
        }
        assert_eq!(retries, 1, "{scenario}/{file}");
        assert!(
            want.contains_key("spliced_text"),
            "{scenario}/{file}: {want:?}"
        );
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join(file);
        std::fs::copy(&path, &copy).unwrap();
        let port = free_port();
        let _run = Run(Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .arg("run")
            .arg(&copy)
            .args(["--findings-out", "", "--idle-timeout-secs", "2"])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start retryscope run"));
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let m = scrape_text(port).unwrap_or_default();
            let got = findings_by_kind(&m);
            if got == want && total(&m, "retryscope_retries_total") == 1.0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{scenario}/{file}: run found {got:?}, check found {want:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[test]
fn qwen_code_telemetry_and_stream_json_together_are_one_session_in_check_and_run() {
    // Regression: Qwen Code's two outputs of one session name its calls differently (the
    // telemetry by prompt id `<session>########0`, the stream-json by session id), so checked
    // together every attempt was counted twice. Joined: one retry, two model calls, and the
    // splice both where only the screen showed it (a resend after a clean end of body) and
    // where the history kept it (a continuation after a reset); `run` tailing both agrees.
    for scenario in ["mid-word-reset", "mid-word-eof"] {
        let files = ["telemetry.log", "stream.jsonl"];
        let (code, lines) = check_json(&files.map(|f| recording("qwen-code", scenario, f)), &[]);
        assert!(matches!(code, Some(0 | 1)), "{scenario}: {code:?}");
        let turns: Vec<&Value> = lines.iter().filter(|l| l.get("turn").is_some()).collect();
        assert_eq!(turns.len(), 2, "{scenario}: one turn per model call");
        let retries: u64 = turns
            .iter()
            .map(|t| t["retries"].as_u64().unwrap_or(0))
            .sum();
        assert_eq!(retries, 1, "{scenario}");
        let mut want = std::collections::BTreeMap::new();
        for t in &turns {
            for k in kinds(t) {
                *want.entry(k).or_insert(0.0) += 1.0;
            }
        }
        assert_eq!(want.get("spliced_text"), Some(&1.0), "{scenario}: {want:?}");
        let dir = tempfile::tempdir().unwrap();
        for f in files {
            std::fs::copy(recording("qwen-code", scenario, f), dir.path().join(f)).unwrap();
        }
        let port = free_port();
        let _run = Run(Command::new(env!("CARGO_BIN_EXE_retryscope"))
            .arg("run")
            .arg(dir.path().join("telemetry.log"))
            .arg(dir.path().join("stream.jsonl"))
            .args(["--findings-out", "", "--idle-timeout-secs", "2"])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start retryscope run"));
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            let m = scrape_text(port).unwrap_or_default();
            let got = findings_by_kind(&m);
            if got == want && total(&m, "retryscope_retries_total") == 1.0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{scenario}: run found {got:?} ({} retries), check found {want:?}",
                total(&m, "retryscope_retries_total")
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
