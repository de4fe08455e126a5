//! The real coding agents' own output files (`tests/fixtures/agents/<client>/<scenario>/`,
//! recorded by `e2e/agents/run.sh --record` against a mock that cuts the first stream), read
//! the way `check --format auto` reads them, and compared with the recording's `truth.json`:
//! which attempts the first model call had and how each ended, which calls ran from which
//! attempt (marker files), and the findings that ground truth implies. Every other model call
//! of the session must be clean.

use crate::common;
use crate::otlp_post;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::{correlate, decode, findings, summary};
use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::decode::gemini_join::{SessionJoiner, Source};
use retryscope_core::finding::FindingKind;
use retryscope_core::ingest::{Ingest, Note, Source as IngestSource};
use retryscope_core::report::{Outcome, TurnReport};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agents")
}

/// The recordings of `client` that hold `file` (gemini-cli's `otlp-*` runs export their
/// telemetry over OTLP instead of to an outfile).
fn scenarios_with(client: &str, file: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root().join(client))
        .unwrap_or_else(|e| panic!("{client}: {e}"))
        .flatten()
        .map(|d| d.path())
        .filter(|p| p.join("truth.json").is_file() && p.join(file).is_file())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no recordings for {client}");
    dirs
}

/// Decode one client file with `--format auto` semantics and correlate it.
fn reports(file: &Path, want: Format) -> Vec<TurnReport> {
    let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("x");
    let d = decode(name, &bytes, Format::Auto);
    assert_eq!(d.format, want, "{}: detected format", file.display());
    assert_eq!(d.errors, 0, "{}: bad lines", file.display());
    correlate(&d.events)
}

/// What the ground truth says the first model call's turn must show.
struct Expected {
    /// Per attempt: finished, and the ids of the calls that really ran.
    attempts: Vec<(bool, bool, Vec<String>)>,
    findings: Vec<FindingKind>,
}

/// Retries the client's output leaves no trace of (FORMATS.md): Claude Code retries an
/// in-stream error right after `message_start` silently, Codex an HTTP error silently. The
/// failed first attempt delivered no content, so nothing else depends on it.
/// Qwen Code retries an HTTP error status silently too.
const SILENT_FIRST_ATTEMPT: [(&str, &str); 3] = [
    ("claude-code", "start-error"),
    ("codex", "start-status"),
    ("qwen-code", "start-status"),
];

/// When an input shows a spliced text (an abandoned attempt's text kept with the retry's).
#[derive(Clone, Copy, PartialEq)]
enum Splice {
    /// Never: the input does not carry what the user saw or what the client kept.
    Never,
    /// When what the user saw carries the abandoned attempt's text.
    Shown,
    /// When a later request's history carries it (the client sent the splice back to the
    /// model: a continuation that restarted). A request log, not a display.
    History,
    /// When the user saw it and the retry was not a continuation (Qwen Code's stream-json
    /// prints a continuation's kept text as one message, never the cut part on its own).
    ShownNotContinued,
    /// When the user saw it or a later request's history carries it (a display joined with a
    /// request log: Qwen Code's stream-json with its telemetry).
    ShownOrHistory,
}

impl From<bool> for Splice {
    fn from(sees_output: bool) -> Self {
        if sees_output {
            Splice::Shown
        } else {
            Splice::Never
        }
    }
}

