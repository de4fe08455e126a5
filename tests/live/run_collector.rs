//! End-to-end tests of `retryscope run` as a real process: files on disk, real HTTP scrapes
//! of /metrics, kill -9 and restart, rotation while a writer appends, bad lines, stdin, SIGTERM.

use crate::run_harness;
use run_harness::*;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn bookstore_examples_show_up_in_a_real_scrape() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["naive.jsonl", "reset.jsonl", "reset-late-exec.jsonl"] {
        let text = std::fs::read_to_string(example(f)).unwrap();
        let renamed = text.replace("\"bookstore-1\"", &format!("\"{f}\""));
        std::fs::write(dir.path().join(f), renamed).unwrap();
    }
    let glob = format!("{}/*.jsonl", dir.path().display());
    let c = Collector::start(&[&glob, "--findings-out", ""]);
    let m = c.wait_until(|m| sum(m, "retryscope_turns_total{") >= 3.0, "three turns");
    let labels = "model=\"claude-sonnet-4-5\",provider=\"anthropic\"";
    assert_eq!(
        get(
            &m,
            &format!("retryscope_turns_total{{agent=\"help-desk\",{labels},status=\"completed\"}}")
        ),
        3.0
    );
    assert_eq!(
        get(
            &m,
            &format!(
                "retryscope_retries_total{{agent=\"help-desk\",{labels},reason=\"connection_reset\"}}"
            )
        ),
        3.0
    );
    assert_eq!(
        get(
            &m,
            &format!("retryscope_attempts_total{{{labels},outcome=\"abandoned\"}}")
        ),
        3.0
    );
    assert_eq!(
        get(
            &m,
            "retryscope_findings_total{agent=\"help-desk\",kind=\"abandoned_tool_executed\",severity=\"critical\",tool=\"issue_refund\"}"
        ),
        2.0,
        "naive and reset ran the abandoned refund"
    );
    assert_eq!(
        get(
            &m,
            "retryscope_findings_total{agent=\"help-desk\",kind=\"duplicate_effect\",severity=\"critical\",tool=\"issue_refund\"}"
        ),
        2.0
    );
    assert_eq!(
        get(
            &m,
            "retryscope_findings_total{agent=\"help-desk\",kind=\"spliced_text\",severity=\"high\",tool=\"\"}"
        ),
        1.0
    );
    assert_eq!(
        get(
            &m,
            "retryscope_tool_executions_total{tool=\"issue_refund\",attempt_outcome=\"completed\"}"
        ),
        3.0
    );
    assert_eq!(
        get(
            &m,
            "retryscope_tool_executions_total{tool=\"issue_refund\",attempt_outcome=\"abandoned\"}"
        ),
        2.0
    );
    let abandoned_cost: f64 = m
        .iter()
        .filter(|(k, _)| {
            k.starts_with("retryscope_billed_cost_usd_total{")
                && k.contains("attempt_outcome=\"abandoned\"")
        })
        .map(|(_, v)| v)
        .sum();
    assert!(abandoned_cost > 0.0);
    assert_eq!(
        get(&m, "retryscope_events_read_total{source=\"file\"}"),
        52.0
    );
    assert_eq!(get(&m, "retryscope_files_watched"), 3.0);
    let status = c.terminate();
    assert!(status.success(), "SIGTERM exits 0: {status:?}");
}

