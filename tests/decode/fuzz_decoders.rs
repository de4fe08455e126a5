//! A byte fuzzer per decoder (issue 11): random and mutated real inputs through `check` with
//! each format, in process. No input may panic, every `--json` line must be valid JSON, and the
//! text report must carry no raw terminal control character.
//!
//! Bounded for CI: `FUZZ_CASES` cases per decoder (default 48). Seeds are real recordings, per
//! decoder (`seed_dirs`): the coding agents' (`tests/fixtures/agents/`: Claude Code, Codex,
//! gemini-cli stream-json and telemetry, and their OTLP exports as the receiver writes them),
//! the provider streams (`tests/fixtures/providers/`, `tests/fixtures/recorded/`, and
//! `../shared/fixtures` when present) and the bookstore examples, mutated by byte flips,
//! insertions of hostile bytes (terminal controls, C1, bidi, zero-width), duplications and
//! cuts. A seed folder that is missing or empty fails the test.

use crate::otlp_post;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use retryscope::check::{self, BadLine, CheckObserver, CheckOptions, InputSpec, render};
use retryscope::engine::sinks::At;
use retryscope::engine::{Sink, SinkList};
use retryscope_core::correlate::{CorrelatorConfig, Output};
use retryscope_core::cost::PriceTable;
use retryscope_core::decode::Format;
use retryscope_core::report::TurnReport;

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

