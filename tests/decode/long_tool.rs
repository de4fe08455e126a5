//! A tool that runs longer than the idle timeout, in the real agents' own output files
//! (`tests/fixtures/agents/<client>/clean/`): each file is read as `run` tails it, with the
//! clock stopped for 20 minutes just before the line that first records a tool's execution
//! (a build, a test suite), ticking through the wait. The turn must not be closed under the
//! running tool: the execution joins its turn, and the reports are those of reading the file
//! straight through. These formats record every execution, so a turn waiting on one is
//! waiting on a tool, from the session's first call (its input need not have shown one yet).

use std::path::{Path, PathBuf};

use crate::otlp_post;
use std::sync::Arc;

use retryscope_core::correlate::{Correlator, CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::event::EventKind;
use retryscope_core::ingest::{Ingest, Note, Source};
use retryscope_core::report::TurnReport;

const IDLE_MS: i64 = 300_000;

/// What reading `lines` gave: the closed turns' reports, and the events that came after
/// their turn closed.
struct Read {
    reports: Vec<TurnReport>,
    after_close: u64,
}

/// Read `lines` as `format` with the idle timeout on; `pause` stops the clock before that
/// line for 20 minutes, ticking every second through it. An OTLP session's stream is parked
/// once quiet for the idle timeout and opened again by its next record, as `run`'s receiver
/// does (`src/run/otlp_feed.rs`).
fn read(lines: &[&[u8]], format: Format, pause: Option<usize>) -> Read {
    let cfg = CorrelatorConfig {
        idle_timeout_ms: Some(IDLE_MS),
        ..CorrelatorConfig::default()
    };
    let mut ingest = Ingest::new(
        Correlator::new(cfg, Arc::new(PriceTable::builtin())),
        format,
    );
    let (source, name) = match format {
        Format::Otlp => (Source::Otlp, "otlp:agent/session"),
        _ => (Source::File, "session.jsonl"),
    };
    let mut reports = Vec::new();
    let mut out = Vec::new();
    let mut now = 1_000_000;
    let mut note = |_: Note<'_>| {};
    let keep = |out: &mut Vec<Output>, reports: &mut Vec<TurnReport>| {
        for o in out.drain(..) {
            if let Output::TurnClosed(r) = o {
                reports.push(*r);
            }
        }
    };
    for (i, line) in lines.iter().enumerate() {
        if pause == Some(i) {
            for _ in 0..20 * 60 {
                now += 1_000;
                ingest.tick(now, &mut out, &mut note);
                if source == Source::Otlp {
                    ingest.end_quiet(now, IDLE_MS, |_, _| true, &mut out, &mut note);
                }
            }
            keep(&mut out, &mut reports);
        }
        now += 10;
        let stream = ingest.stream_as(source, name, format);
        ingest.line(stream, None, line, Some(now), &mut out, &mut note);
        ingest.tick(now, &mut out, &mut note);
        keep(&mut out, &mut reports);
    }
    ingest.close_all(&mut out, &mut note);
    keep(&mut out, &mut reports);
    let after_close = ingest.correlator().stats().after_close_events;
    Read {
        reports,
        after_close,
    }
}

/// The index of the line whose events first hold a tool's execution.
fn first_exec_line(lines: &[&[u8]], format: Format) -> Option<usize> {
    let mut ingest = Ingest::new(
        Correlator::new(CorrelatorConfig::default(), Arc::new(PriceTable::builtin())),
        format,
    );
    ingest.pipeline_mut().record_events();
    let stream = ingest.stream(Source::File, "session.jsonl");
    let mut out = Vec::new();
    lines.iter().position(|line| {
        ingest.line(stream, None, line, None, &mut out, &mut |_| {});
        let events = ingest.pipeline_mut().take_recorded();
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::ToolExec { .. }))
    })
}

fn recording(client: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agents")
        .join(client)
}

fn check(client: &str, file: &str, format: Format) {
    let path = recording(client).join("clean").join(file);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    check_lines(client, file, &bytes, format);
}

/// The client's OTLP export (`otlp-clean/otlp/`), as the receiver turns it into lines: the
/// receiver keeps a stream per service and session, so a session's first tool is its
/// stream's first (each recording is one session).
fn check_otlp(client: &str) {
    let bytes = otlp_post::receiver_lines(&recording(client).join("otlp-clean"));
    check_lines(client, "otlp-clean", &bytes, Format::Otlp);
}

fn check_lines(client: &str, file: &str, bytes: &[u8], format: Format) {
    let lines: Vec<&[u8]> = bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let at = first_exec_line(&lines, format)
        .unwrap_or_else(|| panic!("{client}/{file}: no line records an execution"));
    let straight = read(&lines, format, None);
    let paused = read(&lines, format, Some(at));
    assert_eq!(
        paused.after_close, 0,
        "{client}/{file}: the execution came after its turn was closed at idle"
    );
    let executed = |r: &Read| -> Vec<(String, Vec<usize>)> {
        r.reports
            .iter()
            .map(|t| {
                let ran = t.attempts.iter().map(|a| a.executed.len()).collect();
                (t.turn.clone(), ran)
            })
            .collect()
    };
    assert_eq!(
        executed(&paused),
        executed(&straight),
        "{client}/{file}: turns and the calls each attempt ran"
    );
    assert!(
        executed(&paused)
            .iter()
            .any(|(_, ran)| ran.iter().any(|n| *n > 0)),
        "{client}/{file}: some call ran"
    );
}

#[test]
fn claude_code_stream_json() {
    check("claude-code", "stream.jsonl", Format::ClaudeCode);
}

#[test]
fn codex_exec_json() {
    check("codex", "exec.jsonl", Format::CodexExec);
}

#[test]
fn gemini_cli_stream_json() {
    check("gemini-cli", "stream.jsonl", Format::GeminiCliStreamJson);
}

#[test]
fn qwen_code_stream_json() {
    check("qwen-code", "stream.jsonl", Format::Auto);
}

#[test]
fn gemini_cli_telemetry_outfile() {
    check("gemini-cli", "telemetry.log", Format::GeminiCliTelemetry);
}

#[test]
fn claude_code_otlp() {
    check_otlp("claude-code");
}

#[test]
fn codex_otlp() {
    check_otlp("codex");
}

#[test]
fn gemini_cli_otlp() {
    check_otlp("gemini-cli");
}

// Not Qwen Code's telemetry (its OTLP export or outfile): the fork logs a response's text
// without its calls or its finish, and a call only once it has run (`qwen-code.tool_call`),
// so while a tool runs its turn shows an open attempt asking for nothing, as a dead agent's
// would, and is closed at the idle timeout. Its stream-json (above) shows the call.