#[test]
fn kill_9_and_restart_gives_the_same_metrics_and_findings() {
    let lines = bookstore_turns(60);
    // Uninterrupted reference run.
    let ref_dir = tempfile::tempdir().unwrap();
    let ref_log = ref_dir.path().join("agent.jsonl");
    append(&ref_log, &lines);
    let ref_findings = ref_dir.path().join("findings.jsonl");
    let c = Collector::start(&[
        ref_log.to_str().unwrap(),
        "--findings-out",
        ref_findings.to_str().unwrap(),
        "--idle-timeout-secs",
        "3600",
    ]);
    let reference = c.wait_until(
        |m| sum(m, "retryscope_turns_total{") >= 60.0,
        "reference run",
    );
    assert!(c.terminate().success());

    // Interrupted run: write half, kill -9 after a checkpoint, write the rest, restart.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.jsonl");
    let data = dir.path().join("data");
    let findings = dir.path().join("findings.jsonl");
    let args = [
        log.to_str().unwrap().to_string(),
        "--data-dir".into(),
        data.to_str().unwrap().into(),
        "--findings-out".into(),
        findings.to_str().unwrap().into(),
        "--idle-timeout-secs".into(),
        "3600".into(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let half = lines.len() / 2 + 7; // mid-turn
    append(&log, &lines[..half]);
    let c = Collector::start(&args);
    c.wait_until(
        |m| {
            get(m, "retryscope_events_read_total{source=\"file\"}") >= half as f64
                && get(m, "retryscope_checkpoint_writes_total") >= 2.0
        },
        "half read and checkpointed",
    );
    c.kill9();
    append(&log, &lines[half..]);
    let c = Collector::start(&args);
    let resumed = c.wait_until(|m| sum(m, "retryscope_turns_total{") >= 60.0, "resumed run");
    std::thread::sleep(Duration::from_millis(500));
    let resumed_final = c.scrape().unwrap();
    assert!(c.terminate().success());
    assert_eq!(turn_level(&resumed), turn_level(&reference));
    assert_eq!(
        turn_level(&resumed_final),
        turn_level(&reference),
        "nothing counted twice later"
    );
    let ref_text = std::fs::read_to_string(&ref_findings).unwrap();
    let text = std::fs::read_to_string(&findings).unwrap();
    assert_eq!(text.lines().count(), ref_text.lines().count());
    let mut a: Vec<&str> = text.lines().collect();
    let mut b: Vec<&str> = ref_text.lines().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "same findings, each exactly once");
}

#[test]
fn rename_rotation_and_truncation_while_writing_lose_and_duplicate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.log");
    let lines = bookstore_turns(90);
    let c = Collector::start(&[
        &format!("{}/agent.log*", dir.path().display()),
        "--findings-out",
        "",
        "--idle-timeout-secs",
        "3600",
    ]);
    let chunk = lines.len() / 3;
    append(&log, &lines[..chunk]);
    c.wait_until(
        |m| get(m, "retryscope_events_read_total{source=\"file\"}") >= chunk as f64,
        "first third",
    );
    // Rename rotation: the writer goes on in a new file.
    std::fs::rename(&log, dir.path().join("agent.log.1")).unwrap();
    append(&log, &lines[chunk..2 * chunk]);
    c.wait_until(
        |m| get(m, "retryscope_events_read_total{source=\"file\"}") >= (2 * chunk) as f64,
        "second third",
    );
    // copytruncate: copy aside (not matched by the glob) and truncate in place.
    std::fs::copy(&log, dir.path().join("copy.old")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    append(&log, &lines[2 * chunk..]);
    let m = c.wait_until(|m| sum(m, "retryscope_turns_total{") >= 90.0, "all turns");
    assert_eq!(
        get(&m, "retryscope_events_read_total{source=\"file\"}"),
        lines.len() as f64
    );
    assert_eq!(sum(&m, "retryscope_turns_total{"), 90.0);
    assert_eq!(get(&m, "retryscope_file_rotations_total"), 1.0);
    assert_eq!(get(&m, "retryscope_file_truncations_total"), 1.0);
    assert_eq!(
        get(
            &m,
            "retryscope_findings_total{agent=\"help-desk\",kind=\"duplicate_effect\",severity=\"critical\",tool=\"issue_refund\"}"
        ),
        60.0
    );
    assert!(c.terminate().success());
}

#[test]
fn malformed_huge_and_non_utf8_lines_are_counted_and_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("agent.jsonl");
    let good = bookstore_turns(3);
    let mut f = std::fs::File::create(&log).unwrap();
    f.write_all(b"{broken json\n").unwrap();
    f.write_all(b"{\"turn\":\"x\",\"type\":\"text\",\"text\":\"\xc3\x28\"}\n")
        .unwrap();
    f.write_all(&vec![b'x'; 3 << 20]).unwrap();
    f.write_all(b"\n{\"turn\":\"x\",\"type\":\"quantum_event\"}\n")
        .unwrap();
    for l in &good {
        f.write_all(l.as_bytes()).unwrap();
        f.write_all(b"\n").unwrap();
    }
    drop(f);
    let c = Collector::start(&[log.to_str().unwrap(), "--findings-out", ""]);
    let m = c.wait_until(|m| sum(m, "retryscope_turns_total{") >= 3.0, "good turns");
    assert_eq!(
        get(
            &m,
            "retryscope_bad_lines_total{source=\"file\",reason=\"invalid_json\"}"
        ),
        1.0
    );
    assert_eq!(
        get(
            &m,
            "retryscope_bad_lines_total{source=\"file\",reason=\"invalid_utf8\"}"
        ),
        1.0
    );
    assert_eq!(
        get(
            &m,
            "retryscope_bad_lines_total{source=\"file\",reason=\"too_long\"}"
        ),
        1.0
    );
    assert_eq!(
        get(&m, "retryscope_unknown_events_total{source=\"file\"}"),
        1.0
    );
    assert!(c.terminate().success());
}