/// Whether a request after `r` sent the text of `r`'s attempt (its tag) back to the model.
fn in_later_history(truth: &Value, r: &Value) -> bool {
    let tag = format!("[A{}]", r["attempt"]);
    let seq = r["request_seq"].as_i64().unwrap_or(0);
    truth["main_requests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|q| q["request_seq"].as_i64().unwrap_or(0) > seq)
        .flat_map(|q| q["history_tags"].as_array().into_iter().flatten())
        .any(|h| h.as_str().is_some_and(|h| h.contains(&tag)))
}

fn expected(truth: &Value, silent_first: bool, splice: Splice) -> Expected {
    let mut step1: Vec<&Value> = truth["main_requests"]
        .as_array()
        .expect("main_requests")
        .iter()
        .filter(|r| r["step"] == 1)
        .collect();
    if silent_first {
        assert_eq!(
            step1[0]["content_delivered"], false,
            "a silent attempt delivered content"
        );
        step1.remove(0);
    }
    let mut findings = Vec::new();
    let mut attempts = Vec::new();
    for r in &step1 {
        let finished = r["finished"] == true;
        let retried = r["retried"] == true;
        let end = r["finish_sent_ms"].as_i64().or(r["ended_ms"].as_i64());
        let mut ran = Vec::new();
        for c in r["calls"].as_array().into_iter().flatten() {
            if c["executed"] != true {
                continue;
            }
            ran.push(c["id"].as_str().unwrap_or("").to_owned());
            // A call of an attempt that never finished ran: unfinished, retried or not; and
            // abandoned too when a retry replaced the attempt.
            if !finished {
                findings.push(FindingKind::UnfinishedToolExecuted);
                if retried {
                    findings.push(FindingKind::AbandonedToolExecuted);
                }
            }
            // Ran before its attempt finished or broke: early, unless the retry came first.
            let marker = c["marker_mtime_ms"].as_i64();
            if let (Some(m), Some(end)) = (marker, end)
                && m < end
            {
                findings.push(FindingKind::EarlyExecution);
            }
        }
        // What the user saw carries the abandoned attempt's text: spliced.
        let text = r["text"].as_str().unwrap_or("");
        let shown = truth["visible_text"].as_str().unwrap_or("");
        let seen = retried
            && r["content_delivered"] == true
            && text.len() >= 12
            && shown.contains(&text[..12]);
        let kept = retried && in_later_history(truth, r);
        let spliced = match splice {
            Splice::Never => false,
            Splice::Shown => seen,
            Splice::History => kept,
            Splice::ShownNotContinued => seen && !kept,
            Splice::ShownOrHistory => seen || kept,
        };
        if spliced {
            findings.push(FindingKind::SplicedText);
        }
        attempts.push((finished, retried, ran));
    }
    if !attempts.iter().any(|a| a.0) {
        findings.push(FindingKind::IncompleteTurn);
    }
    findings.sort();
    Expected { attempts, findings }
}

/// Check the first model call's turn against the truth; every other turn must be clean.
/// `ids` says whether the client's call ids can be compared with the mock's.
fn check_scenario(dir: &Path, file: &str, want: Format, ids: bool) {
    let rs = reports(&dir.join(file), want);
    check_reports(dir, &rs, ids, false);
}

/// Check reports of one recording; `sees_output` when the input shows what the user saw.
fn check_reports(dir: &Path, rs: &[TurnReport], ids: bool, splice: impl Into<Splice>) {
    let truth: Value =
        serde_json::from_slice(&std::fs::read(dir.join("truth.json")).expect("truth"))
            .expect("truth is JSON");
    let scenario = dir.file_name().and_then(|n| n.to_str()).unwrap_or("?");
    let client = truth["client"].as_str().unwrap_or("?");
    // the recorded scenario, not the folder name (`otlp-start-error` is `start-error`)
    let cut = truth["scenario"].as_str().unwrap_or(scenario);
    let silent = SILENT_FIRST_ATTEMPT.contains(&(client, cut));
    let exp = expected(&truth, silent, splice.into());
    // The first model call: the first turn opened (side calls, `~<role>`, apart).
    let first = rs
        .iter()
        .filter(|r| !r.turn.contains('~'))
        .min_by_key(|r| r.opened_seq)
        .unwrap_or_else(|| panic!("{scenario}: no first turn"));
    let ctx = format!("{scenario}: {}", summary(first));
    assert_eq!(first.attempts.len(), exp.attempts.len(), "{ctx}");
    for (a, (finished, retried, ran)) in first.attempts.iter().zip(&exp.attempts) {
        let want_outcome = match (finished, retried) {
            (true, _) => vec![Outcome::Completed],
            (false, true) => vec![Outcome::Abandoned],
            (false, false) => vec![Outcome::Failed, Outcome::Open],
        };
        assert!(want_outcome.contains(&a.outcome), "{ctx}");
        assert_eq!(a.executed.len(), ran.len(), "{ctx}");
        if ids {
            for (e, id) in a.executed.iter().zip(ran) {
                assert!(e.id.ends_with(id.as_str()), "{ctx}: ran {} not {id}", e.id);
            }
        }
    }
    assert_eq!(findings(first), exp.findings, "{ctx}");
    for r in rs.iter().filter(|r| r.turn != first.turn) {
        assert!(r.findings.is_empty(), "{scenario}: {}", summary(r));
    }
}

#[test]
fn claude_code_stream_json_matches_ground_truth() {
    for dir in scenarios_with("claude-code", "stream.jsonl") {
        check_scenario(&dir, "stream.jsonl", Format::ClaudeCode, true);
    }
}

#[test]
fn codex_exec_json_matches_ground_truth() {
    // `codex exec --json` names calls by item id (`item_2`), not by the provider's call id.
    for dir in scenarios_with("codex", "exec.jsonl") {
        check_scenario(&dir, "exec.jsonl", Format::CodexExec, false);
    }
}

#[test]
fn gemini_cli_telemetry_outfile_matches_ground_truth() {
    // The telemetry alone: the abandoned attempt's response is never logged, so its call is
    // known only by the execution's tool and arguments (no provider id to compare).
    for dir in scenarios_with("gemini-cli", "telemetry.log") {
        check_scenario(&dir, "telemetry.log", Format::GeminiCliTelemetry, false);
    }
}

#[test]
fn gemini_cli_telemetry_joined_with_stream_json_matches_ground_truth() {
    // Joined: the telemetry's attempts, the stream-json's deltas, calls (with ids) and
    // executions; the spliced text the user saw is found from the stream-json's output.
    for dir in scenarios_with("gemini-cli", "telemetry.log") {
        let mut joiner = SessionJoiner::default();
        for (file, want, source) in [
            (
                "telemetry.log",
                Format::GeminiCliTelemetry,
                Source::Telemetry,
            ),
            (
                "stream.jsonl",
                Format::GeminiCliStreamJson,
                Source::StreamJson,
            ),
        ] {
            let path = dir.join(file);
            let bytes = std::fs::read(&path).expect("read");
            let mut d = decode(file, &bytes, Format::Auto);
            assert_eq!(d.format, want, "{}", path.display());
            assert_eq!(d.errors, 0, "{}", path.display());
            joiner.push(source, &mut d.events);
        }
        let rs = correlate(&joiner.finish());
        check_reports(&dir, &rs, true, true);
    }
}

#[test]
fn gemini_cli_stream_json_alone_is_readable_but_blind_to_retries() {
    // Without the telemetry a retry leaves no trace: one attempt per model call, every call
    // attributed to it. Still decoded without a bad line, and the clean run is clean.
    for dir in scenarios_with("gemini-cli", "stream.jsonl") {
        let rs = reports(&dir.join("stream.jsonl"), Format::GeminiCliStreamJson);
        assert!(
            rs.iter().all(|r| r.attempts.len() == 1),
            "{}",
            dir.display()
        );
        if dir.ends_with("clean") {
            assert!(rs.iter().all(|r| r.findings.is_empty()));
        }
    }
}

#[test]
fn claude_code_with_partial_messages_matches_ground_truth() {
    // `--include-partial-messages` shows every attempt's message_start (the silent retry of
    // start-error too), the real stop reason and the exact finish or cut.
    for dir in scenarios_with("claude-code-partial", "stream.jsonl") {
        check_scenario(&dir, "stream.jsonl", Format::ClaudeCode, true);
    }
}

fn check_otlp(client: &str, ids: bool) {
    let dirs: Vec<PathBuf> = ["otlp-clean", "otlp-after-tool-reset"]
        .iter()
        .map(|s| root().join(client).join(s))
        .collect();
    for dir in dirs {
        let d = decode("otlp", &otlp_post::receiver_lines(&dir), Format::Auto);
        assert_eq!(d.format, Format::Otlp, "{}", dir.display());
        assert_eq!(d.errors, 0, "{}", dir.display());
        check_reports(&dir, &correlate(&d.events), ids, false);
    }
}

#[test]
fn gemini_cli_otlp_export_matches_ground_truth() {
    // Its OTLP log records are its outfile's records: the same blind spots (no call ids).
    check_otlp("gemini-cli", false);
}

#[test]
fn gemini_cli_otlp_joined_with_stream_json_matches_ground_truth() {
    // Regression: gemini-cli's telemetry received over OTLP took no part in the session join
    // with its stream-json (the outfile did), so one `run` receiving the OTLP and tailing
    // `stream.jsonl` found no spliced text. Both streams through one ingest path that joins
    // sessions, as `run` sets it up: the same reports as the outfile joined with stream-json.
    for dir in ["otlp-clean", "otlp-after-tool-reset"].map(|s| root().join("gemini-cli").join(s)) {
        let correlator = Correlator::new(
            CorrelatorConfig {
                idle_timeout_ms: None,
                ..CorrelatorConfig::default()
            },
            Arc::new(PriceTable::builtin()),
        );
        let mut ingest = Ingest::new(correlator, Format::Auto);
        ingest.join_sessions();
        let mut out = Vec::new();
        let mut note = |_: Note<'_>| {};
        let otlp = ingest.stream_as(IngestSource::Otlp, "gemini-cli", Format::Otlp);
        for line in otlp_post::receiver_lines(&dir)
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
        {
            ingest.line(otlp, None, line, None, &mut out, &mut note);
        }
        let shown = ingest.stream(IngestSource::File, "stream.jsonl");
        let bytes = std::fs::read(dir.join("stream.jsonl")).expect("stream.jsonl");
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            ingest.line(shown, None, line, None, &mut out, &mut note);
        }
        assert_eq!(ingest.format_of(shown), Some(Format::GeminiCliStreamJson));
        ingest.close_all(&mut out, &mut note);
        assert_eq!(ingest.counters().bad_total(), 0, "{}", dir.display());
        let rs: Vec<TurnReport> = out
            .into_iter()
            .filter_map(|o| match o {
                Output::TurnClosed(r) => Some(*r),
                _ => None,
            })
            .collect();
        check_reports(&dir, &rs, true, true);
    }
}

