//! A file named on `check`'s command line that does not start like a log (the README) is
//! refused with the reason (exit 2) instead of being read as 142 bad lines and a turn built
//! from the JSON it quotes; `--format` reads it anyway. gemini-cli's pretty-printed telemetry
//! outfile starts like none of the line formats and is still read, named or in a folder.

use std::path::Path;
use std::process::{Command, Output};

fn check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retryscope"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")))
        .arg("check")
        .args(args)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .output()
        .expect("run retryscope check")
}

#[test]
fn the_readme_named_explicitly_is_refused_with_the_reason() {
    let out = check(&["README.md"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "retryscope: error: README.md does not look like a log: its first line is neither a JSON \
         object on one line nor a server-sent event (`# retryscope`); give --format to read it \
         anyway\n"
    );
    assert!(out.stdout.is_empty(), "nothing was read");
    // Refused before anything is read, even next to a good log.
    let out = check(&["examples/bookstore/naive.jsonl", "README.md"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn format_reads_it_anyway() {
    let out = check(&["--format", "native", "--summary", "README.md"]);
    assert_ne!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Read as asked: every line that is not an event is a counted bad line.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("bad lines: "), "{text}");
    assert!(!text.contains("bad lines: 0 "), "{text}");
}

#[test]
fn gemini_cli_telemetry_is_a_log_named_or_in_a_folder() {
    let dir = "tests/fixtures/agents/gemini-cli/after-tool-reset";
    let out = check(&["--summary", &format!("{dir}/telemetry.log")]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = check(&["--summary", dir]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("telemetry.log"), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("abandoned_tool_executed 1"), "{text}");
}