/// Where a format's seeds are: a folder, and which of its files (by name suffix) are seeds.
/// `agents/<client>/*/<file>` folders are given as `(client folder, file name)`.
enum SeedDir {
    /// Every file of the folder whose name ends with the suffix.
    Files(&'static str, &'static str),
    /// `<folder>/*/<name>`: one file per recorded scenario.
    Scenarios(&'static str, &'static str),
    /// `<folder>/otlp-*/otlp/*.json`: the OTLP bodies a client POSTed, as the receiver turns
    /// them into lines (one seed per scenario).
    Otlp(&'static str),
    /// The same under `../shared/fixtures` (outside the repository: checked when present).
    Shared(&'static str, &'static str),
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn shared_root() -> Option<PathBuf> {
    match std::env::var_os("RETRYSCOPE_SHARED_FIXTURES") {
        Some(p) => Some(PathBuf::from(p)),
        None => Some(root().join("../shared/fixtures")).filter(|p| p.is_dir()),
    }
}

/// The real recordings each decoder is fuzzed from.
fn seed_dirs(format: Format) -> Vec<SeedDir> {
    use SeedDir::*;
    let providers = |f: &'static str| Files(f, "");
    match format {
        Format::Native => vec![Files("examples/bookstore", ".jsonl")],
        Format::Auto => vec![
            Files("examples/bookstore", ".jsonl"),
            Scenarios("tests/fixtures/agents/claude-code", "stream.jsonl"),
            Scenarios("tests/fixtures/agents/codex", "exec.jsonl"),
            Scenarios("tests/fixtures/agents/gemini-cli", "telemetry.log"),
            Files("tests/fixtures/providers/anthropic", ""),
            Files("tests/fixtures/providers/openai-chat", ""),
        ],
        Format::OpenAiChat => vec![
            providers("tests/fixtures/providers/openai-chat"),
            Shared("openai-chat", ""),
        ],
        Format::OpenAiResponses => vec![
            providers("tests/fixtures/providers/openai-responses"),
            Shared("openai-responses", ""),
        ],
        Format::Anthropic => vec![
            providers("tests/fixtures/providers/anthropic"),
            Files("tests/fixtures/recorded", ".sse"),
            Shared("anthropic", ""),
        ],
        Format::Gemini => vec![
            providers("tests/fixtures/providers/gemini"),
            Shared("gemini", ".chunks.txt"),
        ],
        Format::GeminiCliResponses => vec![
            providers("tests/fixtures/providers/gemini-cli-responses"),
            Shared("gemini", ".responses"),
        ],
        Format::Acp => vec![providers("tests/fixtures/providers/acp")],
        Format::GeminiCliTelemetry => {
            vec![Scenarios(
                "tests/fixtures/agents/gemini-cli",
                "telemetry.log",
            )]
        }
        Format::GeminiCliStreamJson => {
            vec![Scenarios(
                "tests/fixtures/agents/gemini-cli",
                "stream.jsonl",
            )]
        }
        Format::ClaudeCode => vec![
            Scenarios("tests/fixtures/agents/claude-code", "stream.jsonl"),
            Scenarios("tests/fixtures/agents/claude-code-partial", "stream.jsonl"),
        ],
        Format::CodexExec => vec![Scenarios("tests/fixtures/agents/codex", "exec.jsonl")],
        Format::Otlp => vec![
            Otlp("tests/fixtures/agents/claude-code"),
            Otlp("tests/fixtures/agents/codex"),
            Otlp("tests/fixtures/agents/gemini-cli"),
        ],
    }
}

fn files_in(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    name.ends_with(suffix)
                        && !name.ends_with(".md")
                        && !name.ends_with(".schema.json")
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Seed inputs of a format, from its real recordings. A seed folder in the repository that is
/// missing or holds no seed fails the test (a fuzzer without seeds mutates nothing, as the
/// gemini-cli telemetry one did); a shared folder is checked the same when the shared
/// fixtures are present.
fn seeds(format: Format) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for d in seed_dirs(format) {
        let (what, found): (String, Vec<Vec<u8>>) = match d {
            SeedDir::Files(dir, suffix) => (
                format!("{dir}/*{suffix}"),
                files_in(&root().join(dir), suffix)
                    .iter()
                    .filter_map(|p| std::fs::read(p).ok())
                    .collect(),
            ),
            SeedDir::Scenarios(dir, name) => {
                let scenarios = std::fs::read_dir(root().join(dir))
                    .map(|e| e.flatten().map(|e| e.path()).collect::<Vec<_>>())
                    .unwrap_or_default();
                (
                    format!("{dir}/*/{name}"),
                    scenarios
                        .iter()
                        .filter_map(|s| std::fs::read(s.join(name)).ok())
                        .collect(),
                )
            }
            SeedDir::Otlp(dir) => {
                let scenarios = std::fs::read_dir(root().join(dir))
                    .map(|e| e.flatten().map(|e| e.path()).collect::<Vec<_>>())
                    .unwrap_or_default();
                (
                    format!("{dir}/otlp-*/otlp"),
                    scenarios
                        .iter()
                        .filter(|s| s.join("otlp").is_dir())
                        .map(|s| otlp_post::receiver_lines(s))
                        .filter(|l| !l.is_empty())
                        .collect(),
                )
            }
            SeedDir::Shared(dir, suffix) => {
                let Some(shared) = shared_root() else {
                    eprintln!("note: shared fixtures not found: {dir} seeds skipped");
                    continue;
                };
                (
                    format!("{}/{dir}/*{suffix}", shared.display()),
                    files_in(&shared.join(dir), suffix)
                        .iter()
                        .filter_map(|p| std::fs::read(p).ok())
                        .collect(),
                )
            }
        };
        assert!(
            !found.is_empty(),
            "no seed for {} in {what}: the folder is missing or empty",
            format.as_str()
        );
        out.extend(found);
    }
    out.push(Vec::new());
    out
}

/// Every decoder the factory has is fuzzed here, each with seeds (see [`seed_dirs`]).
#[test]
fn every_format_has_a_fuzz_target_and_seeds() {
    for f in Format::ALL {
        assert!(seeds(f).len() > 1, "{}", f.as_str());
    }
}

const HOSTILE: &[&[u8]] = &[
    b"\x1b]0;pwned\x07",
    b"\r\x08\x00",
    b"\xff\xfe",
    b"\xc2\x9b2J",
    b"\n",
    b"\"",
    b"{",
    b"}",
    b"18446744073709551615",
    b"-9223372036854775808",
    b"-0.0",
    b"data: ",
    b"\\u0000",
    "é".as_bytes(),
    "\u{202e}".as_bytes(),
    "\u{2067}".as_bytes(),
    "\u{200b}".as_bytes(),
    "\u{2028}".as_bytes(),
    "\u{feff}".as_bytes(),
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, usize),
    Cut(usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), 0..HOSTILE.len()).prop_map(|(i, h)| Mutation::Insert(i, h)),
        any::<usize>().prop_map(Mutation::Cut),
        (any::<usize>(), 1..400usize).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn apply(mut bytes: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        let len = bytes.len().max(1);
        match *m {
            Mutation::Flip(i, b) => {
                if !bytes.is_empty() {
                    bytes[i % len] = b;
                }
            }
            Mutation::Insert(i, h) => {
                let at = i % (bytes.len() + 1);
                bytes.splice(at..at, HOSTILE[h].iter().copied());
            }
            Mutation::Cut(i) => bytes.truncate(i % len),
            Mutation::Duplicate(i, n) => {
                let at = i % len;
                let end = (at + n).min(bytes.len());
                let piece: Vec<u8> = bytes.get(at..end).unwrap_or_default().to_vec();
                bytes.splice(at..at, piece);
            }
        }
    }
    bytes
}

/// Renders what `check` prints and checks it as it goes.
#[derive(Default)]
struct Verify {
    turns: u64,
}