#[test]
fn codex_otlp_export_matches_ground_truth() {
    // `codex.tool_result` carries the provider's `call_id`, which `exec --json` lacks.
    check_otlp("codex", true);
}

#[test]
fn codex_otlp_reconnect_with_attempt_zero_is_a_retry() {
    // Regression: Codex 0.169.0 sends `attempt: 0` on every `codex.api_request`, its
    // reconnect after the start-error cut included; the retry is the broken stream followed
    // by a new request with no `codex.tool_result` in between (was read as a new model call:
    // 0 retries, 1 failed and 2 completed attempts).
    let dir = root().join("codex/otlp-start-error");
    let d = decode("otlp", &otlp_post::receiver_lines(&dir), Format::Auto);
    assert_eq!((d.format, d.errors), (Format::Otlp, 0));
    let rs = correlate(&d.events);
    check_reports(&dir, &rs, true, false);
    let first = rs.iter().find(|r| !r.turn.contains('#')).expect("first");
    assert_eq!(first.attempts.len(), 2, "{}", summary(first));
    assert_eq!(rs.len(), 2, "two model calls, not three");
}

#[test]
fn claude_code_otlp_export_matches_ground_truth_except_the_cut_it_cannot_show() {
    // Clean: the call, its early execution (by `tool_use_id`) and the usage, as the truth.
    let clean = root().join("claude-code/otlp-clean");
    let d = decode("otlp", &otlp_post::receiver_lines(&clean), Format::Auto);
    assert_eq!((d.format, d.errors), (Format::Otlp, 0));
    check_reports(&clean, &correlate(&d.events), true, false);
    // Cut after the tool call: the export logs the cut message as an ordinary response
    // (FORMATS.md), so the attempt reads as finished: only the early execution is seen, not
    // that the attempt never finished.
    let cut = root().join("claude-code/otlp-after-tool-reset");
    let d = decode("otlp", &otlp_post::receiver_lines(&cut), Format::Auto);
    let rs = correlate(&d.events);
    let first = rs
        .iter()
        .find(|r| !r.turn.contains('#'))
        .expect("first turn");
    assert_eq!(first.attempts.len(), 1, "{}", summary(first));
    assert_eq!(first.attempts[0].outcome, Outcome::Completed);
    assert_eq!(first.attempts[0].executed.len(), 1);
    assert!(first.attempts[0].executed[0].id.ends_with("toolu_mockA1"));
    assert_eq!(findings(first), vec![FindingKind::EarlyExecution]);
}