#[test]
fn stdin_source_closes_turns_at_end_of_input() {
    let port = free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args([
            "run",
            "-",
            "--exit-on-eof",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let input = std::fs::read(example("naive.jsonl")).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let findings: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("findings are JSON lines"))
        .collect();
    let mut kinds: Vec<&str> = findings
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    assert_eq!(
        kinds,
        [
            "abandoned_tool_executed",
            "duplicate_effect",
            "early_execution",
            "early_execution",
            "spliced_text",
            "unfinished_tool_executed"
        ]
    );
}

#[test]
fn demo_produces_metrics_within_seconds() {
    let c = Collector::start(&[
        "--demo",
        "--findings-out",
        "",
        "--demo-turns-per-sec",
        "50",
        "--idle-timeout-secs",
        "1",
    ]);
    let m = c.wait_until(
        |m| sum(m, "retryscope_turns_total{") >= 10.0 && sum(m, "retryscope_retries_total{") >= 1.0,
        "demo turns and retries",
    );
    assert!(get(&m, "retryscope_events_read_total{source=\"demo\"}") > 0.0);
    assert_eq!(sum(&m, "retryscope_bad_lines_total{"), 0.0);
    assert!(c.terminate().success());
}

#[test]
fn provider_streams_are_detected_per_file_while_tailing() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers");
    std::fs::copy(
        fixtures.join("anthropic/spliced-message-start.chunks.txt"),
        dir.path().join("anthropic.log"),
    )
    .unwrap();
    std::fs::copy(example("reset.jsonl"), dir.path().join("native.log")).unwrap();
    let glob = format!("{}/*.log", dir.path().display());
    let c = Collector::start(&[&glob, "--findings-out", "", "--idle-timeout-secs", "1"]);
    let m = c.wait_until(|m| sum(m, "retryscope_turns_total{") >= 2.0, "both turns");
    assert_eq!(
        get(
            &m,
            "retryscope_findings_total{agent=\"unknown\",kind=\"spliced_stream\",severity=\"high\",tool=\"\"}"
        ),
        1.0,
        "the spliced Anthropic stream was decoded as Anthropic"
    );
    assert_eq!(
        get(
            &m,
            "retryscope_findings_total{agent=\"help-desk\",kind=\"duplicate_effect\",severity=\"critical\",tool=\"issue_refund\"}"
        ),
        1.0,
        "the native file beside it still decodes as native"
    );
    assert_eq!(sum(&m, "retryscope_bad_lines_total{"), 0.0);
    assert!(c.terminate().success());
}