fn no_raw_controls(text: &str) -> Result<(), String> {
    match text
        .chars()
        .find(|&c| c != '\n' && retryscope_core::sanitize::is_invisible(c))
    {
        Some(c) => Err(format!("raw control {c:?} in {text:?}")),
        None => Ok(()),
    }
}

impl Verify {
    fn turn(&mut self, report: &TurnReport) {
        self.turns += 1;
        let line = render::turn_json(report);
        if let Err(e) = no_raw_controls(&line) {
            panic!("--json: {e}");
        }
        let parsed: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("invalid --json line {e}: {line}"));
        assert!(parsed.is_object());
        if let Err(e) = no_raw_controls(&render::turn_text(report)) {
            panic!("{e}");
        }
    }
}

/// Every closed turn, checked as `check --json` and the text report would print it.
impl Sink for Verify {
    fn name(&self) -> &'static str {
        "verify"
    }
    fn deliver(&mut self, output: &Output, _at: Option<At<'_>>) {
        if let Output::TurnClosed(report) = output {
            self.turn(report);
        }
    }
}

/// Bad lines' reasons carry no raw escape.
struct Bad;

impl CheckObserver for Bad {
    fn bad_line(&mut self, bad: &BadLine) {
        assert!(!bad.reason.contains('\x1b'), "{:?}", bad.reason);
    }
    fn unreadable(&mut self, _input: &str, _error: &std::io::Error) {}
}

fn fuzz(format: Format) {
    let dir = tempfile::tempdir().unwrap();
    let seeds = seeds(format);
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        0..seeds.len(),
        proptest::collection::vec(mutation(), 0..24),
        proptest::collection::vec(any::<u8>(), 0..256),
        any::<bool>(),
    );
    let n = std::sync::atomic::AtomicU32::new(0);
    runner
        .run(&strategy, |(seed, muts, noise, use_noise)| {
            let bytes = if use_noise {
                noise
            } else {
                apply(seeds[seed].clone(), &muts)
            };
            let case = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = dir.path().join(format!("case-{case}"));
            std::fs::write(&path, &bytes).unwrap();
            let mut verify = Verify::default();
            let cfg = CorrelatorConfig {
                idle_timeout_ms: None,
                ..CorrelatorConfig::default()
            };
            let opts = CheckOptions {
                format,
                ..CheckOptions::default()
            };
            let summary = {
                let mut sinks = SinkList::new();
                sinks.push(Box::new(&mut verify));
                check::check(
                    &[InputSpec::Path(path)],
                    cfg,
                    Arc::new(PriceTable::builtin()),
                    &opts,
                    &mut Bad,
                    &mut sinks,
                )
            };
            let line = render::summary_json(&summary);
            let parsed: serde_json::Value = serde_json::from_str(&line)
                .map_err(|e| TestCaseError::fail(format!("invalid summary {e}: {line}")))?;
            prop_assert!(
                parsed["summary"]["cost_usd"]
                    .as_f64()
                    .is_some_and(|c| c.is_finite() && c >= 0.0)
            );
            prop_assert!(!line.contains("-0.0"));
            no_raw_controls(&render::summary_text(&summary)).map_err(TestCaseError::fail)?;
            prop_assert_eq!(summary.turns, verify.turns);
            Ok(())
        })
        .unwrap();
}

#[test]
fn fuzz_native() {
    fuzz(Format::Native);
}

#[test]
fn fuzz_auto_detect() {
    fuzz(Format::Auto);
}

#[test]
fn fuzz_openai_chat() {
    fuzz(Format::OpenAiChat);
}

#[test]
fn fuzz_openai_responses() {
    fuzz(Format::OpenAiResponses);
}

#[test]
fn fuzz_anthropic() {
    fuzz(Format::Anthropic);
}

#[test]
fn fuzz_gemini() {
    fuzz(Format::Gemini);
}

#[test]
fn fuzz_gemini_cli_responses() {
    fuzz(Format::GeminiCliResponses);
}

#[test]
fn fuzz_acp() {
    fuzz(Format::Acp);
}

#[test]
fn fuzz_gemini_cli_telemetry() {
    fuzz(Format::GeminiCliTelemetry);
}

#[test]
fn fuzz_gemini_cli_stream_json() {
    fuzz(Format::GeminiCliStreamJson);
}

#[test]
fn fuzz_claude_code() {
    fuzz(Format::ClaudeCode);
}

#[test]
fn fuzz_codex_exec() {
    fuzz(Format::CodexExec);
}

#[test]
fn fuzz_otlp() {
    fuzz(Format::Otlp);
}