/// Qwen Code's recordings of one file, with its `-o stream-json` or telemetry outfile.
fn check_qwen(file: &str, want: Format, splice: Splice) {
    for dir in scenarios_with("qwen-code", file) {
        let rs = reports(&dir.join(file), want);
        check_reports(&dir, &rs, true, splice);
    }
}

#[test]
fn qwen_code_telemetry_outfile_matches_ground_truth() {
    // gemini-cli's records under `qwen-code.*`, read by structure. After a reset Qwen Code
    // retries by continuation (the cut text as a trailing model turn, then "output only text
    // that comes after this suffix"); the mock restarts, and the kept text holds both
    // attempts' text, which the next request's history shows: spliced_text. After a clean end
    // of body it resends the request (a `chat.content_retry`): the screen showed both texts,
    // the log cannot.
    check_qwen("telemetry.log", Format::GeminiCliTelemetry, Splice::History);
}

#[test]
fn qwen_code_stream_json_matches_ground_truth() {
    // Claude Code's shape, `system/retry` records, ids naming lines: the retries and
    // executions as the truth; spliced_text where the cut attempt's text was printed before
    // the resend, not where a continuation's kept text is printed as one message.
    check_qwen(
        "stream.jsonl",
        Format::ClaudeCode,
        Splice::ShownNotContinued,
    );
}

