//! `run --workers 1` and `--workers 2` on non-native streams, each read whole by one worker
//! (issue 22): providers' SSE, agents' own files, a gemini-cli session's telemetry and
//! stream-json, OTLP captures through the receiver (alone, and joined with a tailed
//! stream-json), and stdin to its end, against `check` and against each other.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::assert_close;
use super::run_harness::*;
use crate::otlp_post;

/// The committed OTLP/JSON captures of `agent`'s `otlp-after-tool-reset` run: (path, body).
fn otlp_capture(agent: &str) -> Vec<(String, Vec<u8>)> {
    otlp_post::capture_in(&fixture(&format!(
        "tests/fixtures/agents/{agent}/otlp-after-tool-reset"
    )))
    .into_iter()
    .map(|(signal, body)| (format!("/v1/{signal}"), body))
    .collect()
}

/// POST a JSON body to the OTLP receiver; the HTTP status.
fn post_json(port: u16, path: &str, body: &[u8]) -> u16 {
    let json = [("Content-Type", "application/json")];
    otlp_post::post(port, path, &json, body, false).0
}

/// Wait until `c` has read `want(m)` and its turn-level series have not moved for 2 s (turns
/// close after the 2 s idle timeout, joined sessions after the 10 s quiet period).
fn settled(
    c: &Collector,
    what: &str,
    want: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, f64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut last = BTreeMap::new();
    let mut since = std::time::Instant::now();
    loop {
        if let Some(m) = c.scrape() {
            let now = turn_level(&m);
            if now != last {
                last = now;
                since = std::time::Instant::now();
            } else if want(&m) && since.elapsed() >= Duration::from_secs(2) {
                return m;
            }
        }
        assert!(std::time::Instant::now() < deadline, "{what}: not settled");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 22: every worker decoded every non-native stream; now each is read whole by one
/// worker (by a hash of its name; the gemini-cli join's streams by one designated worker).
/// What one worker and `check` find, two find too, from the same files and OTLP records.
#[test]
fn non_native_streams_read_by_one_worker_each_give_one_workers_and_checks_findings() {
    let dir = tempfile::tempdir().unwrap();
    // Files: providers' SSE (one from the shared fixtures when they are there), agents' own
    // formats, and gemini-cli's telemetry outfile and stream-json of one session (joined).
    let mut files = vec![
        (
            "chat.sse",
            fixture("tests/fixtures/providers/openai-chat/id-change-splice.sse"),
        ),
        (
            "anthropic.sse",
            fixture("tests/fixtures/providers/anthropic/duplicate-message-start.sse"),
        ),
        (
            "telemetry.log",
            fixture("tests/fixtures/agents/gemini-cli/after-tool-reset/telemetry.log"),
        ),
        (
            "stream.jsonl",
            fixture("tests/fixtures/agents/gemini-cli/after-tool-reset/stream.jsonl"),
        ),
        (
            "claude.stream.jsonl",
            fixture("tests/fixtures/agents/claude-code/after-tool-reset/stream.jsonl"),
        ),
        (
            "exec.jsonl",
            fixture("tests/fixtures/agents/codex/after-tool-reset/exec.jsonl"),
        ),
        (
            "acp.jsonl",
            fixture("tests/fixtures/providers/acp/message-id-change.jsonl"),
        ),
    ];
    let shared = fixture("../shared/fixtures/openai-chat/openai-python__parallel-tool-calls.sse");
    if shared.exists() {
        files.push(("parallel.sse", shared));
    } else {
        eprintln!("note: shared fixtures not found; that stream is left out");
    }
    let mut paths = Vec::new();
    for (name, from) in &files {
        let to = dir.path().join(name);
        std::fs::copy(from, &to).unwrap();
        paths.push(to.to_str().unwrap().to_owned());
    }
    let checked = check_json(&paths);
    let want_findings = checked.finding_ids();
    let turns = checked.number("turns") as u64;
    assert!(
        turns >= 8 && want_findings.len() >= 4,
        "{}",
        checked.summary
    );

    // OTLP: three agents' captures, into a receiver that reads no file (its sessions spread
    // over the workers by name), and into one that also tails the gemini-cli OTLP session's
    // stream-json (every OTLP stream then goes to the join's worker, and the session is
    // joined across its OTLP records and the file).
    let otlp_stream_json = dir.path().join("otlp-session.stream.jsonl");
    std::fs::copy(
        fixture("tests/fixtures/agents/gemini-cli/otlp-after-tool-reset/stream.jsonl"),
        &otlp_stream_json,
    )
    .unwrap();
    let mut bodies = Vec::new();
    for agent in ["gemini-cli", "claude-code", "codex"] {
        bodies.extend(otlp_capture(agent));
    }

    let start = |workers: &str, inputs: &[String], otlp: bool| {
        let findings = dir.path().join(format!(
            "findings-{workers}-{}-{}.jsonl",
            inputs.len(),
            otlp
        ));
        let mut args: Vec<String> = inputs.to_vec();
        args.extend(
            [
                "--findings-out",
                findings.to_str().unwrap(),
                "--idle-timeout-secs",
                "2",
                "--workers",
                workers,
            ]
            .map(str::to_owned),
        );
        let port = free_port();
        if otlp {
            args.extend(["--otlp-listen".to_owned(), format!("127.0.0.1:{port}")]);
        }
        let c = Collector::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        if otlp {
            for (path, body) in &bodies {
                assert_eq!(post_json(port, path, body), 200, "{path}");
            }
        }
        (c, findings)
    };
    let stream_json = vec![otlp_stream_json.to_str().unwrap().to_owned()];
    let mut runs = Vec::new();
    for workers in ["1", "2"] {
        runs.push((workers, "files", start(workers, &paths, false)));
        runs.push((workers, "otlp", start(workers, &[], true)));
        runs.push((workers, "otlp+file", start(workers, &stream_json, true)));
    }
    let mut got = BTreeMap::new();
    for (workers, what, (c, findings)) in runs {
        let m = settled(&c, &format!("{what}, {workers} workers"), |m| {
            what != "files" || sum(m, "retryscope_turns_total{") >= turns as f64
        });
        assert!(c.terminate().success());
        got.insert((what, workers), (m, finding_ids(&findings)));
    }

    // The files: as `check` reads them, with one worker and with two.
    for workers in ["1", "2"] {
        let (m, findings) = &got[&("files", workers)];
        let what = format!("files, {workers} workers");
        assert_eq!(findings, &want_findings, "{what}: findings");
        assert_eq!(
            sum(m, "retryscope_turns_total{") as u64,
            turns,
            "{what}: turns"
        );
        assert_eq!(
            by_label(m, "retryscope_findings_total", "kind"),
            checked.counts("findings"),
            "{what}"
        );
        assert_eq!(
            by_label(m, "retryscope_attempts_total", "outcome"),
            checked.counts("attempts_by_outcome"),
            "{what}"
        );
        assert_eq!(
            sum(m, "retryscope_retries_total{"),
            checked.number("retries"),
            "{what}"
        );
    }
    // Every run: two workers give one worker's turn-level metrics and findings.
    for what in ["files", "otlp", "otlp+file"] {
        let (one, one_findings) = &got[&(what, "1")];
        let (two, two_findings) = &got[&(what, "2")];
        assert!(sum(one, "retryscope_turns_total{") >= 3.0, "{what}: turns");
        assert!(one_findings.len() >= 2, "{what}: {one_findings:?}");
        assert_close(&turn_level(two), &turn_level(one), what);
        assert_eq!(two_findings, one_findings, "{what}: findings");
    }
    // stdin, to its end (`--exit-on-eof`): one stream, read whole by one of two workers.
    for rel in [
        "tests/fixtures/agents/claude-code/after-tool-reset/stream.jsonl",
        "tests/fixtures/agents/gemini-cli/after-tool-reset/telemetry.log",
    ] {
        let want = check_json(&[fixture(rel)]).finding_ids();
        assert!(!want.is_empty(), "{rel}");
        for workers in ["1", "2"] {
            assert_eq!(
                stdin_to_eof(&fixture(rel), workers),
                want,
                "{rel} on stdin, {workers} workers"
            );
        }
    }
    // The joined session: its OTLP records and its stream-json make one session's turns.
    let (joined, _) = &got[&("otlp+file", "1")];
    let (alone, _) = &got[&("otlp", "1")];
    assert_ne!(
        by_label(joined, "retryscope_findings_total", "kind"),
        by_label(alone, "retryscope_findings_total", "kind"),
        "the stream-json adds what the user saw"
    );
}

/// `run - --exit-on-eof --workers N` on `path` piped to stdin: its findings' identities,
/// sorted, once it has stopped by itself.
fn stdin_to_eof(path: &Path, workers: &str) -> Vec<String> {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .args(["run", "-", "--exit-on-eof", "--findings-out", "-"])
        .args(["--workers", workers])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port())])
        .env("RUST_LOG", "error")
        .stdin(std::fs::File::open(path).unwrap())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start run -");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("run - --exit-on-eof did not stop at the end of stdin");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", out.status);
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| identity(&serde_json::from_str(l).expect("a finding line")))
        .collect();
    v.sort();
    v
}