/// Regression: gemini-cli events held for the session join were not in the checkpoint, whose
/// file offset was already past them, so a kill -9 before the session went quiet lost them
/// (and their findings) for good.
#[test]
fn kill_9_while_gemini_cli_events_are_held_for_the_join_loses_none() {
    let recording = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents/gemini-cli/after-tool-reset/telemetry.log");
    let lines = std::fs::read_to_string(&recording).unwrap().lines().count() as f64;
    let run_args = |dir: &Path, data: bool| -> Vec<String> {
        let log = dir.join("telemetry.log");
        if !log.exists() {
            std::fs::copy(&recording, &log).unwrap();
        }
        let mut args = vec![
            log.to_str().unwrap().to_string(),
            "--findings-out".into(),
            dir.join("findings.jsonl").to_str().unwrap().into(),
            // Turns close at once when idle (by event time: the recording is old), so what
            // the close raises comes out in every run alike, whatever the recording's age.
            "--idle-timeout-secs".into(),
            "1".into(),
        ];
        if data {
            args.extend([
                "--data-dir".into(),
                dir.join("data").to_str().unwrap().into(),
            ]);
        }
        args
    };
    let read_all = |m: &BTreeMap<String, f64>| {
        get(m, "retryscope_events_read_total{source=\"file\"}") >= lines
    };

    // Reference: read it all, then stop (which correlates whatever is held).
    let ref_dir = tempfile::tempdir().unwrap();
    let args = run_args(ref_dir.path(), false);
    let c = Collector::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    c.wait_until(read_all, "reference read");
    assert!(c.terminate().success());
    let ref_text = std::fs::read_to_string(ref_dir.path().join("findings.jsonl")).unwrap();
    assert_eq!(
        ref_text.lines().count(),
        2,
        "the recording has two findings"
    );

    // Read it all, take a checkpoint while the session's events are still held (it has not
    // been quiet for long yet: no finding), kill -9, restart.
    let dir = tempfile::tempdir().unwrap();
    let args = run_args(dir.path(), true);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let c = Collector::start(&args);
    let m = c.wait_until(read_all, "file read");
    let written = get(&m, "retryscope_checkpoint_writes_total");
    let m = c.wait_until(
        |m| get(m, "retryscope_checkpoint_writes_total") > written,
        "a checkpoint after the file was read",
    );
    assert_eq!(
        sum(&m, "retryscope_findings_total{"),
        0.0,
        "the events are still held when the checkpoint is taken"
    );
    c.kill9();
    let c = Collector::start(&args);
    // The restored events are released once the session is quiet again.
    c.wait_until(
        |m| sum(m, "retryscope_findings_total{") >= 2.0,
        "held events correlated after the restart",
    );
    std::thread::sleep(Duration::from_millis(1500));
    let m = c.scrape().unwrap();
    assert_eq!(sum(&m, "retryscope_findings_total{"), 2.0, "nothing twice");
    assert_eq!(
        get(&m, "retryscope_events_read_total{source=\"file\"}"),
        lines
    );
    assert!(c.terminate().success());
    let text = std::fs::read_to_string(dir.path().join("findings.jsonl")).unwrap();
    let mut a: Vec<&str> = text.lines().collect();
    let mut b: Vec<&str> = ref_text.lines().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b, "the same findings, each exactly once");
}

