//! Issue 11 regressions for `retryscope check` as a real process: terminal injection, symlink
//! loops, unbounded open turns, turn ids reused across files, inputs with no events.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .arg("check")
        .args(args)
        .output()
        .expect("run retryscope check")
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples/bookstore")
        .join(name)
}

fn summary(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().expect("a summary line");
    serde_json::from_str::<Value>(last).expect("valid JSON")["summary"].clone()
}

/// Bytes a terminal would act on: C0 controls except newline, DEL, and C1 controls.
fn terminal_controls(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter(|c| (c.is_control() && *c != '\n') || ('\u{80}'..='\u{9f}').contains(c))
        .map(|c| format!("{:?}", c))
        .collect()
}

/// A retried turn whose every string field carries terminal controls, modelled on the
/// bookstore example with its strings replaced.
fn hostile_log() -> String {
    let h = "\u{1b}]0;pwned\u{7}\r\u{8}\u{0}\u{9b}2J\u{1b}[2J";
    let s = |v: &str| serde_json::to_string(&format!("{v}{h}")).unwrap();
    let t = s("turn");
    [
        format!(r#"{{"turn":{t},"type":"turn_start","ts":1000,"model":{},"provider":{},"agent":{},"session":{}}}"#, s("model"), s("provider"), s("agent"), s("session")),
        format!(r#"{{"turn":{t},"type":"attempt_start","ts":1001,"attempt":0,"request_id":{}}}"#, s("req")),
        format!(r#"{{"turn":{t},"type":"tool_call","ts":1002,"attempt":0,"id":{},"name":{},"args":{{"k":{}}}}}"#, s("c1"), s("tool"), s("v")),
        format!(r#"{{"turn":{t},"type":"tool_exec","ts":1003,"attempt":0,"id":{},"name":{},"args":{{"k":{}}},"status":{}}}"#, s("c1"), s("tool"), s("v"), s("ok")),
        format!(r#"{{"turn":{t},"type":"error","ts":1004,"attempt":0,"message":{},"code":{}}}"#, s("msg"), s("code")),
        format!(r#"{{"turn":{t},"type":"retry","ts":1005,"attempt":1,"reason":{}}}"#, s("reason")),
        format!(r#"{{"turn":{t},"type":"tool_call","ts":1006,"attempt":1,"id":{},"name":{},"args":{{"k":{}}}}}"#, s("c2"), s("tool"), s("v")),
        format!(r#"{{"turn":{t},"type":"tool_exec","ts":1007,"attempt":1,"id":{},"name":{},"args":{{"k":{}}},"effect_key":{}}}"#, s("c2"), s("tool"), s("v"), s("key")),
        format!(r#"{{"turn":{t},"type":"finish","ts":1008,"attempt":1,"reason":{}}}"#, s("finish")),
        format!(r#"{{"turn":{t},"type":"turn_end","ts":1009,"status":{}}}"#, s("status")),
        format!(r#"{{"turn":{t},"type":{},"ts":1010}}"#, s("bogus_type")),
        format!(r#"{{"turn":{t},"type":"usage","ts":1010,"input_tokens":{}}}"#, s("many")),
    ]
    .join("\n")
        + "\n"
}

/// Issue 11.1: the text report and stderr printed ESC, BEL, CR, BS, NUL from log fields
/// (and file names) verbatim.
#[test]
fn terminal_injection_in_the_check_report_is_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent\u{1b}]0;title\u{7}.jsonl");
    std::fs::write(&path, hostile_log()).unwrap();
    let missing = dir.path().join("gone\u{1b}[2J.jsonl");
    let out = check(&["-v", path.to_str().unwrap(), missing.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("turn turn\\x1b]0;pwned\\x07\\r\\x08\\x00"),
        "{stdout}"
    );
    for s in [
        "model", "provider", "tool", "c1", "reason", "finish", "msg", "code",
    ] {
        assert!(
            stdout.contains(&format!("{s}\\x1b]0;pwned")),
            "{s} shown escaped: {stdout}"
        );
    }
    assert_eq!(
        terminal_controls(&out.stdout),
        Vec::<String>::new(),
        "{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("gone\\x1b[2J"), "{stderr}");
    assert_eq!(
        terminal_controls(&out.stderr),
        Vec::<String>::new(),
        "{stderr}"
    );
    // JSON output is JSON: C0 controls are escaped by the encoder (C1 ones are valid JSON
    // text and stay as they are, for machines), and it parses.
    let out = check(&["--json", path.to_str().unwrap()]);
    assert!(!out.stdout.iter().any(|b| *b < 0x20 && *b != b'\n'));
    assert_eq!(summary(&out)["turns"], 1);
}

/// Issue 11.5: `check DIR` followed symlinked directories with no loop detection: `sub/up ->
/// ..` hung it, `self -> .` read one file 41 times.
#[test]
fn symlink_loops_in_check_dir_terminate_and_read_each_file_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(example("naive.jsonl"), dir.path().join("naive.jsonl")).unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("..", dir.path().join("sub/up")).unwrap();
    std::os::unix::fs::symlink(".", dir.path().join("self")).unwrap();
    std::os::unix::fs::symlink("naive.jsonl", dir.path().join("alias.jsonl")).unwrap();
    let d = dir.path().to_str().unwrap();
    let out = check(&["--json", d, d]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = summary(&out);
    assert_eq!(s["inputs"], 1, "{s}");
    assert_eq!(s["lines"], 17, "{s}");
}

/// Issue 11.6: `check` kept every unfinished turn in memory (1M turns took 1.45 GB); `run`
/// capped them.
#[test]
fn check_bounds_open_turns_and_reports_evictions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("open.jsonl");
    let log: String = (0..1000)
        .map(|i| {
            format!(
                "{{\"turn\":\"t{i}\",\"type\":\"text\",\"ts\":{i},\"attempt\":0,\"text\":\"x\"}}\n"
            )
        })
        .collect();
    std::fs::write(&path, log).unwrap();
    let p = path.to_str().unwrap();
    let out = check(&["--json", "--single-thread", "--max-open-turns", "100", p]);
    let s = summary(&out);
    assert_eq!(s["turns"], 1000, "every turn is still reported: {s}");
    assert!(s["evicted_turns"].as_u64().unwrap() >= 900, "{s}");
    let out = check(&["--max-open-turns", "100", p]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("open turns were evicted"), "{text}");
}

/// Issue 11.9: the three bookstore files reuse one turn id, and `check examples/bookstore/`
/// reported one turn; which findings survived depended on the order of the files.
#[test]
fn turn_ids_reused_across_files_are_new_turns_not_dropped() {
    let files = ["naive.jsonl", "reset.jsonl", "reset-late-exec.jsonl"].map(example);
    let each: Vec<Value> = files
        .iter()
        .map(|f| summary(&check(&["--json", f.to_str().unwrap()])))
        .collect();
    let dir = example("");
    let all = summary(&check(&["--json", dir.to_str().unwrap()]));
    assert_eq!(all["turns"], 3, "{all}");
    assert_eq!(all["reused_turn_ids"], 2, "{all}");
    assert_eq!(all["after_close_events"], 0, "{all}");
    let total = |k: &str| -> u64 {
        each.iter()
            .map(|s| s["findings"][k].as_u64().unwrap_or(0))
            .sum()
    };
    for kind in [
        "abandoned_tool_executed",
        "duplicate_effect",
        "early_execution",
        "spliced_text",
    ] {
        assert_eq!(all["findings"][kind], total(kind), "{kind}: {all}");
    }
    // Order of the files does not matter.
    let reversed: Vec<&str> = files.iter().rev().map(|f| f.to_str().unwrap()).collect();
    let mut args = vec!["--json"];
    args.extend(reversed);
    let rev = summary(&check(&args));
    assert_eq!(rev["findings"], all["findings"]);
    let text = String::from_utf8_lossy(&check(&[dir.to_str().unwrap()]).stdout).into_owned();
    assert!(text.contains("warning: 2 turn ids"), "{text}");
}

/// Issue 11.9: `check` exited 0 when no input held a single event, so a CI gate pointed at
/// the wrong path passed green.
#[test]
fn inputs_with_no_events_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let empty_file = dir.path().join("empty.jsonl");
    std::fs::write(&empty_file, b"").unwrap();
    let text_file = dir.path().join("notes.txt");
    std::fs::write(&text_file, b"just some\nplain text\n").unwrap();
    let empty_dir = dir.path().join("nothing");
    std::fs::create_dir(&empty_dir).unwrap();
    for (p, why) in [
        (&empty_file, "no events"),
        // Named on the command line, plain text is refused before it is read (issue 23).
        (&text_file, "does not look like a log"),
        (&empty_dir, "no events"),
    ] {
        let out = check(&[p.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", p.display());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(why),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        check(&[example("naive.jsonl").to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
}

/// Issue 11.8: an `error` event's message and code went into `check --json` (and OTLP
/// attributes), and bad-line warnings echoed string values from the line.
#[test]
fn content_stays_in_the_process_unless_captured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"turn":"t","type":"error","ts":1,"attempt":0,"message":"SECRET-MESSAGE","code":"SECRET-CODE"}"#,
            "\n",
            r#"{"turn":"t","type":"usage","ts":2,"attempt":"SECRET-VALUE","input_tokens":1}"#,
            "\n",
            r#"{"turn":"t","type":"tool_exec","ts":3,"id":"c","name":"n","effect":"SECRET-ENUM"}"#,
            "\n",
        ),
    )
    .unwrap();
    let p = path.to_str().unwrap();
    let out = check(&["--json", p]);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!all.contains("SECRET"), "{all}");
    let turn: Value = serde_json::from_str(all.lines().next().unwrap()).unwrap();
    assert_eq!(turn["attempts"][0]["error_chars"], 27, "{turn}");
    assert!(all.contains("invalid type: string \"<12 chars>\""), "{all}");
    // Opted in, the error text is there.
    let out = check(&["--json", "--capture-content", p]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("SECRET-CODE: SECRET-MESSAGE"));
}

/// Issue 11.7: one usage event with u64::MAX tokens added $2.5e14 to the cost, a `ts` of
/// i64::MIN/MAX added 1.8e16 s to durations, attempt 4294967295 wrapped.
#[test]
fn numbers_outside_sane_ranges_are_counted_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.jsonl");
    let good = std::fs::read_to_string(example("naive.jsonl")).unwrap();
    let hostile = [
        r#"{"turn":"bookstore-1","type":"usage","attempt":1,"model":"claude-sonnet-4-5","input_tokens":18446744073709551615,"output_tokens":1}"#,
        r#"{"turn":"bookstore-1","type":"text","ts":-9223372036854775808,"attempt":1,"text":"x"}"#,
        r#"{"turn":"bookstore-1","type":"text","ts":9223372036854775807,"attempt":1,"text":"x"}"#,
        r#"{"turn":"bookstore-1","type":"retry","attempt":4294967295}"#,
    ];
    let mut lines: Vec<&str> = good.lines().collect();
    let end = lines.pop().unwrap();
    lines.extend(hostile);
    lines.push(end);
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let base = summary(&check(&[
        "--json",
        example("naive.jsonl").to_str().unwrap(),
    ]));
    let s = summary(&check(&["--json", path.to_str().unwrap()]));
    assert_eq!(s["bad_lines_by_reason"]["invalid_value"], 4, "{s}");
    assert_eq!(s["cost_usd"], base["cost_usd"], "{s}");
    assert_eq!(s["attempts"], 2, "{s}");
    assert_eq!(s["findings"], base["findings"], "{s}");
}
