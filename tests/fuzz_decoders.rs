//! A byte fuzzer per decoder (issue 11): random and mutated real inputs through `check` with
//! each format, in process. No input may panic, every `--json` line must be valid JSON, and the
//! text report must carry no raw terminal control character.
//!
//! Bounded for CI: `FUZZ_CASES` cases per decoder (default 48). Seeds are the recorded provider
//! streams in `tests/fixtures/providers/` and the bookstore examples, mutated by byte flips,
//! insertions of hostile bytes, duplications and cuts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use retryscope::check::{self, BadLine, CheckObserver, CheckOptions, InputSpec, render};
use retryscope::correlate::CorrelatorConfig;
use retryscope::cost::PriceTable;
use retryscope::decode::Format;
use retryscope::report::TurnReport;

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

/// Seed files of a format: its recorded fixtures (the bookstore examples for native).
fn seeds(format: Format) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir: PathBuf = match format {
        Format::Native | Format::Auto => root.join("examples/bookstore"),
        f => root.join("tests/fixtures/providers").join(f.as_str()),
    };
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| std::fs::read(e.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    out.push(Vec::new());
    out
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
        .find(|c| (c.is_control() && *c != '\n') || ('\u{80}'..='\u{9f}').contains(c))
    {
        Some(c) => Err(format!("raw control {c:?} in {text:?}")),
        None => Ok(()),
    }
}

impl CheckObserver for Verify {
    fn turn(&mut self, report: &TurnReport) {
        self.turns += 1;
        let line = render::turn_json(report);
        let parsed: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("invalid --json line {e}: {line}"));
        assert!(parsed.is_object());
        if let Err(e) = no_raw_controls(&render::turn_text(report)) {
            panic!("{e}");
        }
    }
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
            let summary = check::check(
                &[InputSpec::Path(path)],
                cfg,
                Arc::new(PriceTable::builtin()),
                &opts,
                &mut verify,
            );
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