/// The reports of one ingest path that joins sessions (as `check` and `run` set it up) fed
/// `files` of `dir` in turn.
fn joined_reports(dir: &Path, files: &[&str]) -> Vec<TurnReport> {
    let correlator = Correlator::new(
        CorrelatorConfig {
            idle_timeout_ms: None,
            ..CorrelatorConfig::default()
        },
        Arc::new(PriceTable::builtin()),
    );
    let mut ingest = Ingest::new(correlator, Format::Auto);
    ingest.join_sessions();
    let mut out = Vec::new();
    let mut note = |_: Note<'_>| {};
    for file in files {
        let stream = ingest.stream(IngestSource::File, file);
        let bytes = std::fs::read(dir.join(file)).expect("read");
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            ingest.line(stream, None, line, None, &mut out, &mut note);
        }
    }
    ingest.close_all(&mut out, &mut note);
    assert_eq!(ingest.counters().bad_total(), 0, "{}", dir.display());
    out.into_iter()
        .filter_map(|o| match o {
            Output::TurnClosed(r) => Some(*r),
            _ => None,
        })
        .collect()
}

#[test]
fn qwen_code_telemetry_joined_with_stream_json_matches_ground_truth() {
    // Regression: the two outputs of one Qwen Code session name its calls differently (the
    // telemetry by prompt id `<session>########0`, the stream-json by session id), so
    // together every attempt was counted twice. Joined by session and call order: the
    // telemetry's attempts, the stream-json's text and executions; spliced_text both where
    // only the screen showed it (a resend) and where the history kept it (a continuation).
    for dir in scenarios_with("qwen-code", "telemetry.log") {
        if !dir.join("stream.jsonl").exists() {
            continue;
        }
        for files in [
            ["telemetry.log", "stream.jsonl"],
            ["stream.jsonl", "telemetry.log"],
        ] {
            let rs = joined_reports(&dir, &files);
            check_reports(&dir, &rs, true, Splice::ShownOrHistory);
        }
    }
}

#[test]
fn qwen_code_otlp_export_matches_ground_truth() {
    // The same records as the outfile, over OTLP; its spans (which repeat them, under
    // GenAI operation names) are not read a second time.
    for dir in ["otlp-clean", "otlp-after-tool-reset"].map(|s| root().join("qwen-code").join(s)) {
        let d = decode("otlp", &otlp_post::receiver_lines(&dir), Format::Auto);
        assert_eq!((d.format, d.errors), (Format::Otlp, 0), "{}", dir.display());
        let rs = correlate(&d.events);
        check_reports(&dir, &rs, true, Splice::History);
        assert_eq!(rs.len(), 2, "{}: two model calls", dir.display());
    }
}
