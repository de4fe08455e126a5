//! CLI tests of `retryscope check`: the bookstore examples, exit codes, bad input, JSON shape.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_retryscope"))
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/bookstore")
        .join(name)
}

fn check(args: &[&str]) -> Output {
    bin()
        .arg("check")
        .args(args)
        .output()
        .expect("run retryscope")
}

fn json_lines(out: &Output) -> (Vec<Value>, Value) {
    let text = String::from_utf8(out.stdout.clone()).expect("utf-8 stdout");
    let mut values: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let summary = values.pop().expect("summary line");
    (values, summary["summary"].clone())
}

/// (attempt, call id) of every execution in a turn object.
fn executed(turn: &Value) -> Vec<(u64, String)> {
    turn["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|a| {
            let n = a["attempt"].as_u64().unwrap();
            a["executed"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |e| (n, e["id"].as_str().unwrap().to_string()))
        })
        .collect()
}

fn finding_kinds(turn: &Value) -> Vec<String> {
    let mut kinds: Vec<String> = turn["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect();
    kinds.sort();
    kinds
}

#[test]
fn bookstore_policies_json() {
    let naive = check(&["--json", example("naive.jsonl").to_str().unwrap()]);
    assert!(naive.status.success());
    let (turns, summary) = json_lines(&naive);
    assert_eq!(turns.len(), 1);
    assert_eq!(
        finding_kinds(&turns[0]),
        [
            "abandoned_tool_executed",
            "duplicate_effect",
            "early_execution",
            "early_execution",
            "spliced_text",
            "unfinished_tool_executed"
        ]
    );
    assert_eq!(summary["turns"], 1);
    assert_eq!(summary["attempts"], 2);
    assert_eq!(summary["retries"], 1);
    assert_eq!(summary["findings"]["duplicate_effect"], 1);
    assert_eq!(summary["events"], 17);
    assert_eq!(summary["bad_lines"], 0);

    let reset = check(&["--json", example("reset.jsonl").to_str().unwrap()]);
    let (turns, _) = json_lines(&reset);
    assert_eq!(
        finding_kinds(&turns[0]),
        [
            "abandoned_tool_executed",
            "duplicate_effect",
            "early_execution",
            "early_execution",
            "unfinished_tool_executed"
        ]
    );

    let late = check(&["--json", example("reset-late-exec.jsonl").to_str().unwrap()]);
    let (turns, summary) = json_lines(&late);
    assert!(finding_kinds(&turns[0]).is_empty());
    assert_eq!(
        executed(&turns[0]),
        vec![(1, "c7".to_string())],
        "exactly one refund, from attempt 1"
    );
    assert!(summary["wasted_cost_usd"].as_f64().unwrap() > 0.0);
}

#[test]
fn json_turn_object_has_the_documented_fields() {
    let out = check(&["--json", example("naive.jsonl").to_str().unwrap()]);
    let (turns, summary) = json_lines(&out);
    let t = &turns[0];
    for key in [
        "turn",
        "model",
        "status",
        "retries",
        "cost_usd",
        "wasted_cost_usd",
        "attempts",
        "findings",
    ] {
        assert!(t.get(key).is_some(), "turn lacks {key}");
    }
    let a = &t["attempts"][0];
    for key in [
        "attempt",
        "outcome",
        "finish_reason",
        "text_chars",
        "tool_calls",
        "executed",
        "usage",
        "cost_usd",
    ] {
        assert!(a.get(key).is_some(), "attempt lacks {key}");
    }
    for key in ["id", "name", "effect_key"] {
        assert!(a["tool_calls"][0].get(key).is_some());
        assert!(a["executed"][0].get(key).is_some());
    }
    for key in [
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "source",
    ] {
        assert!(a["usage"].get(key).is_some(), "usage lacks {key}");
    }
    assert_eq!(a["usage"]["source"], "estimated");
    let f = &t["findings"][0];
    for key in [
        "kind",
        "severity",
        "attempt",
        "tool",
        "call_id",
        "effect_key",
        "evidence",
    ] {
        assert!(f.get(key).is_some(), "finding lacks {key}");
    }
    for key in [
        "turns",
        "attempts",
        "retries",
        "findings",
        "cost_usd",
        "wasted_cost_usd",
        "events",
        "bad_lines",
    ] {
        assert!(summary.get(key).is_some(), "summary lacks {key}");
    }
}

#[test]
fn text_report_shows_findings_and_summary() {
    let out = check(&[example("naive.jsonl").to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("turn bookstore-1"), "{text}");
    assert!(
        text.contains("CRITICAL abandoned_tool_executed: issue_refund (call c1) from attempt 0"),
        "{text}"
    );
    assert!(
        text.contains("HIGH     spliced_text: the user saw attempt 0's abandoned text"),
        "{text}"
    );
    assert!(text.contains("summary"));
    assert!(text.contains("retries: 1"));
}

#[test]
fn fail_on_gates_the_exit_status() {
    let naive = example("naive.jsonl");
    let late = example("reset-late-exec.jsonl");
    let code = |args: &[&str]| check(args).status.code();
    assert_eq!(
        code(&["--fail-on", "critical", naive.to_str().unwrap()]),
        Some(1)
    );
    assert_eq!(
        code(&["--fail-on", "high", naive.to_str().unwrap()]),
        Some(1)
    );
    assert_eq!(
        code(&[naive.to_str().unwrap()]),
        Some(0),
        "no --fail-on: findings do not fail"
    );
    assert_eq!(
        code(&["--fail-on", "info", late.to_str().unwrap()]),
        Some(0)
    );
    // The reset policy has critical findings but no high ones besides: critical >= high.
    let reset = example("reset.jsonl");
    assert_eq!(
        code(&["--fail-on", "critical", reset.to_str().unwrap()]),
        Some(1)
    );
}

#[test]
fn unusable_arguments_and_unreadable_inputs_exit_2() {
    assert_eq!(check(&["--fail-on", "urgent", "x"]).status.code(), Some(2));
    assert_eq!(check(&["--no-such-flag", "x"]).status.code(), Some(2));
    assert_eq!(check(&[]).status.code(), Some(2));
    let out = check(&["/nonexistent/retryscope/log.jsonl"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("cannot read /nonexistent/retryscope/log.jsonl")
    );
}

#[test]
fn bad_lines_are_reported_counted_and_skipped_keeping_good_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    let good = std::fs::read(example("naive.jsonl")).unwrap();
    let mut lines = good.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    // Bad lines interleaved with the good turn.
    f.write_all(lines.next().unwrap()).unwrap();
    f.write_all(b"\n{not json\n").unwrap();
    f.write_all(b"{\"turn\":\"x\",\"type\":\"text\",\"text\":\"\xff\xfe\"}\n")
        .unwrap();
    f.write_all(&vec![b'a'; 5000]).unwrap();
    f.write_all(b"\n{\"turn\":\"bookstore-1\",\"type\":\"hologram\",\"attempt\":0}\n")
        .unwrap();
    f.write_all(b"{\"type\":\"text\",\"text\":\"no turn\"}\n")
        .unwrap();
    for l in lines {
        f.write_all(l).unwrap();
        f.write_all(b"\n").unwrap();
    }
    drop(f);
    let out = check(&["--json", "--max-line-bytes", "4096", path.to_str().unwrap()]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mixed.jsonl:2: skipped: invalid_json"),
        "{stderr}"
    );
    assert!(
        stderr.contains("mixed.jsonl:3: skipped: invalid_utf8"),
        "{stderr}"
    );
    assert!(
        stderr.contains("mixed.jsonl:4: skipped: too_long"),
        "{stderr}"
    );
    assert!(
        stderr.contains("mixed.jsonl:6: skipped: missing_field"),
        "{stderr}"
    );
    let (turns, summary) = json_lines(&out);
    assert_eq!(summary["bad_lines"], 4);
    assert_eq!(summary["bad_lines_by_reason"]["too_long"], 1);
    assert_eq!(summary["unknown_types"], 1);
    assert_eq!(turns.len(), 1, "the good turn survives");
    assert_eq!(turns[0]["findings"].as_array().unwrap().len(), 6);
}

#[test]
fn bad_line_messages_are_rate_limited() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.jsonl");
    std::fs::write(&path, "junk\n".repeat(500)).unwrap();
    // Named alone it would be refused as not a log: --format reads it anyway.
    let out = check(&[
        "--json",
        "--format",
        "native",
        "--max-bad-lines-shown",
        "5",
        path.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("skipped:").count(), 5);
    assert!(stderr.contains("495 more bad lines not shown"), "{stderr}");
    let (_, summary) = json_lines(&out);
    assert_eq!(summary["bad_lines"], 500);
}

#[test]
fn directories_and_stdin() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/bookstore");
    let out = check(&["--json", dir.to_str().unwrap()]);
    let (_, summary) = json_lines(&out);
    // The same turn id in three files is one turn: check spans inputs (rotated logs).
    assert!(summary["inputs"].as_u64().unwrap() >= 3);

    let mut child = bin()
        .args(["check", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(example("reset.jsonl")).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let (turns, _) = json_lines(&out);
    assert_eq!(finding_kinds(&turns[0]).len(), 5);
}

#[test]
fn prices_flag_layers_over_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"claude-sonnet-4-5": {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002}}"#,
    )
    .unwrap();
    let out = check(&[
        "--json",
        "--prices",
        prices.to_str().unwrap(),
        example("reset-late-exec.jsonl").to_str().unwrap(),
    ]);
    let (turns, _) = json_lines(&out);
    let a1 = &turns[0]["attempts"][1];
    // 1250 input (no cache price: cached billed as input) * 0.001 + 48 * 0.002
    let expected = 1250.0 * 0.001 + 48.0 * 0.002;
    assert!(
        (a1["cost_usd"].as_f64().unwrap() - expected).abs() < 1e-9,
        "{a1}"
    );
    let bad = check(&[
        "--prices",
        "/nonexistent.json",
        example("naive.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(2));
}

/// The article's failure-injection points: after a tool-call event, mid-word, before finish.
#[test]
fn retry_injection_examples() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/retries");
    let run = |name: &str| {
        let out = check(&["--json", dir.join(name).to_str().unwrap()]);
        assert!(out.status.success());
        json_lines(&out).0.remove(0)
    };
    // After a tool-call event, with early execution: the email goes out twice.
    let t = run("retry-after-tool-call.jsonl");
    assert_eq!(
        finding_kinds(&t),
        [
            "abandoned_tool_executed",
            "duplicate_effect",
            "early_execution",
            "early_execution",
            "unfinished_tool_executed"
        ]
    );
    assert_eq!(
        executed(&t),
        [(0, "call_A1".to_string()), (1, "call_B7".to_string())]
    );
    // Mid-word, with no renderer reset and no logged output: the user saw both texts.
    let t = run("retry-mid-word.jsonl");
    assert_eq!(finding_kinds(&t), ["spliced_text"]);
    assert_eq!(t["findings"][0]["evidence"], "no_reset");
    assert_eq!(executed(&t), [(1, "toolu_9".to_string())]);
    // Just before finish, with late execution: clean, one update, both attempts billed.
    let t = run("retry-before-finish.jsonl");
    assert!(finding_kinds(&t).is_empty());
    assert_eq!(executed(&t), [(1, "fc-2".to_string())]);
    assert_eq!(t["attempts"][0]["usage"]["source"], "estimated");
    assert_eq!(t["attempts"][0]["usage"]["input_tokens"], 950);
    assert_eq!(t["attempts"][1]["usage"]["source"], "reported");
    assert!(t["wasted_cost_usd"].as_f64().unwrap() > 0.0);
}

#[test]
fn validate_checks_a_config_without_running() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "include = [\"/var/log/agents/*.jsonl\"]\nidle_timeout_secs = 60\n",
    )
    .unwrap();
    let out = bin().arg("validate").arg(&good).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
    let typo = dir.path().join("typo.toml");
    std::fs::write(&typo, "idle_timeout = 60\n").unwrap();
    let out = bin().arg("validate").arg(&typo).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("idle_timeout"),
        "the message names the field"
    );
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "metrics_addr = \"everywhere\"\n").unwrap();
    let out = bin().arg("validate").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("metrics_addr"));
}

