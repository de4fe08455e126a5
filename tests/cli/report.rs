//! CLI tests of what a person reads from `retryscope check`: the exact text report (sorted by
//! severity, evidence in sentences, thousands separators, one cost format), `--summary`,
//! `--color`, `--max-attempts`, `--prices` layering, and the self-contained `--html` page.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
        .env_remove("NO_COLOR")
        .output()
        .expect("run retryscope")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("utf-8 stderr")
}

const NAIVE_REPORT: &str = "\
turn bookstore-1  model=claude-sonnet-4-5 provider=anthropic  status=completed  2 attempts, 1 retry  cost=$0.0031 wasted=$0.0014
  attempt 0  abandoned  error=ECONNRESET: connection reset by peer  text=42 chars  calls: issue_refund(c1)  executed: issue_refund(c1)  tokens 1,250 in / 26 out (estimated)  $0.0014
  attempt 1  completed (retry: connection_reset)  finish=tool_use  text=83 chars  calls: issue_refund(c7)  executed: issue_refund(c7)  tokens 1,250 in / 48 out (reported)  $0.0017
  CRITICAL abandoned_tool_executed: issue_refund (call c1) from attempt 0 ran and then a retry abandoned it: its effect happened for an answer the user never got
  CRITICAL duplicate_effect: issue_refund (call c7) from attempt 1 repeats the effect of call c1 from attempt 0 (same tool, same arguments): it happened twice
  HIGH     unfinished_tool_executed: issue_refund (call c1) from attempt 0 ran although that attempt never finished (a retry replaced it): the client did not hold the call until the finish event
  HIGH     spliced_text: the user saw attempt 0's abandoned text together with the retry's (the client's logged output holds both): 'Checking order ORD-7781. Refunding the dam'
  WARNING  early_execution: issue_refund (call c1) ran before attempt 0 finished: had the stream broken after it, the effect would stand for an abandoned answer
  WARNING  early_execution: issue_refund (call c7) ran before attempt 1 finished: had the stream broken after it, the effect would stand for an abandoned answer

";

const NAIVE_SUMMARY: &str = "\
summary
  inputs: 1  lines: 17  events: 17  bad lines: 0  unknown types: 0  unknown fields: 0
  turns: 1 (completed 1)  attempts: 2  retries: 1
  findings: critical: abandoned_tool_executed 1, duplicate_effect 1; high: unfinished_tool_executed 1, spliced_text 1; warning: early_execution 2
  cost: $0.0031  wasted on abandoned/failed attempts: $0.0014 (44.6%)
";

#[test]
fn text_report_is_sorted_by_severity_with_sentences_and_one_cost_format() {
    let path = example("naive.jsonl");
    let out = check(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    // Where the turn came from follows its header: file, first line, session.
    let (header, rest) = NAIVE_REPORT.split_once('\n').unwrap();
    let from = format!("  from {}:1, session sess-42", path.display());
    assert_eq!(
        stdout(&out),
        format!("{header}\n{from}\n{rest}{NAIVE_SUMMARY}")
    );
}

#[test]
fn summary_mode_prints_only_the_summary() {
    let out = check(&["--summary", example("naive.jsonl").to_str().unwrap()]);
    assert_eq!(stdout(&out), NAIVE_SUMMARY);
    // --summary still gates on findings.
    let out = check(&[
        "--summary",
        "--fail-on",
        "critical",
        example("naive.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn empty_input_says_turns_0_without_empty_parentheses() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let out = check(&["--summary", empty.to_str().unwrap()]);
    let text = stdout(&out);
    assert!(
        text.contains("\n  turns: 0  attempts: 0  retries: 0\n"),
        "{text}"
    );
}

#[test]
fn thousands_separators_in_counts() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.jsonl");
    let mut lines = String::new();
    for i in 0..1200 {
        lines.push_str(&format!("{{\"turn\":\"t{i}\",\"type\":\"turn_start\"}}\n"));
    }
    std::fs::write(&big, lines).unwrap();
    let text = stdout(&check(&["--summary", big.to_str().unwrap()]));
    assert!(text.contains("lines: 1,200  events: 1,200"), "{text}");
    assert!(text.contains("turns: 1,200 (incomplete 1,200)"), "{text}");
    assert!(text.contains("info: incomplete_turn 1,200"), "{text}");
}

#[test]
fn color_always_paints_severities_and_never_does_not() {
    let naive = example("naive.jsonl");
    let on = stdout(&check(&["--color", "always", naive.to_str().unwrap()]));
    assert!(
        on.contains("  \x1b[1;31mCRITICAL\x1b[0m abandoned_tool_executed:"),
        "{on:?}"
    );
    assert!(
        on.contains("\x1b[33mWARNING \x1b[0m early_execution:"),
        "{on:?}"
    );
    // Not a terminal: auto means no colour, and so does never.
    for args in [&["--color", "auto"][..], &["--color", "never"][..], &[][..]] {
        let mut all: Vec<&str> = args.to_vec();
        all.push(naive.to_str().unwrap());
        let off = stdout(&check(&all));
        assert!(!off.contains('\x1b'), "{args:?}: {off:?}");
    }
    let bad = check(&["--color", "sometimes", naive.to_str().unwrap()]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn max_attempts_counts_attempts_and_retry_cap_is_its_old_name() {
    let naive = example("naive.jsonl");
    for flag in ["--max-attempts", "--retry-cap"] {
        let text = stdout(&check(&[flag, "1", naive.to_str().unwrap()]));
        assert!(
            text.contains(
                "  WARNING  retry_cap_exceeded: attempt 1 is over the cap of 1 attempt (the turn has 2 attempts)\n"
            ),
            "{flag}: {text}"
        );
        let text = stdout(&check(&[flag, "2", naive.to_str().unwrap()]));
        assert!(!text.contains("retry_cap_exceeded"), "{flag}: {text}");
    }
}

#[test]
fn prices_file_layers_over_the_built_in_table() {
    let dir = tempfile::tempdir().unwrap();
    let prices = dir.path().join("prices.json");
    // Only another model: claude-sonnet-4-5 keeps its built-in price.
    std::fs::write(
        &prices,
        r#"{"my-own-model": {"input_cost_per_token": 0.001, "output_cost_per_token": 0.002}}"#,
    )
    .unwrap();
    let with = check(&[
        "--summary",
        "--prices",
        prices.to_str().unwrap(),
        example("naive.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(stdout(&with), NAIVE_SUMMARY);
}

#[test]
fn json_lines_carry_attempt_text_only_with_capture_content() {
    let naive = example("naive.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    let plain = stdout(&check(&["--json", naive.to_str().unwrap()]));
    let with_html = stdout(&check(&[
        "--json",
        "--html",
        html.to_str().unwrap(),
        naive.to_str().unwrap(),
    ]));
    for text in [&plain, &with_html] {
        assert!(!text.contains("text_prefix"), "{text}");
        assert!(!text.contains("output_prefix"), "{text}");
        assert!(!text.contains("\"timeline\""), "{text}");
    }
    let captured = stdout(&check(&[
        "--json",
        "--capture-content",
        naive.to_str().unwrap(),
    ]));
    assert!(
        captured.contains("\"text_prefix\":\"Checking order ORD-7781. Refunding the dam\""),
        "{captured}"
    );
}

fn html_of(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.html");
    let mut all = vec!["--summary", "--html", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = check(&all);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("HTML report written to"),
        "{}",
        stderr(&out)
    );
    std::fs::read_to_string(&path).unwrap()
}

#[test]
fn html_report_draws_the_bookstore_turn_self_contained() {
    let page = html_of(&[example("naive.jsonl").to_str().unwrap()]);
    // Self-contained: no URL anywhere, two script elements (the data and the code).
    assert!(!page.contains("http://") && !page.contains("https://"));
    assert_eq!(page.matches("<script").count(), 2);
    assert!(page.contains(r#"<section class="turn" id="t0" data-turn="bookstore-1">"#));
    assert!(page.contains(r#"<g class="lane lane-abandoned" data-attempt="0">"#));
    assert!(page.contains(r#"<g class="lane lane-completed" data-attempt="1">"#));
    assert!(page.contains(r#"<g class="exec exec-abandoned" data-attempt="0" data-call="c1">"#));
    assert!(page.contains(r#"<g class="exec" data-attempt="1" data-call="c7">"#));
    assert!(page.contains("cut: ECONNRESET: connection reset by peer"));
    // Tokens and cost per attempt, what the user saw, findings most severe first.
    assert!(page.contains("1,250 / 26 <span class=\"src\">estimated</span>"));
    assert!(page.contains("Checking order ORD-7781. Refunding the damChecking order"));
    let crit = page.find("<b>CRITICAL</b>").unwrap();
    let warn = page.find("<b>WARNING</b>").unwrap();
    assert!(crit < warn);
    assert!(page.contains("1 timeline drawn."));
}

#[test]
fn html_report_escapes_log_text() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("evil.jsonl");
    let evil_turn = "<img src=x onerror=alert(1)>";
    let lines = [
        serde_json::json!({"turn": evil_turn, "type": "turn_start", "ts": 1000, "model": "</script><b>m"}),
        serde_json::json!({"turn": evil_turn, "type": "text", "ts": 1100, "attempt": 0, "text": "</script><script>alert(2)</script>"}),
        serde_json::json!({"turn": evil_turn, "type": "tool_call", "ts": 1200, "attempt": 0, "id": "\"><svg onload=alert(3)>", "name": "<i>tool", "args": {}}),
        serde_json::json!({"turn": evil_turn, "type": "tool_exec", "ts": 1300, "attempt": 0, "id": "\"><svg onload=alert(3)>", "name": "<i>tool"}),
        serde_json::json!({"turn": evil_turn, "type": "retry", "ts": 1400, "attempt": 1, "reason": "<u>r"}),
        serde_json::json!({"turn": evil_turn, "type": "finish", "ts": 1500, "attempt": 1, "reason": "stop"}),
        serde_json::json!({"turn": evil_turn, "type": "turn_end", "ts": 1600}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&log, text).unwrap();
    let page = html_of(&[log.to_str().unwrap()]);
    for raw in [
        "<img src=x",
        "<script>alert(2)",
        "<svg onload",
        "<i>tool",
        "<u>r",
        "</script><b>",
    ] {
        assert!(!page.contains(raw), "unescaped {raw:?} in the page");
    }
    assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert_eq!(page.matches("<script").count(), 2);
    assert_eq!(page.matches("</script>").count(), 2);
}

#[test]
fn html_timelines_are_capped_and_say_how_many_were_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("many.jsonl");
    let mut text = String::new();
    for i in 0..230 {
        for (ty, extra) in [
            ("turn_start", ""),
            ("text", r#","attempt":0,"text":"a""#),
            ("retry", r#","attempt":1"#),
            ("finish", r#","attempt":1,"reason":"stop""#),
            ("turn_end", ""),
        ] {
            text.push_str(&format!(
                "{{\"turn\":\"t{i}\",\"type\":\"{ty}\",\"ts\":{}{extra}}}\n",
                1000 + i
            ));
        }
    }
    // One clean turn: in the table, never a timeline.
    text.push_str("{\"turn\":\"clean\",\"type\":\"finish\",\"attempt\":0,\"reason\":\"stop\"}\n");
    // The most severe turn comes last and still gets a timeline (retry-only turns make room).
    text.push_str(&std::fs::read_to_string(example("naive.jsonl")).unwrap());
    std::fs::write(&log, text).unwrap();
    let page = html_of(&[log.to_str().unwrap()]);
    assert!(
        page.contains(
            "200 timelines drawn; 31 turns with findings or retries left out (the 200 most severe are drawn)."
        ),
        "{}",
        &page[page.find("timeline-count").unwrap_or(0)..][..200]
    );
    assert_eq!(page.matches("<section class=\"turn\"").count(), 200);
    assert!(page.contains(r#"data-turn="bookstore-1">"#));
    // Most severe first: the bookstore turn's timeline leads.
    let first = page.find("<section class=\"turn\"").unwrap();
    let head = &page[first..first + 80];
    assert!(head.contains(r#"data-turn="bookstore-1">"#), "{head}");
    assert!(page.contains("[\"clean\",\"completed\""));
}

#[test]
fn html_into_a_missing_folder_fails_before_reading() {
    let out = check(&[
        "--html",
        "/nonexistent-dir/report.html",
        example("naive.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout(&out), "");
    assert_eq!(
        stderr(&out),
        "retryscope: error: cannot create the HTML report /nonexistent-dir/report.html: No such file or directory (os error 2)\n"
    );
}

#[test]
fn a_folder_contributes_its_logs_not_its_source_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let out = check(&["--summary", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("  inputs: 6  lines: 91  events: 91  bad lines: 0"));
    let base = dir.to_str().unwrap();
    // Every Rust source in the folder (the benchmarks come and go) is skipped, and counted;
    // the first five are named.
    fn sources(dir: &Path, into: &mut Vec<String>) {
        for p in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = p.path();
            if p.is_dir() {
                sources(&p, into);
            } else if p.extension().is_some_and(|x| x == "rs") {
                into.push(p.to_string_lossy().into_owned());
            }
        }
    }
    let mut skipped = Vec::new();
    sources(&dir, &mut skipped);
    skipped.sort();
    assert!(skipped.len() >= 9, "{skipped:?}");
    assert!(
        skipped[0].starts_with(&format!("{base}/bench_")),
        "{skipped:?}"
    );
    assert_eq!(
        stderr(&out),
        format!(
            "retryscope: skipped {} files in the given folders that do not look like logs (the \
             first line is neither a JSON object nor a server-sent event): {}, …\n",
            skipped.len(),
            skipped[..5].join(", ")
        )
    );
    // Named on the command line, a file that is not a log is refused (exit 2, the reason on
    // stderr) unless --format says what it is.
    let named = check(&["--summary", dir.join("gen_log.rs").to_str().unwrap()]);
    assert_eq!(named.status.code(), Some(2));
    assert!(
        stderr(&named).contains("does not look like a log"),
        "{}",
        stderr(&named)
    );
    let named = check(&[
        "--summary",
        "--format",
        "native",
        dir.join("gen_log.rs").to_str().unwrap(),
    ]);
    assert!(stdout(&named).contains("bad lines: "), "{}", stdout(&named));
    assert!(!stdout(&named).contains("bad lines: 0 "));
}

#[test]
fn gzip_logs_are_read_like_plain_ones() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let plain = std::fs::read(example("naive.jsonl")).unwrap();
    // A name without .gz: gzip is known by its magic bytes. Two members, as `cat a.gz b.gz`.
    let gz_path = dir.path().join("naive.log");
    let half = plain.len() / 2;
    let cut = half + plain[half..].iter().position(|&b| b == b'\n').unwrap() + 1;
    let mut bytes = Vec::new();
    for part in [&plain[..cut], &plain[cut..]] {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(part).unwrap();
        bytes.extend(gz.finish().unwrap());
    }
    std::fs::write(&gz_path, bytes).unwrap();
    let out = check(&["--summary", gz_path.to_str().unwrap()]);
    assert_eq!(stdout(&out), NAIVE_SUMMARY);
    // In a folder too.
    let out = check(&["--summary", dir.path().to_str().unwrap()]);
    assert_eq!(stdout(&out), NAIVE_SUMMARY);
    // And on stdin.
    let mut child = bin()
        .args(["check", "--summary", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let gz = std::fs::read(&gz_path).unwrap();
    child.stdin.take().unwrap().write_all(&gz).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out), NAIVE_SUMMARY);
}

/// Run `command` (a shell line) on a pseudo-terminal with `script`, returning what it printed.
fn on_a_terminal(command: &str, no_color: Option<&str>) -> String {
    let mut c = Command::new("script");
    c.args(["-qec", command, "/dev/null"]).env("TERM", "xterm");
    match no_color {
        Some(v) => c.env("NO_COLOR", v),
        None => c.env_remove("NO_COLOR"),
    };
    let out = c
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux script");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn on_a_terminal_severities_are_coloured_unless_no_color() {
    let cmd = format!(
        "{} check {}",
        env!("CARGO_BIN_EXE_retryscope"),
        example("naive.jsonl").display()
    );
    let coloured = on_a_terminal(&cmd, None);
    assert!(
        coloured.contains("\x1b[1;31mCRITICAL\x1b[0m"),
        "{coloured:?}"
    );
    let plain = on_a_terminal(&cmd, Some("1"));
    assert!(
        plain.contains("CRITICAL abandoned_tool_executed"),
        "{plain:?}"
    );
    assert!(!plain.contains('\x1b'), "{plain:?}");
    let forced = on_a_terminal(&format!("{cmd} --color never"), None);
    assert!(!forced.contains('\x1b'), "{forced:?}");
}

#[test]
fn timeline_axis_spans_the_attempts_not_a_stray_turn_time() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("stray.jsonl");
    // The turn_start's time is from another clock, months before the attempts.
    let far = 10_000_000_000i64;
    let lines = [
        serde_json::json!({"turn": "t", "type": "turn_start", "ts": 1000}),
        serde_json::json!({"turn": "t", "type": "text", "ts": far, "attempt": 0, "text": "a"}),
        serde_json::json!({"turn": "t", "type": "retry", "ts": far + 1000, "attempt": 1}),
        serde_json::json!({"turn": "t", "type": "finish", "ts": far + 2000, "attempt": 1, "reason": "stop"}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&log, text).unwrap();
    let page = html_of(&[log.to_str().unwrap()]);
    let lane = page
        .split(r#"<g class="lane lane-abandoned" data-attempt="0">"#)
        .nth(1)
        .unwrap();
    assert!(
        lane.contains(r#"<rect class="lane-bg" x="150.0""#),
        "{lane}"
    );
    assert!(
        page.contains(">+2 s</text>"),
        "the axis covers the attempts' 2 s"
    );
}