/// A stream's decoder state is in the checkpoint: real agents' outputs (Codex's `exec
/// --json`, Claude Code's stream-json, each recorded with a cut after a tool ran), written
/// half, `run` killed -9 after a checkpoint, the rest written, restarted: the findings of a
/// run that never stopped. Before, the restarted decoder started afresh: Codex's findings
/// went to a turn named `codex` (the thread's id is on its first line).
#[test]
fn kill_9_half_way_through_an_agents_output_resumes_its_decoder() {
    let agents = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents");
    for (run, file) in [
        ("codex/after-tool-reset", "exec.jsonl"),
        ("claude-code/after-tool-reset", "stream.jsonl"),
    ] {
        let text = std::fs::read_to_string(agents.join(run).join(file)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let n = lines.len() as f64;
        let run_args = |dir: &Path, data: bool| -> Vec<String> {
            let mut args = vec![
                dir.join(file).to_str().unwrap().to_string(),
                "--findings-out".into(),
                dir.join("findings.jsonl").to_str().unwrap().into(),
                // The turns end by their own events; none may time out while `run` is down.
                "--idle-timeout-secs".into(),
                "3600".into(),
            ];
            if data {
                args.extend([
                    "--data-dir".into(),
                    dir.join("data").to_str().unwrap().into(),
                ]);
            }
            args
        };
        let read = |k: f64| {
            move |m: &BTreeMap<String, f64>| {
                get(m, "retryscope_events_read_total{source=\"file\"}") >= k
            }
        };
        // Reference: all of it, then a clean stop (which closes what is open).
        let ref_dir = tempfile::tempdir().unwrap();
        append(&ref_dir.path().join(file), &lines);
        let args = run_args(ref_dir.path(), false);
        let c = Collector::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        c.wait_until(read(n), "reference read");
        std::thread::sleep(Duration::from_millis(1500));
        assert!(c.terminate().success());
        let reference =
            std::fs::read_to_string(ref_dir.path().join("findings.jsonl")).unwrap_or_default();
        assert!(!reference.is_empty(), "{run}: the recording has findings");

        let dir = tempfile::tempdir().unwrap();
        let half = lines.len() / 2;
        append(&dir.path().join(file), &lines[..half]);
        let args = run_args(dir.path(), true);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let c = Collector::start(&args);
        let m = c.wait_until(read(half as f64), "half read");
        let written = get(&m, "retryscope_checkpoint_writes_total");
        c.wait_until(
            |m| get(m, "retryscope_checkpoint_writes_total") > written,
            "a checkpoint after the half was read",
        );
        c.kill9();
        append(&dir.path().join(file), &lines[half..]);
        let c = Collector::start(&args);
        c.wait_until(read(n), "the rest read");
        std::thread::sleep(Duration::from_millis(1500));
        assert!(c.terminate().success());
        let text = std::fs::read_to_string(dir.path().join("findings.jsonl")).unwrap();
        assert_eq!(
            untimed(text.lines()),
            untimed(reference.lines()),
            "{run}: the same findings, each exactly once"
        );
    }
}

/// Issue 21, item 7: a stream that borrows Anthropic's event names without its shape (another
/// agent's own event log) is refused by `run`'s auto-detection: its lines are counted as
/// `unknown_format`, the refusal is logged once as an error naming the proxy and OTLP, and the
/// native log beside it is still read.
#[test]
fn a_lookalike_stream_is_refused_while_others_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/lookalike/agent-events-anthropic-names.jsonl");
    std::fs::copy(&fixture, dir.path().join("agent-events.log")).unwrap();
    std::fs::copy(example("reset.jsonl"), dir.path().join("native.log")).unwrap();
    let glob = format!("{}/*.log", dir.path().display());
    let stderr = dir.path().join("stderr.txt");
    let c = Collector::start_logging(
        &[&glob, "--findings-out", "", "--idle-timeout-secs", "1"],
        &stderr,
    );
    let m = c.wait_until(
        |m| {
            sum(m, "retryscope_turns_total{") >= 1.0
                && m.get("retryscope_bad_lines_total{source=\"file\",reason=\"unknown_format\"}")
                    == Some(&21.0)
        },
        "the native turn and the refused stream's lines",
    );
    assert_eq!(
        get(
            &m,
            "retryscope_findings_total{agent=\"help-desk\",kind=\"duplicate_effect\",severity=\"critical\",tool=\"issue_refund\"}"
        ),
        1.0,
        "the native file beside it still decodes"
    );
    assert_eq!(
        sum(&m, "retryscope_turns_total{"),
        1.0,
        "no turn from the lookalike"
    );
    for kind in ["spliced_stream", "spliced_text"] {
        // any agent: the label comes first
        let found: f64 = m
            .iter()
            .filter(|(k, _)| {
                k.starts_with("retryscope_findings_total{")
                    && k.contains(&format!("kind=\"{kind}\""))
            })
            .map(|(_, v)| v)
            .sum();
        assert_eq!(found, 0.0, "{kind}");
    }
    assert!(c.terminate().success());
    let log = std::fs::read_to_string(&stderr).unwrap();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("not a format retryscope reads"))
        .collect();
    assert_eq!(refusals.len(), 1, "{log}");
    assert!(refusals[0].contains("agent-events.log"), "{log}");
    assert!(refusals[0].contains("retryscope proxy") && refusals[0].contains("--otlp-listen"));
}