fn lookalike() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lookalike/agent-events-anthropic-names.jsonl")
}

/// The sentence that refuses a lookalike names the routes that do work.
fn assert_refused_sentence(stderr: &str, name: &str) {
    let line = stderr
        .lines()
        .find(|l| l.contains("not a format retryscope reads"))
        .unwrap_or_else(|| panic!("no refusal in stderr: {stderr}"));
    assert!(line.contains(name), "{line}");
    assert!(line.contains("Anthropic Messages"), "{line}");
    assert!(line.contains("`retryscope proxy`"), "{line}");
    assert!(line.contains("--otlp-listen"), "{line}");
    assert_eq!(
        stderr.matches("not a format retryscope reads").count(),
        1,
        "once per input, not per line: {stderr}"
    );
}

/// Issue 21, item 7: another agent's own event stream that borrows Anthropic's event names
/// (a clean run) was read as an Anthropic stream: 3 retries, `spliced_stream` x3 and a
/// `spliced_text` quoting the user's prompt, and `--fail-on high` exited 1. It is refused.
#[test]
fn a_lookalike_of_a_provider_stream_is_refused_with_exit_2() {
    let path = lookalike();
    let out = check(&["--json", "--fail-on", "high", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_refused_sentence(
        &String::from_utf8_lossy(&out.stderr),
        "agent-events-anthropic-names.jsonl",
    );
    let (turns, summary) = json_lines(&out);
    assert!(turns.is_empty(), "{turns:?}");
    assert_eq!(summary["retries"], 0);
    assert_eq!(summary["findings_by_severity"], serde_json::json!({}));
    assert_eq!(summary["bad_lines_by_reason"]["unknown_format"], 21);
    assert!(
        summary["refused_inputs"][0]
            .as_str()
            .is_some_and(|s| s.ends_with("agent-events-anthropic-names.jsonl")),
        "{summary}"
    );
}

/// In a folder, the lookalike is refused and the logs beside it are still checked.
#[test]
fn a_lookalike_in_a_folder_is_refused_and_the_other_logs_still_checked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(lookalike(), dir.path().join("agent-events.jsonl")).unwrap();
    std::fs::copy(example("naive.jsonl"), dir.path().join("naive.jsonl")).unwrap();
    let out = check(&["--json", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_refused_sentence(&String::from_utf8_lossy(&out.stderr), "agent-events.jsonl");
    let (_, summary) = json_lines(&out);
    assert_eq!(summary["inputs"], 2);
    assert_eq!(summary["turns"], 1, "the native log beside it: {summary}");
    assert_eq!(summary["findings"]["duplicate_effect"], 1);
    // The human report says it too.
    let out = check(&[dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("refused inputs"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
